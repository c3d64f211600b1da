// A tensor-parallel group over NCCL: the TensorGroup a GPU stage model of a pp × dp × tp job
// sums its partial results over (nccl::Groups::tensor()), the twin of mpi::TensorGroup with values
// in device memory. Each all-reduce runs on a stream of the group's own, after the compute
// stream's work so far, on a buffer of its own; the host waits for it with the pipeline's
// progress running (so a failure on another process stops the wait) and the result is copied
// back on the compute stream. After a failed step `drain` runs every all-reduce some member
// started and this one did not, so the communicator is clean for the next step.
#pragma once

#include <nccl.h>

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/transport/detail/collective_log.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"

namespace pipesched::nccl {

//! The tensor-parallel group of this process over NCCL: `all_reduce` sums values in the
//! device memory of `device` (written on its compute stream) over a communicator split from
//! `tensor` (e.g. nccl::Groups::tensor(); collective over its ranks, like ncclCommSplit), with
//! `control` (the MPI communicator of the same processes, duplicated) for drain's agreement.
//! `poll` runs between completion tests of a wait (the pipeline's progress; it throws when the
//! step is being stopped); a wait longer than `timeout` throws receive_timeout. nccl::Pipeline
//! makes one for stage models that ask for their group (`tensor_parallel_stage`).
class TensorGroup final : public pipesched::TensorGroup {
 public:
  //! A group over a communicator split from `tensor`, on `device`.
  TensorGroup(ncclComm_t tensor, MPI_Comm control, CudaDevice device, std::function<void()> poll,
              std::chrono::duration<double> timeout)
      : device_(std::move(device)), poll_(std::move(poll)), timeout_(timeout), log_(control) {
    device_.activate();
    stream_.emplace();
    PIPESCHED_NCCL_CHECK(ncclCommUserRank(tensor, &rank_));
    PIPESCHED_NCCL_CHECK(ncclCommCount(tensor, &size_));
    PIPESCHED_NCCL_CHECK(ncclCommSplit(tensor, 0, rank_, comm_.out(), nullptr));
  }
  TensorGroup(const TensorGroup&) = delete;
  TensorGroup& operator=(const TensorGroup&) = delete;

  //! Ends the communicator (finalized when the group's stream is idle, aborted otherwise: an
  //! all-reduce still in flight is abandoned, the job is ending); the log frees the MPI one.
  ~TensorGroup() override {
    try {
      device_.activate();
      pending_.clear();
    } catch (...) {
    }
    detail::nccl::end_link(comm_, stream_, broken_);
  }

  int size() const noexcept override { return size_; }
  int rank() const noexcept override { return rank_; }
  //! Sums `values` (device memory, written on the compute stream) over the group, in place.
  void all_reduce(std::span<double> values) override { run(values, ncclFloat64, 0); }
  //! Sums `values` (device memory, written on the compute stream) over the group, in place.
  void all_reduce(std::span<float> values) override { run(values, ncclFloat32, 1); }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }
  //! The stream the all-reduces run on.
  cudaStream_t stream() const noexcept { return *stream_; }

  //! All-reduces started since the step began.
  std::size_t started() const noexcept { return log_.size(); }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    log_.clear();
    pending_.clear();
  }

  //! After a failed step: every member learns how many all-reduces the most advanced one
  //! started and of what sizes, runs the ones it did not on scratch buffers and waits for its
  //! stream (collective over the group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    device_.activate();
    const auto missed = log_.missed(deadline);
    if (!missed) return broken();
    for (const detail::CollectiveLog::Entry& e : *missed) {
      if (e.count == 0) continue;  // never started on the GPU
      Pending& p = pending_.emplace_back();
      p.buffer = DeviceTensor<double>::zeros({words(e.count, e.type)}, *stream_);
      enqueue(p.buffer.data(), e.count, e.type == 0 ? ncclFloat64 : ncclFloat32);
    }
    if (!detail::nccl::wait_idle(
            *stream_, {"the tensor group's all-reduces after a failed step (NCCL)", deadline}))
      return broken();
    begin_step();
    return true;
  }

 private:
  struct Pending {
    DeviceTensor<double> buffer;  // the values' copy, reduced in place (as doubles' storage)
  };

  // The doubles that hold `count` values of `type`.
  static int words(long long count, int type) {
    const long long bytes = count * (type == 0 ? 8 : 4);
    return static_cast<int>(std::max<long long>(1, (bytes + 7) / 8));
  }

  template <class V>
  void run(std::span<V> values, ncclDataType_t type, int code) {
    log_.add(static_cast<long long>(values.size()), code);
    if (values.empty()) return;
    device_.activate();
    const cudaStream_t s = *stream_;
    CudaDevice::wait(s, device_.mark());
    // A buffer of its own: when the wait is stopped, the all-reduce stays in flight (until
    // `drain`) while the caller's tensor goes away.
    Pending& p = pending_.emplace_back();
    p.buffer = DeviceTensor<double>::zeros({words(static_cast<long long>(values.size()), code)}, s);
    PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(p.buffer.data(), values.data(), values.size_bytes(),
                                         cudaMemcpyDeviceToDevice, s));
    enqueue(p.buffer.data(), static_cast<long long>(values.size()), type);
    const CudaDevice::Mark done = device_.mark_on(s);
    const detail::Wait wait{
        "a tensor-parallel all-reduce of " + std::to_string(values.size()) + " values (NCCL)",
        detail::deadline_after(timeout_), detail::poll_interval::tensor};
    const bool ok = detail::nccl::wait_for_mark(done, wait, poll_);
    if (!ok) {
      broken_ = true;
      throw receive_timeout(detail::expired_text(
          wait, timeout_, "does every member of the tensor group run the same schedule?"));
    }
    // Done on the group's stream: the sum goes back on the compute stream, after its work.
    const cudaStream_t compute = device_.compute();
    PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(values.data(), p.buffer.data(), values.size_bytes(),
                                         cudaMemcpyDeviceToDevice, compute));
    // The buffer is freed on the group's stream, which first waits for that copy.
    CudaDevice::wait(s, device_.mark());
    pending_.pop_back();
  }

  void enqueue(void* buffer, long long count, ncclDataType_t type) {
    PIPESCHED_NCCL_CHECK(ncclAllReduce(buffer, buffer, static_cast<std::size_t>(count), type,
                                       ncclSum, comm_.get(), *stream_));
  }

  // Notes that a member may be gone (the communicator is then aborted, not finalized); false.
  bool broken() noexcept {
    broken_ = true;
    return false;
  }

  CudaDevice device_;
  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  std::optional<CudaStream> stream_;  // the all-reduces' (made on the device, after activate)
  detail::CollectiveLog log_;         // this step's all-reduces, in order; the drain's agreement
  detail::nccl::Link comm_;           // split from the tensor group's communicator
  int size_ = 1, rank_ = 0;
  bool broken_ = false;           // a wait or a drain ran out of time: a member may be gone
  std::vector<Pending> pending_;  // started and not completed (after a failure: abandoned)
};
}  // namespace pipesched::nccl
