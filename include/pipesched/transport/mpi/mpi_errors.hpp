// What the MPI transport reports: the errors it throws and the failure notice a failing rank
// sends every other one.
#pragma once

#include <string>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! An MPI call returned an error; the message names the call and the MPI error text.
class mpi_error : public error {
 public:
  using error::error;
  void throw_after(const Message& prefix) const override { throw mpi_error(prefix + message()); }
};

//! The processes of one pipeline were started with different schedules: `first_rank()` (0)
//! and `second_rank()` (the lowest rank whose schedule differs from rank 0's) hold schedules
//! with different fingerprints (`schedule_fingerprint`). Every process throws it, alike, when
//! its transport is built.
class schedule_mismatch : public invalid_problem {
 public:
  //! An exception whose message is `what`, about ranks `first` and `second`.
  schedule_mismatch(const Message& what, int first, int second)
      : invalid_problem(what), first_(first), second_(second) {}
  void throw_after(const Message& prefix) const override {
    throw schedule_mismatch(prefix + message(), first_, second_);
  }
  //! The rank whose schedule the others are compared with (0).
  int first_rank() const noexcept { return first_; }
  //! The lowest rank whose schedule differs from first_rank()'s.
  int second_rank() const noexcept { return second_; }

 private:
  int first_;
  int second_;
};

//! What a failing rank tells every other rank: who failed, where, and why.
struct FailureNotice {
  int rank = -1;        //!< the rank that failed
  int position = -1;    //!< position in its (lowered) list; -1 when outside the list
  Action action{};      //!< the action at that position
  std::string message;  //!< the failing rank's error message
};

}  // namespace pipesched
