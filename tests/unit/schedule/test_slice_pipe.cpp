// Slice-level schedules: seq-1f1b, slice-pipe (MEPipe's SVPP) and GPipe over slices.
#include <gtest/gtest.h>

#include <map>

#include <algorithm>
#include <string>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"

namespace test_slice_pipe {

namespace ps = pipesched;

namespace {

int forwards_before_first_backward(const std::vector<ps::Action>& list) {
  int n = 0;
  for (const ps::Action& a : list) {
    if (ps::is_input_backward(a.kind)) break;
    n += a.kind == ps::OpKind::F;
  }
  return n;
}

}  // namespace

TEST(SlicePipe, EveryGridPointValidatesAndCountsAreExact) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m)
      for (int k : {1, 2, 3, 4, 8})
        for (int v = 1; v <= 3; ++v)
          for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
            SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                         " k=" + std::to_string(k) + " v=" + std::to_string(v));
            // Every count is taken: rounds of whole microbatches, at least g units each.
            const ps::Schedule s = ps::schedule::slice_pipe(
                {.ranks = p, .stages = p * v, .microbatches = m, .slices = k}, wg);
            ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
            ASSERT_TRUE(ps::check(ps::lower_communication(s)).ok());
            std::size_t expected =
                static_cast<std::size_t>(p) * v * m * k * (wg == ps::WGradMode::Split ? 3 : 2);
            EXPECT_EQ(s.action_count(), expected);
          }
}

// The counts a group size used to refuse (p = 20, M = 40, K = 8: groups of 24 units) run in
// rounds of whole microbatches, the larger first: 320 units in 13 rounds of 24 or 32.
TEST(SlicePipe, CountsOutsideWholeGroupsRunInRounds) {
  const std::vector<int> rounds = ps::schedule::detail::slice_rounds(20, 8, 40);
  ASSERT_EQ(rounds.size(), 13u);
  EXPECT_EQ(rounds.front(), 32);
  EXPECT_EQ(rounds.back(), 24);
  int units = 0;
  for (int r : rounds) {
    EXPECT_EQ(r % 8, 0);
    EXPECT_GE(r, 24);
    units += r;
  }
  EXPECT_EQ(units, 320);
  const ps::Schedule s = ps::schedule::slice_pipe({.ranks = 20, .microbatches = 40, .slices = 8});
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  // Where groups were whole, the rounds are those groups: the schedule is unchanged.
  EXPECT_EQ(ps::schedule::detail::slice_rounds(16, 8, 32), std::vector<int>(16, 16));
  for (int p : {3, 5, 7})
    for (int m : {5, 7, 11, 13})
      for (int k : {2, 3})
        for (int v : {2, 3}) {
          const ps::Schedule t = ps::schedule::slice_pipe(
              {.ranks = p, .stages = p * v, .microbatches = m, .slices = k});
          ASSERT_TRUE(ps::check(t).ok()) << "p=" << p << " m=" << m << " k=" << k << " v=" << v;
        }
}

TEST(SeqOneFOneB, WarmupAndBubbleAreThePublishedOnes) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; m += 3)
      for (int k : {1, 2, 4, 8}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " k=" + std::to_string(k));
        ps::Schedule s = ps::schedule::seq_1f1b({.ranks = p, .microbatches = m, .slices = k});
        ASSERT_TRUE(ps::check(s).ok());
        for (int r = 0; r < p; ++r) {
          // The warm-up is min(p − r − 2 + k, m·k); the first backward follows one more
          // forward when any is left.
          const int warmup = std::min(p - r - 2 + k, m * k);
          EXPECT_EQ(forwards_before_first_backward(s.ranks[r]), std::min(warmup + 1, m * k));
        }
        // Uniform slice costs: bubble (p − 1)/(k·m + p − 1).
        EXPECT_NEAR(ps::simulate(s).bubble_ratio, double(p - 1) / (k * m + p - 1), 1e-9);
      }
  // K = 1 is 1F1B.
  EXPECT_EQ(ps::schedule::seq_1f1b({.ranks = 4, .microbatches = 8}).ranks,
            ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}).ranks);
}

// MEPipe's memory claim with slice-pipe's defaults (UniformCost defaults, p = 16, m = 2p).
TEST(SlicePipe, DefaultsCutPeakMemoryWithoutASlowerStep) {
  const int p = 16, m = 32;
  const ps::SimulationResult base =
      ps::simulate(ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}));
  for (auto [k, cut] : {std::pair{4, 0.70}, std::pair{8, 0.80}}) {
    SCOPED_TRACE("slices " + std::to_string(k));
    const ps::SimulationResult r =
        ps::simulate(ps::schedule::slice_pipe({.ranks = p, .microbatches = m, .slices = k}));
    EXPECT_LE(r.peak_memory_max, (1 - cut) * base.peak_memory_max);
    EXPECT_LE(r.makespan, base.makespan);
    // And below seq-1f1b's p − 1 + k slices on rank 0, with no slower step.
    const ps::SimulationResult seq =
        ps::simulate(ps::schedule::seq_1f1b({.ranks = p, .microbatches = m, .slices = k}));
    EXPECT_NEAR(seq.ranks[0].peak_memory, double(p - 1 + k) / k, 1e-9);
    EXPECT_LT(r.peak_memory_max, seq.peak_memory_max);
    EXPECT_LE(r.makespan, seq.makespan);
  }
}

TEST(SlicePipe, WarmupKnob) {
  const ps::Problem pr{.ranks = 8, .microbatches = 16, .slices = 4};
  const ps::Schedule def = ps::schedule::slice_pipe(pr);
  const int w = forwards_before_first_backward(def.ranks[0]) - 1;
  EXPECT_EQ(w, (2 - 1) * 8 + (4 - 1) + (8 - 1));
  EXPECT_EQ(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = w}).ranks, def.ranks);
  // Fewer warm-up forwards: less memory, a slower step; more: the reverse.
  const ps::SimulationResult r_def = ps::simulate(def);
  const ps::SimulationResult r_small =
      ps::simulate(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = w - 7}));
  EXPECT_LT(r_small.peak_memory_max, r_def.peak_memory_max);
  EXPECT_GE(r_small.makespan, r_def.makespan);
  EXPECT_THROW(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = 0}),
               ps::invalid_problem);
  // Below (V − 1)·g + K − 1 = 11 SVPP's own order cannot run; groups of one microbatch can,
  // down to V·K − 1 = 7.
  EXPECT_THROW(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = 6}),
               ps::invalid_problem);
  for (int warm = 7; warm <= 40; ++warm)
    EXPECT_TRUE(
        ps::check(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = warm})).ok())
        << warm;
  // 9 units on 4 ranks (groups of 6): one round of 9, whose size sets the least warm-up.
  const ps::Schedule odd = ps::schedule::slice_pipe({.ranks = 4, .microbatches = 3, .slices = 3});
  EXPECT_TRUE(ps::check(odd).ok());
  EXPECT_EQ(forwards_before_first_backward(odd.ranks[0]) - 1, (2 - 1) * 9 + (3 - 1) + (4 - 1));
}

// MEPipe's memory/bubble knob trades gradually: p = 16, K = 8, M = 32 (the fixed alternation
// took 2.85x at two fewer warm-up forwards than the default and 14x at 24).
TEST(SlicePipe, FewerWarmupForwardsCostMemoryGradually) {
  const ps::Problem pr{.ranks = 16, .microbatches = 32, .slices = 8};
  const ps::Schedule def = ps::schedule::slice_pipe(pr);
  const int most = ps::warmup_of(def, 0);
  ASSERT_EQ(most, 38);
  const ps::SimulationResult d = ps::simulate(def);
  std::map<int, ps::SimulationResult> at;
  at.emplace(most, d);
  for (int w = most - 1; w >= 15; --w) {
    SCOPED_TRACE("warmup " + std::to_string(w));
    const ps::Schedule s = ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = w});
    EXPECT_EQ(s.name, "slice-pipe");
    ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
    EXPECT_EQ(ps::warmup_of(s, 0), w);
    const ps::SimulationResult r = ps::simulate(s);
    // Rank 0 holds at most w + 1 units (1/16 of a microbatch each).
    EXPECT_LE(r.ranks[0].peak_memory, (w + 1) / 16.0 + 1e-9);
    const ps::SimulationResult& up = at.at(w + 1);
    EXPECT_LE(r.peak_memory_max, up.peak_memory_max + 1e-9);  // monotone in memory
    EXPECT_GE(r.makespan, up.makespan - 1e-9);                // and in time
    // Two fewer warm-up forwards cost at most 10 % down to SVPP's own floor, 23.
    if (w + 2 <= most && w >= 23) {
      EXPECT_LE(r.makespan, 1.10 * at.at(w + 2).makespan);
    }
    at.emplace(w, r);
  }
  EXPECT_LE(at.at(36).makespan, 1.06 * d.makespan);
  EXPECT_LE(at.at(23).makespan, 1.45 * d.makespan);
  EXPECT_LT(at.at(23).peak_memory_max, 0.62 * d.peak_memory_max);
  EXPECT_LE(at.at(15).makespan, 2.10 * d.makespan);
  EXPECT_LE(at.at(15).peak_memory_max, 0.42 * d.peak_memory_max);
  // Below what any variant can run, a sentence.
  try {
    ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = 14});
    FAIL() << "warmup 14 was accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("warmup = 14 cannot run"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most the default 38"), std::string::npos) << e.what();
  }
}

// Every warm-up from the default down to the least that runs validates, with split backwards
// too, and where SVPP's own order cannot go below its floor, the out-of-order variant may.
TEST(SlicePipe, EveryWarmupDownToTheLeastThatRunsValidates) {
  struct Case {
    int p, m, k;
  };
  for (const Case& c : {Case{4, 8, 4}, Case{8, 16, 4}, Case{4, 6, 2}, Case{6, 9, 3}})
    for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
      const ps::Problem pr{.ranks = c.p, .microbatches = c.m, .slices = c.k};
      const int most = ps::warmup_of(ps::schedule::slice_pipe(pr, wg), 0);
      int ran = 0;
      for (int w = most - 1; w >= 1; --w) {
        SCOPED_TRACE("p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) +
                     " k=" + std::to_string(c.k) + " warmup " + std::to_string(w));
        ps::Schedule s;
        try {
          s = ps::schedule::slice_pipe(pr, wg, {.warmup = w});
        } catch (const ps::invalid_problem& e) {
          EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
          break;
        }
        ++ran;
        ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
        EXPECT_EQ(ps::warmup_of(s, 0), w);
      }
      EXPECT_GT(ran, 0);
    }
}

TEST(GPipeOverSlices, IsTeraPipesOrder) {
  ps::Schedule s = ps::schedule::gpipe({.ranks = 2, .microbatches = 2, .slices = 2});
  ASSERT_TRUE(ps::check(s).ok());
  std::string got;
  for (const ps::Action& a : s.ranks[1])
    got += ps::to_string(a) + " ";
  EXPECT_EQ(got, "1F0 1F0.1 1F1 1F1.1 1B0.1 1B0 1B1.1 1B1 ");
  // Slices shorten the fill: the makespan drops as K grows (uniform slice costs).
  const double t1 = ps::simulate(ps::schedule::gpipe({.ranks = 4, .microbatches = 4})).makespan;
  const double t4 =
      ps::simulate(ps::schedule::gpipe({.ranks = 4, .microbatches = 4, .slices = 4})).makespan;
  EXPECT_LT(t4, t1);
}

TEST(SlicePipe, WithinABudgetTakesTheLargestWarmupThatFits) {
  const ps::Problem pr{.ranks = 8, .microbatches = 16, .slices = 4};
  const ps::UniformCost cost{};
  const double def_peak = ps::simulate(ps::schedule::slice_pipe(pr)).peak_memory_max;
  // A generous budget keeps the default; a tight one lowers the warm-up until it fits.
  EXPECT_EQ(ps::schedule::slice_pipe_within(pr, ps::WGradMode::Fused, cost,
                                            std::vector<double>(8, def_peak))
                .ranks,
            ps::schedule::slice_pipe(pr).ranks);
  const double tight = def_peak * 0.75;
  ps::Schedule s = ps::schedule::slice_pipe_within(pr, ps::WGradMode::Fused, cost,
                                                   std::vector<double>(8, tight));
  ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_LE(r.peak_memory_max, tight + 1e-9);
  EXPECT_THROW(
      ps::schedule::slice_pipe_within(pr, ps::WGradMode::Fused, cost, std::vector<double>(8, 0.5)),
      ps::invalid_problem);
}

}  // namespace test_slice_pipe
