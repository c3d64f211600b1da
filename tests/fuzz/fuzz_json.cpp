// Fuzz target: the JSON reader, then the layer-profile and run-plan readers on what it read.
// What parses writes back (json::Writer) to text that parses to the same tree; a parse error's
// position lies in the input; a layer profile that reads writes back to the same samples and
// gives each sample's figures at its point; a plan that reads has a grid of its schedule's
// ranks and a schedule that survives everything a schedule goes through.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_harness.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/io/plan_file.hpp"

namespace {

using pipesched::json::Kind;
using pipesched::json::Value;

void write(pipesched::json::Writer& w, const Value& v) {
  switch (v.kind()) {
    case Kind::Null:
      w.value(nullptr);
      break;
    case Kind::Boolean:
      w.value(v.boolean());
      break;
    case Kind::Number:
      w.raw(v.number_text());
      break;
    case Kind::String:
      w.value(v.string());
      break;
    case Kind::Array:
      w.begin_array();
      for (const Value& e : v.array())
        write(w, e);
      w.end_array();
      break;
    case Kind::Object:
      w.begin_object();
      for (const Value::Member& m : v.object()) {
        w.key(m.key);
        write(w, m.value);
      }
      w.end_object();
      break;
  }
}

bool same(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Null:
      return true;
    case Kind::Boolean:
      return a.boolean() == b.boolean();
    case Kind::Number:
      return a.number_text() == b.number_text();
    case Kind::String:
      return a.string() == b.string();
    case Kind::Array:
      if (a.array().size() != b.array().size()) return false;
      for (std::size_t i = 0; i < a.array().size(); ++i)
        if (!same(a.array()[i], b.array()[i])) return false;
      return true;
    case Kind::Object:
      if (a.object().size() != b.object().size()) return false;
      for (std::size_t i = 0; i < a.object().size(); ++i)
        if (a.object()[i].key != b.object()[i].key ||
            !same(a.object()[i].value, b.object()[i].value))
          return false;
      return true;
  }
  return false;
}

}  // namespace

int pipesched_fuzz_json(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Value v;
  try {
    v = json::parse(input, "fuzz.json");
  } catch (const parse_error& e) {
    fuzz::require(e.line() >= 1 && e.column() >= 1 &&
                      static_cast<std::size_t>(e.line()) <= size + 1 &&
                      static_cast<std::size_t>(e.column()) <= size + 1,
                  "a JSON parse error's position lies outside the input", e.what());
    return 0;
  } catch (...) {
    fuzz::finding("the JSON reader threw something other than a parse_error");
  }
  // Written and read back, the tree is the same.
  json::Writer w;
  write(w, v);
  const std::string text = w.take();
  Value again;
  fuzz::require(fuzz::answers([&] { again = json::parse(text, "written.json"); }),
                "JSON the writer wrote from a parsed tree does not parse", text);
  fuzz::require(same(v, again), "a JSON tree does not survive write + read", text);
  // As a layer profile: refused with a pipesched::error, or one that reads back once written
  // and answers each sample's point with that sample's figures.
  LayerProfile profile;
  if (fuzz::answers([&] { profile = read_layer_profile(input, "fuzz.json"); })) {
    const std::string written = layer_profile_json(profile);
    LayerProfile back;
    fuzz::require(fuzz::answers([&] { back = read_layer_profile(written, "written.json"); }),
                  "a layer profile read does not read back once written", written);
    fuzz::require(back.samples().size() == profile.samples().size(),
                  "a layer profile written and read back has other samples", written);
    for (std::size_t n = 0; n < profile.samples().size(); ++n) {
      const LayerSample& x = profile.samples()[n];
      fuzz::require(back.samples()[n].figures == x.figures && back.samples()[n].at == x.at &&
                        back.samples()[n].part == x.part,
                    "a layer profile sample changed when written and read back", written);
      fuzz::require(profile.at(x.part, x.at.tensor, x.at.microbatch_size, x.at.tokens,
                               x.at.prefix) == x.figures,
                    "a layer profile does not give a sample's figures at its point");
    }
  }
  // As a plan: refused with a pipesched::error, or a plan whose parts agree.
  tuning::Plan plan;
  if (!fuzz::answers([&] { plan = read_plan(input, "fuzz.json"); })) return 0;
  fuzz::require(plan.grid().pipeline == plan.schedule.problem.ranks && plan.data >= 1 &&
                    plan.tensor >= 1 && plan.zero >= 0 && plan.zero <= 2,
                "a plan read with a grid that does not fit its schedule");
  fuzz::require(check(plan.schedule).ok(), "a plan read with a schedule that does not validate");
  fuzz::exercise(plan.schedule);
  // Written and read back, the plan is the same.
  const std::string written = plan_json(plan);
  tuning::Plan back;
  fuzz::require(fuzz::answers([&] { back = read_plan(written, "written.json"); }),
                "a plan read does not read back once written", written);
  fuzz::require(
      back.schedule == plan.schedule && back.data == plan.data && back.tensor == plan.tensor &&
          back.zero == plan.zero && back.sequence_parallel == plan.sequence_parallel &&
          back.microbatch_size == plan.microbatch_size &&
          back.layers_per_stage == plan.layers_per_stage && back.checkpoint == plan.checkpoint &&
          back.checkpoint_policy == plan.checkpoint_policy && back.fine_wgrad == plan.fine_wgrad &&
          back.wgrad == plan.wgrad && back.makespan == plan.makespan &&
          back.cost.has_value() == plan.cost.has_value(),
      "a plan written and read back is another plan", written);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_json(data, size);
}
#endif
