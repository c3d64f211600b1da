// apply_checkpoint and its text inputs: memory budgets and checkpoint modes read from text,
// each mode dispatched to its pass with the budget held, device budgets from TransformerCost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched::test_apply_checkpoint {
namespace {

// ---------------------------------------------------------------------------------------
// parse_memory_budget

TEST(ParseMemoryBudget, ReadsPlainNumbersAsMemoryUnitsAndUnitsAsBytes) {
  struct Case {
    const char* text;
    double value;
    bool bytes;
  };
  const double ki = 1024.0;
  for (const Case& c : {
           Case{"2", 2, false},
           Case{"0.5", 0.5, false},
           Case{" 3 ", 3, false},
           Case{".25", 0.25, false},
           Case{"1e3", 1000, false},
           Case{"24GB", 24e9, true},
           Case{"24 GB", 24e9, true},
           Case{"24gb", 24e9, true},
           Case{"512MiB", 512 * ki * ki, true},
           Case{"1.5GiB", 1.5 * ki * ki * ki, true},
           Case{"1.5 gib", 1.5 * ki * ki * ki, true},
           Case{"800MB", 800e6, true},
           Case{"4096B", 4096, true},
           Case{"4096 b", 4096, true},
           Case{"3TB", 3e12, true},
           Case{"2TiB", 2 * ki * ki * ki * ki, true},
           Case{"64kB", 64e3, true},
           Case{"64KB", 64e3, true},
           Case{"64KiB", 64 * ki, true},
           Case{"2.5e1 MB", 25e6, true},
       }) {
    SCOPED_TRACE(c.text);
    const MemoryBudgetValue v = parse_memory_budget(c.text);
    EXPECT_DOUBLE_EQ(v.value, c.value);
    EXPECT_EQ(v.bytes, c.bytes);
  }
}

TEST(ParseMemoryBudget, RefusesOtherTextNamingItAndTheAcceptedForms) {
  struct Case {
    const char* text;
    const char* says;
    int column;
  };
  for (const Case& c : {
           Case{"", "is empty", 1},
           Case{"   ", "is empty", 4},
           Case{"abc", "does not start with a number", 1},
           Case{"-2", "is negative", 1},
           Case{"+2", "does not start with a number", 1},
           Case{"0", "is zero", 1},
           Case{"0.0GB", "is zero", 1},
           Case{"2XB", "unknown unit 'XB'", 2},
           Case{"24 G", "unknown unit 'G'", 4},
           Case{"2 GB extra", "unknown unit 'GB extra'", 3},
           Case{"1e400", "is too large", 1},
           Case{"inf", "does not start with a number", 1},
           Case{"nan", "does not start with a number", 1},
           Case{"0x10", "unknown unit 'x10'", 2},
           Case{"2e", "unknown unit 'e'", 2},
           // A list (one budget per rank) is not taken; a decimal comma is named as one.
           Case{"1,5GB", "is a list; a budget is one amount that holds for every rank", 2},
           Case{"1,5GB", "a fraction is written with a point ('1.5GB')", 2},
           Case{"2,2,2,2", "is a list; a budget is one amount that holds for every rank", 2},
       }) {
    SCOPED_TRACE(std::string("'") + c.text + "'");
    try {
      parse_memory_budget(c.text);
      ADD_FAILURE() << "accepted";
    } catch (const parse_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("memory budget '") + c.text + "'"), std::string::npos)
          << what;
      EXPECT_NE(what.find(c.says), std::string::npos) << what;
      EXPECT_NE(what.find("24GB"), std::string::npos) << what;  // the accepted forms
      EXPECT_NE(what.find("GiB"), std::string::npos) << what;
      EXPECT_EQ(e.line(), 0);
      EXPECT_EQ(e.column(), c.column);
    }
  }
}

// ---------------------------------------------------------------------------------------
// parse_checkpoint_mode

TEST(ParseCheckpointMode, ReadsEveryModeByItsNameAndRefusesOthers) {
  EXPECT_EQ(std::size(checkpoint_modes), 6u);
  for (CheckpointMode m : checkpoint_modes) {
    SCOPED_TRACE(to_string(m));
    EXPECT_EQ(parse_checkpoint_mode(to_string(m)), m);
    std::string upper = to_string(m);
    for (char& c : upper)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(parse_checkpoint_mode(upper), m);
  }
  for (const char* bad : {"", "some", "fulll", "mario "}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    try {
      parse_checkpoint_mode(bad);
      ADD_FAILURE() << "accepted";
    } catch (const parse_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      for (const char* choice :
           {"none", "full", "selective", "mario", "full-early", "selective-early", "Megatron"})
        EXPECT_NE(what.find(choice), std::string::npos) << what;
    }
  }
}

// ---------------------------------------------------------------------------------------
// apply_checkpoint

MemoryBudget budget_of(double all) {
  MemoryBudget b;
  b.all = all;
  return b;
}

// The schedules the dispatch is tried on: the Mario bases and two others.
std::vector<Schedule> bases() {
  return {
      find_generator("1f1b").generate({.ranks = 4, .microbatches = 8}, WGradMode::Fused),
      find_generator("interleaved-1f1b")
          .generate({.ranks = 4, .stages = 8, .microbatches = 8}, WGradMode::Fused),
      find_generator("zb-h1").generate({.ranks = 4, .microbatches = 8}, WGradMode::Split),
      find_generator("gpipe").generate({.ranks = 3, .microbatches = 6}, WGradMode::Fused),
      find_generator("dualpipe-v")
          .generate({.ranks = 4, .stages = 8, .microbatches = 10}, WGradMode::Split),
  };
}

int recomputes(const Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind == OpKind::R;
  return n;
}

// Every rank's simulated peak within its budget.
void expect_fits(const Schedule& s, const MemoryBudget& b, const UniformCost& cost = {}) {
  const SimulationResult r = simulate(s, cost);
  EXPECT_FALSE(r.deadlock) << r.deadlock_report;
  for (int q = 0; q < s.rank_count(); ++q)
    EXPECT_LE(r.ranks[static_cast<std::size_t>(q)].peak_memory, b.of(q) + 1e-9) << "rank " << q;
}

void expect_invalid_problem(const std::function<void()>& f,
                            const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no invalid_problem thrown";
  } catch (const invalid_problem& e) {
    const std::string what = e.what();
    for (const std::string& x : fragments)
      EXPECT_NE(what.find(x), std::string::npos) << "'" << x << "' missing from: " << what;
  }
}

TEST(ApplyCheckpoint, RankPeaksAreTheSimulatorsPeaks) {
  const UniformCost cost{.w_memory = 0.25};
  for (const Schedule& base : bases()) {
    for (const Schedule& s : {base, checkpoint_full(base)}) {
      SCOPED_TRACE(s.name);
      const std::vector<double> peaks = detail::rank_peaks(s, cost);
      const SimulationResult r = simulate(s, cost);
      ASSERT_EQ(peaks.size(), r.ranks.size());
      for (std::size_t q = 0; q < peaks.size(); ++q)
        EXPECT_DOUBLE_EQ(peaks[q], r.ranks[q].peak_memory) << "rank " << q;
    }
  }
}

TEST(ApplyCheckpoint, NoneKeepsTheScheduleAndChecksALimitedBudget) {
  const UniformCost cost;
  for (const Schedule& s : bases()) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(apply_checkpoint(s, CheckpointMode::None, cost, MemoryBudget{}), s);
    const double peak = simulate(s, cost).peak_memory_max;
    EXPECT_EQ(apply_checkpoint(s, CheckpointMode::None, cost, budget_of(peak)), s);
    expect_invalid_problem(
        [&] { apply_checkpoint(s, CheckpointMode::None, cost, budget_of(peak * 0.9)); },
        {"without checkpointing rank", "'" + s.name + "'",
         "over the budget " + pipesched::detail::format_general(peak * 0.9),
         "CheckpointMode::Selective or CheckpointMode::Mario"});
  }
}

TEST(ApplyCheckpoint, FullRecomputesEveryUnitAndChecksALimitedBudget) {
  const UniformCost cost;
  for (const Schedule& s : bases()) {
    SCOPED_TRACE(s.name);
    const Schedule full = apply_checkpoint(s, CheckpointMode::Full, cost, MemoryBudget{});
    EXPECT_EQ(full, checkpoint_full(s));
    EXPECT_EQ(recomputes(full), s.problem.stages * s.problem.microbatches);
    EXPECT_TRUE(check(full).ok()) << check(full).summary();
    const double peak = simulate(full, cost).peak_memory_max;
    EXPECT_LT(peak, simulate(s, cost).peak_memory_max);
    EXPECT_EQ(apply_checkpoint(s, CheckpointMode::Full, cost, budget_of(peak)), full);
    expect_invalid_problem(
        [&] { apply_checkpoint(s, CheckpointMode::Full, cost, budget_of(peak * 0.9)); },
        {"with every forward checkpointed rank", "still holds", "at least"});
    // full-early: the same units, each R free to run before its gradient (no RL).
    const Schedule early = apply_checkpoint(s, CheckpointMode::FullEarly, cost, MemoryBudget{});
    EXPECT_EQ(early, checkpoint_full(s, RecomputeTiming::Early));
    EXPECT_EQ(recomputes(early), recomputes(full));
    for (const auto& list : early.ranks)
      for (const Action& a : list)
        EXPECT_FALSE(a.late) << a;
    EXPECT_TRUE(check(early).ok()) << check(early).summary();
    EXPECT_LE(simulate(early, cost).makespan, simulate(full, cost).makespan);
    EXPECT_DOUBLE_EQ(simulate(early, cost).peak_memory_max, peak);
  }
}

TEST(ApplyCheckpoint, SelectiveAndMarioMeetTheBudgetAsTheirPassesDo) {
  const UniformCost cost;
  for (const Schedule& s : bases()) {
    const double none_peak = simulate(s, cost).peak_memory_max;
    const double full_peak = simulate(checkpoint_full(s), cost).peak_memory_max;
    for (double share : {0.0, 0.5, 1.0}) {
      const MemoryBudget b = budget_of(full_peak + share * (none_peak - full_peak));
      SCOPED_TRACE(s.name + ", budget " + pipesched::detail::format_general(b.all));
      const Schedule sel = apply_checkpoint(s, CheckpointMode::Selective, cost, b);
      EXPECT_EQ(sel, checkpoint_selective(s, cost, b));
      EXPECT_TRUE(check(sel).ok()) << check(sel).summary();
      expect_fits(sel, b);
      if (share == 1.0) {
        EXPECT_EQ(recomputes(sel), 0);
      } else {
        EXPECT_GT(recomputes(sel), 0);
      }
      if (s.name == "gpipe" || s.name == "dualpipe-v") continue;  // not Mario bases
      const Schedule mario = apply_checkpoint(s, CheckpointMode::Mario, cost, b);
      EXPECT_EQ(mario, checkpoint_mario(s, cost, b));
      EXPECT_TRUE(check(mario).ok()) << check(mario).summary();
      expect_fits(mario, b);
    }
  }
}

TEST(ApplyCheckpoint, PerRankBudgetsAreHeldRankByRank) {
  const UniformCost cost;
  const Schedule s = bases()[0];  // 1F1B, 4 ranks: rank r holds 4 − r without checkpointing
  MemoryBudget b;
  b.per_rank = {1.5, 2.5, 3, 1};
  const Schedule sel = apply_checkpoint(s, CheckpointMode::Selective, cost, b);
  expect_fits(sel, b);
  // Only ranks 0 and 1 are over their budgets; ranks 2 and 3 recompute nothing.
  std::vector<int> per_rank(4, 0);
  for (int r = 0; r < 4; ++r)
    for (const Action& a : sel.ranks[static_cast<std::size_t>(r)])
      per_rank[static_cast<std::size_t>(r)] += a.kind == OpKind::R;
  EXPECT_GT(per_rank[0], 0);
  EXPECT_GT(per_rank[1], 0);
  EXPECT_EQ(per_rank[2], 0);
  EXPECT_EQ(per_rank[3], 0);
  expect_invalid_problem([&] { apply_checkpoint(s, CheckpointMode::None, cost, b); },
                         {"rank 0", "holds 4", "over the budget 1.5"});
}

TEST(ApplyCheckpoint, BudgetsTooSmallOrOutOfRangeAreRefused) {
  const UniformCost cost;
  const Schedule s = bases()[0];
  for (CheckpointMode m : checkpoint_modes) {
    SCOPED_TRACE(to_string(m));
    expect_invalid_problem([&] { apply_checkpoint(s, m, cost, budget_of(0.5)); }, {"0.5"});
    expect_invalid_problem([&] { apply_checkpoint(s, m, cost, budget_of(-1)); },
                           {"MemoryBudget.all = -1", "positive"});
    expect_invalid_problem(
        [&] { apply_checkpoint(s, m, cost, budget_of(std::numeric_limits<double>::quiet_NaN())); },
        {"MemoryBudget.all", "positive"});
    MemoryBudget zero_rank;
    zero_rank.per_rank = {2, 0};
    expect_invalid_problem([&] { apply_checkpoint(s, m, cost, zero_rank); },
                           {"MemoryBudget.per_rank[1] = 0"});
  }
}

// ---------------------------------------------------------------------------------------
// Device budgets and byte budgets under TransformerCost

TEST(DeviceMemoryBudget, IsDeviceMemoryLessWhatEachRankHoldsAnyway) {
  const TransformerCost cost{
      presets::find_model("gpt3-1.3b"), presets::find_device("a100-40gb"), {}};
  for (int ranks : {2, 3, 4}) {
    SCOPED_TRACE("ranks = " + std::to_string(ranks));
    const Schedule s =
        find_generator("1f1b").generate({.ranks = ranks, .microbatches = 8}, WGradMode::Fused);
    const MemoryBudget b = device_memory_budget(cost, s.problem, s.placement);
    ASSERT_EQ(b.per_rank.size(), static_cast<std::size_t>(ranks));
    const CostContext ctx{s.problem, s.placement, 1};
    for (int r = 0; r < ranks; ++r)
      EXPECT_DOUBLE_EQ(b.of(r), cost.device.usable_memory() - cost.static_bytes(ctx, r));
    // The first and last ranks hold the embedding and the LM head: less room there.
    if (ranks > 2) {
      EXPECT_LT(b.of(0), b.of(1));
      EXPECT_LT(b.of(ranks - 1), b.of(1));
    }
    // A fitting budget leaves the schedule alone; a byte budget below the peak recomputes.
    EXPECT_EQ(apply_checkpoint(s, CheckpointMode::Selective, cost, b).ranks, s.ranks);
    const double none_peak = simulate(s, cost).peak_memory_max;
    const double full_peak = simulate(checkpoint_full(s), cost).peak_memory_max;
    const MemoryBudget tight = budget_of((none_peak + full_peak) / 2);
    const Schedule sel = apply_checkpoint(s, CheckpointMode::Selective, cost, tight);
    EXPECT_GT(recomputes(sel), 0);
    EXPECT_LE(simulate(sel, cost).peak_memory_max, tight.all);
    const Schedule mario = apply_checkpoint(s, CheckpointMode::Mario, cost, tight);
    EXPECT_LE(simulate(mario, cost).peak_memory_max, tight.all);
  }
}

TEST(DeviceMemoryBudget, RefusesADeviceTheWeightsAloneFill) {
  const TransformerCost cost{
      presets::find_model("llama2-34b"), presets::find_device("rtx-4090"), {}};
  const Problem p{.ranks = 2, .stages = 2, .microbatches = 4};
  expect_invalid_problem(
      [&] { device_memory_budget(cost, p, Placement::linear(2)); },
      {"rank 0", "weights, gradients and optimizer state", "rtx-4090", "more ranks"});
}

// ---------------------------------------------------------------------------------------
// apply_offload, and offloading before checkpointing in assemble_plan

std::size_t offloads(const Schedule& s) {
  return s.count(OpKind::Offload);
}

Schedule generate_order(const char* name, const Problem& p) {
  const GeneratorInfo& g = find_generator(name);
  return g.generate(p, g.default_wgrad);
}

// 1F1B on 4 ranks holds up to 4 microbatches' activations; within 2, rank 0 offloads its
// later forwards while it waits for the backwards of earlier ones. With copies half as long as
// a forward, they hide behind the compute: the step is 1F1B's, where recomputing costs time.
TEST(Offload, FitsTheBudgetByCopiesThatHideBehindCompute) {
  const Schedule s = generate_order("1f1b", Problem{.ranks = 4, .microbatches = 8});
  const UniformCost cost{.f = 1, .b = 2, .w = 1, .copy = 0.5};
  const MemoryBudget two{.all = 2};
  const Schedule off = apply_offload(s, cost, two);
  EXPECT_NO_THROW(validate(off));
  EXPECT_EQ(off.name, "1f1b+offload");
  EXPECT_GT(offloads(off), 0u);
  EXPECT_EQ(off.count(OpKind::R), 0u);
  EXPECT_EQ(off.count(OpKind::Reload), offloads(off));
  const SimulationResult r = simulate(off, cost);
  for (int k = 0; k < 4; ++k)
    EXPECT_LE(r.ranks[k].peak_memory, 2 + 1e-9) << "rank " << k;
  EXPECT_GT(r.ranks[0].peak_host_memory, 0);
  EXPECT_EQ(r.ranks[3].peak_host_memory, 0);  // the last rank holds one microbatch anyway
  EXPECT_DOUBLE_EQ(r.makespan, simulate(s, cost).makespan);
  const Schedule sel = apply_checkpoint(s, CheckpointMode::Selective, cost, two);
  EXPECT_GT(simulate(sel, cost).makespan, r.makespan);
  // Offloading once per rank leaves rank 0 over the budget: checkpointing takes the rest.
  const Schedule once = apply_offload(s, cost, two, {.max_per_rank = 1});
  for (const auto& list : once.ranks)
    EXPECT_LE(std::count_if(list.begin(), list.end(),
                            [](const Action& a) { return a.kind == OpKind::Offload; }),
              1);
  EXPECT_GT(simulate(once, cost).ranks[0].peak_memory, 2);
  const Schedule both = checkpoint_selective(once, cost, two);
  EXPECT_NO_THROW(validate(both));  // an offloaded unit is never also recomputed
  EXPECT_GT(both.count(OpKind::R), 0u);
  EXPECT_EQ(offloads(both), offloads(once));
  EXPECT_LE(simulate(both, cost).peak_memory_max, 2 + 1e-9);
  // An unlimited budget asks for nothing.
  EXPECT_EQ(offloads(apply_offload(s, cost, MemoryBudget{})), 0u);
  // Copies as long as a recompute: weighed against recomputing, some units are left to
  // checkpointing; unweighed, everything the budget asks is offloaded.
  const UniformCost slow{.f = 1, .b = 2, .w = 1, .copy = 1};
  const Schedule weighed = apply_offload(s, slow, two);
  const Schedule all = apply_offload(s, slow, two, {.weigh_recompute = false});
  EXPECT_LT(offloads(weighed), offloads(all));
  EXPECT_NO_THROW(validate(all));
  EXPECT_LE(simulate(all, slow).peak_memory_max, 2 + 1e-9);
}

// ZB-H1 within 2.5 microbatches: offloading (copies as long as a forward) and recomputing what
// is left gives a shorter step than recomputing alone; within 2 the offloads would not pay,
// and assemble_plan keeps the plan without them.
TEST(Offload, AssemblePlanOffloadsThenCheckpointsWherePays) {
  const GeneratorInfo& g = find_generator("zb-h1");
  const Problem p{.ranks = 4, .microbatches = 8};
  const UniformCost cost{.f = 1, .b = 2, .w = 1, .copy = 1};
  const MemoryBudget budget{.all = 2.5};
  PlanRecipe recipe{.wgrad = g.default_wgrad};
  const Schedule recompute_only =
      assemble_plan(g, p, cost, budget, recipe, find_checkpoint("selective")).schedule;
  recipe.offload = true;
  const Schedule mixed =
      assemble_plan(g, p, cost, budget, recipe, find_checkpoint("selective")).schedule;
  EXPECT_NO_THROW(validate(mixed));
  EXPECT_GT(offloads(mixed), 0u);
  EXPECT_GT(mixed.count(OpKind::R), 0u);
  const SimulationResult a = simulate(recompute_only, cost), b = simulate(mixed, cost);
  EXPECT_LE(b.peak_memory_max, 2.5 + 1e-9);
  EXPECT_LT(b.makespan, a.makespan);
  const MemoryBudget two{.all = 2};
  PlanRecipe plain{.wgrad = g.default_wgrad};
  EXPECT_EQ(assemble_plan(g, p, cost, two, recipe, find_checkpoint("selective")).schedule,
            assemble_plan(g, p, cost, two, plain, find_checkpoint("selective")).schedule);
  // Full checkpointing recomputes every unit: nothing is left offloaded.
  const Schedule full = assemble_plan(g, p, cost, budget, recipe, find_checkpoint("full")).schedule;
  EXPECT_NO_THROW(validate(full));
  EXPECT_EQ(offloads(full), 0u);
  expect_invalid_problem(
      [&] { assemble_plan(g, p, cost, budget, recipe, find_checkpoint("mario")); },
      {"PlanRecipe.offload", "mario"});
  recipe.offload_options.prefetch = -1;
  expect_invalid_problem(
      [&] { assemble_plan(g, p, cost, budget, recipe, find_checkpoint("selective")); },
      {"OffloadOptions.prefetch = -1", "out of range"});
}

TEST(Offload, RefusesWhatItCannotOffload) {
  const UniformCost cost{.copy = 0};
  const MemoryBudget one{.all = 1};
  const Schedule s = generate_order("1f1b", Problem{.ranks = 2, .microbatches = 4});
  expect_invalid_problem([&] { apply_offload(s, cost, one, {.max_per_rank = -1}); },
                         {"OffloadOptions.max_per_rank = -1"});
  const Schedule off = apply_offload(s, cost, one);
  ASSERT_GT(offloads(off), 0u);
  expect_invalid_problem([&] { apply_offload(off, cost, one); }, {"already offloads"});
  const GeneratorInfo& sp = find_generator("slice-pipe");
  const Schedule sliced =
      sp.generate({.ranks = 2, .microbatches = 2, .slices = 2}, sp.default_wgrad);
  expect_invalid_problem([&] { apply_offload(sliced, cost, one); },
                         {"2 slices", "whole microbatches"});
}
}  // namespace
}  // namespace pipesched::test_apply_checkpoint
