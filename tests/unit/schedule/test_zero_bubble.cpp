// Zero Bubble generators (ZB-H1, ZB-H2, ZB-V) and the list scheduler under them: action
// counts, placement, in-flight limits, warm-up, makespans replayed in unit time, validation,
// and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/schedule/detail/greedy.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/interleaved_zero_bubble.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/v_shape_memory.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/schedule/zero_bubble_h2.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace test_zero_bubble {

namespace {

using pipesched::Action;
using pipesched::invalid_problem;
using pipesched::OpKind;
using pipesched::Placement;
using pipesched::PlacementKind;
using pipesched::Problem;
using pipesched::Schedule;
using pipesched::WGradMode;
namespace sd = pipesched::schedule::detail;

constexpr int max_ranks = 8;
constexpr int max_microbatches = 32;

// What the replay below measured.
struct Timeline {
  std::vector<double> rank_end;     // when each rank's last action ends
  double makespan = 0.0;            // the latest of those
  std::vector<int> peak_in_flight;  // per rank: most F whose I has not run, in list order
};

// Replays a compute-only F/I/W schedule: each rank runs its list in order, an action starts
// at max(rank free, every dependency finished) and takes `unit`; no communication latency.
// Written independently of the list scheduler so that it checks it. Throws on anything it
// cannot run (a kind other than F/I/W, or lists that block each other).
Timeline replay(const Schedule& s, double unit = 1.0) {
  const int stages = s.problem.stages;
  const int mbs = s.problem.microbatches;
  std::vector<double> end(static_cast<std::size_t>(3 * stages * mbs), -1.0);
  auto slot = [&](int kind, int st, int mb) -> double& {
    return end[static_cast<std::size_t>((kind * stages + st) * mbs + mb)];
  };
  const int ranks = s.rank_count();
  Timeline t;
  t.rank_end.assign(static_cast<std::size_t>(ranks), 0.0);
  t.peak_in_flight.assign(static_cast<std::size_t>(ranks), 0);
  std::vector<std::size_t> pos(static_cast<std::size_t>(ranks), 0);
  std::vector<int> in_flight(static_cast<std::size_t>(ranks), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      const auto& list = s.ranks[static_cast<std::size_t>(r)];
      auto& p = pos[static_cast<std::size_t>(r)];
      for (; p < list.size(); ++p) {
        const Action& a = list[p];
        std::vector<double> deps;
        int kind = 0;
        if (a.kind == OpKind::F) {
          if (a.stage > 0) deps.push_back(slot(0, a.stage - 1, a.microbatch));
        } else if (a.kind == OpKind::I) {
          kind = 1;
          deps.push_back(slot(0, a.stage, a.microbatch));
          if (a.stage + 1 < stages) deps.push_back(slot(1, a.stage + 1, a.microbatch));
        } else if (a.kind == OpKind::W) {
          kind = 2;
          deps.push_back(slot(1, a.stage, a.microbatch));
        } else {
          throw std::logic_error("replay handles F, I and W only");
        }
        if (std::any_of(deps.begin(), deps.end(), [](double d) { return d < 0; })) break;
        double start = t.rank_end[static_cast<std::size_t>(r)];
        for (double d : deps)
          start = std::max(start, d);
        slot(kind, a.stage, a.microbatch) = start + unit;
        t.rank_end[static_cast<std::size_t>(r)] = start + unit;
        auto& f = in_flight[static_cast<std::size_t>(r)];
        if (a.kind == OpKind::F) ++f;
        if (a.kind == OpKind::I) --f;
        t.peak_in_flight[static_cast<std::size_t>(r)] =
            std::max(t.peak_in_flight[static_cast<std::size_t>(r)], f);
        progress = true;
      }
    }
  }
  for (int r = 0; r < ranks; ++r)
    if (pos[static_cast<std::size_t>(r)] != s.ranks[static_cast<std::size_t>(r)].size())
      throw std::logic_error("replay blocked on rank " + std::to_string(r));
  t.makespan = *std::max_element(t.rank_end.begin(), t.rank_end.end());
  return t;
}

// The forwards a rank runs before its first I. For 1F1B this is its warm-up, min(p − r − 1, M),
// plus the first forward of the steady state when there is one (M > p − r − 1), which is
// min(p − r, M) in all cases; ZB-H1 must match it.
int forwards_before_first_input_grad(const std::vector<Action>& list) {
  int n = 0;
  for (const Action& a : list) {
    if (a.kind == OpKind::I) break;
    n += a.kind == OpKind::F;
  }
  return n;
}

// The F and I actions of a list in order (W removed).
std::vector<Action> forwards_and_input_grads(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list)
    if (a.kind == OpKind::F || a.kind == OpKind::I) out.push_back(a);
  return out;
}

// One Zero Bubble generator and what its contract says.
struct Generator {
  const char* name;
  Schedule (*make)(Problem, WGradMode);
  int chunks;
  PlacementKind placement;
  int (*limit)(int ranks, int rank);  // forwards in flight allowed on a rank
  bool staggered_ends;                // rank r ends at 3·chunks·M + r when M >= 2p − 1
};

const Generator zb_h1{"zb-h1",
                      pipesched::schedule::zero_bubble_h1,
                      1,
                      PlacementKind::Linear,
                      [](int p, int r) { return p - r; },
                      false};
const Generator zb_h2{"zb-h2",
                      pipesched::schedule::zero_bubble_h2,
                      1,
                      PlacementKind::Linear,
                      [](int p, int r) { return 2 * (p - r) - 1; },
                      true};
const Generator zb_v{"zb-v",
                     pipesched::schedule::zero_bubble_v,
                     2,
                     PlacementKind::VShape,
                     [](int p, int) { return 2 * p; },
                     true};

Schedule make(const Generator& g, int ranks, int microbatches) {
  return g.make(Problem{.ranks = ranks, .microbatches = microbatches}, WGradMode::Split);
}

// Calls `body(p, M, schedule)` over the grid, naming the grid point on failure.
template <class Body>
void for_grid(const Generator& g, Body body) {
  for (int p = 1; p <= max_ranks; ++p)
    for (int m = 1; m <= max_microbatches; ++m) {
      SCOPED_TRACE(std::string(g.name) + " ranks = " + std::to_string(p) +
                   ", microbatches = " + std::to_string(m));
      body(p, m, make(g, p, m));
    }
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const invalid_problem& e) {
    return e.what();
  }
  return "(no invalid_problem thrown)";
}

class ZeroBubble : public ::testing::TestWithParam<Generator> {};

TEST_P(ZeroBubble, NameProblemAndPlacement) {
  const Generator& g = GetParam();
  for_grid(g, [&](int p, int m, const Schedule& s) {
    EXPECT_EQ(s.name, g.name);
    EXPECT_EQ(s.problem, (Problem{.ranks = p, .stages = g.chunks * p, .microbatches = m}));
    EXPECT_EQ(s.placement.kind(), g.placement);
    EXPECT_EQ(s.placement.stages(), g.chunks * p);
    EXPECT_EQ(s.rank_count(), p);
    EXPECT_FALSE(s.has_comm());
  });
}

TEST_P(ZeroBubble, OneForwardInputGradAndWeightGradPerUnit) {
  const Generator& g = GetParam();
  for_grid(g, [&](int p, int m, const Schedule& s) {
    const int stages = g.chunks * p;
    std::vector<int> count(static_cast<std::size_t>(3 * stages * m), 0);
    int other = 0;
    for (const auto& list : s.ranks)
      for (const Action& a : list) {
        const int kind = a.kind == OpKind::F ? 0 : a.kind == OpKind::I ? 1 : 2;
        if ((a.kind != OpKind::F && a.kind != OpKind::I && a.kind != OpKind::W) || a.slice != 0 ||
            a.part != 0 || a.stage < 0 || a.stage >= stages || a.microbatch < 0 ||
            a.microbatch >= m) {
          ++other;
          continue;
        }
        ++count[static_cast<std::size_t>((kind * stages + a.stage) * m + a.microbatch)];
      }
    EXPECT_EQ(other, 0);
    EXPECT_EQ(std::count(count.begin(), count.end(), 1), static_cast<std::ptrdiff_t>(count.size()));
    EXPECT_EQ(s.action_count(), count.size());
  });
}

TEST_P(ZeroBubble, EveryActionOnItsPlacementRank) {
  const Generator& g = GetParam();
  for_grid(g, [&](int p, int, const Schedule& s) {
    const Placement expected = g.chunks == 1 ? Placement::linear(p) : Placement::v_shape(p, 2);
    EXPECT_EQ(s.placement, expected);
    for (int r = 0; r < p; ++r)
      for (const Action& a : s.ranks[static_cast<std::size_t>(r)])
        ASSERT_EQ(expected.rank_of(a.stage), r) << "stage " << a.stage;
  });
}

TEST_P(ZeroBubble, ForwardsInFlightWithinLimit) {
  const Generator& g = GetParam();
  for_grid(g, [&](int p, int, const Schedule& s) {
    const Timeline t = replay(s);
    for (int r = 0; r < p; ++r)
      EXPECT_LE(t.peak_in_flight[static_cast<std::size_t>(r)], g.limit(p, r)) << "rank " << r;
    // Rank 0's limit is the largest; for ZB-V it is 2p chunk forwards, 1F1B's p microbatches.
    EXPECT_LE(*std::max_element(t.peak_in_flight.begin(), t.peak_in_flight.end()),
              g.chunks == 2 ? 2 * p : g.limit(p, 0));
  });
}

TEST_P(ZeroBubble, ValidatorAccepts) {
  const Generator& g = GetParam();
  for_grid(g, [&](int, int, const Schedule& s) { EXPECT_NO_THROW(pipesched::validate(s)); });
}

// With enough microbatches ZB-H2 and ZB-V keep every rank busy from its first forward (at r
// chunk units) to its end, so rank r finishes at 3·chunks·M + r (M >= 2p − 1); ZB-H1 ends
// every rank together at 3M + p − 1 (M >= p), each with a bubble of p − 1.
TEST_P(ZeroBubble, RankEndsWithEnoughMicrobatches) {
  const Generator& g = GetParam();
  for_grid(g, [&](int p, int m, const Schedule& s) {
    if (m < (g.staggered_ends ? 2 * p - 1 : p)) return;
    const Timeline t = replay(s);
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(t.rank_end[static_cast<std::size_t>(r)],
                g.staggered_ends ? 3 * g.chunks * m + r : 3 * m + p - 1)
          << "rank " << r;
  });
}

TEST_P(ZeroBubble, RefusesFusedBackward) {
  const Generator& g = GetParam();
  const std::string msg =
      message_of([&] { g.make(Problem{.ranks = 4, .microbatches = 8}, WGradMode::Fused); });
  EXPECT_NE(msg.find(std::string(g.name) + " needs split backward (wgrad = split)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("with fused backward use 1f1b"), std::string::npos) << msg;
}

TEST_P(ZeroBubble, RefusesSlicesAndBadProblems) {
  const Generator& g = GetParam();
  std::string msg = message_of([&] { g.make(Problem{.ranks = 4, .slices = 2}, WGradMode::Split); });
  EXPECT_NE(msg.find(g.name), std::string::npos) << msg;
  EXPECT_NE(msg.find("slices = 2"), std::string::npos) << msg;
  msg = message_of([&] { g.make(Problem{.ranks = 0}, WGradMode::Split); });
  EXPECT_NE(msg.find(g.name), std::string::npos) << msg;
  EXPECT_NE(msg.find("ranks = 0"), std::string::npos) << msg;
  msg = message_of([&] { g.make(Problem{.ranks = 2, .microbatches = 0}, WGradMode::Split); });
  EXPECT_NE(msg.find("microbatches = 0"), std::string::npos) << msg;
}

TEST_P(ZeroBubble, Deterministic) {
  const Generator& g = GetParam();
  for (int p : {3, 8})
    for (int m : {5, 17})
      EXPECT_EQ(make(g, p, m), make(g, p, m)) << p << " " << m;
}

INSTANTIATE_TEST_SUITE_P(Generators, ZeroBubble, ::testing::Values(zb_h1, zb_h2, zb_v),
                         [](const ::testing::TestParamInfo<Generator>& param_info) {
                           std::string n = param_info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- generator-specific targets ------------------------------------------------------------

// Unit durations: 3M + p − 1 once M >= p (bubble (p − 1)/(3M + p − 1)); below that the last
// rank's limit of one forward in flight makes it alternate F and I, and the makespan is
// 2p + 2M − 1 = (3M + p − 1) + (p − M).
TEST(ZeroBubbleH1, MakespanInUnitTime) {
  for_grid(zb_h1, [&](int p, int m, const Schedule& s) {
    const double expected = m >= p ? 3 * m + p - 1 : 2 * p + 2 * m - 1;
    EXPECT_EQ(replay(s).makespan, expected);
  });
}

// The known structure: ZB-H1's F and I on each rank are in 1F1B's order, with W's slotted in.
TEST(ZeroBubbleH1, ForwardAndInputGradOrderIsOneFOneB) {
  for_grid(zb_h1, [&](int p, int m, const Schedule& s) {
    const Schedule ref =
        pipesched::schedule::one_f_one_b(Problem{.ranks = p, .microbatches = m}, WGradMode::Split);
    for (int r = 0; r < p; ++r) {
      const auto& list = s.ranks[static_cast<std::size_t>(r)];
      EXPECT_EQ(forwards_and_input_grads(list),
                forwards_and_input_grads(ref.ranks[static_cast<std::size_t>(r)]))
          << "rank " << r;
      EXPECT_EQ(forwards_before_first_input_grad(list), std::min(p - r, m)) << "rank " << r;
    }
  });
}

TEST(ZeroBubbleH2, WarmupFillsTheFirstBubble) {
  for_grid(zb_h2, [&](int p, int m, const Schedule& s) {
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(forwards_before_first_input_grad(s.ranks[static_cast<std::size_t>(r)]),
                std::min(2 * (p - r) - 1, m))
          << "rank " << r;
  });
}

TEST(ZeroBubbleH2, MakespanNoWorseThanH1) {
  for_grid(zb_h2, [&](int p, int m, const Schedule& s) {
    EXPECT_LE(replay(s).makespan, replay(make(zb_h1, p, m)).makespan);
  });
}

// A chunk action is half of a ZB-H1 action, so ZB-V in chunk units is compared with ZB-H1 at
// two units per action.
TEST(ZeroBubbleV, MakespanNoWorseThanH1) {
  for_grid(zb_v, [&](int p, int m, const Schedule& s) {
    const double v = replay(s).makespan;
    EXPECT_LE(v, replay(make(zb_h1, p, m), 2.0).makespan);
    if (m >= 2 * p - 1) {
      EXPECT_EQ(v, 6 * m + p - 1);
    }
  });
}

TEST(ZeroBubbleV, DrainsTheVBeforeStartingMoreForwards) {
  // Rank 0 holds stages 0 and 2p − 1: once F(2p − 1, 0) is ready it goes before the next
  // stage-0 forward, and the backward starts on the same rank right after it.
  const int p = 4;
  const Schedule s = make(zb_v, p, 8);
  const auto& r0 = s.ranks[0];
  const auto last_fwd = std::find(r0.begin(), r0.end(), Action::make(OpKind::F, 2 * p - 1, 0));
  ASSERT_NE(last_fwd, r0.end());
  EXPECT_EQ(last_fwd - r0.begin(), 2 * p - 1);  // after 2p − 1 stage-0 forwards
  EXPECT_EQ(*(last_fwd + 1), Action::make(OpKind::I, 2 * p - 1, 0));
}

TEST(ZeroBubbleV, RefusesOtherChunkCounts) {
  for (int stages : {4, 12, 16}) {
    SCOPED_TRACE("stages = " + std::to_string(stages));
    const std::string msg = message_of([&] {
      pipesched::schedule::zero_bubble_v(Problem{.ranks = 4, .stages = stages, .microbatches = 8});
    });
    EXPECT_NE(msg.find("zb-v: chunks = " + std::to_string(stages / 4)), std::string::npos) << msg;
    EXPECT_NE(msg.find("exactly 2 chunks per rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stages = 8 or 0"), std::string::npos) << msg;
  }
  // stages = 6 over 4 ranks is not even a whole number of chunks.
  const std::string msg = message_of([] {
    pipesched::schedule::zero_bubble_v(Problem{.ranks = 4, .stages = 6, .microbatches = 8});
  });
  EXPECT_NE(msg.find("stages = 6"), std::string::npos) << msg;
}

TEST(ZeroBubbleLinear, RefusesMoreStagesThanRanks) {
  for (auto* gen : {pipesched::schedule::zero_bubble_h1, pipesched::schedule::zero_bubble_h2}) {
    const std::string msg = message_of(
        [&] { gen(Problem{.ranks = 4, .stages = 8, .microbatches = 8}, WGradMode::Split); });
    EXPECT_NE(msg.find("stages = 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("use stages = 4"), std::string::npos) << msg;
  }
}

// ---- the list scheduler itself ----------------------------------------------------------

sd::GreedyOptions options(Placement pl, int microbatches, int limit) {
  sd::GreedyOptions opt;
  opt.generator = "test";
  opt.microbatches = microbatches;
  opt.max_in_flight.assign(static_cast<std::size_t>(pl.ranks()), limit);
  opt.placement = std::move(pl);
  return opt;
}

Schedule as_schedule(const sd::GreedyOptions& opt, const sd::GreedyPlan& plan) {
  return Schedule{"test",
                  Problem{.ranks = opt.placement.ranks(),
                          .stages = opt.placement.stages(),
                          .microbatches = opt.microbatches},
                  opt.placement, plan.ranks};
}

TEST(GreedyListSchedule, PlanAgreesWithReplay) {
  for (int chunks : {1, 2, 3}) {
    for (int p : {1, 2, 5}) {
      SCOPED_TRACE("chunks = " + std::to_string(chunks) + ", ranks = " + std::to_string(p));
      const auto opt = options(Placement::interleaved(p, chunks), 7, chunks * p);
      const auto plan = sd::greedy_list_schedule(opt);
      const Schedule s = as_schedule(opt, plan);
      EXPECT_NO_THROW(pipesched::validate(s));
      const Timeline t = replay(s);
      EXPECT_EQ(plan.makespan, t.makespan);
      EXPECT_EQ(plan.peak_in_flight, t.peak_in_flight);
    }
  }
}

TEST(GreedyListSchedule, OtherDurationsStillValid) {
  auto opt = options(Placement::v_shape(4, 2), 9, 8);
  opt.durations = {.f = 1.0, .i = 1.5, .w = 0.5};
  const auto plan = sd::greedy_list_schedule(opt);
  EXPECT_NO_THROW(pipesched::validate(as_schedule(opt, plan)));
  for (int peak : plan.peak_in_flight)
    EXPECT_LE(peak, 8);
  // Rank 3's busy time alone is 2 stages × 9 microbatches × 3 units.
  EXPECT_GE(plan.makespan, 54.0);
}

TEST(GreedyListSchedule, EarlierStageFirstOnAVNeedsRoomForAllForwards) {
  // Stage-first order fills the bottom rank's limit with its first chunk before the second
  // chunk's forwards arrive: with ZB-V's limit of 2p that is reported as infeasible ...
  auto opt = options(Placement::v_shape(3, 2), 8, 6);
  opt.forward_order = sd::StageOrder::EarlierFirst;
  const std::string msg = message_of([&] { sd::greedy_list_schedule(opt); });
  EXPECT_NE(msg.find("rank 2 holds 6 forwards"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_in_flight = 6"), std::string::npos) << msg;
  // ... while room for every forward (GPipe-like) plans, in another order than LaterFirst.
  opt.max_in_flight.assign(3, 16);
  const auto early = sd::greedy_list_schedule(opt);
  EXPECT_NO_THROW(pipesched::validate(as_schedule(opt, early)));
  opt.forward_order = sd::StageOrder::LaterFirst;
  const auto late = sd::greedy_list_schedule(opt);
  EXPECT_NE(early.ranks, late.ranks);
  EXPECT_GE(early.makespan, late.makespan);
}

TEST(GreedyListSchedule, PendingWeightGradCapRunsWBeforeF) {
  // A cap of 0 makes every W follow its I at once (no F in between): 1F1B's split order.
  auto opt = options(Placement::linear(4), 8, 4);
  opt.max_pending_w = 0;
  for (int r = 0; r < 4; ++r)
    opt.max_in_flight[static_cast<std::size_t>(r)] = 4 - r;
  const auto plan = sd::greedy_list_schedule(opt);
  const Schedule s = as_schedule(opt, plan);
  EXPECT_NO_THROW(pipesched::validate(s));
  for (const auto& list : s.ranks)
    for (std::size_t k = 0; k < list.size(); ++k)
      if (list[k].kind == OpKind::I) {
        ASSERT_LT(k + 1, list.size());
        EXPECT_NE(list[k + 1].kind, OpKind::F) << "position " << k;
      }
}

TEST(GreedyListSchedule, InfeasibleLimitThrowsNamingIt) {
  // One forward in flight per rank cannot work on a V: the bottom rank (2 of 3) must run
  // stage 3 of microbatch 0 while its stage 2 still waits for its input gradient.
  const std::string msg =
      message_of([] { sd::greedy_list_schedule(options(Placement::v_shape(3, 2), 4, 1)); });
  EXPECT_NE(msg.find("test: the in-flight limits leave no rank able to progress"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 2 holds 1 forwards"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_in_flight = 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F(stage 3, microbatch 0)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("raise max_in_flight"), std::string::npos) << msg;
}

TEST(GreedyListSchedule, RefusesBadOptions) {
  auto opt = options(Placement::linear(3), 4, 2);
  opt.max_in_flight.pop_back();
  EXPECT_NE(message_of([&] { sd::greedy_list_schedule(opt); }).find("one limit per rank (3)"),
            std::string::npos);
  opt = options(Placement::linear(3), 4, 2);
  opt.max_in_flight[1] = 0;
  EXPECT_NE(message_of([&] { sd::greedy_list_schedule(opt); }).find("rank 1 = 0"),
            std::string::npos);
  opt = options(Placement::linear(3), 0, 2);
  EXPECT_NE(message_of([&] { sd::greedy_list_schedule(opt); }).find("microbatches = 0"),
            std::string::npos);
  opt = options(Placement::linear(3), 4, 2);
  opt.durations.i = 0.0;
  EXPECT_NE(message_of([&] { sd::greedy_list_schedule(opt); }).find("duration of I"),
            std::string::npos);
  opt = options(Placement::linear(3), 4, 2);
  opt.max_pending_w = -1;
  EXPECT_NE(message_of([&] { sd::greedy_list_schedule(opt); }).find("max_pending_w = -1"),
            std::string::npos);
}

}  // namespace

// Counting a forward in flight until its W (not its I) bounds what deferred W's hold: with
// W keeping most of a unit's activations, the peak stays at 1F1B's.
TEST(GreedyPlanner, InFlightUntilWBoundsTheMemoryDeferredWeightGradientsHold) {
  namespace d = pipesched::schedule::detail;
  const pipesched::UniformCost cost{.w_memory = 0.9};
  for (int p : {4, 8}) {
    const int m = 4 * p;
    d::GreedyOptions o;
    o.generator = "test";
    o.placement = pipesched::Placement::linear(p);
    o.microbatches = m;
    for (int r = 0; r < p; ++r)
      o.max_in_flight.push_back(p - r);
    o.in_flight_until_w = true;
    const d::GreedyPlan bounded = d::greedy_list_schedule(o);
    pipesched::Schedule s{
        "bounded", {.ranks = p, .stages = p, .microbatches = m}, o.placement, bounded.ranks};
    ASSERT_TRUE(pipesched::check(s).ok());
    const pipesched::SimulationResult r = pipesched::simulate(s, cost);
    for (int q = 0; q < p; ++q)
      EXPECT_LE(r.ranks[q].peak_memory, p - q + 1e-9) << q;
    // The default (in flight until I) defers W's freely and holds more.
    o.in_flight_until_w = false;
    const d::GreedyPlan free = d::greedy_list_schedule(o);
    pipesched::Schedule t{
        "free", {.ranks = p, .stages = p, .microbatches = m}, o.placement, free.ranks};
    EXPECT_GT(pipesched::simulate(t, cost).peak_memory_max, r.peak_memory_max);
  }
}

// ---------------------------------------------------------------------------------------
// Memory-bounded Zero Bubble: weight gradients deferred only while the next forward fits.

namespace memory_bounded {

namespace ps = pipesched;

using Bounded = Schedule (*)(Problem, WGradMode, ps::CostRef, const ps::MemoryBudget&);

struct Peaks {
  double makespan;
  std::vector<double> peak;
};

template <class Cost>
Peaks measure(const Schedule& s, const Cost& cost) {
  const ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_FALSE(r.deadlock) << s.name;
  Peaks out{r.makespan, {}};
  for (const auto& rk : r.ranks)
    out.peak.push_back(rk.peak_memory);
  return out;
}

// Llama-2 13B on 16 RTX 4090s, 64 microbatches: unbounded ZB-H1 holds 122.6 GiB on rank 0
// against 1F1B's 32.1 GiB. Bounded by 1F1B's own per-rank peaks, ZB-H1 and ZB-H2 fit every
// rank and still beat 1F1B's step; ZB-V fits 1F1B's largest peak on every rank.
TEST(MemoryBoundedZeroBubble, FitsOneFOneBsPeakOnLlama2AndBeatsItsStep) {
  const ps::TransformerCost cost{
      ps::presets::find_model("llama2-13b"), ps::presets::find_device("rtx-4090"), {}};
  const Problem p{.ranks = 16, .microbatches = 64};
  const Peaks base = measure(ps::schedule::one_f_one_b(p, WGradMode::Fused), cost);
  const Peaks unbounded = measure(ps::schedule::zero_bubble_h1(p), cost);
  ASSERT_GT(unbounded.peak[0], 3.5 * base.peak[0]);  // the problem: 122.6 against 32.1 GiB
  ps::MemoryBudget per_rank;
  per_rank.per_rank = base.peak;
  for (auto [name, gen] :
       {std::pair<const char*, Bounded>{"zb-h1", &ps::schedule::zero_bubble_h1_within},
        {"zb-h2", &ps::schedule::zero_bubble_h2_within}}) {
    SCOPED_TRACE(name);
    const Schedule s = gen(p, WGradMode::Split, cost, per_rank);
    EXPECT_TRUE(ps::check(s).ok());
    const Peaks got = measure(s, cost);
    for (int r = 0; r < p.ranks; ++r)
      EXPECT_LE(got.peak[static_cast<std::size_t>(r)],
                base.peak[static_cast<std::size_t>(r)] * (1 + 1e-9))
          << "rank " << r;
    EXPECT_LT(got.makespan, base.makespan);
    EXPECT_GE(got.makespan, unbounded.makespan * (1 - 1e-9));
  }
  ps::MemoryBudget largest;
  largest.all = *std::max_element(base.peak.begin(), base.peak.end());
  const Schedule v = ps::schedule::zero_bubble_v_within(p, WGradMode::Split, cost, largest);
  EXPECT_TRUE(ps::check(v).ok());
  const Peaks got = measure(v, cost);
  for (double x : got.peak)
    EXPECT_LE(x, largest.all * (1 + 1e-9));
}

// Under a uniform cost where a deferred W keeps half its unit's activations, every bounded
// order fits 1F1B's peak and beats its step; a budget the unbounded schedule never reaches
// gives that schedule action for action.
TEST(MemoryBoundedZeroBubble, UniformCostFitsAndUnreachedBudgetChangesNothing) {
  ps::UniformCost cost;
  cost.w_memory = 0.5;
  for (auto [P, M] : {std::pair{4, 8}, {4, 12}, {8, 16}}) {
    const Problem p{.ranks = P, .microbatches = M};
    const Peaks base = measure(ps::schedule::one_f_one_b(p, WGradMode::Split), cost);
    ps::MemoryBudget cap;
    cap.all = *std::max_element(base.peak.begin(), base.peak.end());
    ps::MemoryBudget huge;
    huge.all = 1e9;
    for (auto [name, gen, plain] :
         {std::tuple<const char*, Bounded, Schedule (*)(Problem, WGradMode)>{
              "zb-h1", &ps::schedule::zero_bubble_h1_within, &ps::schedule::zero_bubble_h1},
          {"zb-h2", &ps::schedule::zero_bubble_h2_within, &ps::schedule::zero_bubble_h2},
          {"zb-v", &ps::schedule::zero_bubble_v_within, &ps::schedule::zero_bubble_v}}) {
      SCOPED_TRACE(std::string(name) + " p=" + std::to_string(P) + " m=" + std::to_string(M));
      const Schedule s = gen(p, WGradMode::Split, cost, cap);
      EXPECT_TRUE(ps::check(s).ok());
      const Peaks got = measure(s, cost);
      for (double x : got.peak)
        EXPECT_LE(x, cap.all * (1 + 1e-9));
      EXPECT_LT(got.makespan, base.makespan);
      EXPECT_EQ(gen(p, WGradMode::Split, cost, huge).ranks, plain(p, WGradMode::Split).ranks);
      EXPECT_EQ(gen(p, WGradMode::Split, cost, ps::MemoryBudget{}).ranks,
                plain(p, WGradMode::Split).ranks);
    }
  }
}

// A budget below one microbatch's activations cannot be met: the bounded order still runs
// (one forward in flight at a time where nothing else frees memory), and is valid.
TEST(MemoryBoundedZeroBubble, BudgetBelowOneMicrobatchStillRuns) {
  ps::UniformCost cost;
  cost.w_memory = 0.5;
  ps::MemoryBudget tiny;
  tiny.all = 0.01;
  const Problem p{.ranks = 4, .microbatches = 8};
  for (Bounded gen : {Bounded{&ps::schedule::zero_bubble_h1_within},
                      Bounded{&ps::schedule::zero_bubble_h2_within},
                      Bounded{&ps::schedule::zero_bubble_v_within}}) {
    const Schedule s = gen(p, WGradMode::Split, cost, tiny);
    EXPECT_TRUE(ps::check(s).ok()) << s.name;
    EXPECT_FALSE(ps::simulate(s, cost).deadlock) << s.name;
  }
}

}  // namespace memory_bounded

// ---------------------------------------------------------------------------------------
// Interleaved Zero Bubble: the Zero Bubble rule over looped chunks.

TEST(InterleavedZeroBubble, ValidOptimalUnderUnitCostsAndWithinOneFOneBsMemory) {
  namespace ps = pipesched;
  const ps::UniformCost cost;
  for (int p = 1; p <= max_ranks; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = 1; m <= max_microbatches; m += (m < 12 ? 1 : 5)) {
        SCOPED_TRACE("p=" + std::to_string(p) + " V=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        const Problem pr{.ranks = p, .stages = v * p, .microbatches = m};
        const Schedule s = ps::schedule::interleaved_zero_bubble(pr);
        EXPECT_EQ(s.name, "interleaved-zb");
        ASSERT_EQ(s.placement, Placement::interleaved(p, v));
        ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
        EXPECT_EQ(s.action_count(), static_cast<std::size_t>(3 * v * p * m));
        for (int r = 0; r < p; ++r)
          for (const Action& a : s.ranks[static_cast<std::size_t>(r)])
            ASSERT_EQ(s.placement.rank_of(a.stage), r);
        const Timeline t = replay(s);
        // In chunk units (1/V of a ZB-H1 action): the last rank starts at p − 1 at the
        // earliest and has 3·V·M of work, so 3·V·M + p − 1 is the least any order reaches;
        // reached at M = p and M >= 2p, within 1.21x between.
        const int least = 3 * v * m + p - 1;
        if (m == p || m >= 2 * p) {
          EXPECT_EQ(t.makespan, least);
        }
        if (m >= p) {
          EXPECT_LE(t.makespan, 1.21 * least);
        }
        const ps::SimulationResult zb = ps::simulate(s, cost);
        const ps::SimulationResult il =
            ps::simulate(ps::schedule::interleaved_1f1b(pr, WGradMode::Split), cost);
        const ps::SimulationResult one =
            ps::simulate(ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}), cost);
        EXPECT_LE(zb.makespan, il.makespan + 1e-9);
        EXPECT_LE(zb.peak_memory_max,
                  std::max(1.27 * one.peak_memory_max, il.peak_memory_max) + 1e-9);
      }
  // PyTorch's ScheduleInterleavedZeroBubble under the same unit cost: 6.5 at p = 2, M = 2 and
  // 13.5 at p = 4, M = 4 (V = 2), where interleaved 1F1B with a split backward takes 7 and 15.
  EXPECT_DOUBLE_EQ(
      ps::simulate(ps::schedule::interleaved_zero_bubble({.ranks = 2, .microbatches = 2}), cost)
          .makespan,
      6.5);
  EXPECT_DOUBLE_EQ(
      ps::simulate(ps::schedule::interleaved_zero_bubble({.ranks = 4, .microbatches = 4}), cost)
          .makespan,
      13.5);
  const std::string msg = message_of([] {
    pipesched::schedule::interleaved_zero_bubble({.ranks = 4, .microbatches = 8}, WGradMode::Fused);
  });
  EXPECT_NE(msg.find("interleaved-zb needs split backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use interleaved-1f1b"), std::string::npos) << msg;
}

TEST(InterleavedZeroBubble, MemoryBoundedFitsOneFOneBsPeak) {
  namespace ps = pipesched;
  ps::UniformCost cost;
  cost.w_memory = 0.5;
  for (auto [p, m] : {std::pair{4, 8}, {4, 10}, {8, 16}}) {
    const Problem pr{.ranks = p, .microbatches = m};
    const ps::SimulationResult one = ps::simulate(ps::schedule::one_f_one_b(pr), cost);
    const ps::SimulationResult free = ps::simulate(ps::schedule::interleaved_zero_bubble(pr), cost);
    ps::MemoryBudget cap;
    cap.all = one.peak_memory_max;
    const Schedule s =
        ps::schedule::interleaved_zero_bubble_within(pr, WGradMode::Split, cost, cap);
    EXPECT_TRUE(ps::check(s).ok());
    const ps::SimulationResult r = ps::simulate(s, cost);
    EXPECT_LE(r.peak_memory_max, cap.all * (1 + 1e-9));
    EXPECT_LT(r.makespan, one.makespan);
    EXPECT_GE(free.peak_memory_max, r.peak_memory_max);
    ps::MemoryBudget huge;
    huge.all = 1e9;
    EXPECT_EQ(ps::schedule::interleaved_zero_bubble_within(pr, WGradMode::Split, cost, huge).ranks,
              ps::schedule::interleaved_zero_bubble(pr).ranks);
  }
}

// ---------------------------------------------------------------------------------------
// V-Half and V-Min: ZB-V within a half and a third of 1F1B's activation memory.

TEST(ControllableMemoryV, HalfAndThirdOfOneFOneBsPeak) {
  namespace ps = pipesched;
  const ps::UniformCost cost;
  for (int p = 1; p <= max_ranks; ++p)
    for (int m : {1, 2, 3, p, 2 * p, 3 * p + 1, 24}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Problem pr{.ranks = p, .microbatches = m};
      const ps::SimulationResult one = ps::simulate(ps::schedule::one_f_one_b(pr), cost);
      const ps::Schedule half = ps::schedule::v_half(pr);
      const ps::Schedule third = ps::schedule::v_min(pr);
      for (const ps::Schedule* s : {&half, &third}) {
        EXPECT_EQ(s->placement, Placement::v_shape(p, 2));
        ASSERT_TRUE(ps::check(*s).ok()) << s->name << ": " << ps::check(*s).summary();
        EXPECT_EQ(s->action_count(), static_cast<std::size_t>(3 * 2 * p * m));
      }
      EXPECT_EQ(half.name, "v-half");
      EXPECT_EQ(third.name, "v-min");
      const ps::SimulationResult h = ps::simulate(half, cost), t = ps::simulate(third, cost);
      // ⌈p/2⌉ + 1 and ⌈p/3⌉ + 1 microbatches of 1F1B's p on rank 0 (never more than 1F1B).
      const double rank0 = one.ranks.front().peak_memory, unit = rank0 / std::min(p, m);
      EXPECT_LE(h.peak_memory_max,
                std::min(rank0, unit * ((p + 1) / 2 + 1)) + 1e-9 + (m < p ? rank0 : 0.0));
      EXPECT_LE(t.peak_memory_max,
                std::min(rank0, unit * ((p + 2) / 3 + 1)) + 1e-9 + (m < p ? rank0 : 0.0));
      EXPECT_LE(t.peak_memory_max, h.peak_memory_max + 1e-9);
      if (p >= 8 && m >= 2 * p) {
        EXPECT_LE(h.peak_memory_max, 0.63 * rank0);  // about a half: (p/2 + 1)/p
        EXPECT_LE(t.peak_memory_max, 0.51 * rank0);  // about a third: (p/3 + 1)/p
        EXPECT_LT(h.makespan, one.makespan);         // and V-Half is faster than 1F1B
      }
    }
  const std::string msg = message_of(
      [] { pipesched::schedule::v_half({.ranks = 4, .microbatches = 8}, WGradMode::Fused); });
  EXPECT_NE(msg.find("v-half needs split backward"), std::string::npos) << msg;
  EXPECT_NE(message_of([] {
              pipesched::schedule::v_min({.ranks = 4, .stages = 4, .microbatches = 8});
            }).find("stages = 4"),
            std::string::npos);
}

}  // namespace test_zero_bubble
