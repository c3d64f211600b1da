// Two helpers of the executor and its transports: deadline_after (a receive's deadline from
// its timeout, saturating where the clock ends) and schedule_fingerprint (what processes
// compare to be sure they run the same schedule).
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>

#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/fingerprint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"

namespace test_deadline_fingerprint {

namespace ps = pipesched;

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

TEST(ExecDeadline, OrdinaryTimeoutsAddToNow) {
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(ps::detail::deadline_after(Seconds(1.5), now), now + std::chrono::milliseconds(1500));
  EXPECT_EQ(ps::detail::deadline_after(std::chrono::hours(24 * 365), now),
            now + std::chrono::hours(24 * 365));
  EXPECT_EQ(ps::detail::deadline_after(std::chrono::milliseconds(250), now),
            now + std::chrono::milliseconds(250));
}

TEST(ExecDeadline, TimeoutsPastTheClockSaturate) {
  const Clock::time_point now = Clock::now();
  for (const Seconds t :
       {Seconds(std::chrono::hours::max()), Seconds(std::numeric_limits<double>::infinity()),
        Seconds(1e10), Seconds(std::numeric_limits<double>::max())}) {
    SCOPED_TRACE(std::to_string(t.count()) + " s");
    EXPECT_EQ(ps::detail::deadline_after(t, now), ps::detail::no_deadline);
  }
  // Just short of the clock's end is still a deadline, at or before its last tick.
  const Clock::duration room = Clock::time_point::max() - now;
  const Seconds almost = Seconds(room) * 0.999;
  const Clock::time_point d = ps::detail::deadline_after(almost, now);
  EXPECT_GT(d, now + std::chrono::duration_cast<Clock::duration>(almost * 0.99));
  EXPECT_LE(d, ps::detail::no_deadline);
  // A timeout that fits the tick count but not once added to `now` saturates too.
  EXPECT_EQ(ps::detail::deadline_after(Seconds(room) + Seconds(1), now), ps::detail::no_deadline);
  // At the very edge: whatever it gives is a valid time point no earlier than now.
  EXPECT_GE(ps::detail::deadline_after(Seconds(room), now), now);
}

TEST(ExecDeadline, NonPositiveAndNanEndAtOnce) {
  const Clock::time_point now = Clock::now();
  for (const Seconds t :
       {Seconds(0), Seconds(-1), Seconds(-std::numeric_limits<double>::infinity()),
        Seconds(std::numeric_limits<double>::quiet_NaN())})
    EXPECT_EQ(ps::detail::deadline_after(t, now), now);
}

TEST(ExecDeadline, CheckNamesTheValue) {
  EXPECT_NO_THROW(ps::detail::check_receive_timeout("X", Seconds(1e-3)));
  EXPECT_THROW(ps::detail::check_receive_timeout("X", Seconds(1e-6)), ps::invalid_problem);
  EXPECT_THROW(ps::detail::check_receive_timeout("X", Seconds(1e-300)), ps::invalid_problem);
  EXPECT_NO_THROW(
      ps::detail::check_receive_timeout("X", Seconds(std::numeric_limits<double>::infinity())));
  try {
    ps::detail::check_receive_timeout("X", Seconds(-2));
    FAIL() << "no error";
  } catch (const ps::invalid_problem& e) {
    EXPECT_EQ(std::string(e.what()).rfind("X: receive_timeout is -2 s; ", 0), 0u) << e.what();
  }
}

TEST(ExecFingerprint, SameScheduleSameFingerprintWhateverItsForm) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  EXPECT_EQ(ps::schedule_fingerprint(s), ps::schedule_fingerprint(s));
  ps::Schedule renamed = s;
  renamed.name = "another name";
  EXPECT_EQ(ps::schedule_fingerprint(renamed), ps::schedule_fingerprint(s));
  // What runs is the lowered form: a schedule lowered beforehand runs the same.
  EXPECT_EQ(ps::schedule_fingerprint(ps::lower_communication(s)), ps::schedule_fingerprint(s));
  // Explicit idle slots change nothing that runs.
  ps::Schedule idle = s;
  idle.ranks[2].insert(idle.ranks[2].begin() + 1, ps::Action::idle());
  EXPECT_EQ(ps::schedule_fingerprint(idle), ps::schedule_fingerprint(s));
}

TEST(ExecFingerprint, AnyDifferenceInWhatRunsChangesIt) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const std::uint64_t f = ps::schedule_fingerprint(s);
  EXPECT_NE(ps::schedule_fingerprint(ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 10})),
            f);
  EXPECT_NE(ps::schedule_fingerprint(ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8})),
            f);
  EXPECT_NE(ps::schedule_fingerprint(ps::checkpoint_full(s)), f);
  EXPECT_NE(
      ps::schedule_fingerprint(ps::schedule::interleaved_1f1b({.ranks = 4, .microbatches = 8})), f);
  // Two actions of one rank swapped.
  ps::Schedule swapped = s;
  std::swap(swapped.ranks[3][0], swapped.ranks[3][1]);
  EXPECT_NE(ps::schedule_fingerprint(swapped), f);
  // One field of one action.
  ps::Schedule moved = s;
  moved.ranks[1].back().microbatch += 1;
  EXPECT_NE(ps::schedule_fingerprint(moved), f);
  // The same lists under another problem (slices) or placement.
  ps::Schedule sliced = s;
  sliced.problem.slices = 2;
  EXPECT_NE(ps::schedule_fingerprint(sliced), f);
  ps::Schedule placed = s;
  placed.placement = ps::Placement::from_map({0, 1, 3, 2}, 4);
  EXPECT_NE(ps::schedule_fingerprint(placed), f);
  // An action moved from the end of one rank's list to the start of the next one's.
  ps::Schedule shifted = s;
  shifted.ranks[2].insert(shifted.ranks[2].begin(), shifted.ranks[1].back());
  shifted.ranks[1].pop_back();
  EXPECT_NE(ps::schedule_fingerprint(shifted), f);
}

}  // namespace

}  // namespace test_deadline_fingerprint
