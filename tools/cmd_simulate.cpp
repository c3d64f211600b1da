// pipesched simulate: time and memory of a schedule under a cost model, as a table in the cost
// model's units (seconds and bytes, or abstract units and microbatches) or as one JSON object.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/io/json.hpp"

namespace pipesched::cli {

namespace {

// The JSON is a contract (docs/cli.md): its fields and their units do not change.
std::string simulate_json(const Prepared& p, const SimulationResult& r) {
  const Schedule& s = p.schedule;
  const Units units = units_of(p.cost);
  json::Writer w;
  w.begin_object().field("schedule", s.name).key("problem").begin_object();
  w.field("ranks", s.problem.ranks)
      .field("stages", s.problem.stages)
      .field("microbatches", s.problem.microbatches)
      .field("slices", s.problem.slices);
  if (s.problem.replicas != 1) w.field("replicas", s.problem.replicas);  // chimera: 2
  w.end_object();
  if (is_transformer(p.cost)) {
    w.field("slicing", to_string(p.slicing.mode)).key("slice_lengths").begin_array();
    for (int t : p.slicing.lengths)
      w.value(t);
    w.end_array();
  }
  w.field("placement", s.placement.describe())
      .field("actions", s.action_count())
      .field("checkpoint", std::string(p.checkpoint.policy->name));
  if (!p.layout.empty()) {
    w.field("layout", p.layout);
    if (p.layouts_tried > 0)
      w.field("layouts_tried", p.layouts_tried).field("even_split_makespan", p.even_step);
  }
  // One number for a budget shared by every rank; the smallest when ranks differ ('device'),
  // each rank's own in "ranks".
  double least_budget = p.checkpoint.budget.all;
  for (int i = 0; i < s.rank_count(); ++i)
    least_budget = std::min(least_budget, p.checkpoint.budget.of(i));
  w.field("memory_budget", least_budget).field("recomputes", static_cast<int>(s.count(OpKind::R)));
  if (s.count(OpKind::Offload) > 0)
    w.field("offloads", static_cast<int>(s.count(OpKind::Offload)))
        .field("peak_host_memory_max", r.peak_host_memory_max);
  if (s.has_vocabulary())
    w.field("vocabulary_passes",
            static_cast<int>(s.count(OpKind::VocabF) + s.count(OpKind::VocabB) +
                             s.count(OpKind::EmbedF) + s.count(OpKind::EmbedB)));
  w.field("time_unit", units.time)
      .field("memory_unit", units.memory)
      .field("deadlock", r.deadlock)
      .field("makespan", r.makespan)
      .field("bubble_ratio", r.bubble_ratio)
      .field("peak_memory_max", r.peak_memory_max)
      .field("warmup", warmup_of(s, 0))
      .key("ranks")
      .begin_array();
  for (int i = 0; i < s.rank_count(); ++i) {
    const RankSummary& rk = r.ranks[static_cast<std::size_t>(i)];
    w.begin_object()
        .field("rank", i)
        .field("busy", rk.busy)
        .field("idle", rk.idle)
        .field("peak_memory", rk.peak_memory)
        .field("warmup", warmup_of(s, i))
        .field("memory_budget", p.checkpoint.budget.of(i))
        .end_object();
  }
  w.end_array().end_object();
  return w.take() + "\n";
}

// Six significant digits: the table is for reading figures off, not for a glance.
constexpr int table_digits = 6;

//! `text` right-aligned in `width` terminal columns (UTF-8: "µs" takes two bytes, one column).
std::string right_aligned(const std::string& text, std::size_t width) {
  std::size_t n = 0;
  for (char ch : text)
    n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n < width ? std::string(width - n, ' ') + text : text;
}

void print_table(const Prepared& p, const SimulationResult& r) {
  const Schedule& s = p.schedule;
  const Units u = units_of(p.cost);
  const bool tc = is_transformer(p.cost);
  auto time = [&](double v) { return format_time(v, u.time, table_digits); };
  auto memory = [&](double v) { return format_memory(v, u.memory, table_digits); };
  std::printf("%s: %d ranks, %d stages (%s), %d microbatches, %zu actions\n", s.name.c_str(),
              s.problem.ranks, s.problem.stages, s.placement.describe().c_str(),
              s.problem.microbatches, s.action_count());
  if (s.problem.replicas > 1)
    std::printf("%d model replicas of %d stages each, microbatch m through replica m mod %d\n",
                s.problem.replicas, s.problem.replica_stages(), s.problem.replicas);
  if (s.problem.slices > 1) {
    std::string line = std::to_string(s.problem.slices) + " slices per microbatch";
    if (tc)
      line += std::string(", ") + to_string(p.slicing.mode) + ": " +
              join_ints(p.slicing.lengths, ", ") + " tokens";
    std::printf("%s\n", line.c_str());
  }
  std::printf("makespan %s, bubble %.2f%%, max peak memory %s\n", time(r.makespan).c_str(),
              100 * r.bubble_ratio, memory(r.peak_memory_max).c_str());
  if (!p.layout.empty() && p.layouts_tried > 0)
    std::printf("layout %s (auto: the fastest of %d layouts tried; the even split: %s)\n",
                p.layout.c_str(), p.layouts_tried,
                std::isfinite(p.even_step) ? time(p.even_step).c_str() : "no plan");
  else if (!p.layout.empty())
    std::printf("layout %s\n", p.layout.c_str());
  const CheckpointChoice& choice = p.checkpoint;
  if (choice.policy->recomputes || choice.budgeted) {
    std::string budget = "no memory budget";
    if (choice.budgeted && choice.budget.per_rank.empty())
      budget = "memory budget " + memory(choice.budget.all) + " per rank";
    else if (choice.budgeted)
      budget = "memory budget per rank as listed";
    std::printf("checkpoint %s, %s, %d recomputes\n", std::string(choice.policy->name).c_str(),
                budget.c_str(), static_cast<int>(s.count(OpKind::R)));
  }
  if (s.count(OpKind::Offload) > 0)
    std::printf("offload %d unit%s to host memory, max peak host memory %s\n",
                static_cast<int>(s.count(OpKind::Offload)),
                s.count(OpKind::Offload) == 1 ? "" : "s", memory(r.peak_host_memory_max).c_str());
  if (s.has_vocabulary())
    std::printf("vocabulary parallel: the output layer%s in %d shards, %zu vocabulary passes\n",
                s.has_input_vocabulary() ? " and the input embedding" : "", s.problem.ranks,
                s.count(OpKind::VocabF) + s.count(OpKind::VocabB) + s.count(OpKind::EmbedF) +
                    s.count(OpKind::EmbedB));
  const bool per_rank_budget = !choice.budget.per_rank.empty();
  std::printf("%6s %16s %16s %18s", "rank", "busy", "idle", "peak memory");
  if (per_rank_budget) std::printf(" %18s", "memory budget");
  std::printf("\n");
  for (int i = 0; i < s.rank_count(); ++i) {
    const RankSummary& rk = r.ranks[static_cast<std::size_t>(i)];
    std::printf("%6d %s %s %18s", i, right_aligned(time(rk.busy), 16).c_str(),
                right_aligned(time(rk.idle), 16).c_str(), memory(rk.peak_memory).c_str());
    if (per_rank_budget) std::printf(" %18s", memory(choice.budget.of(i)).c_str());
    std::printf("\n");
  }
}

}  // namespace

int cmd_simulate(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = schedule_options;
  specs.insert(specs.end(), cost_options.begin(), cost_options.end());
  specs.insert(specs.end(), slicing_options.begin(), slicing_options.end());
  specs.insert(specs.end(), checkpoint_options.begin(), checkpoint_options.end());
  specs.push_back({"--json", false, "print one JSON object (schema: docs/cli.md)"});
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched simulate (--schedule NAME --ranks P --microbatches M ... | FILE) "
        "[--cost K=V,...] [--model M|--profile F (--device D | --cluster C) [--slicing MODE]] "
        "[--checkpoint "
        "MODE] "
        "[--memory-budget X] [--json]",
        "Simulates time and memory. UniformCost (default f=1,b=2,w=1,r=1,comm=0,boundary=0.05)\n"
        "measures time in units of one forward and memory in microbatches of activations;\n"
        "TransformerCost (--model, --device) in seconds and bytes (the table writes GiB, MiB).\n"
        "--checkpoint full|selective|mario recomputes forwards (selective and mario need\n"
        "--memory-budget); a budget counts activations only, per rank, and one the schedule\n"
        "cannot meet is refused (exit 2). With full, a budget is only checked; with none,\n"
        "once the orders with a memory knob (" +
            memory_knob_orders() +
            ") have fitted themselves to it: the Zero Bubble and V-shape orders run deferred "
            "weight gradients before a forward that would exceed it (and hold back forwards), "
            "slice-pipe takes its largest warm-up that fits (unless --warmup sets one).\n"
            "The budget is a plain number of microbatches under UniformCost; under "
            "TransformerCost bytes with a\n"
            "unit (kB MB GB TB, KiB MiB GiB TiB) or 'device': each rank's device memory less its\n"
            "weights, gradients and optimizer state.\n"
            "--slices K cuts each microbatch into K slices (gpipe, seq-1f1b, slice-pipe); under\n"
            "TransformerCost --slicing sets their lengths: uniform (default), balanced (equal\n"
            "forward time: later slices, which attend to a longer prefix, get fewer tokens) or\n"
            "terapipe (TeraPipe's optimum for P ranks). --wgrad fine places the weight-gradient\n"
            "parts under the same cost and budget. --offload moves activations to host memory\n"
            "where the budget asks, before checkpointing recomputes what is left: the copies run\n"
            "on the GPU's host link (the device's host_link_bandwidth; UniformCost: --cost copy)\n"
            "while the rank computes.\n"
            "A schedule may hold at most " +
            grouped(max_actions) +
            " actions (recomputes and W parts included); the\n"
            "--cost times go from 0 to 1e12.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("simulate", argv, specs, 1);
  const Prepared p = prepare(a);
  const SimulationResult r = simulate_schedule(p.schedule, p.cost);
  if (a.has("--json"))
    std::cout << simulate_json(p, r);
  else
    print_table(p, r);
  if (r.deadlock) {
    std::fprintf(stderr, "%s\n", r.deadlock_report.c_str());
    return exit_invalid;
  }
  return exit_ok;
}

}  // namespace pipesched::cli
