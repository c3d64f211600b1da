// When long work should give up: StopToken, a wall-clock deadline and a flag (set by another
// thread or a signal handler) that the tuner and the expensive passes (selective and Mario
// checkpointing) poll as they go, and work_stopped, what a pass throws when it gives up.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! Thrown by work that a StopToken stopped before it finished: what it would have returned is
//! not known, so a caller discards it (the tuner never reports a candidate cut this way).
class work_stopped : public error {
 public:
  //! An exception whose message is `what`.
  explicit work_stopped(const Message& what) : error(what) {}
  //! An exception whose message is the plain text `what`.
  explicit work_stopped(const std::string& what) : error(what) {}
  void throw_after(const Message& prefix) const override { throw work_stopped(prefix + message()); }
};

//! When to give up: a steady-clock deadline, a flag, both or neither (the default never
//! stops). A value, cheap to copy and to poll (an atomic load and a clock read); the flag, if
//! any, must outlive every copy. `std::atomic<bool>` is lock-free wherever pipesched builds,
//! so a signal handler may set the flag.
class StopToken {
 public:
  using Clock = std::chrono::steady_clock;  //!< the clock of the deadline

  //! A token that never stops.
  StopToken() = default;
  //! Stops at `deadline`, or once `*flag` is true (a null flag: the deadline only).
  explicit StopToken(Clock::time_point deadline, const std::atomic<bool>* flag = nullptr)
      : deadline_(deadline), limited_(true), flag_(flag) {}
  //! Stops once `*flag` is true (null: never).
  explicit StopToken(const std::atomic<bool>* flag) : flag_(flag) {}

  //! Stops `seconds` from now (0 or less: already stopped), or once `*flag` is true.
  static StopToken after(double seconds, const std::atomic<bool>* flag = nullptr) {
    return StopToken(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds > 0 ? seconds : 0)),
                     flag);
  }

  //! True once the deadline has passed or the flag is set.
  bool stop_requested() const {
    if (flag_ && flag_->load(std::memory_order_relaxed)) return true;
    return limited_ && Clock::now() >= deadline_;
  }
  //! True where this token can stop at all (a deadline or a flag).
  bool stop_possible() const { return limited_ || flag_; }
  //! Throws work_stopped, naming `what` ("selective checkpointing"), once stop_requested().
  void throw_if_stopped(const char* what) const {
    if (stop_requested())
      throw work_stopped(std::string(what) +
                         " was stopped before it finished (its deadline passed or it was "
                         "interrupted); its result is discarded.");
  }

 private:
  Clock::time_point deadline_{};
  bool limited_ = false;
  const std::atomic<bool>* flag_ = nullptr;
};

}  // namespace pipesched
