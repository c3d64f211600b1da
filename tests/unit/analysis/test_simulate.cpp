// Simulator: the analytic anchors of DESIGN.md over a grid, and the simulation semantics.
#include <gtest/gtest.h>

#include <cmath>

#include "pipesched/analysis/shared_compute.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_simulate {

namespace ps = pipesched;

namespace {

constexpr double eps = 1e-9;

// p from 2 to 16, m from p to 8p (a thinned grid keeps the test fast).
template <class Fn>
void for_grid(Fn&& fn) {
  for (int p : {2, 3, 4, 5, 8, 11, 16})
    for (int m : {p, p + 1, 2 * p, 3 * p + 1, 4 * p, 8 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      fn(p, m);
    }
}

}  // namespace

TEST(Simulate, OneFOneBAnchors) {
  for_grid([](int p, int m) {
    ps::Schedule s = ps::schedule::one_f_one_b({.ranks = p, .microbatches = m});
    ps::SimulationResult r = ps::simulate(s);
    ASSERT_FALSE(r.deadlock) << r.deadlock_report;
    EXPECT_NEAR(r.makespan, 3.0 * (m + p - 1), eps);
    EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (m + p - 1), eps);
    for (int rank = 0; rank < p; ++rank)
      EXPECT_NEAR(r.ranks[rank].peak_memory, std::min(p - rank, m), eps) << "rank " << rank;
    // Split backward sends the gradient after I (b − w) instead of after B: the backward
    // chain shortens by (p − 1)·w, the same peak.
    ps::SimulationResult split = ps::simulate(
        ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}, ps::WGradMode::Split));
    EXPECT_NEAR(split.makespan, 3.0 * m + 2.0 * (p - 1), eps);
    EXPECT_NEAR(split.peak_memory_max, r.peak_memory_max, eps);
  });
}

TEST(Simulate, GPipePeakIsAllMicrobatches) {
  for_grid([](int p, int m) {
    ps::SimulationResult r = ps::simulate(ps::schedule::gpipe({.ranks = p, .microbatches = m}));
    ASSERT_FALSE(r.deadlock);
    for (int rank = 0; rank < p; ++rank)
      EXPECT_NEAR(r.ranks[rank].peak_memory, m, eps);
    EXPECT_NEAR(r.makespan, 3.0 * (m + p - 1), eps);
  });
}

TEST(Simulate, InterleavedAnchors) {
  for (int v : {2, 3, 4})
    for_grid([v](int p, int m) {
      if (m % p != 0) return;  // the anchor holds for m a multiple of p
      SCOPED_TRACE("V=" + std::to_string(v));
      ps::Schedule s =
          ps::schedule::interleaved_1f1b({.ranks = p, .stages = p * v, .microbatches = m});
      ps::SimulationResult r = ps::simulate(s);
      ASSERT_FALSE(r.deadlock) << r.deadlock_report;
      EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (v * m + p - 1), eps);
      // Rank 0 holds its warm-up forwards plus the first steady one, 1/V each:
      // p + (p − 1)/V once m·V exceeds the warm-up (m >= 2p here); all m·V/V = m below that.
      const int warmup = std::min(2 * (p - 1) + (v - 1) * p, m * v);
      EXPECT_NEAR(r.ranks[0].peak_memory, std::min(warmup + 1, m * v) / double(v), eps);
      if (m >= 2 * p) {
        EXPECT_NEAR(r.ranks[0].peak_memory, p + double(p - 1) / v, eps);
      }
    });
}

TEST(Simulate, ZeroBubbleAnchors) {
  const ps::UniformCost cost{.f = 1, .b = 2, .w = 1};
  for_grid([&](int p, int m) {
    ps::SimulationResult h1 =
        ps::simulate(ps::schedule::zero_bubble_h1({.ranks = p, .microbatches = m}), cost);
    ps::SimulationResult h2 =
        ps::simulate(ps::schedule::zero_bubble_h2({.ranks = p, .microbatches = m}), cost);
    ps::SimulationResult v =
        ps::simulate(ps::schedule::zero_bubble_v({.ranks = p, .microbatches = m}), cost);
    ps::SimulationResult base =
        ps::simulate(ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}), cost);
    ASSERT_FALSE(h1.deadlock || h2.deadlock || v.deadlock);
    EXPECT_NEAR(h1.bubble_ratio, double(p - 1) / (3 * m + p - 1), eps);
    EXPECT_LE(h2.makespan, h1.makespan + eps);
    EXPECT_LE(v.makespan, h1.makespan + eps);
    EXPECT_LE(v.peak_memory_max, base.peak_memory_max + eps);
  });
}

TEST(Simulate, EveryGeneratorValidatesLowersAndSimulates) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {1, 2, 4, 8})
      for (int m : {2 * p, 4 * p}) {
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        ps::Schedule s = g.generate({.ranks = p, .microbatches = m}, g.default_wgrad);
        ps::SimulationResult a = ps::simulate(s);
        ps::SimulationResult b = ps::simulate(ps::lower_communication(s));
        ASSERT_FALSE(a.deadlock || b.deadlock);
        // Lowering places receives right before consumers: no time changes.
        EXPECT_NEAR(a.makespan, b.makespan, eps);
        EXPECT_NEAR(a.peak_memory_max, b.peak_memory_max, eps);
      }
}

TEST(Simulate, CommunicationLatencyDelaysCrossRankDependencies) {
  ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  ps::SimulationResult r0 = ps::simulate(s, ps::UniformCost{});
  ps::SimulationResult r1 = ps::simulate(s, ps::UniformCost{.comm = 0.5});
  // The first forward reaches the last rank after 3 hops, the first gradient returns in 3.
  EXPECT_NEAR(r1.timing[3][0].start, 3 * 1.0 + 3 * 0.5, eps);
  EXPECT_GT(r1.makespan, r0.makespan);
  // Lowered to sends/receives, the same latency applies on the receive.
  ps::SimulationResult r2 = ps::simulate(ps::lower_communication(s), ps::UniformCost{.comm = 0.5});
  EXPECT_NEAR(r2.makespan, r1.makespan, eps);
}

TEST(Simulate, RecomputeChargesMemoryAtBoundary) {
  using ps::Action;
  using ps::OpKind;
  ps::Schedule s;
  s.name = "ckpt";
  s.problem = {.ranks = 1, .stages = 1, .microbatches = 2};
  s.placement = ps::Placement::linear(1);
  s.ranks = {{Action::make(OpKind::F, 0, 0), Action::make(OpKind::F, 0, 1),
              Action::make(OpKind::R, 0, 0), Action::make(OpKind::B, 0, 0),
              Action::make(OpKind::B, 0, 1)}};
  ps::SimulationResult r = ps::simulate(s, ps::UniformCost{.boundary = 0.05});
  // F(ckpt) 0.05 + F 1.0, then R adds 0.95: peak 2.0; without R it would be 2.0 as well,
  // so check the curve: after the two forwards the rank holds 1.05.
  ASSERT_GE(r.ranks[0].memory.size(), 3u);
  EXPECT_NEAR(r.ranks[0].memory[1].value, 1.05, eps);
  EXPECT_NEAR(r.ranks[0].peak_memory, 2.0, eps);
  EXPECT_NEAR(r.makespan, 1 + 1 + 1 + 2 + 2, eps);
}

TEST(Simulate, ReportsDeadlockWithoutThrowing) {
  ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  std::swap(s.ranks[1][0], s.ranks[1][2]);  // rank 1: F1 first -> waits while rank 0 waits on B
  ps::Schedule t = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  t.ranks[0] = {ps::Action::make(ps::OpKind::F, 0, 0), ps::Action::make(ps::OpKind::B, 0, 0),
                ps::Action::make(ps::OpKind::F, 0, 1), ps::Action::make(ps::OpKind::B, 0, 1)};
  t.ranks[1] = {ps::Action::make(ps::OpKind::F, 1, 1), ps::Action::make(ps::OpKind::F, 1, 0),
                ps::Action::make(ps::OpKind::B, 1, 0), ps::Action::make(ps::OpKind::B, 1, 1)};
  ps::SimulationResult r = ps::simulate(t);
  EXPECT_TRUE(r.deadlock);
  EXPECT_NE(r.deadlock_report.find("rank 1 is stuck at position 0 (1F1)"), std::string::npos)
      << r.deadlock_report;
}

TEST(Simulate, PyTorchFilesSimulateWithoutDeadlock) {
  for (const char* f : {"zb1p_2rank_2stagep_compute.csv", "zb1p_2rank_2stagep_comms.csv",
                        "dualpipev_4rank_10mb.csv"}) {
    SCOPED_TRACE(f);
    ps::Schedule s = ps::read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + f);
    ps::SimulationResult r = ps::simulate(s);
    EXPECT_FALSE(r.deadlock) << r.deadlock_report;
    EXPECT_GT(r.makespan, 0);
    // Every rank ends holding nothing: each forward's activations were freed.
    for (const auto& rank : r.ranks)
      EXPECT_NEAR(rank.memory.back().value, 0.0, eps);
  }
  // PyTorch's DualPipeV file is the schedule pipesched generates: the same timing.
  ps::Schedule dv =
      ps::read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/dualpipev_4rank_10mb.csv");
  EXPECT_EQ(ps::simulate(dv).makespan,
            ps::simulate(ps::schedule::dualpipe_v({.ranks = 4, .microbatches = 10})).makespan);
}

// Ranks sharing compute units (analysis/shared_compute.hpp).

// With a processor per rank the sharing engine runs every schedule exactly as `simulate`:
// every action's start and end, the makespan, the bubble and the memory peak.
TEST(SharedCompute, AProcessorPerRankIsTheSimulationWithoutSharing) {
  const ps::UniformCost cost{.comm = 0.25, .w_memory = 0.5};
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {2, 4})
      for (int m : {2 * p, 3 * p + 1}) {
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const ps::Schedule s =
            ps::lower_communication(g.generate({.ranks = p, .microbatches = m}, g.default_wgrad));
        const ps::SimulationResult want = ps::simulate(s, cost);
        const ps::SimulationResult got = ps::detail::simulate_shared(s, cost, s.rank_count());
        ASSERT_FALSE(got.deadlock);
        EXPECT_NEAR(got.makespan, want.makespan, eps * want.makespan);
        EXPECT_NEAR(got.bubble_ratio, want.bubble_ratio, eps);
        EXPECT_NEAR(got.peak_memory_max, want.peak_memory_max, eps);
        for (int r = 0; r < s.rank_count(); ++r)
          for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
            EXPECT_NEAR(got.timing[r][i].start, want.timing[r][i].start, eps * want.makespan);
            EXPECT_NEAR(got.timing[r][i].end, want.timing[r][i].end, eps * want.makespan);
          }
        // A count of 0, or at least the ranks, is no sharing at all.
        EXPECT_EQ(ps::simulate(s, cost, ps::SharedCompute{0}).makespan, want.makespan);
        EXPECT_EQ(ps::simulate(s, cost, ps::SharedCompute{p + 3}).makespan, want.makespan);
      }
}

// 1F1B, two ranks, two microbatches (F = 1, B = 2) on one processor, worked by hand: while
// both ranks run, each runs at half speed.
TEST(SharedCompute, TwoRanksOnOneProcessorRunAtHalfSpeedWhileBothRun) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  const ps::SimulationResult r = ps::simulate(s, ps::UniformCost{}, ps::SharedCompute{1});
  ASSERT_FALSE(r.deadlock);
  auto at = [&](int rank, const char* action) {
    for (std::size_t i = 0; i < s.ranks[rank].size(); ++i)
      if (ps::to_string(s.ranks[rank][i]) == action) return r.timing[rank][i];
    ADD_FAILURE() << action << " is not on rank " << rank;
    return ps::ActionTiming{};
  };
  auto expect = [&](int rank, const char* action, double start, double end) {
    SCOPED_TRACE(action);
    EXPECT_NEAR(at(rank, action).start, start, eps);
    EXPECT_NEAR(at(rank, action).end, end, eps);
  };
  expect(0, "0F0", 0, 1);  // alone
  expect(0, "0F1", 1, 3);  // beside 1F0: both at half speed
  expect(1, "1F0", 1, 3);
  expect(1, "1B0", 3, 5);   // alone: rank 0 waits for its gradient
  expect(1, "1F1", 5, 7);   // beside 0B0
  expect(0, "0B0", 5, 9);   // half speed to 7, then beside 1B1
  expect(1, "1B1", 7, 10);  // half speed to 9, alone after
  expect(0, "0B1", 10, 12);
  EXPECT_NEAR(r.makespan, 12, eps);  // the processor never idles: all 12 units of work
  // Rank 0 computed 6 of the 12 (its F0, F1, B0, B1 alone); it waited for the processor or
  // its inputs the rest.
  EXPECT_NEAR(r.ranks[0].busy, 1 + 1 + 2 + 2, eps);
  EXPECT_NEAR(r.bubble_ratio, 0.5, eps);
}

// On C processors the step takes at least its work over C and at least the unshared step, and
// at most the unshared step stretched by ranks / C (no action runs slower than that); on one
// processor without transfers it is exactly the work (some rank can always run).
TEST(SharedCompute, TheStepIsBoundedByTheWorkAndTheStretch) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {2, 4, 8}) {
      SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p));
      ps::Schedule s = g.generate({.ranks = p, .microbatches = 2 * p}, g.default_wgrad);
      if (g.name == std::string_view("1f1b")) s = ps::checkpoint_full(s);
      const ps::UniformCost cost;
      const ps::SimulationResult alone = ps::simulate(s, cost);
      double work = 0;
      for (const ps::RankSummary& rs : alone.ranks)
        work += rs.busy;
      for (int units = 1; units < p; ++units) {
        SCOPED_TRACE("units=" + std::to_string(units));
        const ps::SimulationResult shared = ps::simulate(s, cost, ps::SharedCompute{units});
        ASSERT_FALSE(shared.deadlock);
        EXPECT_GE(shared.makespan, alone.makespan - eps * alone.makespan);
        EXPECT_GE(shared.makespan, work / units - eps * work);
        EXPECT_LE(shared.makespan, alone.makespan * p / units + eps * work);
        if (units == 1) {
          EXPECT_NEAR(shared.makespan, work, eps * work);
        }
        EXPECT_NEAR(shared.peak_memory_max, alone.peak_memory_max, eps);
      }
    }
  EXPECT_THROW(ps::simulate(ps::schedule::gpipe({.ranks = 2, .microbatches = 2}), ps::UniformCost{},
                            ps::SharedCompute{-1}),
               ps::invalid_argument);
}

}  // namespace test_simulate
