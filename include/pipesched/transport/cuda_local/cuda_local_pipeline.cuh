// cuda-local: every rank of the pipeline on one GPU, each with its own compute stream and
// host thread. A send copies the tensor device to device on the sender's send stream once the
// compute stream has produced it; the receiver's compute stream waits on the copy's event. No
// host thread waits for the GPU inside a step, so what the timeline shows is the GPU's own
// schedule. One GPU then runs the CUDA executor end to end.
//
// cuda-local is one GPU by design: every rank's device must be the same GPU (checked at
// construction). Ranks on several GPUs would need peer access for the copies, events recorded
// and compared per device and a common clock across GPUs; one GPU per rank is what the NCCL
// transport is for.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/detail/thread_pipeline.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/transport/inproc/inproc_transport.hpp"

namespace pipesched {

namespace detail::gpu {

//! Throws invalid_problem unless every rank's GPU (`ordinals[r]` for rank r) is the same one:
//! cuda-local runs all its ranks on one GPU.
inline void require_one_gpu(const std::vector<int>& ordinals, const char* who) {
  if (ordinals.empty())
    throw invalid_problem(std::string(who) + ": no devices were given; pass one per rank.");
  for (std::size_t r = 1; r < ordinals.size(); ++r)
    if (ordinals[r] != ordinals.front())
      throw invalid_problem(std::string(who) + ": rank 0 is on GPU " +
                            std::to_string(ordinals.front()) + " but rank " + std::to_string(r) +
                            " is on GPU " + std::to_string(ordinals[r]) +
                            "; cuda-local runs every rank on one GPU (devices_for(schedule, "
                            "ordinal)). For one GPU per rank, use nccl::Pipeline.");
}

}  // namespace detail::gpu

//! A tensor a GPU transport can hand between streams: it knows its owning stream, can be
//! given to another one, and copies itself on the GPU.
template <class Tensor>
concept stream_tensor = std::movable<Tensor> &&
    requires(Tensor& x, const Tensor& cx, cudaStream_t s) {
  { cx.stream() } -> std::same_as<cudaStream_t>;
  { x.set_stream(s) } -> std::same_as<void>;
  { cx.clone(s) } -> std::same_as<Tensor>;
};

namespace cuda_local {

//! Ranks as streams of one GPU (one CudaDevice per rank, all of them the same GPU). Satisfies
//! `transport<cuda_local::Transport<Tensor>, Tensor>`.
template <class Tensor>
requires stream_tensor<Tensor>
class Transport {
 public:
  //! `devices[r]` is rank r's device; all must be the same GPU (throws invalid_problem
  //! otherwise).
  explicit Transport(std::vector<CudaDevice> devices)
      : devices_(checked(std::move(devices))), mailboxes_(static_cast<int>(devices_.size())) {}

  //! Copies `x` on the sender's send stream (after the sender's compute stream has produced
  //! it) and posts the copy with its completion event; never waits for the GPU.
  void send(int from, int to, const MessageKey& key, Tensor&& x) {
    CudaDevice& d = device(from);
    const cudaStream_t stream = d.send_stream(to);
    CudaDevice::wait(stream, d.mark());  // the copy starts after the producer
    if (x.stream() != d.compute() && x.stream() != stream)
      CudaDevice::wait(stream, d.mark_on(x.stream()));  // and after its owner's last use
    Message m{x.clone(stream), {}};
    x.set_stream(stream);  // the original is freed after the copy has read it
    m.ready = d.mark_on(stream);
    mailboxes_.send(from, to, key, std::move(m));
  }

  //! Waits (on the host) for the message, then makes the receiver's compute stream wait (on
  //! the GPU) for its copy.
  Tensor receive(int rank, const MessageKey& key, std::chrono::duration<double> timeout) {
    return accept(rank, mailboxes_.receive(rank, key, timeout));
  }

  //! The message `key` for `rank` if it has arrived, its copy waited for as receive() does;
  //! never waits on the host.
  std::optional<Tensor> try_receive(int rank, const MessageKey& key) {
    std::optional<Message> m = mailboxes_.try_receive(rank, key);
    if (!m) return std::nullopt;
    return accept(rank, std::move(*m));
  }

  //! Wakes every waiting receive; they throw transport_aborted until `reset()`.
  void abort() { mailboxes_.abort(); }
  //! Clears messages and the aborted state (between steps).
  void reset() { mailboxes_.reset(); }
  //! The number of ranks.
  int ranks() const noexcept { return static_cast<int>(devices_.size()); }
  //! Rank `rank`'s device; throws pipesched::error for a rank out of range.
  CudaDevice& device(int rank) {
    if (rank < 0 || rank >= ranks())
      throw error("cuda_local::Transport: rank " + std::to_string(rank) +
                  ", but ranks run from 0 to " + std::to_string(ranks() - 1) + ".");
    return devices_[static_cast<std::size_t>(rank)];
  }

 private:
  struct Message {
    Tensor tensor;
    CudaDevice::Mark ready;
  };

  static std::vector<CudaDevice> checked(std::vector<CudaDevice> devices) {
    std::vector<int> ordinals;
    for (const CudaDevice& d : devices)
      ordinals.push_back(d.ordinal());
    detail::gpu::require_one_gpu(ordinals, "cuda_local::Transport");
    return devices;
  }

  Tensor accept(int rank, Message m) {
    const cudaStream_t compute = device(rank).compute();
    CudaDevice::wait(compute, m.ready);
    m.tensor.set_stream(compute);
    return std::move(m.tensor);
  }

  std::vector<CudaDevice> devices_;
  inproc::Transport<Message> mailboxes_;
};
}  // namespace cuda_local

namespace detail::gpu {

// Ranks as streams of one GPU: rank r's device comes from the transport, and every rank's
// compute stream starts after one event, the zero of every timeline.
struct LocalRanks {
  template <class Transport>
  static CudaDevice device(Transport& t, int rank) {
    return t.device(rank);
  }
  template <class Transport>
  static CudaDevice::Mark start(Transport& t) {
    CudaDevice& first = t.device(0);
    first.activate();
    const CudaDevice::Mark start = first.mark();
    for (int r = 0; r < t.ranks(); ++r)
      CudaDevice::wait(t.device(r).compute(), start);
    return start;
  }
  template <class Transport>
  static void enter(Transport& t, int rank) {
    t.device(rank).activate();
  }
};

}  // namespace detail::gpu

namespace cuda_local {

//! Runs a schedule with every rank on one GPU of this process (GPU 0 by default), one host
//! thread and one CudaDevice per rank, the ranks connected by cuda_local::Transport. Make the
//! stage of stage s with the device of its rank, `devices[schedule.placement.rank_of(s)]`
//! (its compute stream); `stages` is indexed by stage and must outlive the pipeline. Devices
//! on different GPUs are refused with invalid_problem. Failures stop every rank as in
//! inproc::Pipeline; times are GPU times from a common start event.
template <class Stage>
class Pipeline : public detail::ThreadPipeline<Stage, Transport<typename Stage::tensor_type>,
                                               CudaDevice, detail::gpu::LocalRanks> {
 public:
  //! One device per rank of `schedule`, on GPU `ordinal` (every rank on the same GPU).
  static std::vector<CudaDevice> devices_for(const Schedule& schedule, int ordinal = 0) {
    std::vector<CudaDevice> d;
    for (int r = 0; r < schedule.rank_count(); ++r)
      d.emplace_back(ordinal);
    return d;
  }

  //! Runs `schedule` on `stages` (indexed by stage, as inproc::Pipeline's), rank r on
  //! `devices[r]`; throws invalid_problem unless there is one device per rank, all on one GPU.
  Pipeline(const Schedule& schedule, std::vector<CudaDevice> devices, std::span<Stage> stages,
           ExecutorOptions options = {})
      : Pipeline::ThreadPipeline("cuda_local::Pipeline", schedule, stages, options,
                                 checked_count(schedule, std::move(devices))) {}

  //! The device of rank `rank`.
  CudaDevice& device(int rank) { return this->transport_.device(rank); }

 private:
  static std::vector<CudaDevice> checked_count(const Schedule& schedule,
                                               std::vector<CudaDevice> devices) {
    if (static_cast<int>(devices.size()) != schedule.rank_count())
      throw invalid_problem("cuda_local::Pipeline: the schedule has " +
                            std::to_string(schedule.rank_count()) + " ranks but " +
                            std::to_string(devices.size()) +
                            " devices were given; pass one per rank (devices_for(schedule)).");
    return devices;
  }
};
}  // namespace cuda_local

}  // namespace pipesched
