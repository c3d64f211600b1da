// A plan as a file: write_plan writes a tuning::Plan (what `tune` and `tune_cluster` return) as one
// JSON object, read_plan reads it back, checked and validated, to the same tuning::Plan: its
// process grid (pp × dp × tp), ZeRO stage, sequence parallelism, microbatch size, the layers of
// each stage, the schedule itself (its text form, "schedule_text"), its simulated figures and
// the cost model it was simulated under ("cost_model", for TransformerCost and UniformCost).
// cost_of(plan) returns that cost model, so a plan read back simulates to its step time again;
// a program started under `mpirun -np pp·dp·tp` reads it, places each process with
// tuning::Plan::grid() and runs tuning::Plan::schedule (docs/executor.md, "Running a plan").
// `pipesched tune --json` prints its plans with this writer.
#pragma once

#include <algorithm>
#include <any>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/detail/bounded_file.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/io/model_file.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

//! The largest plan file read_plan_file reads: 256 MiB (a plan holds its schedule as text,
//! and the whole `tune --json` output holds the best plan of every pair searched).
inline constexpr std::uint64_t max_plan_bytes = std::uint64_t{256} << 20;
//! Most actions the schedule of a plan may hold: the limit the `pipesched` command applies to
//! every schedule it builds or reads (2,000,000; some 300 MB to validate), counted in the text
//! before it is parsed.
inline constexpr std::int64_t max_plan_actions = 2'000'000;
//! Most JSON values (numbers, strings, arrays, ...) a plan text of n bytes may hold: the larger
//! of 65,536 and n / 8, so that the parsed text takes at most some 13 times its size (a plan of
//! `pipesched tune --json` has a few dozen values and a long schedule text).
inline constexpr std::int64_t min_plan_value_limit = 65'536;
//! Most processes a plan's grid may have (pp × dp × tp): `pipesched tune --gpus`'s range.
inline constexpr int max_plan_processes = 1 << 16;
//! Largest `microbatch_size` of a plan (sequences per microbatch): `pipesched tune
//! --microbatch-sizes`'s range.
inline constexpr int max_plan_microbatch_size = 1 << 16;
//! Largest layer count of one stage in a plan's `layers_per_stage`.
inline constexpr int max_plan_stage_layers = 1 << 20;

namespace detail::plan_file {

//! The fields of one plan object, each read with the sentence that says what it must be.
class PlanReader {
 public:
  PlanReader(const json::Value& plan, const std::string& source) : plan_(plan), source_(source) {}

  tuning::Plan read() const {
    tuning::Plan p;
    p.base = text("schedule");
    // The schedule's name where its text has none: a name the text form's `name` line keeps.
    if (p.base.empty() || detail::io::trim(p.base) != p.base ||
        p.base.find_first_of("\r\n") != std::string::npos)
      mistyped("schedule", field("schedule"),
               "it is the name of the plan's base schedule: not empty, without spaces at its ends "
               "or a line break (a schedule's name is one line of its text form)");
    p.schedule = schedule();
    const Problem& problem = p.schedule.problem;
    const int pp = whole("pp", 1, "the pipeline ranks");
    if (pp != problem.ranks)
      fail(field("pp"), "field \"pp\" is " + std::to_string(pp) +
                            " but the schedule in \"schedule_text\" has " +
                            std::to_string(problem.ranks) +
                            " ranks; pp is the schedule's rank count, so they must agree");
    p.data = whole("dp", 1, "the data-parallel replicas");
    p.tensor = whole("tp", 1, "the tensor-parallel degree");
    const long long processes = static_cast<long long>(pp) * p.data * p.tensor;
    if (processes > max_plan_processes)
      fail(plan_, "pp " + std::to_string(pp) + " × dp " + std::to_string(p.data) + " × tp " +
                      std::to_string(p.tensor) + " is " + std::to_string(processes) +
                      " processes; a plan runs on at most " + std::to_string(max_plan_processes) +
                      " (the GPUs `pipesched tune --gpus` plans for)");
    p.gpus = static_cast<int>(processes);
    p.zero = whole("zero", 0, "the ZeRO stage: 0, 1 or 2");
    if (p.zero > 2)
      fail(field("zero"),
           "field \"zero\" is " + std::to_string(p.zero) +
               "; the ZeRO stage is 0 (none), 1 (optimizer state) or 2 (+ gradients)");
    p.sequence_parallel = boolean("sequence_parallel");
    if (p.sequence_parallel && p.tensor == 1)
      fail(field("sequence_parallel"),
           "field \"sequence_parallel\" is true but \"tp\" is 1; sequence parallelism splits "
           "the sequence over a tensor group, so a plan without tensor parallelism has false");
    p.microbatch_size =
        bounded("microbatch_size", 1, max_plan_microbatch_size, "sequences per microbatch");
    p.microbatches = agreeing("microbatches", problem.microbatches, "microbatches");
    p.global_batch = static_cast<int>(std::min<long long>(
        INT_MAX, static_cast<long long>(p.microbatches) * p.microbatch_size * p.data));
    p.slices = plan_.find("slices") ? agreeing("slices", problem.slices, "slices") : problem.slices;
    p.chunks = plan_.find("chunks") ? agreeing("chunks", problem.chunks(), "stages per rank")
                                    : problem.chunks();
    p.layers_per_stage = layers(p.schedule);
    p.recomputes = static_cast<int>(p.schedule.count(OpKind::R));
    p.offloads = static_cast<int>(p.schedule.count(OpKind::Offload));
    p.vocabulary = p.schedule.has_vocabulary();
    if (const json::Value* policy = plan_.find("checkpoint_policy")) {
      if (policy->kind() != json::Kind::String || policy->string().empty())
        mistyped("checkpoint_policy", *policy,
                 "it is the name of the program's own checkpoint policy that made the plan");
      p.checkpoint_policy = policy->string();
      text("checkpoint");  // the policy's name again
    } else {
      p.checkpoint = checkpoint_mode(p);
    }
    read_wgrad(p);
    read_figures(p);
    if (const json::Value* c = plan_.find("cost_model"); c != nullptr && !c->is_null())
      p.cost = cost_model(*c, p);
    return p;
  }

 private:
  // The plan's "checkpoint" is a mode the tuner writes, and a plan without checkpointing has
  // no recomputes.
  CheckpointMode checkpoint_mode(const tuning::Plan& p) const {
    const std::string name = text("checkpoint");
    std::optional<CheckpointMode> mode;
    for (CheckpointMode m :
         {CheckpointMode::None, CheckpointMode::Full, CheckpointMode::Selective,
          CheckpointMode::Mario, CheckpointMode::FullEarly, CheckpointMode::SelectiveEarly})
      if (name == to_string(m)) mode = m;
    if (!mode)
      mistyped("checkpoint", field("checkpoint"),
               "it is the checkpoint mode: none, full, selective, mario, full-early or "
               "selective-early");
    if (*mode != CheckpointMode::None) return *mode;
    for (int r = 0; r < p.schedule.rank_count(); ++r)
      for (const Action& a : p.schedule.ranks[static_cast<std::size_t>(r)])
        if (a.kind == OpKind::R)
          fail(field("checkpoint"),
               "field \"checkpoint\" is \"none\" but the schedule in "
               "\"schedule_text\" recomputes (" +
                   to_string(a) + " on rank " + std::to_string(r) +
                   "); give the checkpoint mode the plan was made with");
    return *mode;
  }

  // The plan's "wgrad" is fused (full backwards B only), split (input and weight gradients, I
  // and W) or fine (W cut into parts), as its schedule is; without "wgrad", what the schedule
  // does.
  void read_wgrad(tuning::Plan& p) const {
    const Action* split = nullptr;  // the first I or W
    const Action* part = nullptr;   // the first W part after the first
    for (const auto& list : p.schedule.ranks)
      for (const Action& a : list) {
        if ((a.kind == OpKind::I || a.kind == OpKind::W) && split == nullptr) split = &a;
        if (a.kind == OpKind::W && a.part > 0 && part == nullptr) part = &a;
      }
    std::string wgrad = split == nullptr ? "fused" : part == nullptr ? "split" : "fine";
    if (plan_.find("wgrad")) {
      const std::string given = text("wgrad");
      if (given != "fused" && given != "split" && given != "fine")
        mistyped("wgrad", field("wgrad"),
                 "it is how the backward is split: \"fused\", \"split\" or \"fine\"");
      const auto disagree = [&](const std::string& why) {
        fail(field("wgrad"), "field \"wgrad\" is \"" + given +
                                 "\" but the schedule in \"schedule_text\" " + why +
                                 "; give the mode the plan was made with");
      };
      if (given == "fused" && split != nullptr)
        disagree("splits its backward (" + to_string(*split) + ")");
      if (given != "fused" && split == nullptr)
        disagree("has no input or weight gradient actions (I, W)");
      if (given == "split" && part != nullptr)
        disagree("cuts weight gradients into parts (" + to_string(*part) + "), which is \"fine\"");
      wgrad = given;
    }
    p.fine_wgrad = wgrad == "fine";
    p.wgrad = wgrad == "fused" ? WGradMode::Fused : WGradMode::Split;
  }

  // The simulated figures where the plan gives them: "makespan" (else "step_time_s"),
  // "throughput", "bubble_ratio", "warmup", "fitted", "peak_memory" (one per rank, or none),
  // "peak_memory_bytes", "mfu" and "mfu_usual"; a figure written null is left at its default.
  void read_figures(tuning::Plan& p) const {
    if (const json::Value* t = given("step_time_s")) {
      p.makespan = figure("step_time_s", *t, "a step time in seconds, 0 or more, or null");
      p.memory_unit = MemoryUnit::Bytes;  // seconds and bytes: a cost model of a device
    }
    if (const json::Value* v = given("makespan"))
      p.makespan = figure("makespan", *v, "the simulated step time, 0 or more");
    if (const json::Value* v = given("throughput"))
      p.throughput = figure("throughput", *v, "sequences per time unit, 0 or more");
    if (const json::Value* v = given("bubble_ratio")) {
      p.bubble_ratio = figure("bubble_ratio", *v, "the idle share of the step, 0 to 1");
      if (p.bubble_ratio > 1)
        mistyped("bubble_ratio", *v, "it is the idle share of the step, 0 to 1");
    }
    if (const json::Value* v = given("warmup")) {
      if (!v->is_integer() || v->number() < 0 || v->number() > INT_MAX)
        mistyped("warmup", *v,
                 "it is a whole number, 0 or more (forwards before the first "
                 "backward on rank 0)");
      p.warmup = static_cast<int>(v->number());
    }
    if (const json::Value* v = given("fitted")) {
      if (v->kind() != json::Kind::Boolean) mistyped("fitted", *v, "it is true or false");
      p.fitted = v->boolean();
    }
    if (const json::Value* v = given("peak_memory")) {
      const std::string want = "it is an array of the simulated peak memory of each rank (" +
                               std::to_string(p.schedule.problem.ranks) +
                               " numbers, 0 or more), or empty";
      if (v->kind() != json::Kind::Array ||
          (!v->array().empty() && static_cast<int>(v->array().size()) != p.schedule.problem.ranks))
        mistyped("peak_memory", *v, want);
      for (const json::Value& n : v->array()) {
        if (n.kind() != json::Kind::Number || !(n.number() >= 0) || !std::isfinite(n.number()))
          fail(n, "field \"peak_memory\" holds " + shown(n) + "; " + want);
        p.peak_per_rank.push_back(n.number());
        p.peak_memory = std::max(p.peak_memory, n.number());
      }
    }
    if (const json::Value* v = given("peak_memory_bytes"))
      p.peak_memory = figure("peak_memory_bytes", *v, "the largest GPU's memory in bytes");
    if (const json::Value* v = given("mfu")) p.mfu = figure("mfu", *v, "a share, 0 or more");
    if (const json::Value* v = given("mfu_usual"))
      p.mfu_usual = figure("mfu_usual", *v, "a share, 0 or more");
  }

  // The member `key` where the plan gives it and it is not null.
  const json::Value* given(std::string_view key) const {
    const json::Value* v = plan_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }

  // A finite number of at least 0 at `v`.
  double figure(std::string_view key, const json::Value& v, const std::string& what) const {
    if (v.kind() != json::Kind::Number || !(v.number() >= 0) || !std::isfinite(v.number()))
      mistyped(key, v, "it is " + what);
    return v.number();
  }

  // The cost model of "cost_model": {"kind": "transformer", "model": {...}, "device": {...},
  // "parallel": {...}, "slice_lengths": [...], "wgrad_split": "..."} or {"kind": "uniform",
  // "f": ..., ...}, checked against the plan's own fields.
  std::any cost_model(const json::Value& v, const tuning::Plan& p) const {
    if (v.kind() != json::Kind::Object)
      mistyped("cost_model", v,
               "it is the cost model the plan was simulated under (an object with \"kind\": "
               "\"transformer\" or \"uniform\"), or null");
    const std::string source = source_ + ", field \"cost_model\"";
    const detail::spec_json::Fields in(v, source);
    const std::string kind = in.text("kind", in.need("kind", "it says which cost model"),
                                     "\"transformer\" or \"uniform\"");
    if (kind == "uniform") {
      UniformCost c;
      for (auto [key, at] :
           {std::pair{"f", &c.f}, std::pair{"b", &c.b}, std::pair{"w", &c.w}, std::pair{"r", &c.r},
            std::pair{"comm", &c.comm}, std::pair{"boundary", &c.boundary},
            std::pair{"w_memory", &c.w_memory}, std::pair{"copy", &c.copy}, std::pair{"vf", &c.vf},
            std::pair{"vb", &c.vb}, std::pair{"vmem", &c.vmem}, std::pair{"ef", &c.ef},
            std::pair{"eb", &c.eb}})
        if (const json::Value* x = in.find(key))
          *at = in.number(key, *x, -1e308, false, 1e308, "a UniformCost figure");
      if (const json::Value* x = in.find("input_vocabulary"))
        c.input_vocabulary =
            in.boolean("input_vocabulary", *x, "the input embedding split by vocabulary");
      checked(in, v, [&] { c.check(); });
      return c;
    }
    if (kind != "transformer")
      in.mistyped("kind", in.need("kind", ""), "it is \"transformer\" or \"uniform\"");
    TransformerCost c;
    const json::Value& model = in.need("model", "a transformer cost model gives its model");
    if (model.kind() != json::Kind::Object)
      in.mistyped("model", model, "it is a model as a pipesched model file writes it");
    c.model = detail::model_file::read_pipesched(model, source + ", \"model\"", {}).model;
    const json::Value& device = in.need("device", "a transformer cost model gives its device");
    if (device.kind() != json::Kind::Object)
      in.mistyped("device", device, "it is a device as a pipesched device file writes it");
    c.device = detail::device_file::read_object(device, source + ", \"device\"", false).device;
    if (const json::Value* par = in.find("parallel")) {
      if (par->kind() != json::Kind::Object)
        in.mistyped("parallel", *par, "it is the cost model's parallelism (an object)");
      const detail::spec_json::Fields pin(*par, source + ", \"parallel\"");
      Parallelism& q = c.parallel;
      if (const json::Value* x = pin.find("tensor"))
        q.tensor = pin.whole("tensor", *x, 1, INT_MAX, "the tensor-parallel degree");
      if (const json::Value* x = pin.find("sequence_parallel"))
        q.sequence_parallel = pin.boolean("sequence_parallel", *x, "sequence parallelism");
      if (const json::Value* x = pin.find("data"))
        q.data = pin.whole("data", *x, 1, INT_MAX, "the data-parallel degree");
      if (const json::Value* x = pin.find("zero")) q.zero = pin.whole("zero", *x, 0, 2, "ZeRO");
      if (const json::Value* x = pin.find("whole_step"))
        q.whole_step = pin.boolean("whole_step", *x, "whole-step costs");
      if (const json::Value* x = pin.find("vocabulary"))
        q.vocabulary = pin.boolean("vocabulary", *x, "the output layer split by vocabulary");
      if (const json::Value* x = pin.find("input_vocabulary"))
        q.input_vocabulary =
            pin.boolean("input_vocabulary", *x, "the input embedding split by vocabulary");
      if (const json::Value* x = pin.find("split")) {
        const std::string& split = pin.text("split", *x, "\"even\" or \"balanced\"");
        if (split != "even" && split != "balanced")
          pin.mistyped("split", *x, "it is \"even\" or \"balanced\"");
        q.split = split == "even" ? LayerSplit::Even : LayerSplit::Balanced;
      }
      if (const json::Value* x = pin.find("layers")) q.layers = whole_list(pin, "layers", *x);
    }
    if (const json::Value* x = in.find("slice_lengths"))
      c.slice_lengths = whole_list(in, "slice_lengths", *x);
    if (const json::Value* x = in.find("wgrad_split")) {
      const std::string& split = in.text("wgrad_split", *x, "\"even\" or \"per-gemm\"");
      if (split != "even" && split != "per-gemm")
        in.mistyped("wgrad_split", *x, "it is \"even\" or \"per-gemm\"");
      c.wgrad_split = split == "even" ? WGradSplit::Even : WGradSplit::PerGemm;
    }
    if (const json::Value* x = in.find("profile")) {
      if (x->kind() != json::Kind::Object)
        in.mistyped("profile", *x, "it is the layer profile the model was measured by (an object)");
      c.measured = std::make_shared<const LayerProfile>(
          detail::layer_profile_file::read_object(*x, source + ", \"profile\""));
    }
    checked(in, v, [&] { c.check(); });
    // The cost model prices the plan it came with.
    const auto disagree = [&](const std::string& what, long long in_cost, long long in_plan) {
      in.fail(v, "the cost model's " + what + " is " + std::to_string(in_cost) +
                     " but the plan's is " + std::to_string(in_plan) +
                     "; a plan's cost model is the one it was simulated under, so they agree");
    };
    if (c.parallel.tensor != p.tensor) disagree("tensor degree", c.parallel.tensor, p.tensor);
    if (c.parallel.data != p.data) disagree("data-parallel degree", c.parallel.data, p.data);
    if (c.parallel.zero != p.zero) disagree("ZeRO stage", c.parallel.zero, p.zero);
    if (c.parallel.sequence_parallel != p.sequence_parallel)
      disagree("sequence parallelism", c.parallel.sequence_parallel, p.sequence_parallel);
    if (c.model.microbatch_size != p.microbatch_size)
      disagree("microbatch size", c.model.microbatch_size, p.microbatch_size);
    if (!c.parallel.layers.empty() && c.parallel.layers != p.layers_per_stage)
      in.fail(v,
              "the cost model's layers per stage are not the plan's \"layers_per_stage\"; "
              "a plan's cost model is the one it was simulated under, so they agree");
    if (!c.slice_lengths.empty() && static_cast<int>(c.slice_lengths.size()) != p.slices)
      disagree("slice count", static_cast<long long>(c.slice_lengths.size()), p.slices);
    return c;
  }

  // Whole numbers of at least 1 in the array `v`.
  std::vector<int> whole_list(const detail::spec_json::Fields& in, std::string_view key,
                              const json::Value& v) const {
    if (v.kind() != json::Kind::Array || v.array().size() > (1u << 20))
      in.mistyped(key, v, "it is an array of whole numbers, each 1 or more");
    std::vector<int> out;
    for (const json::Value& n : v.array())
      out.push_back(in.whole(key, n, 1, INT_MAX, "each entry 1 or more"));
    return out;
  }

  // Runs a cost model's check(), its complaint as a parse_error at `v`.
  template <class Check>
  void checked(const detail::spec_json::Fields& in, const json::Value& v, Check&& check) const {
    try {
      check();
    } catch (const error& e) {
      std::string why = e.message().text();
      if (!why.empty() && why.back() == '.') why.pop_back();
      in.fail(v, "the cost model is out of range: " + why);
    }
  }

  [[noreturn]] void fail(const json::Value& at, const std::string& problem) const {
    throw parse_error(detail::io::where(source_, at.line(), at.column()) + problem + ".", at.line(),
                      at.column());
  }

  const json::Value& field(std::string_view key) const {
    const json::Value* v = plan_.find(key);
    if (v == nullptr)
      fail(plan_, "field \"" + std::string(key) +
                      "\" is missing; a plan from `pipesched tune --json` has it");
    return *v;
  }

  // "2.5", "\"two\" (a string)", "null": a value as the message shows it.
  static std::string shown(const json::Value& v) { return spec_json::shown(v); }

  [[noreturn]] void mistyped(std::string_view key, const json::Value& v,
                             const std::string& want) const {
    fail(v, "field \"" + std::string(key) + "\" is " + shown(v) + "; " + want);
  }

  int whole(std::string_view key, int least, const std::string& what) const {
    const json::Value& v = field(key);
    if (!v.is_integer() || v.number() < least || v.number() > INT_MAX)
      mistyped(key, v,
               "it is a whole number, " + std::to_string(least) + " or more (" + what + ")");
    return static_cast<int>(v.number());
  }

  // A whole number from `least` to `most`.
  int bounded(std::string_view key, int least, int most, const std::string& what) const {
    const json::Value& v = field(key);
    if (!v.is_integer() || v.number() < least || v.number() > most)
      mistyped(key, v,
               "it is a whole number from " + std::to_string(least) + " to " +
                   std::to_string(most) + " (" + what + ")");
    return static_cast<int>(v.number());
  }

  // A whole number that must equal what the schedule says.
  int agreeing(std::string_view key, int in_schedule, const std::string& what) const {
    const int n = whole(key, 1, what);
    if (n != in_schedule)
      fail(field(key), "field \"" + std::string(key) + "\" is " + std::to_string(n) +
                           " but the schedule in \"schedule_text\" has " +
                           std::to_string(in_schedule) + " " + what + "; they must agree");
    return n;
  }

  bool boolean(std::string_view key) const {
    const json::Value& v = field(key);
    if (v.kind() != json::Kind::Boolean) mistyped(key, v, "it is true or false");
    return v.boolean();
  }

  std::string text(std::string_view key) const {
    const json::Value& v = field(key);
    if (v.kind() != json::Kind::String) mistyped(key, v, "it is a string");
    return v.string();
  }

  std::vector<int> layers(const Schedule& s) const {
    const json::Value& v = field("layers_per_stage");
    const std::string want =
        "it is an array of layer counts, one per model stage, each 1 or more (empty for a plan "
        "made without a model)";
    if (v.kind() != json::Kind::Array) mistyped("layers_per_stage", v, want);
    std::vector<int> out;
    for (const json::Value& n : v.array()) {
      if (!n.is_integer() || n.number() < 1 || n.number() > max_plan_stage_layers)
        fail(n, "field \"layers_per_stage\" holds " + shown(n) + "; " + want + ", at most " +
                    std::to_string(max_plan_stage_layers));
      out.push_back(static_cast<int>(n.number()));
    }
    const int replicas = s.problem.replicas > 1 ? s.problem.replicas : 1;
    const int stages = s.problem.stages / replicas;
    if (!out.empty() && static_cast<int>(out.size()) != stages)
      fail(v, "field \"layers_per_stage\" has " + std::to_string(out.size()) +
                  " entries but the schedule in \"schedule_text\" has " + std::to_string(stages) +
                  " model stages; give one layer count per stage");
    return out;
  }

  Schedule schedule() const {
    const std::string text_source = source_ + ", field \"schedule_text\"";
    const json::Value& v = field("schedule_text");
    if (v.kind() != json::Kind::String)
      mistyped("schedule_text", v, "it is the schedule in pipesched's text form (a string)");
    if (v.string().size() > max_schedule_bytes)
      fail(v, "field \"schedule_text\" is " + std::to_string(v.string().size()) +
                  " bytes; a schedule is at most " + std::to_string(max_schedule_bytes) +
                  " bytes, as in a schedule file");
    if (const std::int64_t n = action_tokens(v.string()); n > max_plan_actions)
      fail(v, "field \"schedule_text\" holds " + std::to_string(n) +
                  " actions; a plan runs at "
                  "most " +
                  std::to_string(max_plan_actions) +
                  " (the limit of every schedule the pipesched command builds or reads)");
    Schedule s = detail::io::TextReader(v.string(), text_source).read();
    const std::string base = text("schedule");
    if (s.name == text_source) {
      s.name = base;  // the text had no name line
    } else if (s.name != base && s.name.rfind(base + "+", 0) != 0) {
      fail(field("schedule"), "field \"schedule\" is " + detail::io::quote_token(base) +
                                  " but the schedule in \"schedule_text\" is named " +
                                  detail::io::quote_token(s.name) +
                                  "; the tuner names a plan's schedule after its base (" +
                                  detail::io::quote_token(base) + " or " +
                                  detail::io::quote_token(base + "+...") + ")");
    }
    try {
      validate(s);
    } catch (const invalid_schedule& e) {
      e.rethrow_after(Message(text_source + ": the schedule does not validate: "));
    }
    return s;
  }

  // Actions in schedule text `t`, counted without parsing it: the words of its `rank N:` lines
  // after the colon, up to a comment (idle slots `-` included).
  static std::int64_t action_tokens(std::string_view t) {
    std::int64_t n = 0;
    std::size_t at = 0;
    while (at < t.size()) {
      std::size_t end = t.find('\n', at);
      if (end == std::string_view::npos) end = t.size();
      std::string_view line = t.substr(at, end - at);
      at = end + 1;
      line = line.substr(0, line.find('#'));
      const std::size_t first = line.find_first_not_of(" \t");
      if (first == std::string_view::npos || line.substr(first, 4) != "rank") continue;
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      bool word = false;
      for (char c : line.substr(colon + 1)) {
        const bool blank = c == ' ' || c == '\t' || c == '\r';
        n += !blank && !word;
        word = !blank;
      }
    }
    return n;
  }

  const json::Value& plan_;
  const std::string& source_;
};

// An upper bound on the JSON values in `text` (each value but the first follows a ',', '[' or
// ':' outside strings), counted without parsing it; stops counting past `limit`.
inline std::int64_t json_values_at_most(std::string_view text, std::int64_t limit) {
  std::int64_t n = 1;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size() && n <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == '[' || c == ':') {
      ++n;
    }
  }
  return n;
}

//! The reason in words why `tune` found no plan, from its output's "search" and "notes".
inline std::string why_none(const json::Value& out) {
  std::string why;
  const json::Value* search = out.find("search");
  if (search != nullptr && search->kind() == json::Kind::Object) {
    const auto count = [&](const char* key) -> std::string {
      const json::Value* v = search->find(key);
      return v != nullptr && v->is_integer() ? v->number_text() : "";
    };
    const std::string total = count("candidates"), over = count("over_budget"),
                      refused = count("refused");
    if (!total.empty() && !over.empty() && !refused.empty())
      why = " (of " + total + " candidates, " + over + " were over the memory budget and " +
            refused + " refused)";
  }
  const json::Value* notes = out.find("notes");
  if (notes != nullptr && notes->kind() == json::Kind::Array && !notes->array().empty()) {
    const json::Value& n = notes->array().front();
    const json::Value* reason = n.kind() == json::Kind::Object ? n.find("reason") : nullptr;
    if (reason != nullptr && reason->kind() == json::Kind::String)
      why += "; its first note: " + reason->string();
  }
  return why;
}

}  // namespace detail::plan_file

//! Reads a plan from `json_text`: one plan object as write_plan writes it (and `pipesched tune
//! --json` prints it), or that command's whole output (then its "best" plan). Takes the plan's
//! grid (`pp`, `dp`, `tp`), `zero`, `sequence_parallel`, `microbatch_size`, `microbatches`,
//! `layers_per_stage`, the base `schedule`, `checkpoint` and the schedule in `schedule_text`;
//! `chunks`, `slices`, `wgrad`, `checkpoint_policy`, the simulated figures (`makespan` or
//! `step_time_s`, `throughput`, `bubble_ratio`, `warmup`, `fitted`, `peak_memory`,
//! `peak_memory_bytes`, `mfu`, `mfu_usual`) and `cost_model` where given; other keys (the
//! command's `command`) are ignored. Throws parse_error naming
//! `source`, the line and the column: for text that is not JSON or holds more values than
//! its size allows (min_plan_value_limit), a missing or mistyped field (`plan.json: line 1,
//! column 1: field "dp" is missing; a plan from `pipesched tune --json` has it.`), a field out
//! of its range (pp × dp × tp above max_plan_processes, `microbatch_size` above
//! max_plan_microbatch_size, a stage above max_plan_stage_layers layers, a `zero` other than
//! 0, 1 or 2), a schedule text above max_schedule_bytes or max_plan_actions actions, fields
//! that disagree with each other or with the schedule (`pp`, `microbatches`, `slices`,
//! `chunks` and `layers_per_stage` against its sizes, `sequence_parallel` true with `tp` 1, a
//! `checkpoint` that is no mode or "none" with recomputes, a `wgrad` that is not how the
//! schedule splits its backward, a `schedule` base the text's name does not start with), a
//! "best" that is null (the search found no plan; the message says why), a `cost_model` that
//! is no cost model or disagrees with the plan (its degrees, microbatch size, layers or slice
//! count); and throws invalid_schedule when the schedule does not validate.
inline tuning::Plan read_plan(std::string_view json_text, std::string source = "plan") {
  const std::int64_t value_limit =
      std::max<std::int64_t>(min_plan_value_limit, static_cast<std::int64_t>(json_text.size() / 8));
  if (detail::plan_file::json_values_at_most(json_text, value_limit) > value_limit)
    throw parse_error(source + ": the text holds more than " + std::to_string(value_limit) +
                          " JSON values for its " + std::to_string(json_text.size()) +
                          " bytes; a plan of `pipesched tune --json` holds a few dozen values "
                          "per plan and at most one per 8 bytes (the larger of 65536 and its "
                          "size / 8), so this is not one.",
                      0, 0);
  const json::Value doc = json::parse(json_text, source);
  auto fail = [&](const json::Value& at, const std::string& problem) {
    throw parse_error(detail::io::where(source, at.line(), at.column()) + problem + ".", at.line(),
                      at.column());
  };
  if (doc.kind() != json::Kind::Object)
    fail(doc, std::string("the text is ") + json::describe(doc.kind()) +
                  "; expected an object: a plan or the output of `pipesched tune --json`");
  const json::Value* plan = &doc;
  if (doc.find("schedule_text") == nullptr && doc.find("pp") == nullptr) {
    plan = doc.find("best");
    if (plan == nullptr)
      fail(doc,
           "this object is neither a plan (it has no field \"schedule_text\") nor the "
           "output of `pipesched tune --json` (it has no field \"best\")");
    if (plan->is_null())
      fail(*plan, "\"best\" is null: the search found no plan that fits" +
                      detail::plan_file::why_none(doc) +
                      "; there is nothing to run (tune again with a larger --memory-budget, "
                      "checkpointing or more GPUs)");
    if (plan->kind() != json::Kind::Object)
      fail(*plan, std::string("\"best\" is ") + json::describe(plan->kind()) +
                      "; expected a plan (an object) or null");
  }
  return detail::plan_file::PlanReader(*plan, source).read();
}

//! Reads the plan file at `path` (at most max_plan_bytes) as read_plan does, naming the path in
//! its messages. Throws pipesched::error naming the path and the reason when the file cannot be
//! read (missing, a directory, too large).
inline tuning::Plan read_plan_file(const std::string& path) {
  return read_plan(
      detail::io::read_bounded_file(path, "plan file", max_plan_bytes,
                                    "give the path of a plan from `pipesched tune --json`",
                                    "the 256 MiB pipesched reads as a plan"),
      path);
}

namespace detail::plan_file {

inline const char* wgrad_name(const tuning::Plan& p) {
  if (p.fine_wgrad) return "fine";
  return p.wgrad == WGradMode::Split ? "split" : "fused";
}

inline void write_ints(json::Writer& w, std::string_view key, const std::vector<int>& v) {
  w.key(key).begin_array();
  for (int n : v)
    w.value(n);
  w.end_array();
}

// The plan's cost model as "cost_model" reads it back, where it is one pipesched can write.
inline void write_cost_model(json::Writer& w, const std::any& cost) {
  if (const auto* c = std::any_cast<UniformCost>(&cost)) {
    w.key("cost_model")
        .begin_object()
        .field("kind", "uniform")
        .field("f", c->f)
        .field("b", c->b)
        .field("w", c->w)
        .field("r", c->r)
        .field("comm", c->comm)
        .field("boundary", c->boundary)
        .field("w_memory", c->w_memory)
        .field("copy", c->copy)
        .field("vf", c->vf)
        .field("vb", c->vb)
        .field("vmem", c->vmem)
        .field("input_vocabulary", c->input_vocabulary)
        .field("ef", c->ef)
        .field("eb", c->eb)
        .end_object();
  } else if (const auto* t = std::any_cast<TransformerCost>(&cost)) {
    w.key("cost_model").begin_object().field("kind", "transformer").key("model");
    write_model(w, t->model, "model");
    w.key("device");
    write_device(w, t->device);
    const Parallelism& q = t->parallel;
    w.key("parallel")
        .begin_object()
        .field("tensor", q.tensor)
        .field("sequence_parallel", q.sequence_parallel)
        .field("data", q.data)
        .field("zero", q.zero);
    write_ints(w, "layers", q.layers);
    w.field("split", q.split == LayerSplit::Even ? "even" : "balanced")
        .field("whole_step", q.whole_step)
        .field("vocabulary", q.vocabulary)
        .field("input_vocabulary", q.input_vocabulary)
        .end_object();
    write_ints(w, "slice_lengths", t->slice_lengths);
    w.field("wgrad_split", t->wgrad_split == WGradSplit::Even ? "even" : "per-gemm");
    if (t->measured) w.key("profile").raw(layer_profile_json(*t->measured, false));
    w.end_object();
  }
}

}  // namespace detail::plan_file

//! Writes plan `p` as one JSON object into `w`, the form read_plan reads back to the same plan
//! (and `pipesched tune --json` prints, docs/cli.md): the base "schedule", "checkpoint"
//! ("checkpoint_policy" too for a program's own policy), "wgrad", the grid ("pp", "dp",
//! "tp"), "zero", "sequence_parallel", "microbatch_size", "microbatches", "chunks", "slices",
//! "warmup", "layers_per_stage"; "step_time_s", "peak_memory_bytes", "mfu" and "mfu_usual"
//! (null unless the plan's memory is in bytes); `command` as "command" when not empty; the
//! figures in the cost model's units ("makespan", "throughput", "bubble_ratio", "recomputes",
//! "offloads", "fine_wgrad", "fitted", "peak_memory" per rank); "cost_model" where the plan holds a
//! TransformerCost or a UniformCost; and the schedule in the text form, "schedule_text".
inline void write_plan(json::Writer& w, const tuning::Plan& p, std::string_view command = {}) {
  const bool bytes = p.memory_unit == MemoryUnit::Bytes;
  w.begin_object()
      .field("schedule", p.base)
      .field("checkpoint", p.checkpoint_policy.empty() ? std::string(to_string(p.checkpoint))
                                                       : p.checkpoint_policy);
  if (!p.checkpoint_policy.empty()) w.field("checkpoint_policy", p.checkpoint_policy);
  w.field("wgrad", detail::plan_file::wgrad_name(p))
      .field("pp", p.schedule.problem.ranks)
      .field("dp", p.data)
      .field("tp", p.tensor)
      .field("zero", p.zero)
      .field("sequence_parallel", p.sequence_parallel)
      .field("microbatch_size", p.microbatch_size)
      .field("microbatches", p.microbatches)
      .field("chunks", p.chunks)
      .field("slices", p.slices)
      .field("warmup", p.warmup);
  detail::plan_file::write_ints(w, "layers_per_stage", p.layers_per_stage);
  // Seconds, bytes and MFU exist where the cost model's memory is in bytes.
  for (const auto& [key, v] :
       {std::pair{"step_time_s", p.makespan}, std::pair{"peak_memory_bytes", p.peak_memory},
        std::pair{"mfu", p.mfu}, std::pair{"mfu_usual", p.mfu_usual}}) {
    w.key(key);
    if (bytes)
      w.value(v);
    else
      w.value(nullptr);
  }
  if (!command.empty()) w.field("command", command);
  w.field("base", p.base)
      .field("makespan", p.makespan)
      .field("throughput", p.throughput)
      .field("bubble_ratio", p.bubble_ratio)
      .field("recomputes", p.recomputes)
      .field("offloads", p.offloads)
      .field("vocabulary_passes", p.vocabulary)
      .field("fine_wgrad", p.fine_wgrad)
      .field("fitted", p.fitted)
      .key("peak_memory")
      .begin_array();
  for (double v : p.peak_per_rank)
    w.value(v);
  w.end_array();
  detail::plan_file::write_cost_model(w, p.cost);
  w.field("schedule_text", to_text(p.schedule)).end_object();
}

//! Plan `p` as the JSON text write_plan writes (one line; `spaced`: with spaces after ':' and
//! ',').
inline std::string plan_json(const tuning::Plan& p, std::string_view command = {},
                             bool spaced = false) {
  json::Writer w(spaced);
  write_plan(w, p, command);
  return w.take();
}

//! Writes plan `p` to the file at `path` (write_plan's form), replacing it. Throws
//! pipesched::error naming the path and the reason when it cannot be written.
inline void write_plan_file(const std::string& path, const tuning::Plan& p,
                            std::string_view command = {}) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    throw error(path + ": cannot write the plan file: " + std::strerror(errno) +
                "; give a path in a folder that exists and can be written.");
  const std::string text = plan_json(p, command) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed)
    throw error(path + ": the plan file was not written in full (" + std::strerror(errno) +
                "); check the free space and write it again.");
}

//! The cost model plan `p` was simulated under (tuning::Plan::cost), as a `Cost`:
//! simulate(p.schedule, cost_of<Cost>(p)) gives the plan's makespan again. Throws
//! invalid_problem when the plan holds no cost model (one made by hand, or read from a file
//! without "cost_model") or one of another type.
template <class Cost>
const Cost& cost_of(const tuning::Plan& p) {
  if (const Cost* c = std::any_cast<Cost>(&p.cost)) return *c;
  if (!p.cost.has_value())
    throw invalid_problem(
        "cost_of: the plan holds no cost model; a plan from tune or tune_cluster holds the one "
        "it was simulated under, and a plan file holds it in \"cost_model\" (TransformerCost "
        "and UniformCost), so read the plan from such a file or give the cost model yourself.");
  throw invalid_problem(
      "cost_of: the plan was simulated under a cost model of another type than the one asked "
      "for; ask for the type the search's cost factory returns (TransformerCost for "
      "tune_cluster(request, model, device) and tune(request, model, device), UniformCost for "
      "tune(request, cost)).");
}

}  // namespace pipesched
