// Receive deadlines from timeouts, shared by every transport and by the process pipelines'
// agreement: a timeout too long for the steady clock means "no deadline" (the clock's
// largest time point) instead of overflowing into the past; and the check that refuses a
// timeout that cannot mean anything (zero, negative, NaN, under a millisecond) before a step
// starts.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"

namespace pipesched::detail {

//! The deadline of a wait that has none: the steady clock's largest time point.
inline constexpr std::chrono::steady_clock::time_point no_deadline =
    std::chrono::steady_clock::time_point::max();

//! The steady-clock time `timeout` after `now`, saturated: a timeout at or past what the clock
//! can still count from `now` (hours::max(), infinity, about 9.2e9 s for a nanosecond clock)
//! gives `no_deadline`. Zero, negative and NaN give `now` (the wait ends at once); the executor
//! refuses them, and timeouts under a millisecond, before a step (`check_receive_timeout`).
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::duration<double> timeout,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  using clock = std::chrono::steady_clock;
  // Compare in the clock's own ticks, as doubles (which cannot overflow), before converting:
  // duration_cast of a value past the tick type's range is undefined, and in practice lands
  // far in the past, so every wait would time out at once.
  const double ticks =
      std::chrono::duration_cast<std::chrono::duration<double, clock::period>>(timeout).count();
  if (!(ticks > 0)) return now;
  const clock::rep room = (no_deadline - now).count();  // ticks left before the clock's end
  // `room` rounded to a double may exceed it; a `ticks` below that rounded value is at most
  // the double just under it, which is below `room` itself, so the conversion fits.
  if (!(ticks < static_cast<double>(room))) return no_deadline;
  return now + clock::duration(static_cast<clock::rep>(ticks));
}

//! Seconds as the messages print them: "0.3", "60", "inf", "nan".
inline std::string seconds_text(double s) {
  return format_general(s);
}

//! The shortest receive timeout a pipeline accepts, in seconds: 1 ms. A shorter one cannot
//! cover even a thread's wake-up or one poll of a transport, so every step would fail.
inline constexpr double min_receive_timeout_s = 1e-3;

//! Throws invalid_problem, naming `who`, the value and the accepted range, unless `timeout` is
//! at least `min_receive_timeout_s` (infinity included: no deadline). Zero, negative, NaN and
//! sub-millisecond timeouts (1e-300 s) are refused.
inline void check_receive_timeout(const char* who, std::chrono::duration<double> timeout) {
  if (timeout.count() >= min_receive_timeout_s) return;  // false for NaN too
  throw invalid_problem(std::string(who) + ": receive_timeout is " + seconds_text(timeout.count()) +
                        " s; give a timeout of at least " + seconds_text(min_receive_timeout_s) +
                        " s (1 ms), or infinity (or any duration too long for the clock such as "
                        "std::chrono::hours::max()) to wait without a deadline.");
}

}  // namespace pipesched::detail
