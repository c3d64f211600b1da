// What the data-parallel gradient reducers (mpi::GradientReducer over MPI, nccl::GradientReducer
// over NCCL) share, so that they differ only in their collective calls: the bucket rule, the
// order in which a rank starts its stages' reductions (its REDUCE_GRAD actions), the count of
// reductions started in a step and, after a failed step, the agreement on the most any replica
// started, which tells each replica which reductions it still has to run so that its
// communicator is clean; ZeRO's cut of a bucket among the replicas, the shard optimizer's
// state and the order a replica steps and gathers its shards in; and the checks of their
// options.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
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
#include "pipesched/exec/shard_optimizer.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/pipeline_options.hpp"

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

//! ZeRO's cut of a bucket among the `replicas` of a data-parallel group (Rajbhandari et al.
//! 2020), the same for both reducers: with ZeRO a bucket of n values is reduced padded with
//! zeros to a multiple of the replicas, and replica j receives (and steps) the j-th of the
//! replicas' equal parts; the padding belongs to no tensor. Without ZeRO a bucket is reduced
//! whole and a replica's shard is the whole bucket (ZeRO-0: every replica steps all of it).
class Sharding {
 public:
  //! The cut of ZeRO stage `zero` (0, 1 or 2) for replica `replica` of `replicas`.
  Sharding(int zero, int replicas, int replica) noexcept
      : zero_(zero), replicas_(std::max(1, replicas)), replica_(replica) {}

  //! Part [begin, end) of a bucket's values.
  struct Range {
    std::size_t begin = 0;  //!< the first value
    std::size_t end = 0;    //!< one past the last
    //! Values in the range.
    std::size_t size() const noexcept { return end - begin; }
  };

  //! The ZeRO stage.
  int zero() const noexcept { return zero_; }
  //! True with ZeRO-1 or ZeRO-2.
  bool sharded() const noexcept { return zero_ >= 1; }
  //! The length a bucket of `n` values is reduced with: n, or with ZeRO n rounded up to a
  //! multiple of the replicas.
  std::size_t padded(std::size_t n) const noexcept {
    if (!sharded()) return n;
    const auto d = static_cast<std::size_t>(replicas_);
    return (n + d - 1) / d * d;
  }
  //! The values each replica steps of a bucket of `n`: with ZeRO its padded part, without
  //! ZeRO the whole bucket (every replica steps the whole mean gradient).
  std::size_t part(std::size_t n) const noexcept {
    if (!sharded()) return n;
    return padded(n) / static_cast<std::size_t>(replicas_);
  }
  //! Where this replica's part of a bucket of `n` values starts in the padded bucket (0
  //! without ZeRO).
  std::size_t part_begin(std::size_t n) const noexcept {
    if (!sharded()) return 0;
    return part(n) * static_cast<std::size_t>(replica_);
  }
  //! The values of a bucket of `n` this replica's shard holds (its part without the padding):
  //! the whole bucket without ZeRO.
  Range shard(std::size_t n) const noexcept {
    const std::size_t begin = std::min(n, part_begin(n));
    return {begin, std::min(n, begin + part(n))};
  }
  //! The piece [begin, end) of a tensor at values [at, at + size) of a bucket of `n`
  //! that lies in this replica's shard, relative to the tensor (empty when none does).
  Range shard_of_tensor(std::size_t n, std::size_t at, std::size_t size) const noexcept {
    const Range s = shard(n);
    const std::size_t lo = std::max(at, s.begin), hi = std::min(at + size, s.end);
    if (lo >= hi) return {0, 0};
    return {lo - at, hi - at};
  }

 private:
  int zero_;
  int replicas_;
  int replica_;
};

//! The reducer's weight step, the same for both reducers: the shard optimizer's state of every
//! bucket of every stage this replica reduces (with ZeRO its shard's only; without, the whole
//! bucket's), kept across steps, with its copy
//! from before the step's update so that a rolled-back step leaves it as it was. A reducer
//! calls `begin_update`, then `step` for each stage in the reductions' order
//! (ReductionPlan::sequence) and each of its buckets in order, and after a failed commit
//! `discard`.
class ShardSteps {
 public:
  //! The steps of `optimizer` (the reducer's options'; empty when ExecutorOptions::optimizer
  //! steps the weights).
  explicit ShardSteps(ShardOptimizer optimizer) : optimizer_(std::move(optimizer)) {}

  //! A step's update starts: the state as it is now is what `discard` restores.
  void begin_update() { saved_ = states_; }

  //! Steps bucket `bucket` of the `buckets` of stage `stage`: this replica's shard of its
  //! weights `weights` in place from the replicas' mean gradient `gradients` (the same length).
  void step(int stage, std::size_t buckets, std::size_t bucket, std::span<double> weights,
            std::span<const double> gradients) {
    std::vector<std::vector<double>>& state = states_[stage];
    state.resize(buckets);
    state[bucket].resize(static_cast<std::size_t>(optimizer_.state_per_value) * weights.size());
    optimizer_.step(weights, gradients, state[bucket]);
  }

  //! Undoes this step's updates of the state (the optimizer may have stopped half-way).
  void discard() { states_ = saved_; }

  //! The error of a shard step of a stage whose reduction was not waited for (`who` names the
  //! reducer).
  static error not_waited(const char* who, int stage) {
    return error(std::string(who) + ": stage " + std::to_string(stage) +
                 "'s reduction was not waited for before the optimizer; put " +
                 std::to_string(stage) + "WAIT_REDUCE_GRAD before the list's end.");
  }

 private:
  ShardOptimizer optimizer_;
  std::map<int, std::vector<std::vector<double>>> states_, saved_;
};

//! The advice after a data-parallel reduction that ran out.
inline constexpr const char* same_schedule_hint = "does every replica run the same schedule?";

}  // namespace pipesched::detail
