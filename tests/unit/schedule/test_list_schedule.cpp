// The list-scheduling engine: rules that reproduce 1F1B, Interleaved 1F1B and ZB-H1 action for
// action, the Zero Bubble planner on the engine equal to the planner it replaced, timing and
// memory equal to the simulator's, admission under a memory cap, and a clear error when a rule
// starves every rank. Everything here uses the public API only, as a user's rule would.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../../../bench/reference_greedy.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/list_schedule.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace pipesched::test_list_schedule {
namespace {

// 1F1B as two rules: a backward goes first, and rank r keeps at most p − r forwards in flight.
struct OneFOneBRule {
  int ranks;
  int priority(const RankState&, const ReadyAction& a) const { return a.action.kind == OpKind::F; }
  bool admit(const RankState& st, const ReadyAction& a) const {
    return a.action.kind != OpKind::F || st.in_flight() < ranks - st.rank;
  }
};

// Megatron's interleaved order as a rule: forwards group by group (p microbatches), chunk by
// chunk; backwards the same with the chunks reversed; a warm-up, then one forward and one
// backward in turn.
struct InterleavedRule {
  int ranks, chunks, microbatches;
  int index(const Action& a, bool backward) const {
    int v = a.stage / ranks;
    if (backward) v = chunks - 1 - v;
    const int first = a.microbatch / ranks * ranks;
    const int size = std::min(first + ranks, microbatches) - first;
    return first * chunks + v * size + (a.microbatch - first);
  }
  int warmup(int r) const {
    return chunks == 1
               ? std::min(ranks - r - 1, microbatches)
               : std::min(2 * (ranks - r - 1) + (chunks - 1) * ranks, microbatches * chunks);
  }
  int priority(const RankState&, const ReadyAction& a) const { return a.action.kind != OpKind::F; }
  bool admit(const RankState& st, const ReadyAction& a) const {
    const int n = microbatches * chunks, w = warmup(st.rank);
    if (a.action.kind == OpKind::F)
      return index(a.action, false) == st.forwards && st.forwards - w <= st.backwards;
    return index(a.action, true) == st.backwards &&
           st.forwards >= std::min(w + st.backwards + 1, n);
  }
};

// ZB-H1: input gradients first (oldest microbatch), forwards within 1F1B's limit (counted in
// units: a microbatch cut into K slices is K units), weight gradients where the rank would
// wait, oldest first.
struct ZeroBubbleH1Rule {
  int ranks;
  int slices = 1;
  std::pair<int, int> priority(const RankState&, const ReadyAction& a) const {
    switch (a.action.kind) {
      case OpKind::I:
        return {0, a.action.microbatch};
      case OpKind::F:
        return {1, a.action.microbatch};
      default:
        return {2, 0};
    }
  }
  bool admit(const RankState& st, const ReadyAction& a) const {
    return a.action.kind != OpKind::F || st.in_flight() < (ranks - st.rank) * slices;
  }
};

TEST(ListSchedule, RulesReproduceOneFOneB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 20; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule ref = schedule::one_f_one_b({.ranks = p, .microbatches = m});
      const Schedule s = list_schedule(
          {.problem = {.ranks = p, .microbatches = m}, .placement = Placement::linear(p)},
          OneFOneBRule{p});
      ASSERT_EQ(s.ranks, ref.ranks);
    }
}

TEST(ListSchedule, RulesReproduceInterleavedOneFOneB) {
  int cases = 0;
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = 1; m <= 4 * p; ++m) {
        if (m > p && m % p != 0) continue;  // the generator refuses those counts
        SCOPED_TRACE("p=" + std::to_string(p) + " V=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        const Problem prob{.ranks = p, .stages = p * v, .microbatches = m};
        const Schedule ref = schedule::interleaved_1f1b(prob);
        const Schedule s = list_schedule(
            {.problem = prob, .placement = Placement::interleaved(p, v)}, InterleavedRule{p, v, m});
        ASSERT_EQ(s.ranks, ref.ranks);
        ++cases;
      }
  EXPECT_EQ(cases, 70);
}

TEST(ListSchedule, RulesReproduceZeroBubbleH1) {
  for (int p = 1; p <= 8; ++p)
    for (int m : {1, 2, p, p + 1, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule ref = schedule::zero_bubble_h1({.ranks = p, .microbatches = m});
      const Schedule s = list_schedule({.problem = {.ranks = p, .microbatches = m},
                                        .placement = Placement::linear(p),
                                        .wgrad = WGradMode::Split},
                                       ZeroBubbleH1Rule{p});
      ASSERT_EQ(s.ranks, ref.ranks);
      EXPECT_TRUE(check(s).ok());
    }
}

// The Zero Bubble planner now runs on the engine; it gives the lists of the planner it
// replaced for every placement, limit, order and option.
TEST(ListSchedule, ZeroBubblePlannerEqualsThePlannerItReplaced) {
  namespace sd = schedule::detail;
  namespace old = bench_reference;
  int cases = 0;
  for (int shape = 0; shape < 3; ++shape)
    for (int p : {1, 2, 3, 5})
      for (int m : {1, 3, 7, 12})
        for (int limit_kind = 0; limit_kind < 3; ++limit_kind)
          for (int order = 0; order < 4; ++order)
            for (int pending : {0, 2, 1 << 30})
              for (bool until_w : {false, true}) {
                const Placement pl = shape == 0   ? Placement::linear(p)
                                     : shape == 1 ? Placement::interleaved(p, 2)
                                                  : Placement::v_shape(p, 2);
                sd::GreedyOptions a;
                old::GreedyOptions b;
                a.generator = b.generator = "t";
                a.placement = b.placement = pl;
                a.microbatches = b.microbatches = m;
                for (int r = 0; r < p; ++r) {
                  const int lim = limit_kind == 0 ? p - r : limit_kind == 1 ? 2 * p : 1 + r % 2;
                  a.max_in_flight.push_back(lim);
                  b.max_in_flight.push_back(lim);
                }
                a.forward_order =
                    order & 1 ? sd::StageOrder::EarlierFirst : sd::StageOrder::LaterFirst;
                b.forward_order =
                    order & 1 ? old::StageOrder::EarlierFirst : old::StageOrder::LaterFirst;
                a.backward_order =
                    order & 2 ? sd::StageOrder::LaterFirst : sd::StageOrder::EarlierFirst;
                b.backward_order =
                    order & 2 ? old::StageOrder::LaterFirst : old::StageOrder::EarlierFirst;
                a.max_pending_w = b.max_pending_w = pending;
                a.in_flight_until_w = b.in_flight_until_w = until_w;
                if (cases % 3 == 1) {
                  a.durations = {.f = 1.0, .i = 1.5, .w = 0.5};
                  b.durations = {.f = 1.0, .i = 1.5, .w = 0.5};
                }
                SCOPED_TRACE("shape " + std::to_string(shape) + " p=" + std::to_string(p) +
                             " m=" + std::to_string(m) + " limit " + std::to_string(limit_kind) +
                             " order " + std::to_string(order) + " pending " +
                             std::to_string(pending) + " until_w " + std::to_string(until_w));
                bool new_ok = true, old_ok = true;
                sd::GreedyPlan x;
                old::GreedyPlan y;
                try {
                  x = sd::greedy_list_schedule(a);
                } catch (const invalid_problem&) {
                  new_ok = false;
                }
                try {
                  y = old::greedy_list_schedule(b);
                } catch (const invalid_problem&) {
                  old_ok = false;
                }
                ASSERT_EQ(new_ok, old_ok);
                ++cases;
                if (!new_ok) continue;
                ASSERT_EQ(x.ranks, y.ranks);
                EXPECT_EQ(x.makespan, y.makespan);
                EXPECT_EQ(x.peak_in_flight, y.peak_in_flight);
              }
  EXPECT_EQ(cases, 3 * 4 * 4 * 3 * 4 * 3 * 2);
}

// The engine times and charges memory as the simulator does: the list it returns simulates to
// the makespan and the peaks it measured, under uniform and transformer costs, with transfer
// times and slices.
TEST(ListSchedule, TimingAndMemoryAreTheSimulators) {
  const UniformCost slow_links{.f = 1, .b = 2, .w = 1, .comm = 0.25, .w_memory = 0.3};
  for (int p : {2, 4})
    for (int k : {1, 3}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " slices=" + std::to_string(k));
      const ListProblem lp{.problem = {.ranks = p, .microbatches = 6, .slices = k},
                           .placement = Placement::linear(p),
                           .wgrad = WGradMode::Split};
      const ListPlan plan = list_schedule_plan(lp, ZeroBubbleH1Rule{p, k}, slow_links);
      ASSERT_TRUE(check(plan.schedule).ok()) << check(plan.schedule).summary();
      const SimulationResult r = simulate(plan.schedule, slow_links);
      EXPECT_DOUBLE_EQ(plan.makespan, r.makespan);
      for (int q = 0; q < p; ++q)
        EXPECT_NEAR(plan.peak_memory[static_cast<std::size_t>(q)],
                    r.ranks[static_cast<std::size_t>(q)].peak_memory, 1e-12);
    }
  const TransformerCost tc{presets::find_model("llama2-7b"), presets::find_device("rtx-4090"), {}};
  const ListPlan plan = list_schedule_plan(
      {.problem = {.ranks = 4, .microbatches = 8}, .placement = Placement::linear(4)},
      OneFOneBRule{4}, tc);
  const SimulationResult r = simulate(plan.schedule, tc);
  EXPECT_NEAR(plan.makespan, r.makespan, 1e-9 * r.makespan);
  EXPECT_NEAR(plan.peak_memory[0], r.ranks[0].peak_memory, 1e-6 * r.ranks[0].peak_memory);
}

// A rule may cap memory: 1F1B that lets a rank run ahead while it holds fewer than `cap`
// microbatches' activations.
struct MemoryCapped {
  double cap;
  int priority(const RankState&, const ReadyAction& a) const { return a.action.kind == OpKind::F; }
  bool admit(const RankState& st, const ReadyAction& a) const {
    return a.memory <= 0 || st.memory + a.memory <= cap + 1e-9;
  }
};

TEST(ListSchedule, AdmissionHoldsAMemoryCap) {
  const UniformCost cost{};
  for (double cap : {1.0, 2.0, 3.5}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    const ListPlan plan = list_schedule_plan(
        {.problem = {.ranks = 4, .microbatches = 8}, .placement = Placement::linear(4)},
        MemoryCapped{cap}, cost);
    ASSERT_TRUE(check(plan.schedule).ok());
    const SimulationResult r = simulate(plan.schedule, cost);
    EXPECT_LE(r.peak_memory_max, cap + 1e-9);
    EXPECT_DOUBLE_EQ(*std::max_element(plan.peak_memory.begin(), plan.peak_memory.end()),
                     r.peak_memory_max);
  }
  // A larger cap never makes the step slower here; an unbounded one is GPipe-like.
  auto step = [&](double cap) {
    return list_schedule_plan(
               {.problem = {.ranks = 4, .microbatches = 8}, .placement = Placement::linear(4)},
               MemoryCapped{cap}, cost)
        .makespan;
  };
  EXPECT_GE(step(1.0), step(2.0));
  EXPECT_GE(step(2.0), step(4.0));
}

// A rule that starves every rank is an error naming the ranks, the time and what was refused.
struct NoForwards {
  int priority(const RankState&, const ReadyAction&) const { return 0; }
  bool admit(const RankState& st, const ReadyAction& a) const {
    return a.action.kind != OpKind::F || st.forwards < 1;
  }
};

TEST(ListSchedule, AStarvingRuleIsNamed) {
  try {
    list_schedule({.problem = {.ranks = 2, .microbatches = 3},
                   .placement = Placement::linear(2),
                   .name = "starved"},
                  NoForwards{});
    FAIL() << "expected schedule_stalled";
  } catch (const schedule_stalled& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("starved: the rule refuses every ready action at time 6"), std::string::npos)
        << m;
    EXPECT_NE(m.find("rank 0 (1 forwards, 1 backwards, 0 in flight, memory 0) refused 0F1, 0F2"),
              std::string::npos)
        << m;
    ASSERT_EQ(e.stalls().size(), 1u);
    EXPECT_EQ(e.stalls()[0].rank, 0);
    EXPECT_EQ(e.stalls()[0].refused.size(), 2u);
    EXPECT_DOUBLE_EQ(e.stalls()[0].time, 6.0);
  }
}

TEST(ListSchedule, RefusesAProblemThatDoesNotFitItsPlacement) {
  try {
    list_schedule({.problem = {.ranks = 3, .microbatches = 2}, .placement = Placement::linear(2)},
                  OneFOneBRule{3});
    FAIL() << "expected invalid_problem";
  } catch (const invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("the placement maps 2 stages onto 2 ranks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      list_schedule({.problem = {.ranks = 2, .microbatches = 0}, .placement = Placement::linear(2)},
                    OneFOneBRule{2}),
      invalid_problem);
}

// Generators built on the engine still produce what they promise.
TEST(ListSchedule, ZeroBubbleVStillValidOnTheEngine) {
  for (int p : {2, 3, 4, 8}) {
    const Schedule s = schedule::zero_bubble_v({.ranks = p, .microbatches = 2 * p});
    EXPECT_TRUE(check(s).ok()) << check(s).summary();
  }
}

}  // namespace
}  // namespace pipesched::test_list_schedule
