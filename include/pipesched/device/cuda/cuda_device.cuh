// The CUDA device: where one rank's work runs on a GPU. A compute stream for the layers, a
// send and a receive stream per neighbour for communication, events for every cross-stream
// dependency, marks that are events (their times are read once the step's work is done), and
// activations allocated from the device's stream-ordered memory pool, which keeps freed
// memory cached for the next allocation instead of returning it to the driver.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/check.cuh"

namespace pipesched {

//! Whether this process can run CUDA work, and why not when it cannot.
struct GpuStatus {
  int devices = 0;     //!< GPUs the runtime sees
  std::string reason;  //!< empty when `devices > 0`; otherwise what the runtime said
  //! True when there is at least one GPU.
  bool available() const noexcept { return devices > 0; }
};

//! Asks the CUDA runtime how many GPUs there are (never throws).
inline GpuStatus gpu_status() {
  GpuStatus s;
  const cudaError_t e = cudaGetDeviceCount(&s.devices);
  if (e != cudaSuccess) {
    s.devices = 0;
    s.reason = std::string("no usable GPU: cudaGetDeviceCount returned ") + cudaGetErrorName(e) +
               " (" + cudaGetErrorString(e) + ")";
    (void)cudaGetLastError();
  } else if (s.devices == 0) {
    s.reason = "no GPU is present";
  }
  return s;
}

//! An owned CUDA stream that does not synchronize with the legacy default stream.
class CudaStream {
 public:
  //! A new stream of `priority` (lower numbers run first, as CUDA orders them).
  explicit CudaStream(int priority = 0) {
    PIPESCHED_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  //! The stream's handle.
  cudaStream_t get() const noexcept { return stream_; }
  //! The stream's handle, for CUDA calls and kernel launches.
  operator cudaStream_t() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

//! An owned CUDA event (with timing).
class CudaEvent {
 public:
  CudaEvent() { PIPESCHED_CUDA_CHECK(cudaEventCreate(&event_)); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  //! The event's handle.
  cudaEvent_t get() const noexcept { return event_; }
  //! The event's handle, for CUDA calls.
  operator cudaEvent_t() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

namespace detail::gpu {

// Makes `device` current for the calling thread (each rank's thread sets its own).
inline void use_device(int device) {
  int current = -1;
  PIPESCHED_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) PIPESCHED_CUDA_CHECK(cudaSetDevice(device));
}

// Makes `device` current for a scope and restores the previous one: an event or stream belongs
// to the device current when it is created, whichever thread asks for it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    PIPESCHED_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) PIPESCHED_CUDA_CHECK(cudaSetDevice(device));
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Events handed out as shared pointers that return to the pool when the last holder lets go:
// a step records two marks per action, and creating events that often would cost more than
// the actions of a toy model. Every event is made on the pool's GPU, so it can be recorded on
// that GPU's streams from any thread.
class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  explicit EventPool(int ordinal) : ordinal_(ordinal) {}

  std::shared_ptr<CudaEvent> take() {
    std::unique_ptr<CudaEvent> e;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        e = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!e) {
      const DeviceScope on(ordinal_);
      e = std::make_unique<CudaEvent>();
    }
    std::weak_ptr<EventPool> home = weak_from_this();
    return std::shared_ptr<CudaEvent>(e.release(), [home](CudaEvent* p) {
      if (auto pool = home.lock()) {
        std::lock_guard lock(pool->mutex_);
        pool->free_.emplace_back(p);
      } else {
        delete p;
      }
    });
  }

 private:
  int ordinal_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CudaEvent>> free_;
};

}  // namespace detail::gpu

//! One rank's GPU: a handle (copies share the streams and events). Satisfies
//! `pipesched::device`: `mark()` records an event on the compute stream, `synchronize()` waits
//! for the compute and communication streams (never the whole device), `seconds_between`
//! reads two recorded events.
class CudaDevice {
 public:
  //! A point on a stream.
  struct Mark {
    std::shared_ptr<CudaEvent> event;  //!< the recorded event (back to the pool when released)
  };
  using mark_type = Mark;  //!< what mark() returns

  //! Uses GPU `ordinal` with a compute stream of its own; throws cuda_error when there is no
  //! such GPU.
  explicit CudaDevice(int ordinal = 0) : state_(std::make_shared<State>()) {
    const GpuStatus status = gpu_status();
    if (!status.available())
      throw cuda_error("CudaDevice: " + status.reason + "; the CUDA device needs a GPU.");
    if (ordinal < 0 || ordinal >= status.devices)
      throw cuda_error("CudaDevice: GPU " + std::to_string(ordinal) + " asked for, but only " +
                       std::to_string(status.devices) + " present (0.." +
                       std::to_string(status.devices - 1) + ").");
    state_->ordinal = ordinal;
    activate();
    state_->compute = std::make_unique<CudaStream>();
    state_->events = std::make_shared<detail::gpu::EventPool>(ordinal);
    // Keep freed activation memory in the pool (a caching allocator) rather than give it back
    // to the driver at every synchronization.
    cudaMemPool_t pool = nullptr;
    PIPESCHED_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    PIPESCHED_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }

  //! The GPU's ordinal.
  int ordinal() const noexcept { return state_->ordinal; }
  //! Makes this GPU current for the calling thread (each rank's thread calls it).
  void activate() const { detail::gpu::use_device(state_->ordinal); }

  //! The stream the layers run on.
  cudaStream_t compute() const noexcept { return state_->compute->get(); }
  //! The stream sends to rank `peer` are issued on (made on first use).
  cudaStream_t send_stream(int peer) const { return comm_stream(state_->send, peer); }
  //! The stream receives from rank `peer` are issued on (made on first use).
  cudaStream_t recv_stream(int peer) const { return comm_stream(state_->recv, peer); }

  //! Records an event on the compute stream.
  Mark mark() const { return mark_on(compute()); }
  //! Records an event on `stream` (for a cross-stream dependency).
  Mark mark_on(cudaStream_t stream) const {
    Mark m{state_->events->take()};
    PIPESCHED_CUDA_CHECK(cudaEventRecord(m.event->get(), stream));
    return m;
  }
  //! Makes `stream` wait (on the GPU, not the host) for the work before `m`.
  static void wait(cudaStream_t stream, const Mark& m) {
    PIPESCHED_CUDA_CHECK(cudaStreamWaitEvent(stream, m.event->get(), 0));
  }

  //! Waits on the host until the compute and communication streams are idle.
  void synchronize() const {
    PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(compute()));
    std::lock_guard lock(state_->mutex);
    for (auto* streams : {&state_->send, &state_->recv})
      for (auto& [peer, s] : *streams)
        PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(s->get()));
  }

  //! Seconds from `a` to `b` (both recorded and completed).
  double seconds_between(const Mark& a, const Mark& b) const {
    float ms = 0;
    PIPESCHED_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event->get(), b.event->get()));
    return 1e-3 * static_cast<double>(ms);
  }

 private:
  struct State {
    int ordinal = 0;
    std::unique_ptr<CudaStream> compute;
    std::mutex mutex;  // guards the stream maps
    std::map<int, std::unique_ptr<CudaStream>> send, recv;
    std::shared_ptr<detail::gpu::EventPool> events;
  };

  cudaStream_t comm_stream(std::map<int, std::unique_ptr<CudaStream>>& streams, int peer) const {
    std::lock_guard lock(state_->mutex);
    auto& s = streams[peer];
    if (!s) {
      const detail::gpu::DeviceScope on(state_->ordinal);  // the stream belongs to this GPU
      s = std::make_unique<CudaStream>();
    }
    return s->get();
  }

  std::shared_ptr<State> state_;
};

}  // namespace pipesched
