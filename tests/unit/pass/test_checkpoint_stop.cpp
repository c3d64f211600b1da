// The checkpoint passes under a StopToken: a deadline already past or a flag already set stops
// selective and Mario checkpointing before any work (work_stopped, nothing returned), a token
// that cannot stop changes nothing, and (Timed*: wall clock) a deadline passing in the middle
// of a long pass stops it within a fraction of a second.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../sanitizer_slowdown.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/stop_token.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_checkpoint_stop {

namespace ps = pipesched;

namespace {

const ps::UniformCost cost{.f = 1, .b = 2, .w = 1, .r = 1, .boundary = 0.05};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// 1F1B whose ranks hold up to `ranks` microbatches; a budget of 2 checkpoints most of them.
ps::Schedule long_base(int ranks, int microbatches) {
  return ps::schedule::one_f_one_b({.ranks = ranks, .microbatches = microbatches});
}

}  // namespace

TEST(CheckpointStop, TokensThatNeverStopChangeNothing) {
  const ps::Schedule base = long_base(4, 16);
  const ps::MemoryBudget budget{.all = 2.0};
  std::atomic<bool> clear{false};
  const ps::StopToken later = ps::StopToken::after(3600, &clear);
  EXPECT_FALSE(later.stop_requested());
  EXPECT_TRUE(later.stop_possible());
  EXPECT_FALSE(ps::StopToken{}.stop_possible());
  std::vector<char> plain, stopped;
  EXPECT_EQ(
      ps::checkpoint_selective(base, cost, budget, &plain),
      ps::checkpoint_selective(base, cost, budget, &stopped, ps::RecomputeTiming::Late, later));
  EXPECT_EQ(plain, stopped);
  EXPECT_EQ(ps::checkpoint_mario(base, cost, budget),
            ps::checkpoint_mario(base, cost, budget, {}, later));
}

TEST(CheckpointStop, APastDeadlineOrASetFlagStopsSelectiveAndMarioBeforeAnyWork) {
  // Large enough that either pass takes seconds when it runs (TimedCheckpointStop).
  const ps::Schedule base = long_base(16, 4096);
  const ps::MemoryBudget budget{.all = 2.0};
  const ps::StopToken past = ps::StopToken::after(0);
  EXPECT_TRUE(past.stop_requested());
  std::atomic<bool> flag{true};
  const ps::StopToken set(&flag);
  for (const ps::StopToken& token : {past, set}) {
    EXPECT_THROW(
        ps::checkpoint_selective(base, cost, budget, nullptr, ps::RecomputeTiming::Late, token),
        ps::work_stopped);
    EXPECT_THROW(ps::checkpoint_mario(base, cost, budget, {}, token), ps::work_stopped);
  }
  // The message says what was stopped and that nothing is returned.
  try {
    ps::checkpoint_selective(base, cost, budget, nullptr, ps::RecomputeTiming::Late, past);
  } catch (const ps::work_stopped& e) {
    EXPECT_NE(std::string(e.what()).find("selective checkpointing was stopped"), std::string::npos)
        << e.what();
  }
}

TEST(TimedCheckpointStop, APastDeadlineReturnsPromptlyFromALongPass) {
  const ps::Schedule base = long_base(16, 4096);
  const ps::MemoryBudget budget{.all = 2.0};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(ps::checkpoint_selective(base, cost, budget, nullptr, ps::RecomputeTiming::Late,
                                        ps::StopToken::after(0)),
               ps::work_stopped);
  EXPECT_THROW(ps::checkpoint_mario(base, cost, budget, {}, ps::StopToken::after(0)),
               ps::work_stopped);
  EXPECT_LT(seconds_since(t0), 0.5 * sanitizer_slowdown);
}

TEST(TimedCheckpointStop, ADeadlineInTheMiddleStopsEachPassWithinAFractionOfASecond) {
  const ps::Schedule base = long_base(16, 4096);
  const ps::MemoryBudget budget{.all = 2.0};
  // Each pass runs for seconds on this base; stopped at 0.3 s it is over well before 1.5 s.
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "selective" : "mario");
    const auto t0 = std::chrono::steady_clock::now();
    const ps::StopToken token = ps::StopToken::after(0.3);
    if (pass == 0)
      EXPECT_THROW(
          ps::checkpoint_selective(base, cost, budget, nullptr, ps::RecomputeTiming::Late, token),
          ps::work_stopped);
    else
      EXPECT_THROW(ps::checkpoint_mario(base, cost, budget, {}, token), ps::work_stopped);
    EXPECT_LT(seconds_since(t0), 0.3 + 1.2 * sanitizer_slowdown);
  }
  // A flag set from another thread stops it the same way.
  std::atomic<bool> flag{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    flag = true;
  });
  EXPECT_THROW(ps::checkpoint_selective(base, cost, budget, nullptr, ps::RecomputeTiming::Late,
                                        ps::StopToken(&flag)),
               ps::work_stopped);
  setter.join();
  EXPECT_LT(seconds_since(t0), 0.3 + 1.2 * sanitizer_slowdown);
}

}  // namespace test_checkpoint_stop
