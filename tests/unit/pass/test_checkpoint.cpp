// Checkpoint passes: Full, Selective (conventional) and Mario under UniformCost
// (f = 1, b = 2, r = 1, boundary 0.05), budgets in units of one microbatch's activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_checkpoint {

namespace ps = pipesched;

namespace {

const ps::UniformCost cost{.f = 1, .b = 2, .w = 1, .r = 1, .boundary = 0.05};

int count(const ps::Schedule& s, ps::OpKind k) {
  int n = 0;
  for (const auto& l : s.ranks)
    for (const ps::Action& a : l)
      n += a.kind == k;
  return n;
}

void expect_fits(const ps::SimulationResult& r, double budget) {
  for (std::size_t q = 0; q < r.ranks.size(); ++q)
    EXPECT_LE(r.ranks[q].peak_memory, budget + 1e-9) << "rank " << q;
}

struct GridPoint {
  int p, m;
  double budget;
};

std::vector<GridPoint> grid() {
  std::vector<GridPoint> g;
  for (int p : {4, 8, 16})
    for (int m : {p, 2 * p, 4 * p})
      for (double b : {2.0, p / 2.0})
        g.push_back({p, m, b});
  return g;
}

}  // namespace

TEST(Checkpoint, FullCheckpointsEveryUnitRightBeforeItsBackward) {
  ps::Schedule s = ps::checkpoint_full(ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}));
  ps::validate(s);
  EXPECT_EQ(count(s, ps::OpKind::R), 4 * 8);
  for (const auto& list : s.ranks)
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i].kind == ps::OpKind::R) {
        ASSERT_LT(i + 1, list.size());
        EXPECT_EQ(list[i + 1].kind, ps::OpKind::B);
        EXPECT_EQ(list[i + 1].microbatch, list[i].microbatch);
      }
  // Memory: each rank holds boundaries of its in-flight units and one recomputed unit.
  ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_NEAR(r.ranks[0].peak_memory, 4 * 0.05 + 0.95, 1e-9);
  // Each recompute waits for its gradient, as inside Megatron-LM's backward call, so every one
  // sits on the critical path: the backward of 1F1B costs b + r, 4(m + p − 1) in all.
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      if (a.kind == ps::OpKind::R) {
        EXPECT_TRUE(a.late) << a;
      }
  EXPECT_DOUBLE_EQ(r.makespan, 4.0 * (8 + 4 - 1));
}

// Megatron-LM's recompute (RL, after the gradient) against the early one (R, free to run while
// the gradient is on its way): 1F1B at p = m = 16 takes 124 and 109 (93 without recompute).
TEST(Checkpoint, LateRecomputeIsOnTheCriticalPathAndEarlyHidesPartOfIt) {
  for (int p : {2, 4, 8, 16})
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = p, .microbatches = m});
      const ps::Schedule late = ps::checkpoint_full(base);
      const ps::Schedule early = ps::checkpoint_full(base, ps::RecomputeTiming::Early);
      EXPECT_EQ(late.name, "1f1b+full");
      EXPECT_EQ(early.name, "1f1b+full-early");
      ps::validate(late);
      ps::validate(early);
      ps::validate(ps::lower_communication(late));
      ps::validate(ps::lower_communication(early));
      const ps::SimulationResult none_sim = ps::simulate(base, cost);
      const ps::SimulationResult late_sim = ps::simulate(late, cost);
      const ps::SimulationResult early_sim = ps::simulate(early, cost);
      EXPECT_DOUBLE_EQ(none_sim.makespan, 3.0 * (m + p - 1));
      EXPECT_DOUBLE_EQ(late_sim.makespan, 4.0 * (m + p - 1));
      if (p > 1) {
        EXPECT_LT(early_sim.makespan, late_sim.makespan);
        EXPECT_GT(early_sim.makespan, none_sim.makespan);
      }
      // The same units and the same list order: the same memory.
      for (std::size_t q = 0; q < late_sim.ranks.size(); ++q)
        EXPECT_DOUBLE_EQ(late_sim.ranks[q].peak_memory, early_sim.ranks[q].peak_memory);
      // The lowered late recompute receives its gradient first.
      const ps::Schedule lowered = ps::lower_communication(late);
      for (const auto& list : lowered.ranks)
        for (std::size_t i = 0; i < list.size(); ++i)
          if (list[i].kind == ps::OpKind::R && list[i].stage + 1 < p) {
            ASSERT_GT(i, 0u);
            EXPECT_EQ(list[i - 1],
                      ps::Action::make(ps::OpKind::RecvB, list[i].stage, list[i].microbatch))
                << list[i];
          }
    }
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 16, .microbatches = 16});
  EXPECT_DOUBLE_EQ(ps::simulate(ps::checkpoint_full(base), cost).makespan, 124);
  EXPECT_DOUBLE_EQ(
      ps::simulate(ps::checkpoint_full(base, ps::RecomputeTiming::Early), cost).makespan, 109);
}

// A lowered schedule whose late recompute comes before the receive of its gradient is refused;
// the same with a plain R (which needs only its forward) is valid.
TEST(Checkpoint, LateRecomputeBeforeItsGradientsReceiveIsRefused) {
  const ps::Schedule early = ps::lower_communication(ps::checkpoint_full(
      ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2}), ps::RecomputeTiming::Early));
  // Rank 0: ... 0R0 0RECV_B0 0B0 ... once the early recompute is moved before the receive.
  ps::Schedule moved = early;
  auto& list = moved.ranks[0];
  auto r = std::find(list.begin(), list.end(), ps::Action::make(ps::OpKind::R, 0, 0));
  auto recv = std::find(list.begin(), list.end(), ps::Action::make(ps::OpKind::RecvB, 0, 0));
  ASSERT_NE(r, list.end());
  ASSERT_NE(recv, list.end());
  if (r > recv) std::rotate(recv, r, r + 1);
  EXPECT_TRUE(ps::check(moved).ok()) << ps::check(moved).summary();
  auto late_at = std::find(list.begin(), list.end(), ps::Action::make(ps::OpKind::R, 0, 0));
  late_at->late = true;
  const ps::ValidationReport rep = ps::check(moved);
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.summary().find("no 0RECV_B0 comes before it"), std::string::npos) << rep.summary();
  EXPECT_NE(rep.summary().find("0RL0"), std::string::npos) << rep.summary();
}

TEST(Checkpoint, SelectiveEarlyChoosesTheSameUnitsAsSelective) {
  for (const GridPoint& g : grid()) {
    SCOPED_TRACE("p=" + std::to_string(g.p) + " m=" + std::to_string(g.m) +
                 " budget=" + std::to_string(g.budget));
    const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = g.p, .microbatches = g.m});
    std::vector<char> late_units, early_units;
    const ps::Schedule late =
        ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = g.budget}, &late_units);
    const ps::Schedule early = ps::checkpoint_selective(
        base, cost, ps::MemoryBudget{.all = g.budget}, &early_units, ps::RecomputeTiming::Early);
    EXPECT_EQ(late_units, early_units);
    EXPECT_EQ(early.name, "1f1b+selective-early");
    const ps::SimulationResult ls = ps::simulate(late, cost), es = ps::simulate(early, cost);
    EXPECT_LE(es.makespan, ls.makespan);
    EXPECT_DOUBLE_EQ(es.peak_memory_max, ls.peak_memory_max);
  }
}

TEST(Checkpoint, SelectiveFitsTheBudgetWithTheFewestRecomputesItNeeds) {
  for (const GridPoint& g : grid()) {
    SCOPED_TRACE("p=" + std::to_string(g.p) + " m=" + std::to_string(g.m) +
                 " budget=" + std::to_string(g.budget));
    ps::Schedule base = ps::schedule::one_f_one_b({.ranks = g.p, .microbatches = g.m});
    std::vector<char> chosen;
    ps::Schedule s =
        ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = g.budget}, &chosen);
    ps::validate(s);
    ps::SimulationResult r = ps::simulate(s, cost);
    expect_fits(r, g.budget);
    // Ranks whose 1F1B peak already fits checkpoint nothing.
    const int fits_from = std::max(0, g.p - static_cast<int>(std::floor(g.budget + 1e-9)));
    for (int st = fits_from; st < g.p; ++st)
      for (int mb = 0; mb < g.m; ++mb)
        EXPECT_FALSE(chosen[st * g.m + mb]) << "stage " << st;
    // Recomputes run right before their backward.
    for (const auto& list : s.ranks)
      for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].kind == ps::OpKind::R) {
          EXPECT_EQ(list[i + 1].kind, ps::OpKind::B);
        }
  }
}

TEST(Checkpoint, SelectiveRefusesAnImpossibleBudget) {
  ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 8, .microbatches = 16});
  try {
    ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = 1.0});
    FAIL() << "expected invalid_problem";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("too small for rank 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 1.35"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = 1.0}), ps::invalid_problem);
}

// The acceptance grid of Mario on a 1F1B base.
TEST(Mario, NeverSlowerThanSelectiveAndHidesMostRecompute) {
  double sum_ratio = 0;
  int cases = 0;
  for (const GridPoint& g : grid()) {
    SCOPED_TRACE("p=" + std::to_string(g.p) + " m=" + std::to_string(g.m) +
                 " budget=" + std::to_string(g.budget));
    ps::Schedule base = ps::schedule::one_f_one_b({.ranks = g.p, .microbatches = g.m});
    const double t0 = ps::simulate(base, cost).makespan;
    ps::Schedule sel = ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = g.budget});
    ps::Schedule mario = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = g.budget});
    ps::validate(mario);
    EXPECT_TRUE(ps::check(ps::lower_communication(mario)).ok());
    ps::SimulationResult rs = ps::simulate(sel, cost), rm = ps::simulate(mario, cost);
    expect_fits(rm, g.budget);
    EXPECT_LE(rm.makespan, rs.makespan + 1e-9);
    const double over_sel = rs.makespan / t0 - 1, over_mario = rm.makespan / t0 - 1;
    ASSERT_GT(over_sel, 0);
    sum_ratio += over_mario / over_sel;
    ++cases;
    // With m = p and budget p/2 the bubbles hide every recompute.
    if (g.m == g.p && g.budget == g.p / 2.0) {
      EXPECT_LE(over_mario, 0.005);
    }
  }
  // Mario's overhead averages at most 0.6 of Selective's (per grid point, then averaged).
  EXPECT_LE(sum_ratio / cases, 0.6);
}

TEST(Mario, WorksOnInterleavedAndZeroBubbleBases) {
  for (const char* name : {"interleaved-1f1b", "zb-h1"})
    for (const GridPoint& g : {GridPoint{4, 8, 2.0}, GridPoint{8, 16, 4.0}}) {
      SCOPED_TRACE(std::string(name) + " p=" + std::to_string(g.p));
      const ps::GeneratorInfo& gen = ps::find_generator(name);
      ps::Schedule base = gen.generate({.ranks = g.p, .microbatches = g.m}, gen.default_wgrad);
      ps::Schedule sel = ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = g.budget});
      ps::Schedule mario = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = g.budget});
      ps::validate(mario);
      ps::SimulationResult rs = ps::simulate(sel, cost), rm = ps::simulate(mario, cost);
      expect_fits(rm, g.budget);
      EXPECT_LE(rm.makespan, rs.makespan + 1e-9);
      EXPECT_GT(count(mario, ps::OpKind::R), 0);
    }
}

TEST(Mario, LeavesAFittingScheduleAloneAndRefusesCommunication) {
  ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  ps::Schedule m = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = 4.0});
  EXPECT_EQ(count(m, ps::OpKind::R), 0);
  EXPECT_EQ(m.ranks, base.ranks);
  EXPECT_THROW(
      ps::checkpoint_mario(ps::lower_communication(base), cost, ps::MemoryBudget{.all = 2.0}),
      ps::invalid_problem);
}

TEST(Mario, PerRankBudgets) {
  ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  ps::MemoryBudget b;
  b.per_rank = {2.0, 3.0, 4.0, 4.0};
  ps::SimulationResult r = ps::simulate(ps::checkpoint_mario(base, cost, b), cost);
  for (int q = 0; q < 4; ++q)
    EXPECT_LE(r.ranks[q].peak_memory, b.per_rank[q] + 1e-9);
}

// The budget is a hard line for Mario: just below the base schedule's peak the pass must
// checkpoint and fit, at the peak it must leave the schedule alone. (A fit test with any slack
// would return the base unchanged below its peak.)
TEST(Mario, BudgetsJustAboveAndBelowTheBasePeak) {
  for (const char* name : {"1f1b", "interleaved-1f1b", "zb-h1"})
    for (int p : {4, 8}) {
      SCOPED_TRACE(std::string(name) + " p=" + std::to_string(p));
      const ps::GeneratorInfo& gen = ps::find_generator(name);
      ps::Schedule base = gen.generate({.ranks = p, .microbatches = 2 * p}, gen.default_wgrad);
      const ps::SimulationResult rb = ps::simulate(base, cost);
      const double peak = rb.peak_memory_max;
      // At and just above the peak: nothing to do.
      for (double b : {peak, peak * 1.01}) {
        ps::Schedule same = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = b});
        EXPECT_EQ(same.ranks, base.ranks) << "budget " << b;
      }
      // Just below it: recomputes appear and every rank fits, for budgets 1 % to 10 % under.
      for (double f : {0.99, 0.95, 0.9}) {
        const double b = peak * f;
        ps::Schedule m = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = b});
        ps::validate(m);
        EXPECT_GT(count(m, ps::OpKind::R), 0) << "budget " << b;
        const ps::SimulationResult rm = ps::simulate(m, cost);
        EXPECT_LE(rm.peak_memory_max, b + 1e-9) << "budget " << b;
        expect_fits(rm, b);
      }
      // Per rank: rank 0 gets 10 % less than its peak, the others exactly theirs.
      ps::MemoryBudget per;
      for (const ps::RankSummary& r : rb.ranks)
        per.per_rank.push_back(r.peak_memory);
      per.per_rank[0] *= 0.9;
      const ps::SimulationResult rp = ps::simulate(ps::checkpoint_mario(base, cost, per), cost);
      for (std::size_t q = 0; q < rp.ranks.size(); ++q)
        EXPECT_LE(rp.ranks[q].peak_memory, per.per_rank[q] + 1e-9) << "rank " << q;
    }
}

}  // namespace test_checkpoint
