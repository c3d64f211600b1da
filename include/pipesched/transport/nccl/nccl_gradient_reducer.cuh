// Data-parallel gradient reduction over NCCL, the GPU twin of MpiGradientReducer: at a stage's
// REDUCE_GRAD its weight gradients (device memory) are packed into buckets on a stream of the
// reducer's own, which first waits (on the GPU) for the compute stream that produced them;
// each bucket is all-reduced there (ncclAllReduce, ncclAvg for the replicas' mean) and
// unpacked back into the gradients. At its WAIT_REDUCE_GRAD the host waits for the stage's
// reduction (polling, so the pipeline's messages and failure notices keep moving) and the
// compute stream is ordered after it, so the optimizer sees the mean. After a failed step
// `drain` runs on every replica the all-reduces another replica started and it did not, so the
// data-parallel communicator is clean for the next step (detail::ReductionPlan, shared with
// the MPI reducer, as are the buckets and the reductions' order).
#pragma once

#include <nccl.h>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/transport/detail/reduction_plan.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"

namespace pipesched {

//! A GPU stage model whose weight gradients an NCCL reduction can reach: `device_gradients()`
//! is a range of `std::span<T>` over device memory (T float or double), written on the
//! compute stream of the device the stage was made with (the toy GPU MLP and GPT have it).
template <class S>
concept device_reducible_stage = requires(S& s) {
  { s.device_gradients() } -> std::ranges::range;
  requires std::is_floating_point_v<typename std::remove_cvref_t<
      std::ranges::range_value_t<decltype(s.device_gradients())>>::element_type>;
};

//! Knobs of NcclGradientReducer.
struct NcclReducerOptions {
  //! The most bytes one all-reduce carries; a stage's gradients go in buckets of at most this
  //! many (PyTorch DDP's default, 25 MiB). One tensor larger than it gets a bucket of its own.
  std::size_t bucket_bytes = 25u << 20;
  //! Divide the sum by the replica count (ncclAvg: the replicas' mean), else keep the sum.
  bool average = true;
  //! The ZeRO stage: only 0 (every bucket all-reduced) runs on NCCL; ZeRO-1/2 run over MPI
  //! (MpiPipeline with MpiReducerOptions::zero).
  int zero = 0;

  //! Throws invalid_argument for options the reducer cannot run.
  void validate() const {
    detail::check_bucket_bytes("NcclReducerOptions", bucket_bytes);
    if (zero != 0)
      throw invalid_argument("NcclReducerOptions.zero = " + std::to_string(zero) +
                                 ": ZeRO runs over MPI only, not on NCCL; give 0 (all-reduce of "
                                 "every bucket), or run ZeRO-1/2 over MPI (MpiPipeline with "
                                 "MpiReducerOptions::zero).",
                             "NcclReducerOptions.zero", std::to_string(zero));
  }
};

//! Reduces the weight gradients of this process's stages over a data-parallel NCCL
//! communicator: one ncclAllReduce per bucket on the reducer's own stream, started at the
//! stage's REDUCE_GRAD (after the compute stream's work so far) and waited for at its
//! WAIT_REDUCE_GRAD. `stages` is indexed by stage; every replica reduces the same stages in the
//! same order, as the schedule's actions say. Called by one thread (the rank's).
template <class Stage>
requires device_reducible_stage<Stage>
class NcclGradientReducer {
  using span_type = std::remove_cvref_t<
      std::ranges::range_value_t<decltype(std::declval<Stage&>().device_gradients())>>;
  using value = std::remove_cv_t<typename span_type::element_type>;
  static_assert(std::is_same_v<value, float> || std::is_same_v<value, double>,
                "NcclGradientReducer reduces float or double gradients");

 public:
  //! A reducer of `stages` on `device` over a communicator split from `data` (collective over
  //! `data`'s ranks, like ncclCommSplit) with `control` (the MPI communicator of the same
  //! processes, duplicated) for drain's agreement; `order` is the executed schedule's list of
  //! this rank (its REDUCE_GRAD actions give the order the stages are reduced in). `poll` runs
  //! between completion tests of a wait and throws when the step is being stopped.
  NcclGradientReducer(ncclComm_t data, MPI_Comm control, CudaDevice device, std::span<Stage> stages,
                      const std::vector<Action>& order, std::function<void()> poll,
                      std::chrono::duration<double> timeout, NcclReducerOptions options = {})
      : stages_(stages),
        device_(std::move(device)),
        poll_(std::move(poll)),
        timeout_(timeout),
        options_(options),
        plan_(order, control) {
    options_.validate();
    device_.activate();
    stream_.emplace();
    int rank = 0;
    PIPESCHED_NCCL_CHECK(ncclCommUserRank(data, &rank));
    PIPESCHED_NCCL_CHECK(ncclCommSplit(data, 0, rank, comm_.out(), nullptr));
    PIPESCHED_NCCL_CHECK(ncclCommCount(comm_.get(), &replicas_));
    replica_ = rank;
  }

  NcclGradientReducer(const NcclGradientReducer&) = delete;
  NcclGradientReducer& operator=(const NcclGradientReducer&) = delete;

  //! Ends the communicator: finalized and destroyed when the reducer's stream is idle,
  //! aborted otherwise (a reduction still in flight is abandoned: the job is ending).
  ~NcclGradientReducer() {
    try {
      device_.activate();
      pending_.clear();
      // After a wait that timed out or a drain that failed a replica may be gone, and a
      // finalize could wait for it.
      const bool idle = !broken_ && stream_ && cudaStreamQuery(*stream_) == cudaSuccess;
      if (idle && comm_.finalize(std::chrono::steady_clock::now() + std::chrono::seconds(10)))
        comm_.destroy();
      else
        comm_.abort();
    } catch (...) {
    }
  }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }
  //! Replicas in the data-parallel group.
  int replicas() const noexcept { return replicas_; }
  //! This process's replica: its rank in the data-parallel group.
  int replica() const noexcept { return replica_; }
  //! The stream the all-reduces run on.
  cudaStream_t stream() const noexcept { return *stream_; }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    plan_.begin_step();
    pending_.clear();
  }

  //! Starts reducing stage `stage`'s gradients (REDUCE_GRAD): the reducer's stream waits for
  //! the compute stream's work so far, then packs each bucket, all-reduces it and unpacks it
  //! into the gradients. Returns at once.
  void start(int stage) {
    device_.activate();
    const cudaStream_t s = *stream_;
    CudaDevice::wait(s, device_.mark());
    Pending p;
    p.stage = stage;
    std::vector<std::vector<std::span<value>>> buckets = bucket(stage);
    for (std::vector<std::span<value>>& b : buckets) {
      const std::size_t n = values_in(b);
      if (b.size() == 1) {  // one tensor: reduced in place
        all_reduce(b.front().data(), n);
      } else {
        p.buffers.emplace_back(std::vector<int>{static_cast<int>(n)}, s);
        value* buffer = p.buffers.back().data();
        copy(b, buffer, true);
        all_reduce(buffer, n);
        copy(b, buffer, false);
      }
      plan_.count_start();
    }
    p.done = device_.mark_on(s);
    pending_.push_back(std::move(p));
  }

  //! Waits for stage `stage`'s reduction (WAIT_REDUCE_GRAD): the host polls until it is done
  //! (running `poll` meanwhile) and the compute stream is ordered after it. Throws
  //! receive_timeout after the timeout.
  void wait(int stage) {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& p) { return p.stage == stage; });
    if (it == pending_.end())
      throw detail::ReductionPlan::not_started("NcclGradientReducer", stage);
    const std::string what =
        "the data-parallel reduction of stage " + std::to_string(stage) + "'s gradients (NCCL)";
    const detail::Wait wait{what, detail::deadline_after(timeout_)};
    const bool done = detail::poll_until(
        wait,
        [&] {
          const cudaError_t e = cudaEventQuery(it->done.event->get());
          if (e != cudaErrorNotReady) PIPESCHED_CUDA_CHECK(e);
          return e == cudaSuccess;
        },
        [&] {
          if (poll_) poll_();
        });
    if (!done) {
      broken_ = true;
      throw receive_timeout(detail::expired_text(wait, timeout_, detail::same_schedule_hint));
    }
    CudaDevice::wait(device_.compute(), it->done);
    pending_.erase(it);
  }

  //! After a failed step: every replica learns how many all-reduces the most advanced one
  //! started, runs the ones it did not (on scratch buffers of the same sizes, in the same
  //! order) and waits for its stream, so the communicator is clean for the next step
  //! (collective over the data-parallel group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    device_.activate();
    const std::optional<long long> most = plan_.most_started(deadline);
    if (!most) return broken();
    std::vector<DeviceTensor<value>> scratch;
    plan_.for_each_missing(
        *most,
        [&](int stage) {
          std::vector<std::size_t> sizes;
          for (const std::vector<std::span<value>>& b : bucket(stage))
            sizes.push_back(values_in(b));
          return sizes;
        },
        [&](std::size_t n) {
          scratch.push_back(DeviceTensor<value>::zeros({static_cast<int>(n)}, *stream_));
          all_reduce(scratch.back().data(), n);
        });
    bool failed = false;
    const bool idle = detail::poll_until({"the all-reduces after a failed step", deadline}, [&] {
      const cudaError_t e = cudaStreamQuery(*stream_);
      failed = e != cudaSuccess && e != cudaErrorNotReady;
      return e != cudaErrorNotReady;
    });
    if (!idle || failed) return broken();
    begin_step();
    return true;
  }

 private:
  struct Pending {
    int stage = 0;
    std::vector<DeviceTensor<value>> buffers;  // the packed buckets (freed on the stream)
    CudaDevice::Mark done;                     // recorded after the last unpack
  };

  // Notes that a replica may be gone (the communicator is then aborted, not finalized); false.
  bool broken() noexcept {
    broken_ = true;
    return false;
  }

  static constexpr ncclDataType_t datatype() {
    return std::is_same_v<value, double> ? ncclFloat64 : ncclFloat32;
  }

  void all_reduce(value* data, std::size_t n) {
    PIPESCHED_NCCL_CHECK(ncclAllReduce(
        data, data, n, datatype(), options_.average ? ncclAvg : ncclSum, comm_.get(), *stream_));
  }

  // Copies the tensors of bucket `b` into `buffer` (`in`) or back out of it, on the stream.
  void copy(const std::vector<std::span<value>>& b, value* buffer, bool in) {
    std::size_t at = 0;
    for (std::span<value> g : b) {
      void* to = in ? static_cast<void*>(buffer + at) : static_cast<void*>(g.data());
      const void* from = in ? static_cast<const void*>(g.data()) : buffer + at;
      PIPESCHED_CUDA_CHECK(
          cudaMemcpyAsync(to, from, g.size_bytes(), cudaMemcpyDeviceToDevice, *stream_));
      at += g.size();
    }
  }

  // Stage `stage`'s gradients in buckets: a bucket is closed when the next tensor would take it
  // past bucket_bytes; empty tensors are left out.
  std::vector<std::vector<std::span<value>>> bucket(int stage) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= stages_.size())
      throw detail::ReductionPlan::no_such_stage("NcclGradientReducer", stage, stages_.size());
    std::vector<std::vector<std::span<value>>> out;
    detail::Buckets buckets(options_.bucket_bytes, sizeof(value));
    for (auto g : stages_[static_cast<std::size_t>(stage)].device_gradients()) {
      const std::span<value> v(g.data(), g.size());
      if (v.empty()) continue;
      if (buckets.add(v.size()).bucket == out.size()) out.emplace_back();
      out.back().push_back(v);
    }
    return out;
  }

  // The values in bucket `b`.
  static std::size_t values_in(const std::vector<std::span<value>>& b) {
    std::size_t n = 0;
    for (std::span<value> g : b)
      n += g.size();
    return n;
  }

  std::span<Stage> stages_;
  CudaDevice device_;
  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  NcclReducerOptions options_;
  std::optional<CudaStream> stream_;  // the all-reduces' (made on the device, after activate)
  detail::ReductionPlan plan_;        // the stages' order, the count started, drain's agreement
  detail::nccl::Link comm_;           // split from the data-parallel communicator
  int replicas_ = 1;
  int replica_ = 0;
  bool broken_ = false;  // a wait or a drain ran out of time: a replica may be gone
  std::vector<Pending> pending_;
};

}  // namespace pipesched
