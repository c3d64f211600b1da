// Fuzz target: the device-file and cluster-file readers. What reads is a checked DeviceSpec:
// written as a device (cluster) file and read again it is the same, field by field, with the
// same name, description and GPU count; and GPT-3 1.3B's 1F1B on it either is refused with a
// pipesched::error or simulates to finite figures.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_harness.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace {

//! Whether every DeviceSpec field of `a` and `b` is the same; the first that differs in `why`.
bool same_device(const pipesched::DeviceSpec& a, const pipesched::DeviceSpec& b, std::string& why) {
  if (a.name != b.name) {
    why = "name";
    return false;
  }
  for (const pipesched::detail::device_file::Field& f : pipesched::detail::device_file::fields()) {
    const bool equal = f.number  ? a.*f.number == b.*f.number
                       : f.whole ? a.*f.whole == b.*f.whole
                                 : a.*f.flag == b.*f.flag;
    if (!equal) {
      why = f.name;
      return false;
    }
  }
  return true;
}

//! Everything a device read from `input` as a device (`cluster` false) or cluster file goes
//! through.
void exercise_device(std::string_view input, bool cluster) {
  using namespace pipesched;
  DeviceFile d;
  if (!fuzz::answers([&] {
        d = cluster ? read_cluster(input, "fuzz.json") : read_device(input, "fuzz.json");
      }))
    return;
  fuzz::require(fuzz::answers([&] { d.device.check(); }), "a device read that does not check");
  fuzz::require(cluster ? d.gpus >= 0 && d.gpus <= 65536 : d.gpus == 0,
                "a device file read with a GPU count out of range");
  const std::string text = device_json(d.device, d.description, d.gpus);
  DeviceFile again;
  fuzz::require(fuzz::answers([&] {
                  again = d.gpus > 0 ? read_cluster(text, "written.json")
                                     : read_device(text, "written.json");
                }),
                "a device file the writer wrote does not read", text);
  std::string field;
  fuzz::require(same_device(d.device, again.device, field),
                "a device does not survive write + read", field + " in " + text);
  fuzz::require(again.description == d.description && again.gpus == d.gpus,
                "a device's description or GPU count does not survive write + read", text);
  TransformerCost cost;
  cost.model = presets::find_model("gpt3-1.3b");
  cost.device = d.device;
  Problem p;
  p.ranks = 2;
  p.stages = 2;
  p.microbatches = 2;
  const Schedule s = schedule::one_f_one_b(p);
  const CostContext ctx{s.problem, s.placement, 1};
  if (!fuzz::answers([&] { cost.check(ctx); })) return;
  SimulationResult sim;
  if (!fuzz::answers([&] { sim = simulate(s, cost); })) return;
  fuzz::require(!sim.deadlock && std::isfinite(sim.makespan) && sim.makespan > 0 &&
                    std::isfinite(sim.peak_memory_max) && sim.peak_memory_max >= 0,
                "1F1B on a device read simulates to figures that are not finite",
                "makespan " + std::to_string(sim.makespan) + " on " + text);
}

}  // namespace

int pipesched_fuzz_device(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  exercise_device(input, false);
  exercise_device(input, true);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_device(data, size);
}
#endif
