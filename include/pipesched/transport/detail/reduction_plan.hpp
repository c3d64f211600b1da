// What the data-parallel gradient reducers (MpiGradientReducer over MPI, NcclGradientReducer
// over NCCL) share, so that they differ only in their collective calls: the bucket rule, the
// order in which a rank starts its stages' reductions (its REDUCE_GRAD actions), the count of
// reductions started in a step and, after a failed step, the agreement on the most any replica
// started, which tells each replica which reductions it still has to run so that its
// communicator is clean; and the checks of their options.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched::detail {

//! The bucket rule of both reducers: a stage's tensors, in order, fill a bucket until the next
//! one would take it past `bucket_bytes`, which then starts the next bucket; a tensor larger
//! than that gets a bucket of its own, and an empty tensor belongs to none (`add` is not
//! called for it).
class Buckets {
 public:
  //! Buckets of at most `bucket_bytes` (at least one value each) of values of `value_bytes`.
  Buckets(std::size_t bucket_bytes, std::size_t value_bytes)
      : cap_(std::max<std::size_t>(1, bucket_bytes / value_bytes)) {}

  //! Where a tensor lies: its bucket and its first value's offset in it.
  struct Place {
    std::size_t bucket = 0;
    std::size_t offset = 0;
  };

  //! The place of the next tensor, of `n` > 0 values.
  Place add(std::size_t n) {
    if (sizes_.empty() || (open_ > 0 && open_ + n > cap_)) {
      sizes_.push_back(0);
      open_ = 0;
    }
    const Place at{sizes_.size() - 1, open_};
    open_ += n;
    sizes_.back() = open_;
    return at;
  }

  //! The buckets' sizes, in values.
  const std::vector<std::size_t>& sizes() const noexcept { return sizes_; }

 private:
  std::size_t cap_;
  std::size_t open_ = 0;
  std::vector<std::size_t> sizes_;
};

//! The order of a rank's reductions and their count in a step, with the agreement that
//! completes them after a failed step. Holds a duplicate of the data-parallel group's MPI
//! communicator for that agreement only: a collective on the reductions' own communicator
//! would match a reduction another replica started and this one did not.
class ReductionPlan {
 public:
  //! The plan of the rank whose executed list is `order` (its REDUCE_GRAD actions give the
  //! order its stages are reduced in), agreeing over a duplicate of `group` (collective over
  //! it).
  ReductionPlan(const std::vector<Action>& order, MPI_Comm group) {
    for (const Action& a : order)
      if (a.kind == OpKind::ReduceGrad) sequence_.push_back(a.stage);
    mpi::check(MPI_Comm_dup(group, &control_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  }

  ReductionPlan(const ReductionPlan&) = delete;
  ReductionPlan& operator=(const ReductionPlan&) = delete;

  //! Frees the agreement's communicator.
  ~ReductionPlan() {
    if (control_ != MPI_COMM_NULL && mpi::initialized()) MPI_Comm_free(&control_);
  }

  //! The stages in the order this rank starts their reductions.
  const std::vector<int>& sequence() const noexcept { return sequence_; }
  //! A step starts: no reduction started yet.
  void begin_step() noexcept { started_ = 0; }
  //! One more reduction (one bucket's collective) started this step.
  void count_start() noexcept { ++started_; }
  //! Reductions started this step.
  long long started() const noexcept { return started_; }

  //! After a failed step: the most reductions any replica started, agreed by every replica of
  //! the group by `deadline` (nothing when one does not take part in time).
  std::optional<long long> most_started(std::chrono::steady_clock::time_point deadline) {
    long long mine = started_, most = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Iallreduce(&mine, &most, 1, MPI_LONG_LONG, MPI_MAX, control_, &request),
               "MPI_Iallreduce");
    if (!poll_until({"the count of the reductions started", deadline},
                    [&] { return mpi::test(request); }))
      return std::nullopt;
    return most;
  }

  //! Calls `run(n)` for every reduction, of a bucket of `n` values, that some replica started
  //! (`most` of them) and this one did not, in the order every replica starts them: the
  //! stages in sequence, each stage's buckets as `bucket_sizes(stage)` gives their sizes.
  template <class Sizes, class Run>
  void for_each_missing(long long most, Sizes&& bucket_sizes, Run&& run) const {
    long long index = 0;
    for (int stage : sequence_)
      for (std::size_t n : bucket_sizes(stage)) {
        if (index >= started_ && index < most) run(n);
        ++index;
      }
  }

  //! The error of a WAIT_REDUCE_GRAD whose reduction never started (`who` names the reducer).
  static error not_started(const char* who, int stage) {
    return error(std::string(who) + ": WAIT_REDUCE_GRAD of stage " + std::to_string(stage) +
                 " with no reduction of it started; put " + std::to_string(stage) +
                 "REDUCE_GRAD before it.");
  }

  //! The error of a stage index outside the `count` stage models a reducer was given.
  static error no_such_stage(const char* who, int stage, std::size_t count) {
    return error(std::string(who) + ": stage " + std::to_string(stage) + " is not one of the " +
                 std::to_string(count) + " stage models given.");
  }

 private:
  std::vector<int> sequence_;
  long long started_ = 0;
  MPI_Comm control_ = MPI_COMM_NULL;
};

//! The advice after a data-parallel reduction that ran out.
inline constexpr const char* same_schedule_hint = "does every replica run the same schedule?";

//! Throws invalid_argument naming `options` (MpiReducerOptions, NcclReducerOptions) unless
//! `bucket_bytes` is at least 1.
inline void check_bucket_bytes(const char* options, std::size_t bucket_bytes) {
  if (bucket_bytes == 0)
    throw invalid_argument(std::string(options) +
                               ".bucket_bytes = 0 is out of range; give 1 byte or more (25 MiB "
                               "is PyTorch DDP's default).",
                           std::string(options) + ".bucket_bytes", "0");
}

}  // namespace pipesched::detail
