// A plan that `pipesched tune --json` printed, read back to be run: the process grid
// (pp × dp × tp), the ZeRO stage, sequence parallelism, the microbatch size, the layers of each
// stage and the schedule itself (its text form, the plan's "schedule_text"), checked against
// each other and validated. A program started under `mpirun -np pp·dp·tp` reads it, places
// each process with RunPlan::grid and runs RunPlan::schedule (docs/executor.md, "Running a
// plan").
#pragma once

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/io/detail/bounded_file.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/text.hpp"

namespace pipesched {

//! The largest plan file read_run_plan_file reads: 256 MiB (a plan holds its schedule as text,
//! and the whole `tune --json` output holds the best plan of every pair searched).
inline constexpr std::uint64_t max_plan_bytes = std::uint64_t{256} << 20;

//! One plan of `pipesched tune --json`, ready to run: where each process sits, how the model is
//! split, and what each pipeline rank runs.
struct RunPlan {
  //! Pipeline ranks (the schedule's, the plan's `pp`) × data-parallel replicas (`dp`) ×
  //! tensor-parallel ranks (`tp`); the job runs grid.size() processes.
  ProcessGrid grid;
  //! ZeRO stage: 0 none, 1 optimizer state sharded over the replicas, 2 gradients too.
  int zero = 0;
  bool sequence_parallel = false;  //!< sequence parallelism over each tensor group
  int microbatch_size = 1;         //!< sequences per microbatch
  int microbatches = 1;            //!< microbatches per step and pipeline (the schedule's)
  int chunks = 1;                  //!< stages per rank, as the tuner counts them
  int slices = 1;                  //!< sequence slices per microbatch (the schedule's)
  //! Layers of each model stage (one replica's stages, in order); empty for a plan made
  //! without a model (UniformCost).
  std::vector<int> layers_per_stage;
  Schedule schedule;       //!< what each pipeline rank runs; it validates
  std::string base;        //!< the generator it came from (the plan's `schedule`: "zb-h1")
  std::string checkpoint;  //!< its checkpointing ("none", "selective", "mario", ...)
  std::string wgrad;       //!< "fused", "split" or "fine"; empty when the plan does not say
  //! Simulated step time in seconds (a plan made with a model); empty otherwise.
  std::optional<double> step_time_s;
  //! The `pipesched simulate` command that reproduces the step time; empty when not given.
  std::string command;
};

namespace detail::run_plan {

//! The fields of one plan object, each read with the sentence that says what it must be.
class PlanReader {
 public:
  PlanReader(const json::Value& plan, const std::string& source) : plan_(plan), source_(source) {}

  RunPlan read() const {
    RunPlan p;
    p.base = text("schedule");
    p.checkpoint = text("checkpoint");
    p.schedule = schedule();
    const Problem& problem = p.schedule.problem;
    const int pp = whole("pp", 1, "the pipeline ranks");
    if (pp != problem.ranks)
      fail(field("pp"), "field \"pp\" is " + std::to_string(pp) +
                            " but the schedule in \"schedule_text\" has " +
                            std::to_string(problem.ranks) +
                            " ranks; pp is the schedule's rank count, so they must agree");
    p.grid = ProcessGrid{pp, whole("dp", 1, "the data-parallel replicas"),
                         whole("tp", 1, "the tensor-parallel degree")};
    if (static_cast<long long>(p.grid.pipeline) * p.grid.data * p.grid.tensor > INT_MAX)
      fail(plan_, "pp " + std::to_string(p.grid.pipeline) + " × dp " + std::to_string(p.grid.data) +
                      " × tp " + std::to_string(p.grid.tensor) +
                      " is more processes than a job can have (" + std::to_string(INT_MAX) + ")");
    p.zero = whole("zero", 0, "the ZeRO stage: 0, 1 or 2");
    if (p.zero > 2)
      fail(field("zero"),
           "field \"zero\" is " + std::to_string(p.zero) +
               "; the ZeRO stage is 0 (none), 1 (optimizer state) or 2 (+ gradients)");
    p.sequence_parallel = boolean("sequence_parallel");
    p.microbatch_size = whole("microbatch_size", 1, "sequences per microbatch");
    p.microbatches = agreeing("microbatches", problem.microbatches, "microbatches");
    p.slices = plan_.find("slices") ? agreeing("slices", problem.slices, "slices") : problem.slices;
    p.chunks = plan_.find("chunks") ? whole("chunks", 1, "stages per rank")
                                    : problem.stages / problem.ranks;
    p.layers_per_stage = layers(p.schedule);
    if (plan_.find("wgrad")) p.wgrad = text("wgrad");
    if (plan_.find("command")) p.command = text("command");
    if (const json::Value* t = plan_.find("step_time_s"); t && !t->is_null()) {
      if (t->kind() != json::Kind::Number || t->number() < 0)
        mistyped("step_time_s", *t, "it is a step time in seconds, 0 or more, or null");
      p.step_time_s = t->number();
    }
    return p;
  }

 private:
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
  static std::string shown(const json::Value& v) {
    switch (v.kind()) {
      case json::Kind::Number: {
        const std::string& t = v.number_text();
        return t.size() <= 40 ? t : t.substr(0, 40) + "...";
      }
      case json::Kind::String:
        return detail::io::quote_token(v.string()) + " (a string)";
      case json::Kind::Boolean:
        return v.boolean() ? "true" : "false";
      default:
        return json::describe(v.kind());
    }
  }

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
      if (!n.is_integer() || n.number() < 1 || n.number() > INT_MAX)
        fail(n, "field \"layers_per_stage\" holds " + shown(n) + "; " + want);
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
    Schedule s = detail::io::TextReader(v.string(), text_source).read();
    if (s.name == text_source) s.name = text("schedule");  // the text had no name line
    try {
      validate(s);
    } catch (const invalid_schedule& e) {
      e.rethrow_after(Message(text_source + ": the schedule does not validate: "));
    }
    return s;
  }

  const json::Value& plan_;
  const std::string& source_;
};

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

}  // namespace detail::run_plan

//! Reads a plan to run from `json_text`: one plan object of `pipesched tune --json`, or that
//! command's whole output (then its "best" plan). Takes the plan's grid (`pp`, `dp`, `tp`),
//! `zero`, `sequence_parallel`, `microbatch_size`, `microbatches`, `layers_per_stage`, the base
//! `schedule`, `checkpoint` and the schedule in `schedule_text`; `chunks`, `slices`, `wgrad`,
//! `step_time_s` and `command` where given; other keys are ignored. Throws parse_error naming
//! `source`, the line and the column: for text that is not JSON, a missing or mistyped field
//! (`plan.json: line 1, column 1: field "dp" is missing; a plan from `pipesched tune --json` has
//! it.`), `pp`, `microbatches` or `slices` that disagree with the schedule, a `zero` other than
//! 0, 1 or 2, a "best" that is null (the search found no plan; the message says why); and
//! throws invalid_schedule when the schedule does not validate.
inline RunPlan read_run_plan(std::string_view json_text, std::string source = "plan") {
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
                      detail::run_plan::why_none(doc) +
                      "; there is nothing to run (tune again with a larger --memory-budget, "
                      "checkpointing or more GPUs)");
    if (plan->kind() != json::Kind::Object)
      fail(*plan, std::string("\"best\" is ") + json::describe(plan->kind()) +
                      "; expected a plan (an object) or null");
  }
  return detail::run_plan::PlanReader(*plan, source).read();
}

//! Reads the plan file at `path` (at most max_plan_bytes) as read_run_plan does, naming the
//! path in its messages. Throws pipesched::error naming the path and the reason when the file
//! cannot be read (missing, a directory, too large).
inline RunPlan read_run_plan_file(const std::string& path) {
  return read_run_plan(
      detail::io::read_bounded_file(path, "plan file", max_plan_bytes,
                                    "give the path of a plan from `pipesched tune --json`",
                                    "the 256 MiB pipesched reads as a plan"),
      path);
}

}  // namespace pipesched
