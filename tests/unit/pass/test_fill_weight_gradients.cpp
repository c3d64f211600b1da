// fill_weight_gradients: weight gradients cut into parts and placed in the waits of split-backward
// schedules; and the shared filler floating recomputes and weight gradients together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched::test_fill_weight_gradients {
namespace {

// Deferring a W holds half of its unit's activations, and messages take time, so waits are
// uneven and a deferred W costs memory.
const UniformCost memory_cost{.f = 1, .b = 2, .w = 1, .r = 1, .comm = 0.1, .w_memory = 0.5};
// The Zero Bubble paper's setting: F = I = W = 1, no latency.
const UniformCost zb_cost{.f = 1, .b = 2, .w = 1, .r = 1};

constexpr double unlimited = std::numeric_limits<double>::infinity();

struct Case {
  const char* generator;
  int ranks, microbatches, slices;
  std::string label() const {
    return std::string(generator) + " p=" + std::to_string(ranks) +
           " m=" + std::to_string(microbatches) + " k=" + std::to_string(slices);
  }
  Schedule make() const {
    const GeneratorInfo& g = find_generator(generator);
    return g.generate({.ranks = ranks, .microbatches = microbatches, .slices = slices},
                      WGradMode::Split);
  }
};

// The built-in split schedules over a few sizes (slice-level ones also with 4 slices).
std::vector<Case> split_grid() {
  std::vector<Case> cases;
  for (const char* g : {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "seq-1f1b", "slice-pipe"})
    for (int p : {4, 8})
      for (int m : {p, 2 * p}) {
        cases.push_back({g, p, m, 1});
        if (find_generator(g).slices) cases.push_back({g, p, m, 4});
      }
  return cases;
}

bool fits(const SimulationResult& sim, const MemoryBudget& budget) {
  for (std::size_t r = 0; r < sim.ranks.size(); ++r) {
    const double limit = budget.of(static_cast<int>(r));
    if (sim.ranks[r].peak_memory > limit + 1e-9 * std::max(1.0, std::abs(limit))) return false;
  }
  return true;
}

// Each rank's actions of the given kinds, in list order.
std::vector<std::vector<Action>> of_kinds(const Schedule& s, std::initializer_list<OpKind> kinds) {
  std::vector<std::vector<Action>> out;
  for (const auto& list : s.ranks) {
    out.emplace_back();
    for (const Action& a : list)
      if (std::find(kinds.begin(), kinds.end(), a.kind) != kinds.end()) out.back().push_back(a);
  }
  return out;
}

// Each rank's list without its W actions.
std::vector<std::vector<Action>> without_w(const Schedule& s) {
  return of_kinds(s, {OpKind::F, OpKind::B, OpKind::I, OpKind::R, OpKind::Overlap, OpKind::Idle});
}

// How many times each (stage, microbatch, slice, part) W occurs.
std::map<std::tuple<int, int, int, int>, int> w_counts(const Schedule& s) {
  std::map<std::tuple<int, int, int, int>, int> n;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::W) ++n[{a.stage, a.microbatch, a.slice, a.part}];
  return n;
}

void expect_parts_exact(const Schedule& s, int parts) {
  const Problem& p = s.problem;
  const auto n = w_counts(s);
  EXPECT_EQ(n.size(), static_cast<std::size_t>(p.stages) * p.microbatches * p.slices * parts);
  for (const auto& [key, count] : n) {
    EXPECT_EQ(count, 1) << "W part occurs " << count << " times";
    EXPECT_GE(std::get<3>(key), 0);
    EXPECT_LT(std::get<3>(key), parts);
  }
}

TEST(FillWeightGradients, ValidatesRunsEachPartOnceAndKeepsTheOtherActionsInOrder) {
  for (const Case& c : split_grid())
    for (int parts : {1, 3, 4}) {
      SCOPED_TRACE(c.label() + " parts=" + std::to_string(parts));
      const Schedule in = c.make();
      const Schedule out = fill_weight_gradients(in, memory_cost, MemoryBudget{}, parts);
      EXPECT_TRUE(check(out).ok()) << check(out).summary();
      expect_parts_exact(out, parts);
      EXPECT_EQ(without_w(out), without_w(in));
      EXPECT_EQ(out.problem, in.problem);
      EXPECT_EQ(out.placement, in.placement);
    }
}

TEST(FillWeightGradients, NeverSlowerThanTheInputAndHelpsWhereTheInputRunsWRightAfterI) {
  for (const Case& c : split_grid())
    for (int parts : {1, 4}) {
      SCOPED_TRACE(c.label() + " parts=" + std::to_string(parts));
      const Schedule in = c.make();
      const SimulationResult before = simulate(in, memory_cost);
      // The input's own peak: the budget every input fits, so the input is a candidate.
      const MemoryBudget tight{.all = before.peak_memory_max};
      for (const MemoryBudget& budget : {MemoryBudget{}, tight}) {
        SCOPED_TRACE(std::isfinite(budget.all) ? "budget = the input's peak" : "no budget");
        const Schedule out = fill_weight_gradients(in, memory_cost, budget, parts);
        const SimulationResult after = simulate(out, memory_cost);
        EXPECT_LE(after.makespan, before.makespan * (1 + 1e-12));
        EXPECT_TRUE(fits(after, budget));
      }
      // 1F1B-ordered inputs run each W right after its I; taking them off the critical path
      // always shortens the step.
      const std::string g = c.generator;
      if (g == "1f1b" || g == "seq-1f1b" || g == "interleaved-1f1b" || g == "slice-pipe") {
        const double filled =
            simulate(fill_weight_gradients(in, memory_cost, MemoryBudget{}, parts), memory_cost)
                .makespan;
        EXPECT_LT(filled, before.makespan - 0.1);
      }
    }
}

// f = 1, b = 2, w = 1: 1F1B split runs each W right after its I, on the way of the next
// forward; with the W's filled it takes ZB-H1's 3m + p − 1 (the same F/I order, W's in the
// waits).
TEST(FillWeightGradients, OneFOneBSplitFilledReachesZeroBubbleH1) {
  for (int p : {4, 8})
    for (int m : {p, 2 * p, 4 * p})
      for (int parts : {1, 2}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " parts=" + std::to_string(parts));
        const Schedule in =
            schedule::one_f_one_b({.ranks = p, .microbatches = m}, WGradMode::Split);
        const double before = simulate(in, zb_cost).makespan;
        const double zb =
            simulate(schedule::zero_bubble_h1({.ranks = p, .microbatches = m}), zb_cost).makespan;
        const double after =
            simulate(fill_weight_gradients(in, zb_cost, MemoryBudget{}, parts), zb_cost).makespan;
        EXPECT_GT(before, zb + 1);
        EXPECT_LT(after, before);
        EXPECT_LE(after, zb + 1e-9);
        EXPECT_DOUBLE_EQ(after, 3.0 * m + p - 1);
      }
}

// With messages taking time the waits are shorter than a whole W; parts fit where W does not.
TEST(FillWeightGradients, FinerPartsFillWaitsAWholeWeightGradientDoesNotFit) {
  const Schedule in = schedule::one_f_one_b({.ranks = 8, .microbatches = 16}, WGradMode::Split);
  const double whole =
      simulate(fill_weight_gradients(in, memory_cost, MemoryBudget{}, 1), memory_cost).makespan;
  const double quarter =
      simulate(fill_weight_gradients(in, memory_cost, MemoryBudget{}, 4), memory_cost).makespan;
  EXPECT_LT(quarter, whole - 0.5);
}

// Deferring W's costs memory (w_memory > 0): unlimited, the filler holds more than the input;
// under a budget between the two it holds no more than the budget and still gains time.
TEST(FillWeightGradients, HoldsTheBudgetWhenDeferringWeightGradientsCostsMemory) {
  for (const char* g : {"1f1b", "interleaved-1f1b", "seq-1f1b", "slice-pipe"})
    for (int parts : {1, 4}) {
      SCOPED_TRACE(std::string(g) + " parts=" + std::to_string(parts));
      const Schedule in = Case{g, 8, 16, 1}.make();
      const SimulationResult before = simulate(in, memory_cost);
      const SimulationResult free_run =
          simulate(fill_weight_gradients(in, memory_cost, MemoryBudget{}, parts), memory_cost);
      ASSERT_GT(free_run.peak_memory_max, before.peak_memory_max + 0.5)
          << "the unlimited fill should hold more than the input for this test to bind";
      const MemoryBudget budget{.all = (before.peak_memory_max + free_run.peak_memory_max) / 2};
      const SimulationResult held =
          simulate(fill_weight_gradients(in, memory_cost, budget, parts), memory_cost);
      EXPECT_TRUE(fits(held, budget)) << "peak " << held.peak_memory_max;
      EXPECT_LT(held.makespan, before.makespan);
    }
  // Per-rank budgets: each rank its own.
  const Schedule in = schedule::one_f_one_b({.ranks = 4, .microbatches = 8}, WGradMode::Split);
  MemoryBudget per_rank;
  per_rank.per_rank = {4.0, 3.5, 2.5, 1.5};
  const SimulationResult r =
      simulate(fill_weight_gradients(in, memory_cost, per_rank, 2), memory_cost);
  EXPECT_TRUE(fits(r, per_rank));
}

// Below the input's peak the filler runs W's earlier than the input does; a budget that only
// running every W right after its I meets is met.
TEST(FillWeightGradients, MeetsABudgetBelowTheInputsPeakByRunningWeightGradientsEarly) {
  const Schedule in = schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8});
  const SimulationResult before = simulate(in, memory_cost);
  const Schedule eager = detail::weight_gradients_after_input(in);
  const double least = simulate(eager, memory_cost).peak_memory_max;
  ASSERT_LT(least, before.peak_memory_max - 0.5);
  const MemoryBudget budget{.all = least};
  const Schedule out = fill_weight_gradients(in, memory_cost, budget, 2);
  EXPECT_TRUE(check(out).ok());
  EXPECT_TRUE(fits(simulate(out, memory_cost), budget));
}

TEST(FillWeightGradients, HoldsTheDeviceBudgetUnderTransformerCost) {
  const TransformerCost cost{
      presets::find_model("llama2-7b"), presets::find_device("rtx-4090"), {}};
  for (const char* g : {"seq-1f1b", "slice-pipe"})
    for (int parts : {1, 4}) {
      SCOPED_TRACE(std::string(g) + " parts=" + std::to_string(parts));
      const Schedule in = Case{g, 8, 8, 4}.make();
      const MemoryBudget budget = device_memory_budget(cost, in.problem, in.placement);
      const SimulationResult before = simulate(in, cost);
      ASSERT_TRUE(fits(before, budget));
      const SimulationResult free_run =
          simulate(fill_weight_gradients(in, cost, MemoryBudget{}, parts), cost);
      EXPECT_FALSE(fits(free_run, budget)) << "unlimited, the deferred W's should overflow";
      const Schedule out = fill_weight_gradients(in, cost, budget, parts);
      EXPECT_TRUE(check(out).ok());
      expect_parts_exact(out, parts);
      const SimulationResult after = simulate(out, cost);
      EXPECT_TRUE(fits(after, budget));
      EXPECT_LT(after.makespan, before.makespan * 0.99);
    }
}

// The fallback's promise: cutting W's in place changes neither time nor memory.
TEST(FillWeightGradients, CuttingInPlaceKeepsTimeAndMemory) {
  for (const Case& c : split_grid()) {
    SCOPED_TRACE(c.label());
    const Schedule in = c.make();
    const Schedule cut = detail::cut_weight_gradients_in_place(in, 4);
    EXPECT_TRUE(check(cut).ok());
    expect_parts_exact(cut, 4);
    const SimulationResult a = simulate(in, memory_cost), b = simulate(cut, memory_cost);
    EXPECT_NEAR(b.makespan, a.makespan, 1e-9 * a.makespan);
    EXPECT_NEAR(b.peak_memory_max, a.peak_memory_max, 1e-9);
  }
}

TEST(FillWeightGradients, RecutsAScheduleAlreadyCutAndKeepsRecomputesInPlace) {
  const Schedule in = schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8});
  const Schedule twice = fill_weight_gradients(
      fill_weight_gradients(in, memory_cost, MemoryBudget{}, 2), memory_cost, MemoryBudget{}, 3);
  EXPECT_TRUE(check(twice).ok());
  expect_parts_exact(twice, 3);
  // Recomputes stay in the list as they stand: F, R and I keep their order on every rank.
  const Schedule ckpt =
      checkpoint_full(schedule::one_f_one_b({.ranks = 4, .microbatches = 8}, WGradMode::Split));
  const Schedule out = fill_weight_gradients(ckpt, memory_cost, MemoryBudget{}, 2);
  EXPECT_TRUE(check(out).ok());
  EXPECT_EQ(without_w(out), without_w(ckpt));
  EXPECT_LE(simulate(out, memory_cost).makespan, simulate(ckpt, memory_cost).makespan);
}

TEST(FillWeightGradients, RefusesWhatItCannotFill) {
  const Schedule split = schedule::one_f_one_b({.ranks = 4, .microbatches = 8}, WGradMode::Split);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const invalid_problem& e) {
      return std::string(e.what());
    }
    return std::string("no invalid_problem");
  };
  for (int parts : {0, -2})
    EXPECT_NE(message([&] {
                fill_weight_gradients(split, memory_cost, MemoryBudget{}, parts);
              }).find("parts = " + std::to_string(parts)),
              std::string::npos);
  // Fused backwards: plain B, and DualPipeV's overlapped F and B.
  for (const Schedule& fused :
       {schedule::one_f_one_b({.ranks = 4, .microbatches = 8}),
        find_generator("dualpipe-v").generate({.ranks = 4, .microbatches = 8}, WGradMode::Split)}) {
    SCOPED_TRACE(fused.name);
    const std::string m =
        message([&] { fill_weight_gradients(fused, memory_cost, MemoryBudget{}, 2); });
    EXPECT_NE(m.find("'" + fused.name + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("split backward"), std::string::npos) << m;
  }
  EXPECT_NE(message([&] {
              fill_weight_gradients(lower_communication(split), memory_cost, MemoryBudget{}, 2);
            }).find("sends and receives"),
            std::string::npos);
  for (double bad : {0.0, -1.0, std::nan("")})
    EXPECT_NE(message([&] {
                fill_weight_gradients(split, memory_cost, MemoryBudget{.all = bad}, 2);
              }).find("MemoryBudget.all"),
              std::string::npos);
  // Rank 0 of 1F1B runs four forwards before its first input gradient: it holds 4 whatever
  // the W's do.
  const std::string small =
      message([&] { fill_weight_gradients(split, memory_cost, MemoryBudget{.all = 1.0}, 2); });
  EXPECT_NE(small.find("rank 0"), std::string::npos) << small;
  EXPECT_NE(small.find("at least 4"), std::string::npos) << small;
  // An invalid input: a forward missing.
  Schedule broken = split;
  broken.ranks[1].erase(broken.ranks[1].begin());
  EXPECT_THROW(fill_weight_gradients(broken, memory_cost, MemoryBudget{}, 2), invalid_schedule);
}

// The shared engine with both kinds floating: recomputes hoisted or forced before their
// backward, weight-gradient parts in the waits; every action still runs once, in order.
TEST(Filler, FloatsRecomputesAndWeightGradientPartsTogether) {
  for (const char* g : {"1f1b", "zb-h1", "zb-v"})
    for (double min_fit : {1.0, 0.0}) {
      SCOPED_TRACE(std::string(g) + " min_fit=" + std::to_string(min_fit));
      const Schedule in = checkpoint_full(Case{g, 4, 8, 1}.make());
      const detail::FillOptions opt{
          .float_recompute = true, .float_wgrad = true, .wgrad_parts = 2, .min_fit = min_fit};
      const Schedule out = detail::fill_bubbles(
          in, memory_cost, MemoryBudget{.all = 3.0},
          detail::fixed_starts(in, simulate(in, memory_cost), opt), opt, "test");
      EXPECT_TRUE(check(out).ok()) << check(out).summary();
      expect_parts_exact(out, 2);
      // Forwards, recomputes and input gradients are all there, F and I in their order.
      EXPECT_EQ(of_kinds(out, {OpKind::F, OpKind::I}), of_kinds(in, {OpKind::F, OpKind::I}));
      auto count_r = [](const Schedule& s) {
        std::size_t n = 0;
        for (const auto& list : of_kinds(s, {OpKind::R}))
          n += list.size();
        return n;
      };
      EXPECT_EQ(count_r(out), count_r(in));
    }
}

}  // namespace
}  // namespace pipesched::test_fill_weight_gradients
