// Errors raised while executing a schedule.
#pragma once

#include <exception>
#include <string>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! An action failed on a rank: a layer threw, a receive timed out, a message was missing.
//! The message names the rank, the position in its list and the action. A pipeline's step
//! that throws it has been rolled back (`rolled_back()`, and the message ends by saying so):
//! no rank applied its update, so every rank keeps the parameters and optimizer state it had
//! before the step.
class execution_error : public error {
 public:
  //! An exception whose message is `what`, about `action` at `position` of `rank`'s list.
  execution_error(const Message& what, int rank, int position, Action action,
                  bool rolled_back = false)
      : error(what), rank_(rank), position_(position), action_(action), rolled_back_(rolled_back) {}
  //! The rank on which the action failed.
  int rank() const noexcept { return rank_; }
  //! The action's index in the rank's (lowered) list; -1 before the list starts, the list's
  //! size for the optimizer step after it.
  int position() const noexcept { return position_; }
  //! The action that failed.
  const Action& action() const noexcept { return action_; }
  //! True when the step this error ended left every rank's parameters and optimizer state as
  //! they were before it (a pipeline's steps commit on every rank or on none).
  bool rolled_back() const noexcept { return rolled_back_; }
  void throw_after(const Message& prefix) const override {
    throw execution_error(prefix + message(), rank_, position_, action_, rolled_back_);
  }

 private:
  int rank_;
  int position_;
  Action action_;
  bool rolled_back_;
};

//! A receive gave up: no message with its key came within the timeout.
class receive_timeout : public error {
 public:
  using error::error;
  void throw_after(const Message& prefix) const override {
    throw receive_timeout(prefix + message());
  }
};

//! A receive was woken because another rank failed and the step is being stopped.
class transport_aborted : public error {
 public:
  using error::error;
  void throw_after(const Message& prefix) const override {
    throw transport_aborted(prefix + message());
  }
};

namespace detail {

//! What a rolled-back step's error adds to the failing rank's message.
inline constexpr const char* rolled_back_text =
    "; the step was rolled back: no rank applied its update, every rank keeps its previous "
    "parameters and optimizer state";

//! `e` as the error of a step that was rolled back (its message saying so).
inline execution_error rolled_back(const execution_error& e) {
  if (e.rolled_back()) return e;
  return execution_error(std::string(e.what()) + rolled_back_text, e.rank(), e.position(),
                         e.action(), true);
}

//! What is said of an exception that is not a std::exception (`throw 42`).
inline constexpr const char* non_standard_exception =
    "a non-standard exception (not derived from std::exception)";

//! The message of the exception being handled (call inside a catch block): its what(), or
//! `non_standard_exception` when it is not a std::exception.
inline std::string current_exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return non_standard_exception;
  }
}

}  // namespace detail

}  // namespace pipesched
