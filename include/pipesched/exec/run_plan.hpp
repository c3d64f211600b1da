// A plan that `pipesched tune --json` printed, read back to be run: the process grid
// (pp × dp × tp), the ZeRO stage, sequence parallelism, the microbatch size, the layers of each
// stage and the schedule itself (its text form, the plan's "schedule_text"), checked against
// each other and validated. A program started under `mpirun -np pp·dp·tp` reads it, places
// each process with RunPlan::grid and runs RunPlan::schedule (docs/executor.md, "Running a
// plan").
#pragma once

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
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
#include "pipesched/core/modes.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/detail/bounded_file.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/text.hpp"

namespace pipesched {

//! The largest plan file read_run_plan_file reads: 256 MiB (a plan holds its schedule as text,
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
    if (static_cast<long long>(p.grid.pipeline) * p.grid.data * p.grid.tensor > max_plan_processes)
      fail(plan_, "pp " + std::to_string(p.grid.pipeline) + " × dp " + std::to_string(p.grid.data) +
                      " × tp " + std::to_string(p.grid.tensor) + " is " +
                      std::to_string(static_cast<long long>(p.grid.pipeline) * p.grid.data *
                                     p.grid.tensor) +
                      " processes; a plan runs on at most " + std::to_string(max_plan_processes) +
                      " (the GPUs `pipesched tune --gpus` plans for)");
    p.zero = whole("zero", 0, "the ZeRO stage: 0, 1 or 2");
    if (p.zero > 2)
      fail(field("zero"),
           "field \"zero\" is " + std::to_string(p.zero) +
               "; the ZeRO stage is 0 (none), 1 (optimizer state) or 2 (+ gradients)");
    p.sequence_parallel = boolean("sequence_parallel");
    if (p.sequence_parallel && p.grid.tensor == 1)
      fail(field("sequence_parallel"),
           "field \"sequence_parallel\" is true but \"tp\" is 1; sequence parallelism splits "
           "the sequence over a tensor group, so a plan without tensor parallelism has false");
    p.microbatch_size =
        bounded("microbatch_size", 1, max_plan_microbatch_size, "sequences per microbatch");
    p.microbatches = agreeing("microbatches", problem.microbatches, "microbatches");
    p.slices = plan_.find("slices") ? agreeing("slices", problem.slices, "slices") : problem.slices;
    p.chunks = plan_.find("chunks") ? agreeing("chunks", problem.chunks(), "stages per rank")
                                    : problem.chunks();
    p.layers_per_stage = layers(p.schedule);
    check_checkpoint(p);
    if (plan_.find("wgrad")) {
      p.wgrad = text("wgrad");
      check_wgrad(p);
    }
    if (plan_.find("command")) p.command = text("command");
    if (const json::Value* t = plan_.find("step_time_s"); t && !t->is_null()) {
      if (t->kind() != json::Kind::Number || !(t->number() >= 0) || !std::isfinite(t->number()))
        mistyped("step_time_s", *t, "it is a step time in seconds, 0 or more, or null");
      p.step_time_s = t->number();
    }
    return p;
  }

 private:
  // The plan's "checkpoint" is a mode the tuner writes, and a plan without checkpointing has
  // no recomputes.
  void check_checkpoint(const RunPlan& p) const {
    bool known = false;
    for (CheckpointMode m :
         {CheckpointMode::None, CheckpointMode::Full, CheckpointMode::Selective,
          CheckpointMode::Mario, CheckpointMode::FullEarly, CheckpointMode::SelectiveEarly})
      known = known || p.checkpoint == to_string(m);
    if (!known)
      mistyped("checkpoint", field("checkpoint"),
               "it is the checkpoint mode: none, full, selective, mario, full-early or "
               "selective-early");
    if (p.checkpoint != "none") return;
    for (int r = 0; r < p.schedule.rank_count(); ++r)
      for (const Action& a : p.schedule.ranks[static_cast<std::size_t>(r)])
        if (a.kind == OpKind::R)
          fail(field("checkpoint"),
               "field \"checkpoint\" is \"none\" but the schedule in "
               "\"schedule_text\" recomputes (" +
                   to_string(a) + " on rank " + std::to_string(r) +
                   "); give the checkpoint mode the plan was made with");
  }

  // The plan's "wgrad" is fused (full backwards B only), split (input and weight gradients, I
  // and W) or fine (W cut into parts), as its schedule is.
  void check_wgrad(const RunPlan& p) const {
    if (p.wgrad != "fused" && p.wgrad != "split" && p.wgrad != "fine")
      mistyped("wgrad", field("wgrad"),
               "it is how the backward is split: \"fused\", \"split\" or \"fine\"");
    const Action* split = nullptr;  // the first I or W
    const Action* part = nullptr;   // the first W part after the first
    for (const auto& list : p.schedule.ranks)
      for (const Action& a : list) {
        if ((a.kind == OpKind::I || a.kind == OpKind::W) && split == nullptr) split = &a;
        if (a.kind == OpKind::W && a.part > 0 && part == nullptr) part = &a;
      }
    const auto disagree = [&](const std::string& why) {
      fail(field("wgrad"), "field \"wgrad\" is \"" + p.wgrad +
                               "\" but the schedule in \"schedule_text\" " + why +
                               "; give the mode the plan was made with");
    };
    if (p.wgrad == "fused" && split != nullptr)
      disagree("splits its backward (" + to_string(*split) + ")");
    if (p.wgrad != "fused" && split == nullptr)
      disagree("has no input or weight gradient actions (I, W)");
    if (p.wgrad == "split" && part != nullptr)
      disagree("cuts weight gradients into parts (" + to_string(*part) + "), which is \"fine\"");
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

}  // namespace detail::run_plan

//! Reads a plan to run from `json_text`: one plan object of `pipesched tune --json`, or that
//! command's whole output (then its "best" plan). Takes the plan's grid (`pp`, `dp`, `tp`),
//! `zero`, `sequence_parallel`, `microbatch_size`, `microbatches`, `layers_per_stage`, the base
//! `schedule`, `checkpoint` and the schedule in `schedule_text`; `chunks`, `slices`, `wgrad`,
//! `step_time_s` and `command` where given; other keys are ignored. Throws parse_error naming
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
//! "best" that is null (the search found no plan; the message says why); and throws
//! invalid_schedule when the schedule does not validate.
inline RunPlan read_run_plan(std::string_view json_text, std::string source = "plan") {
  const std::int64_t value_limit =
      std::max<std::int64_t>(min_plan_value_limit, static_cast<std::int64_t>(json_text.size() / 8));
  if (detail::run_plan::json_values_at_most(json_text, value_limit) > value_limit)
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
