// The NCCL transport's parts below the transport: the ticket that goes over MPI ahead of a
// payload (and its wire form), a one-direction two-rank NCCL link, and the links a schedule
// needs.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/wire.hpp"
#include "pipesched/transport/detail/poll.hpp"

namespace pipesched {

namespace detail::nccl {

//! What goes over MPI ahead of a payload: how to allocate it, which message it is, and its
//! place in the sender's sends to this peer (the order NCCL will match them in).
struct Ticket {
  WireHeader header{};
  std::int32_t stage = 0;
  std::int32_t microbatch = 0;
  std::int32_t slice = 0;
  std::int32_t direction = 0;
  std::uint64_t sequence = 0;

  MessageKey key() const {
    return {stage, microbatch, slice, direction != 0 ? Direction::Backward : Direction::Forward};
  }
};
static_assert(std::is_trivially_copyable_v<Ticket>);

//! A two-rank NCCL communicator that carries one direction between two ranks (the sender is
//! its rank 0). Ended cleanly by `finalize` and then `destroy`, on both ranks; aborted on
//! destruction otherwise: an abort never waits, where a finalize waits for the other rank.
class Link {
 public:
  Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  Link(Link&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Link& operator=(Link&& o) noexcept {
    if (this != &o) {
      abort();
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  ~Link() { abort(); }

  ncclComm_t* out() noexcept { return &comm_; }
  ncclComm_t get() const noexcept { return comm_; }

  //! Flushes the communicator's operations and waits (NCCL's ncclCommFinalize) until it is
  //! quiescent on both of its ranks; false when NCCL reports an error, or the communicator is
  //! still finalizing at `deadline` (then `abort` it). On a blocking communicator, as the
  //! transport's are, the finalize call itself is the wait. Both ranks call it, and a rank with
  //! several links finalizes them in the order every rank agrees on, so no two ranks wait on
  //! each other in a cycle.
  bool finalize(std::chrono::steady_clock::time_point deadline) noexcept {
    if (!comm_) return true;
    const ncclResult_t started = ncclCommFinalize(comm_);
    if (started != ncclSuccess && started != ncclInProgress) return false;
    bool failed = false;
    const bool quiet = poll_until(
        {"the finalize of an NCCL communicator", deadline, poll_interval::teardown}, [&] {
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess)
            failed = true;
          else if (state != ncclInProgress)
            failed = state != ncclSuccess;
          else
            return false;
          return true;
        });
    return quiet && !failed;
  }
  //! Frees the communicator; call after `finalize` succeeded on it.
  void destroy() noexcept {
    if (comm_) (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
  }
  void abort() noexcept {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
};

//! The (sender, receiver) pairs a schedule's messages go between: each direction between the
//! ranks of two neighbouring stages, sorted, without repeats. Every process derives the same
//! list, and each rank joins and ends its links in this order.
inline std::vector<std::pair<int, int>> pipeline_links(const Schedule& schedule) {
  std::vector<std::pair<int, int>> links;
  for (int s = 0; s + 1 < schedule.problem.stages; ++s) {
    const int a = schedule.placement.rank_of(s), b = schedule.placement.rank_of(s + 1);
    if (a == b) continue;
    links.emplace_back(a, b);
    links.emplace_back(b, a);
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

//! Ends `comm` when its owner goes: finalized and destroyed when `stream` (the owner's, if it
//! made one) is idle and nothing broke, aborted otherwise (work still in flight is abandoned:
//! the job is ending). Never throws.
inline void end_link(Link& comm, const std::optional<CudaStream>& stream, bool broken) noexcept {
  try {
    const bool idle = !broken && stream && cudaStreamQuery(*stream) == cudaSuccess;
    if (idle && comm.finalize(std::chrono::steady_clock::now() + std::chrono::seconds(10)))
      comm.destroy();
    else
      comm.abort();
  } catch (...) {
  }
}

//! Waits on the host for `done` (a mark on a stream), running `poll` (when set) between its
//! queries, until `wait`'s deadline: true when the work before the mark completed, false when
//! the deadline passed first. Throws cuda_error when that work failed.
inline bool wait_for_mark(const CudaDevice::Mark& done, const Wait& wait,
                          const std::function<void()>& poll) {
  return poll_until(
      wait,
      [&] {
        const cudaError_t e = cudaEventQuery(done.event->get());
        if (e != cudaErrorNotReady) PIPESCHED_CUDA_CHECK(e);
        return e == cudaSuccess;
      },
      [&] {
        if (poll) poll();
      });
}

//! After a failed step: waits on the host until `stream` is idle, until `wait`'s deadline. True
//! when all its work completed without error; false when the deadline passed first or the
//! work failed (the owner's communicator then counts as broken).
inline bool wait_idle(cudaStream_t stream, const Wait& wait) {
  bool failed = false;
  const bool idle = poll_until(wait, [&] {
    const cudaError_t e = cudaStreamQuery(stream);
    failed = e != cudaSuccess && e != cudaErrorNotReady;
    return e != cudaErrorNotReady;
  });
  return idle && !failed;
}

}  // namespace detail::nccl

//! The tickets' own MPI wire form: a fixed-size host message with no payload of its own. This
//! lets an `mpi::Transport<Ticket>` serve as the NCCL transport's control plane.
template <>
struct wire<detail::nccl::Ticket> {
  static constexpr std::uint32_t code = 0x4e43u;  // "NC"
  static WireHeader describe(const detail::nccl::Ticket&) {
    WireHeader h;
    h.element_type = code;
    return h;
  }
  static std::span<const std::byte> payload(const detail::nccl::Ticket&) { return {}; }
  static std::span<std::byte> payload(detail::nccl::Ticket&) { return {}; }
  static detail::nccl::Ticket make(const WireHeader& h) {
    if (h.magic != WireHeader::magic_value || h.element_type != code)
      throw error("a received header is not an NCCL transport ticket.");
    return {};
  }
};
}  // namespace pipesched
