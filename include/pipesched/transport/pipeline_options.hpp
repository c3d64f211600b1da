// What a process pipeline of a pp × dp × tp job takes besides its schedule, stages and groups,
// the same for MPI and NCCL: the executor's options, the transport's, and the data-parallel
// gradient reducer's (the bucket size, the mean or the sum, the ZeRO stage and the optimizer
// that steps this replica's shard of the weights). mpi::PipelineOptions, mpi::ReducerOptions
// and their nccl:: twins name these.
#pragma once

#include <cstddef>
#include <string>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/executor_options.hpp"
#include "pipesched/exec/shard_optimizer.hpp"

namespace pipesched {

namespace detail {

//! Throws invalid_argument naming `options` (mpi::ReducerOptions, nccl::ReducerOptions) unless
//! `bucket_bytes` is at least 1.
inline void check_bucket_bytes(const char* options, std::size_t bucket_bytes) {
  if (bucket_bytes == 0)
    throw invalid_argument(std::string(options) +
                               ".bucket_bytes = 0 is out of range; give 1 byte or more (25 MiB "
                               "is PyTorch DDP's default).",
                           std::string(options) + ".bucket_bytes", "0");
}

//! Throws invalid_argument naming `options` (mpi::ReducerOptions, nccl::ReducerOptions) unless
//! `zero` is a ZeRO stage the reducers run (0, 1, 2), with 1 or 2 `optimizer` is set, and a
//! set `optimizer` keeps 0 or more state values per weight.
inline void check_zero(const char* options, int zero, const ShardOptimizer& optimizer) {
  const std::string o(options);
  if (zero < 0 || zero > 2)
    throw invalid_argument(o + ".zero = " + std::to_string(zero) +
                               " is not a ZeRO stage pipesched runs; give 0 (all-reduce), 1 "
                               "(sharded optimizer state) or 2 (and sharded gradients).",
                           o + ".zero", std::to_string(zero));
  if (zero >= 1 && !optimizer)
    throw invalid_argument(o + ".zero = " + std::to_string(zero) +
                               " steps each replica's shard, but " + o +
                               ".optimizer is empty; set it (e.g. sgd_shards(0.01)).",
                           o + ".optimizer", "empty");
  if (optimizer && optimizer.state_per_value < 0)
    throw invalid_argument(
        "ShardOptimizer.state_per_value = " + std::to_string(optimizer.state_per_value) +
            " is negative; give 0 or more state values per weight.",
        "ShardOptimizer.state_per_value", std::to_string(optimizer.state_per_value));
}

}  // namespace detail

//! Knobs of mpi::GradientReducer and nccl::GradientReducer.
struct ReducerOptions {
  //! The most bytes one all-reduce carries; a stage's gradients go in buckets of at most this
  //! many (PyTorch DDP's default, 25 MiB). One tensor larger than it gets a bucket of its own.
  std::size_t bucket_bytes = 25u << 20;
  //! Divide the sum by the replica count (the mean: the gradient of the global batch's mean
  //! loss, when each replica's loss is the mean over its own share; ncclAvg on NCCL).
  bool average = true;
  //! The ZeRO stage (Rajbhandari et al. 2020). 0: each bucket is all-reduced, every replica
  //! holds the whole mean gradient and steps all the weights (with `optimizer`, or when that is
  //! empty with ExecutorOptions::optimizer). 1 and 2: each bucket is reduce-scattered; replica
  //! j of d receives the mean of its j-th shard (a bucket padded to a multiple of d, cut in d
  //! equal parts), `optimizer` updates that shard's weights with that shard's state only (the
  //! state is sharded: 1/d of it per replica; on NCCL stepped on the host in double), and once
  //! every process of the job has stepped, the replicas all-gather the weights. Outside its
  //! shard a replica's gradients keep its own unreduced sums with 1 (the gradient buffer stays
  //! whole) and are zeroed with 2 (ZeRO-2 releases them; the toy tensors stay allocated). Both
  //! move the bytes of one all-reduce.
  int zero = 0;
  //! The update rule of this replica's shard of the weights (`sgd_shards`): with `zero` 1 or 2
  //! its 1/d part of each bucket (required), with 0 the whole bucket (optional). When set, the
  //! reducer steps the weights after the list, keeps and restores the rule's state and the
  //! weights when the step rolls back, and writes the new weights once the job agreed to
  //! commit; ExecutorOptions' optimizer, snapshot and rollback hooks must then be empty. One
  //! optimizer so serves every ZeRO stage.
  ShardOptimizer optimizer{};
  //! MPI only (the NCCL reducer runs on a stream of its own and needs none): drive MPI's
  //! progress from a thread of the reducer while a reduction is in flight (an MPI_Iprobe on a
  //! communicator of its own every 100 µs, resting while none is and while WAIT_REDUCE_GRAD
  //! polls), so that it runs during the rank's compute: MPI implementations without
  //! asynchronous progress (OpenMPI's default) advance a non-blocking collective only inside
  //! MPI calls, and a reduction would otherwise wait for its WAIT_REDUCE_GRAD. Needs
  //! MPI_THREAD_MULTIPLE (mpi::Session asks for it); with less, or false here, the reductions
  //! progress only while the pipeline polls MPI (its receives and waits).
  bool progress_thread = true;

  //! Throws invalid_argument for options a reducer cannot run; the messages name the options
  //! `options` (e.g. "mpi::ReducerOptions").
  void validate(const char* options = "ReducerOptions") const {
    detail::check_bucket_bytes(options, bucket_bytes);
    detail::check_zero(options, zero, optimizer);
  }
};

//! What a process pipeline (mpi::Pipeline, nccl::Pipeline) of a pp × dp × tp job takes besides
//! its schedule, stages and groups, set by name: `{.executor = options, .reducer =
//! run.reducer_options(sgd_shards(0.1))}`. `TransportOptions` is the backend's
//! (mpi::TransportOptions, nccl::TransportOptions).
template <class TransportOptions>
struct ProcessPipelineOptions {
  ExecutorOptions executor{};    //!< the executor's hooks and timeouts
  TransportOptions transport{};  //!< the transport's timeouts
  ReducerOptions reducer{};      //!< the data-parallel reduction: buckets, ZeRO stage, optimizer
};

}  // namespace pipesched
