// The NCCL transport: one pipeline rank per MPI process, one GPU per rank. A tensor's payload
// goes GPU to GPU by ncclSend/ncclRecv on the device's per-peer send and receive streams; its
// description (a WireHeader, the message key and a sequence number) goes ahead over MPI, since
// a receiver cannot size its buffer otherwise. No host thread waits for the GPU inside a step:
// a send waits (on the GPU) for the compute stream that produced the tensor, a receive makes
// the compute stream wait for the payload's event.
//
// Why one NCCL communicator per direction between two neighbouring ranks rather than one for
// all: NCCL runs the operations of a communicator one after the other, and a send may wait on
// the GPU until its receive is posted. With one communicator, 1F1B on two ranks would deadlock
// once messages outgrow NCCL's buffers: rank 0's send of microbatch 1's activation and rank
// 1's send of microbatch 0's gradient each run ahead of the receive their rank queued after
// them, and each waits for that receive on the other rank. A communicator that carries one
// direction only sees its sends and receives in the same order on both ends (the sender
// numbers its sends; the receiver posts its receives strictly in that order), so it always
// progresses.
//
// Failures reuse the MPI transport's control plane: an mpi::Transport that carries no tensors
// sends and hears the failure notices, so a failing rank stops every other one with its
// message, and `drain` leaves NCCL and MPI clean for the next step.
#pragma once
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/core/schedule.hpp"
#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/wire.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/mpi/mpi_transport.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/detail/setup.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"

namespace pipesched::nccl {

//! Tuning knobs of nccl::Transport.
struct TransportOptions {
  //! Sleep between completion tests while a receive waits (the core is free meanwhile).
  std::chrono::microseconds poll_interval{20};
  //! How long the start-up agreements (on the schedule, and on every process having its GPU)
  //! wait for every process (mpi::TransportOptions::startup_timeout).
  std::chrono::duration<double> startup_timeout{detail::default_startup_timeout_s};
};

//! Ranks as GPUs, one per MPI process: the process of rank r of `comm` runs pipeline rank r on
//! its CudaDevice. Satisfies `transport<nccl::Transport<Tensor>, Tensor>` for a stream-aware
//! `Tensor` with a `wire` specialization (DeviceTensor<T>). One thread per process calls it.
//!
//! Construction is collective over `comm`: rank 0 makes one NCCL unique id per direction
//! between ranks that hold neighbouring stages, MPI broadcasts them, and each rank joins its
//! communicators in one global order (so the blocking joins cannot wait on each other in a
//! cycle).
template <class Tensor>
requires stream_tensor<Tensor>
class Transport : detail::mpi::RankGeometry {
  static_assert(check_wire_tensor<Tensor>());

 public:
  //! Runs this process's rank on `device`. MPI must be initialized (mpi::Session) and `comm`'s
  //! size must be the schedule's rank count; every process constructs its transport with the
  //! same schedule. `job`, when given, is the whole job `comm` is one pipeline of (as for
  //! mpi::Transport): failure notices and the step's agreement go over it.
  Transport(const Schedule& schedule, CudaDevice device, MPI_Comm comm = MPI_COMM_WORLD,
            TransportOptions options = {}, MPI_Comm job = MPI_COMM_NULL)
      : Transport(
            schedule, [&] { return std::move(device); }, comm, options, job, 0) {}

  //! Runs this process's rank on GPU `ordinal` (usually its local rank on the node). The
  //! process count is checked before the GPU is touched.
  Transport(const Schedule& schedule, int ordinal, MPI_Comm comm = MPI_COMM_WORLD,
            TransportOptions options = {})
      : Transport(
            schedule, [ordinal] { return CudaDevice(ordinal); }, comm, options, MPI_COMM_NULL, 0) {}

  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  //! Ends the NCCL communicators (aborting them when the GPU still has communication queued,
  //! which a peer that is gone would never complete) and cancels the posted header receives;
  //! never blocks for long.
  ~Transport() {
    try {
      device_.activate();
      ready_.clear();
      local_.clear();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      // After a wait that timed out a peer may be gone, and a finalize would wait for it; and
      // either every process finalizes its links or none does, since a finalize waits for the
      // link's other rank.
      const bool idle = !stalled_ && settle(deadline);
      end_links(every_process(idle, deadline + std::chrono::seconds(2)),
                deadline + std::chrono::seconds(10));
    } catch (...) {
      end_links(false, std::chrono::steady_clock::now());
    }
    if (!detail::mpi::initialized()) return;
    for (auto& [peer, in] : from_)
      if (in.request != MPI_REQUEST_NULL) {
        MPI_Cancel(&in.request);
        MPI_Wait(&in.request, MPI_STATUS_IGNORE);
      }
    poll_until("the tickets in flight", std::chrono::steady_clock::now() + std::chrono::seconds(2),
               [&] {
                 test_sends();
                 return outgoing_.empty();
               });
    if (header_comm_ != MPI_COMM_NULL) MPI_Comm_free(&header_comm_);
  }

  //! This process's pipeline rank.
  int rank() const noexcept { return rank_; }
  //! Processes (= pipeline ranks = GPUs).
  int ranks() const noexcept { return ranks_; }
  //! This rank's GPU.
  CudaDevice& device() noexcept { return device_; }
  //! The communicator of the control plane (barriers, agreement, failure notices).
  MPI_Comm communicator() const noexcept { return control_.communicator(); }
  //! The communicator of the whole job (the pipeline's own without a `job`).
  MPI_Comm job() const noexcept { return control_.job(); }

  //! Starts sending `x` to rank `to` under `key`: its ticket over MPI, its payload by ncclSend
  //! on the send stream to `to` once the compute stream has produced it. Returns at once; the
  //! tensor is freed in the send stream's order, after NCCL has read it.
  void send(int from, int to, const MessageKey& key, Tensor&& x) {
    check_self(from, "send from");
    check_peer(to, "send to");
    check_key(key);
    Tensor t = std::move(x);
    const cudaStream_t compute = device_.compute();
    if (to == rank_) {  // a message to itself never leaves the GPU
      follow(compute, t);
      auto [it, fresh] = local_.try_emplace(detail::pack_key(key), std::move(t));
      if (!fresh) throw twice(key, "sent to itself");
      return;
    }
    auto link = to_.find(to);
    if (link == to_.end())
      throw error("nccl::Transport: rank " + std::to_string(rank_) + " sends the " +
                  detail::describe_key(key) + " to rank " + std::to_string(to) +
                  ", but the placement has no neighbouring stages on these ranks, so no NCCL "
                  "link joins them.");
    auto out = std::make_unique<Outgoing>();
    out->ticket.header = wire<Tensor>::describe(t);
    out->ticket.stage = key.stage;
    out->ticket.microbatch = key.microbatch;
    out->ticket.slice = key.slice;
    out->ticket.direction = key.direction == Direction::Backward ? 1 : 0;
    out->ticket.sequence = link->second.count;
    const std::span<const std::byte> bytes = wire<Tensor>::payload(t);
    if (bytes.size() != out->ticket.header.payload_bytes)
      throw error("wire<Tensor>::describe announces " +
                  std::to_string(out->ticket.header.payload_bytes) +
                  " payload bytes but payload() has " + std::to_string(bytes.size()) + ".");
    const cudaStream_t stream = device_.send_stream(to);
    if (!bytes.empty()) {
      follow(stream, t);  // the send starts after the tensor's producer; freed after it
      PIPESCHED_NCCL_CHECK(ncclSend(bytes.data(), bytes.size(), ncclUint8, /*peer=*/1,
                                    link->second.comm.get(), stream));
    }
    // The ticket goes once the payload is queued: a receiver never posts a receive that has
    // no send behind it.
    detail::mpi::check(MPI_Isend(&out->ticket, sizeof(detail::nccl::Ticket), MPI_BYTE, to,
                                 ticket_tag, header_comm_, &out->request),
                       "MPI_Isend");
    ++link->second.count;
    outgoing_.push_back(std::move(out));
    test_sends();
  }

  //! Waits (sleeping between tests) until the message `key` has arrived and returns it; the
  //! compute stream waits (on the GPU) for its payload. Throws receive_timeout after
  //! `timeout`; transport_aborted when another rank failed.
  Tensor receive(int rank, const MessageKey& key, std::chrono::duration<double> timeout) {
    check_self(rank, "receive on");
    check_key(key);
    std::optional<Tensor> x;
    const std::string what = "the " + detail::describe_key(key);
    if (!poll_until(what, detail::deadline_after(timeout), [&] {
          progress();
          if ((x = take(key))) return true;
          if (failure()) throw transport_aborted(aborted_message(key));
          return false;
        }))
      throw receive_timeout("rank " + std::to_string(rank_) + " waited " +
                            detail::mpi::seconds_text(timeout.count()) + " s for " + what +
                            " from rank " + std::to_string(source_of(key)) +
                            " and none came; is that process alive and running the same "
                            "schedule?");
    return std::move(*x);
  }

  //! The message `key` if its ticket has arrived (its payload may still be on its way: the
  //! compute stream waits for it); never waits.
  std::optional<Tensor> try_receive(int rank, const MessageKey& key) {
    check_self(rank, "receive on");
    check_key(key);
    progress();
    if (std::optional<Tensor> x = take(key)) return x;
    if (failure()) throw transport_aborted(aborted_message(key));
    return std::nullopt;
  }

  //! Stops this process's waits and tells every other rank that this one failed.
  void abort() { control_.abort(); }
  //! Tells every other rank that this one failed, and why (see mpi::Transport::notify_failure).
  void notify_failure(const FailureNotice& notice) { control_.notify_failure(notice); }
  //! The failure this process heard of (its own or a peer's), if any.
  const std::optional<FailureNotice>& failure() const noexcept { return control_.failure(); }

  //! Completes arrived tickets (posting their payload receives, in sequence order per peer,
  //! grouped), sent tickets and failure notices. Receive and try_receive call it.
  void progress() {
    control_.progress();
    for (auto& [peer, in] : from_)
      receive_tickets(peer, in);
    test_sends();
  }

  //! Waits for `request` while running progress, up to `deadline`; false when it did not
  //! complete in time.
  bool wait(MPI_Request& request, std::chrono::steady_clock::time_point deadline) {
    const detail::Wait wait{"a collective of the pipeline", deadline, options_.poll_interval};
    return detail::poll_until(
               wait, [&] { return detail::mpi::test(request); }, [&] { progress(); }) ||
           stall();
  }

  //! After a failed step in which every process is still alive and has called this: posts the
  //! receive of every payload a peer sent this rank, lets the GPU finish the step's
  //! communication, drops the messages nobody took and clears the control plane, so the next
  //! step starts clean (collective; bounded by `timeout`; false when it could not).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    device_.activate();
    // Everyone learns how many tickets each peer has sent it (counts never restart, as NCCL's
    // matching never does).
    std::vector<long long> sent(static_cast<std::size_t>(ranks_), 0), to_me(sent.size(), 0);
    for (const auto& [peer, link] : to_)
      sent[static_cast<std::size_t>(peer)] = static_cast<long long>(link.count);
    MPI_Request request = MPI_REQUEST_NULL;
    detail::mpi::check(MPI_Ialltoall(sent.data(), 1, MPI_LONG_LONG, to_me.data(), 1, MPI_LONG_LONG,
                                     header_comm_, &request),
                       "MPI_Ialltoall");
    if (!wait(request, deadline)) return false;  // wait() marks the stall
    const bool all_in = poll_until("the tickets in flight after a failed step", deadline, [&] {
      progress();
      bool all = true;
      for (const auto& [peer, in] : from_)
        all = all && static_cast<long long>(in.count) >= to_me[static_cast<std::size_t>(peer)];
      return all;
    });
    if (!all_in) return stall();
    if (!settle(deadline)) return stall();
    ready_.clear();
    local_.clear();
    const std::chrono::duration<double> left = deadline - std::chrono::steady_clock::now();
    return control_.drain(std::max(left, std::chrono::duration<double>(0.0))) || stall();
  }

  //! Per-step bookkeeping: called by nccl::Pipeline when a step starts.
  void begin_step() { control_.begin_step(); }

  //! Messages arrived (or posted) and not yet taken (0 after a clean step).
  std::size_t pending() const noexcept {
    return ready_.size() + local_.size() + control_.pending();
  }

  //! The ranks this one has an NCCL link to, in increasing order (its pipeline neighbours).
  std::vector<int> peers() const {
    std::vector<int> p;
    for (const auto& [peer, link] : to_)
      p.push_back(peer);
    for (const auto& [peer, link] : from_)
      if (!to_.contains(peer)) p.push_back(peer);
    std::sort(p.begin(), p.end());
    return p;
  }

 private:
  static constexpr int ticket_tag = 1;

  // This rank → a peer: the link and how many tickets went over it.
  struct Sender {
    detail::nccl::Link comm;
    std::uint64_t count = 0;
  };
  // A peer → this rank: the link, how many tickets were taken (their payload receives posted),
  // and the ticket receive that is posted now.
  struct Receiver {
    detail::nccl::Link comm;
    std::uint64_t count = 0;
    detail::nccl::Ticket ticket{};
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct Outgoing {
    detail::nccl::Ticket ticket{};
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // A payload whose receive is posted: the compute stream waits for `done` before using it.
  struct Ready {
    Tensor tensor;
    CudaDevice::Mark done;
  };

  template <class MakeDevice>
  Transport(const Schedule& schedule, MakeDevice&& make_device, MPI_Comm comm,
            TransportOptions options, MPI_Comm job, int)
      : RankGeometry("nccl::Transport", schedule),
        options_(options),
        control_(schedule, comm,
                 mpi::TransportOptions{options.poll_interval, options.startup_timeout}, job),
        device_(detail::nccl::agreed_device(make_device, control_.communicator(),
                                            options.poll_interval, options.startup_timeout)) {
    rank_ = control_.rank();
    ranks_ = control_.ranks();
    device_.activate();
    connect(detail::nccl::pipeline_links(schedule));
    detail::mpi::check(MPI_Comm_dup(control_.communicator(), &header_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(header_comm_, MPI_ERRORS_RETURN);
    for (auto& [peer, in] : from_)
      post_ticket_receive(peer, in);
  }

  // Makes this rank's NCCL communicators, one per link it is on.
  void connect(const std::vector<std::pair<int, int>>& links) {
    for (detail::nccl::JoinedLink& j :
         detail::nccl::join_links(links, rank_, device_, control_.communicator())) {
      if (j.ends.first == rank_)
        to_[j.ends.second].comm = std::move(j.link);
      else
        from_[j.ends.first].comm = std::move(j.link);
      joined_.push_back(j.ends);
    }
  }

  // Notes that a peer may be gone (the links are then aborted, not finalized); false.
  bool stall() noexcept {
    stalled_ = true;
    return false;
  }

  // Whether `mine` holds on every process, agreed by an all-reduce that must finish by
  // `deadline` (false when some process does not take part in time).
  bool every_process(bool mine, std::chrono::steady_clock::time_point deadline) noexcept {
    if (ranks_ < 2 || header_comm_ == MPI_COMM_NULL || !detail::mpi::initialized()) return mine;
    return detail::mpi::every_process(mine, header_comm_, deadline, options_.poll_interval);
  }

  // A wait of the transport's own (its messages' interval): `done` until true, up to
  // `deadline`; false when it ran out.
  template <class Done>
  bool poll_until(std::string_view what, std::chrono::steady_clock::time_point deadline,
                  Done&& done) {
    return detail::poll_until({what, deadline, options_.poll_interval}, done);
  }

  // This rank's links in the order every rank joined them (pipeline_links' order).
  std::vector<detail::nccl::Link*> links_in_order() {
    std::vector<detail::nccl::Link*> out;
    for (const auto& [from, to] : joined_)
      out.push_back(from == rank_ ? &to_.at(to).comm : &from_.at(from).comm);
    return out;
  }

  // Ends every NCCL link: when the GPU is idle (`clean`), each is finalized in the global
  // order — a finalize waits for the other rank of its link, and ranks that took their links
  // in different orders (outgoing first, say) could each wait for the other — and then all are
  // destroyed; otherwise, or when a finalize fails or passes `deadline`, the rest are aborted.
  void end_links(bool clean, std::chrono::steady_clock::time_point deadline) noexcept {
    try {
      const std::vector<detail::nccl::Link*> links = links_in_order();
      for (detail::nccl::Link* link : links)
        clean = clean && link->finalize(deadline);
      for (detail::nccl::Link* link : links)
        clean ? link->destroy() : link->abort();
    } catch (...) {
      // Link's own destructor aborts whatever is left.
    }
  }

  void post_ticket_receive(int peer, Receiver& in) {
    detail::mpi::check(MPI_Irecv(&in.ticket, sizeof(detail::nccl::Ticket), MPI_BYTE, peer,
                                 ticket_tag, header_comm_, &in.request),
                       "MPI_Irecv");
  }

  // Takes every ticket from `peer` that has arrived: MPI delivers one source's messages on one
  // tag in the order they were sent, so they come in sequence order, and their receives are
  // posted in that order (together, in one NCCL group, when several came at once).
  void receive_tickets(int peer, Receiver& in) {
    std::vector<detail::nccl::Ticket> got;
    for (;;) {
      int done = 0;
      detail::mpi::check(MPI_Test(&in.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      got.push_back(in.ticket);
      post_ticket_receive(peer, in);
    }
    if (got.empty()) return;
    const cudaStream_t stream = device_.recv_stream(peer);
    std::vector<std::pair<MessageKey, Tensor>> batch;
    batch.reserve(got.size());
    for (const detail::nccl::Ticket& t : got) {
      const MessageKey key = t.key();
      if (t.sequence != in.count + batch.size())
        throw error("nccl::Transport: rank " + std::to_string(rank_) + " expected message " +
                    std::to_string(in.count + batch.size()) + " from rank " + std::to_string(peer) +
                    " but its ticket says " + std::to_string(t.sequence) +
                    "; the two processes disagree on what was sent.");
      check_key(key);
      if (source_of(key) != peer)
        throw error("nccl::Transport: rank " + std::to_string(peer) + " sent the " +
                    detail::describe_key(key) + ", which the placement has rank " +
                    std::to_string(source_of(key)) +
                    " send; do the processes run the same "
                    "schedule?");
      batch.emplace_back(key, make_on(t.header, stream));
      const std::size_t size = wire<Tensor>::payload(batch.back().second).size();
      if (size != t.header.payload_bytes)
        throw error("wire<Tensor>::make gave a tensor of " + std::to_string(size) +
                    " payload bytes for a header that announces " +
                    std::to_string(t.header.payload_bytes) + ".");
    }
    const bool any = std::any_of(batch.begin(), batch.end(),
                                 [](auto& m) { return !wire<Tensor>::payload(m.second).empty(); });
    if (any) {
      PIPESCHED_NCCL_CHECK(ncclGroupStart());
      try {
        for (auto& [key, x] : batch) {
          const std::span<std::byte> bytes = wire<Tensor>::payload(x);
          if (!bytes.empty())
            PIPESCHED_NCCL_CHECK(
                ncclRecv(bytes.data(), bytes.size(), ncclUint8, /*peer=*/0, in.comm.get(), stream));
        }
      } catch (...) {
        (void)ncclGroupEnd();
        throw;
      }
      PIPESCHED_NCCL_CHECK(ncclGroupEnd());
    }
    in.count += batch.size();
    const CudaDevice::Mark done = device_.mark_on(stream);
    for (auto& [key, x] : batch) {
      auto [it, fresh] = ready_.try_emplace(detail::pack_key(key), Ready{std::move(x), done});
      if (!fresh) throw twice(key, "received");
    }
  }

  // A tensor shaped by `h` whose memory `stream` may write.
  Tensor make_on(const WireHeader& h, cudaStream_t stream) {
    if constexpr (requires {
                    { wire<Tensor>::make(h, stream) } -> std::same_as<Tensor>;
                  }) {
      Tensor x = wire<Tensor>::make(h, stream);
      x.set_stream(stream);
      return x;
    } else {
      Tensor x = wire<Tensor>::make(h);
      if (x.stream() != stream) CudaDevice::wait(stream, device_.mark_on(x.stream()));
      x.set_stream(stream);
      return x;
    }
  }

  // Orders `stream` after the work on the stream that owns `x` (and after the compute stream,
  // where the stage models write), then hands `x` to `stream`.
  void follow(cudaStream_t stream, Tensor& x) {
    if (stream != device_.compute()) CudaDevice::wait(stream, device_.mark());
    if (x.stream() != stream && x.stream() != device_.compute())
      CudaDevice::wait(stream, device_.mark_on(x.stream()));
    x.set_stream(stream);
  }

  std::optional<Tensor> take(const MessageKey& key) {
    const std::uint64_t k = detail::pack_key(key);
    if (auto it = local_.find(k); it != local_.end()) {
      std::optional<Tensor> x(std::move(it->second));
      local_.erase(it);
      return x;
    }
    auto it = ready_.find(k);
    if (it == ready_.end()) return std::nullopt;
    Ready r = std::move(it->second);
    ready_.erase(it);
    const cudaStream_t compute = device_.compute();
    CudaDevice::wait(compute, r.done);
    r.tensor.set_stream(compute);
    return std::optional<Tensor>(std::move(r.tensor));
  }

  void test_sends() {
    std::erase_if(outgoing_, [](std::unique_ptr<Outgoing>& out) {
      int done = 0;
      MPI_Test(&out->request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  // Waits (polling, up to `deadline`) until the compute stream and the communication streams
  // have no work left; false when they still have some then.
  bool settle(std::chrono::steady_clock::time_point deadline) {
    std::vector<cudaStream_t> streams{device_.compute()};
    for (const auto& [peer, link] : to_)
      streams.push_back(device_.send_stream(peer));
    for (const auto& [peer, link] : from_)
      streams.push_back(device_.recv_stream(peer));
    return poll_until("the GPU's work of the step", deadline, [&] {
      for (cudaStream_t s : streams) {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaErrorNotReady) return false;
        PIPESCHED_CUDA_CHECK(e);
      }
      return true;
    });
  }

  error twice(const MessageKey& key, const char* what) const {
    return error("rank " + std::to_string(rank_) + " " + what + " the " +
                 detail::describe_key(key) + " twice in one step.");
  }

  std::string aborted_message(const MessageKey& key) const {
    const FailureNotice& f = *failure();
    return "rank " + std::to_string(rank_) + " stopped waiting for the " +
           detail::describe_key(key) + ": rank " + std::to_string(f.rank) + " failed (" +
           f.message + ")";
  }

  TransportOptions options_;
  mpi::Transport<detail::nccl::Ticket> control_;  // failure notices and the step's agreement
  CudaDevice device_;
  MPI_Comm header_comm_ = MPI_COMM_NULL;     // tickets only, so drains of either side stay apart
  std::map<int, Sender> to_;                 // by receiving peer
  std::map<int, Receiver> from_;             // by sending peer (map nodes keep `ticket` in place)
  std::vector<std::pair<int, int>> joined_;  // this rank's links, (sender, receiver), in order
  bool stalled_ = false;                     // a collective wait timed out: a peer may be gone
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
  std::unordered_map<std::uint64_t, Ready> ready_;   // by packed key
  std::unordered_map<std::uint64_t, Tensor> local_;  // messages to itself, by packed key
};
}  // namespace pipesched::nccl
