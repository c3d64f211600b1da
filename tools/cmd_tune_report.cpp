// pipesched tune, printing what the search found: as text (the bests, each pair's best, the
// search, the notes) or as one JSON object (docs/cli.md), each plan with the `pipesched
// simulate` command that reproduces its step time and its schedule in the text form.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::cli {

namespace {

// `s` as one shell word: as it is, or in single quotes (each ' inside written '\'').
std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$`;&|<>()*?[]{}#~!") == std::string::npos) return s;
  std::string out = "'";
  for (char ch : s)
    out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

//! A `pipesched simulate` command line that builds this plan's schedule the way tune did
//! (generate, fit, place W parts, checkpoint) under the same cost model, so that its makespan
//! is the plan's step time.
std::string plan_command(const TunePlan& p, const CommandContext& c) {
  const GeneratorInfo& g = find_generator(p.base);
  std::string cmd = "pipesched simulate --schedule " + p.base + " --ranks " +
                    std::to_string(p.schedule.problem.ranks) + " --microbatches " +
                    std::to_string(p.microbatches);
  if (g.chunks_vary) cmd += " --chunks " + std::to_string(p.chunks);
  if (p.slices > 1) {
    cmd += " --slices " + std::to_string(p.slices);
    if (c.transformer && !c.slicing.empty()) cmd += " --slicing " + c.slicing;
  }
  if (p.fine_wgrad)
    cmd += " --wgrad fine --wgrad-parts " +
           (c.wgrad_parts == 0 ? std::string("gemm") : std::to_string(c.wgrad_parts));
  if (c.transformer) {
    cmd +=
        " --model " + quoted(c.model) +
        (c.cluster.empty() ? " --device " + quoted(c.device) : " --cluster " + quoted(c.cluster));
    if (!c.sequence.empty()) cmd += " --sequence " + c.sequence;
    cmd += " --microbatch-size " + std::to_string(p.microbatch_size);
    if (!c.gpus_per_node.empty()) cmd += " --gpus-per-node " + c.gpus_per_node;
    if (p.tensor > 1) cmd += " --tp " + std::to_string(p.tensor);
    if (p.sequence_parallel) cmd += " --sp";
    if (p.data > 1) cmd += " --dp " + std::to_string(p.data);
    if (p.zero > 0) cmd += " --zero " + std::to_string(p.zero);
    cmd += " --layers " + join_ints(p.layers_per_stage, ",");
    if (c.whole_step) cmd += " --whole-step";
  } else if (!c.cost.empty()) {
    cmd += " --cost " + quoted(c.cost);
  }
  if (p.checkpoint != CheckpointMode::None)
    cmd += std::string(" --checkpoint ") + to_string(p.checkpoint);
  // The budget tune held the plan to, where the schedule depends on it.
  const std::string budget = c.transformer && c.budget.empty() ? "device" : c.budget;
  if (!budget.empty() && (p.fitted || p.fine_wgrad || p.checkpoint != CheckpointMode::None)) {
    cmd += " --memory-budget " + quoted(budget);
    if (g.generate_within) cmd += p.fitted ? " --fit" : " --no-fit";
  }
  return cmd;
}

namespace {

const char* wgrad_name(const TunePlan& p) {
  if (p.fine_wgrad) return "fine";
  return p.wgrad == WGradMode::Split ? "split" : "fused";
}

// The JSON is a contract (docs/cli.md).
void plan_json(json::Writer& w, const std::optional<TunePlan>& plan, const CommandContext& c) {
  if (!plan) {
    w.value(nullptr);
    return;
  }
  const TunePlan& p = *plan;
  w.begin_object()
      .field("schedule", p.base)
      .field("checkpoint", to_string(p.checkpoint))
      .field("wgrad", wgrad_name(p))
      .field("pp", p.schedule.problem.ranks)
      .field("dp", p.data)
      .field("tp", p.tensor)
      .field("zero", p.zero)
      .field("sequence_parallel", p.sequence_parallel)
      .field("microbatch_size", p.microbatch_size)
      .field("microbatches", p.microbatches)
      .field("chunks", p.chunks)
      .field("slices", p.slices)
      .field("warmup", p.warmup)
      .key("layers_per_stage")
      .begin_array();
  for (int n : p.layers_per_stage)
    w.value(n);
  w.end_array();
  // Seconds, bytes and MFU exist under TransformerCost only.
  for (const auto& [key, v] :
       {std::pair{"step_time_s", p.makespan}, std::pair{"peak_memory_bytes", p.peak_memory},
        std::pair{"mfu", p.mfu}, std::pair{"mfu_usual", p.mfu_usual}}) {
    w.key(key);
    if (c.transformer)
      w.value(v);
    else
      w.value(nullptr);
  }
  w.field("command", plan_command(p, c))
      .field("base", p.base)
      .field("makespan", p.makespan)
      .field("throughput", p.throughput)
      .field("bubble_ratio", p.bubble_ratio)
      .field("recomputes", p.recomputes)
      .field("fine_wgrad", p.fine_wgrad)
      .field("fitted", p.fitted)
      .key("peak_memory")
      .begin_array();
  for (double v : p.peak_per_rank)
    w.value(v);
  // The schedule itself, so that the plan runs as it is (read_run_plan) without regenerating.
  w.end_array().field("schedule_text", to_text(p.schedule)).end_object();
}

//! A plan's step time in the cost model's unit, with how much faster the best plan is.
std::string step_of(const TunePlan& p, const TuneResult& r, const Units& units) {
  std::string s = detail::format_time(p.makespan, units.time, 6);
  if (r.best && p.makespan > r.best->makespan * (1 + 1e-12))
    s += "  (best is " + detail::format_number(p.makespan / r.best->makespan, 4) + "x faster)";
  return s;
}

//! One of the bests as a row: "best:", the plan in a few words, its step.
void print_row(const char* what, const std::optional<TunePlan>& p, const TuneResult& r,
               const Units& units) {
  if (!p) {
    std::printf("%-26s none fits\n", what);
    return;
  }
  std::printf("%-26s %-58s step %s\n", what, describe(*p).c_str(), step_of(*p, r, units).c_str());
}

}  // namespace

void print_tune_json(const TuneResult& r, const TuneCommand& c) {
  const CommandContext& ctx = c.context;
  const Units& units = c.units;
  json::Writer w;
  w.begin_object();
  w.key("best");
  plan_json(w, r.best, ctx);
  w.key("baselines").begin_array();
  for (const TuneBaseline& b : r.baselines) {
    if (b.plan) {
      plan_json(w, b.plan, ctx);
    } else {
      w.begin_object()
          .field("schedule", b.base)
          .field("checkpoint", to_string(b.checkpoint))
          .key("step_time_s")
          .value(nullptr)
          .end_object();
    }
  }
  w.end_array();
  w.key("search")
      .begin_object()
      .field("candidates", r.candidates_tried)
      .field("total", r.candidates_total)
      .field("seconds", r.seconds)
      .field("cut", r.cut)
      .field("threads", r.threads)
      .field("refused", r.candidates_refused)
      .field("over_budget", r.candidates_over_budget)
      .field("pruned", r.candidates_pruned)
      .end_object();
  w.key("best_without_checkpoint");
  plan_json(w, r.best_without_checkpoint, ctx);
  w.key("best_conventional");
  plan_json(w, r.best_conventional, ctx);
  w.key("best_mario");
  plan_json(w, r.best_mario, ctx);
  w.field("time_unit", units.time)
      .field("candidates", r.candidates_tried)
      .field("seconds", r.seconds)
      .key("notes")
      .begin_array();
  for (const TuneNote& n : r.notes)
    w.begin_object()
        .field("configuration", n.configuration)
        .field("reason", words_of(n.message, "tune"))
        .field("count", n.count)
        .end_object();
  w.end_array().end_object();
  std::cout << w.take() << "\n";
}

void print_tune_text(const TuneResult& r, const TuneCommand& c) {
  const CommandContext& ctx = c.context;
  const Units& units = c.units;
  const bool tc = c.transformer;
  print_row("best:", r.best, r, units);
  if (r.best) {
    if (tc)
      std::printf(
          "%-26s MFU %.1f%% (causal attention; %.1f%% counting it in full, as PaLM and "
          "Megatron-LM do), largest GPU's memory %s\n",
          "", 100 * r.best->mfu, 100 * r.best->mfu_usual,
          detail::format_memory(r.best->peak_memory, units.memory, 4).c_str());
    std::printf("%-26s %s\n", "", plan_command(*r.best, ctx).c_str());
  }
  print_row("best without checkpoint:", r.best_without_checkpoint, r, units);
  print_row("best conventional:", r.best_conventional, r, units);
  print_row("best Mario:", r.best_mario, r, units);
  std::printf("\nbest of each schedule and checkpoint mode:\n");
  std::printf("  %-18s %-16s %-64s %s\n", "schedule", "checkpoint", "plan", "step");
  for (const TuneBaseline& b : r.baselines)
    std::printf("  %-18s %-16s %-64s %s\n", b.base.c_str(), to_string(b.checkpoint),
                b.plan ? describe(*b.plan).c_str() : "none fits",
                b.plan ? step_of(*b.plan, r, units).c_str() : "");
  std::printf(
      "searched %d candidates in %.2f s on %d thread%s (%d refused, %d over budget, %d "
      "pruned)%s\n",
      r.candidates_tried, r.seconds, r.threads, r.threads == 1 ? "" : "s", r.candidates_refused,
      r.candidates_over_budget, r.candidates_pruned,
      r.cut ? ("; cut by --time-limit after " + std::to_string(r.candidates_tried) + " of " +
               std::to_string(r.candidates_total))
                  .c_str()
            : "");
  for (const TuneNote& n : r.notes) {
    std::string line = "note: " + n.configuration + ": " + words_of(n.message, "tune");
    if (n.count > 1) line += " (\xC3\x97" + std::to_string(n.count) + ")";
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace pipesched::cli
