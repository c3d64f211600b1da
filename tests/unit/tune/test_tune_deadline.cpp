// The tuner's time limit and stop flag: a flag already set stops the search before any
// candidate, and (Timed*: wall clock) the limit holds within a second or so even where one
// selective or Mario candidate alone would take far longer; the candidates it cuts are
// dropped, so every plan returned is complete and reproduces its step time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../sanitizer_slowdown.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/tune/tune.hpp"

namespace test_tune_deadline {

namespace ps = pipesched;
using ps::CheckpointMode;

namespace {

const ps::UniformCost cost{.f = 1, .b = 2, .w = 1, .r = 1, .boundary = 0.05};

// One configuration (1F1B over 16 ranks, 4096 microbatches) whose base is over the budget:
// phase one (base and full checkpointing) takes a fraction of a second, each of its
// selective and Mario candidates seconds.
ps::tuning::Request long_candidates() {
  ps::tuning::Request r{.ranks = 16, .global_batch = 4096};
  r.bases = {"1f1b"};
  r.budget = ps::MemoryBudget{.all = 2.0};
  r.checkpoints = {CheckpointMode::None, CheckpointMode::Selective, CheckpointMode::Mario};
  r.threads = 2;
  return r;
}

// A plan that is whole: valid, within its budget, and simulating to its step time.
void expect_complete(const ps::tuning::Plan& p) {
  SCOPED_TRACE(ps::describe(p));
  const ps::ValidationReport rep = ps::check(p.schedule);
  EXPECT_TRUE(rep.ok()) << rep.summary();
  const ps::SimulationResult sim = ps::simulate(p.schedule, cost);
  ASSERT_FALSE(sim.deadlock);
  EXPECT_DOUBLE_EQ(sim.makespan, p.makespan);
  for (std::size_t r = 0; r < sim.ranks.size(); ++r)
    EXPECT_LE(sim.ranks[r].peak_memory, p.budget_per_rank[r] + 1e-9) << "rank " << r;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(TuneStop, AFlagSetBeforeTheSearchStopsItBeforeAnyCandidate) {
  ps::tuning::Request r = long_candidates();
  std::atomic<bool> flag{true};
  r.stop_flag = &flag;
  const ps::tuning::Result res = ps::tune(r, cost);
  EXPECT_TRUE(res.cut);
  EXPECT_TRUE(res.interrupted);
  EXPECT_EQ(res.candidates_tried, 0);
  EXPECT_GT(res.candidates_total, 0);
  EXPECT_FALSE(res.best);
}

TEST(TuneStop, AFlagNeverSetChangesNothing) {
  ps::tuning::Request r{.ranks = 4, .global_batch = 16};
  r.budget = ps::MemoryBudget{.all = 2.0};
  r.threads = 1;
  const ps::tuning::Result plain = ps::tune(r, cost);
  std::atomic<bool> flag{false};
  r.stop_flag = &flag;
  const ps::tuning::Result flagged = ps::tune(r, cost);
  EXPECT_FALSE(flagged.cut);
  EXPECT_FALSE(flagged.interrupted);
  EXPECT_EQ(flagged.candidates_tried, flagged.candidates_total);
  ASSERT_TRUE(plain.best && flagged.best);
  EXPECT_EQ(plain.best->schedule, flagged.best->schedule);
  EXPECT_EQ(plain.best->makespan, flagged.best->makespan);
}

TEST(TimedTuneDeadline, TheLimitHoldsWhenOneCandidateOutlastsItAndCutCandidatesAreDropped) {
  ps::tuning::Request r = long_candidates();
  r.time_limit = 2;  // phase one takes a fraction of it, even on a busy machine
  const auto t0 = std::chrono::steady_clock::now();
  const ps::tuning::Result res = ps::tune(r, cost);
  const double wall = seconds_since(t0);
  EXPECT_LT(wall, r.time_limit + 2 * sanitizer_slowdown);
  EXPECT_LE(res.seconds, wall);
  EXPECT_TRUE(res.cut);
  EXPECT_FALSE(res.interrupted);
  EXPECT_LT(res.candidates_tried, res.candidates_total);
  // The selective and Mario candidates were cut: neither is reported, not even as a pair's
  // best; full checkpointing, which phase one finished, is the plan.
  for (CheckpointMode m : {CheckpointMode::Selective, CheckpointMode::Mario}) {
    const ps::tuning::Baseline* b = res.baseline("1f1b", m);
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->plan) << ps::describe(*b->plan);
  }
  EXPECT_FALSE(res.best_mario);
  ASSERT_TRUE(res.best);
  EXPECT_EQ(res.best->checkpoint, CheckpointMode::Full);
  expect_complete(*res.best);
  for (const ps::tuning::Point& p : res.evaluated)
    EXPECT_TRUE(p.checkpoint == "none" || p.checkpoint == "full") << p.checkpoint;
}

TEST(TimedTuneDeadline, AFlagSetDuringALongCandidateEndsTheSearchPromptly) {
  ps::tuning::Request r = long_candidates();
  std::atomic<bool> flag{false};
  r.stop_flag = &flag;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    flag = true;
  });
  const ps::tuning::Result res = ps::tune(r, cost);
  setter.join();
  EXPECT_LT(seconds_since(t0), 2 + 2 * sanitizer_slowdown);
  EXPECT_TRUE(res.cut);
  EXPECT_TRUE(res.interrupted);
  ASSERT_TRUE(res.best);
  expect_complete(*res.best);
}

}  // namespace test_tune_deadline
