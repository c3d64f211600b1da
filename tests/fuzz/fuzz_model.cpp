// Fuzz target: the model-file reader (pipesched's model files and Hugging Face config.json).
// What reads is a checked ModelShape: written as a pipesched model file and read again it is
// the same, field by field, with the same name and description; read with a sequence given it
// reads too; its parameter and FLOP counts are finite and positive; and a small 1F1B under
// TransformerCost on an A100 either is refused with a pipesched::error or simulates to finite
// figures.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_harness.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/io/model_file.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace {

//! Whether every ModelShape field of `a` and `b` is the same; the first that differs in `why`.
bool same_shape(const pipesched::ModelShape& a, const pipesched::ModelShape& b, std::string& why) {
  for (const pipesched::detail::model_file::Field& f : pipesched::detail::model_file::fields()) {
    const bool equal = f.whole ? a.*f.whole == b.*f.whole : a.*f.flag == b.*f.flag;
    if (!equal) {
      why = f.name;
      return false;
    }
  }
  return true;
}

}  // namespace

int pipesched_fuzz_model(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  ModelFile m;
  if (!fuzz::answers([&] { m = read_model(input, "fuzz.json"); })) return 0;
  fuzz::require(fuzz::answers([&] { m.model.check(); }), "a model read that does not check");
  // Written in pipesched's form and read back: the same model.
  const std::string text = model_json(m.model, m.name, m.description);
  ModelFile again;
  fuzz::require(fuzz::answers([&] { again = read_model(text, "written.json"); }),
                "a model file the writer wrote does not read", text);
  std::string field;
  fuzz::require(same_shape(m.model, again.model, field), "a model does not survive write + read",
                field + " in " + text);
  fuzz::require(again.name == m.name && again.description == m.description,
                "a model's name or description does not survive write + read", text);
  // A sequence given overrides the file's (or is refused in words).
  ModelReadOptions options;
  options.sequence = 512;
  fuzz::answers([&] { read_model(input, "fuzz.json", options); });
  const double parameters = m.model.parameters(), flops = m.model.training_flops_per_sequence();
  fuzz::require(std::isfinite(parameters) && parameters > 0 && std::isfinite(flops) && flops > 0,
                "a model's parameter or FLOP count is not finite and positive",
                std::to_string(parameters) + " parameters, " + std::to_string(flops) + " FLOPs");
  // A small pipeline under the model's costs.
  TransformerCost cost;
  cost.model = m.model;
  cost.device = presets::find_device("a100-80gb");
  Problem p;
  p.ranks = m.model.layers >= 2 ? 2 : 1;
  p.stages = p.ranks;
  p.microbatches = 2;
  const Schedule s = schedule::one_f_one_b(p);
  const CostContext ctx{s.problem, s.placement, 1};
  if (!fuzz::answers([&] { cost.check(ctx); })) return 0;
  SimulationResult sim;
  if (!fuzz::answers([&] { sim = simulate(s, cost); })) return 0;
  fuzz::require(!sim.deadlock && std::isfinite(sim.makespan) && sim.makespan > 0 &&
                    std::isfinite(sim.peak_memory_max) && sim.peak_memory_max >= 0,
                "a model's 1F1B simulates to figures that are not finite",
                "makespan " + std::to_string(sim.makespan) + ", peak memory " +
                    std::to_string(sim.peak_memory_max) + " on " + text);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_model(data, size);
}
#endif
