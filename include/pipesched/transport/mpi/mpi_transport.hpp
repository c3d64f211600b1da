// The MPI transport: one pipeline rank per process. Each message is a fixed-size header
// (extents, payload size) and the tensor's payload, sent non-blocking under tags derived from
// (stage, microbatch, slice, direction); a rank posts the header receives of a whole step
// ahead, posts each payload receive as soon as its header lands (straight into the tensor),
// and tests for completion between sleeps of a few microseconds, so a waiting rank leaves its
// core to others. A failing rank sends a failure notice to every other rank; their waits
// stop with the failing rank, position and action named.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/wire.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/mpi/detail/rank_geometry.hpp"
#include "pipesched/transport/mpi/mpi_errors.hpp"

namespace pipesched::mpi {

//! Tuning knobs of mpi::Transport.
struct TransportOptions {
  //! Sleep between completion tests while a receive waits (the core is free meanwhile): 0 to
  //! 1 s (0 polls without sleeping; a longer sleep would overshoot every receive deadline by
  //! as much). Others are refused when the transport is built.
  std::chrono::microseconds poll_interval{20};
  //! How long the start-up agreement on the schedule (every process compares its schedule's
  //! fingerprint when its transport is built) waits for every process of the job: at least
  //! 1 ms, or infinity to wait without a deadline. A process that has not joined by then
  //! (dead, hung, or never reaching its transport) makes the others throw peer_lost.
  std::chrono::duration<double> startup_timeout{detail::default_startup_timeout_s};
};

//! Ranks as MPI processes: the process of rank r of `comm` runs pipeline rank r. Satisfies
//! `transport<mpi::Transport<Tensor>, Tensor>` for a `Tensor` with a `wire` specialization.
//! One thread per process calls it (MPI_THREAD_FUNNELED is enough for it).
template <class Tensor>
class Transport : detail::mpi::RankGeometry {
  static_assert(check_wire_tensor<Tensor>());

 public:
  //! Carries vocabulary messages: any process may send to any other.
  static constexpr bool carries_vocabulary = true;

  //! Duplicates `comm` (its size must be the schedule's rank count). MPI must be initialized.
  //! Collective over `comm`: the processes first compare their schedules' fingerprints
  //! (`schedule_fingerprint`) and every one throws schedule_mismatch, naming rank 0 and the
  //! first rank that differs, unless all are the same.
  //!
  //! `job`, when given, is the communicator of the whole job `comm` is one pipeline of (the
  //! one mpi::Groups split, with data-parallel replicas of the pipeline): the schedules are
  //! compared over it, and a failing rank's notice goes to every process of it, so that the
  //! other replicas' waits (a data-parallel reduction with the failing replica) stop too.
  //! Collective over `job` then.
  Transport(const Schedule& schedule, MPI_Comm comm = MPI_COMM_WORLD, TransportOptions options = {},
            MPI_Comm job = MPI_COMM_NULL)
      : RankGeometry("mpi::Transport", schedule), options_(options) {
    if (options_.poll_interval < std::chrono::microseconds(0) ||
        options_.poll_interval > std::chrono::seconds(1))
      throw invalid_problem("mpi::Transport: poll_interval is " +
                            std::to_string(options_.poll_interval.count()) +
                            " µs; give 0 to 1000000 µs (1 s) to sleep between the tests of a "
                            "waiting receive (the default is 20 µs).");
    if (!(options_.startup_timeout.count() >= detail::min_receive_timeout_s))
      throw invalid_problem("mpi::Transport: startup_timeout is " +
                            detail::seconds_text(options_.startup_timeout.count()) +
                            " s; give at least 0.001 s (1 ms), or infinity to wait for every "
                            "process without a deadline (the default is 60 s).");
    if (!detail::mpi::initialized())
      throw error(
          "mpi::Transport: MPI is not initialized; create a pipesched::mpi::Session (or call "
          "MPI_Init_thread) before the transport.");
    if (job == MPI_COMM_NULL) job = comm;
    detail::mpi::agree_on_schedule("mpi::Transport", schedule, job, options_.poll_interval,
                                   options_.startup_timeout);
    int size = 0;
    detail::mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    if (size != schedule.rank_count())
      throw invalid_problem("mpi::Transport: the schedule has " +
                            std::to_string(schedule.rank_count()) +
                            " ranks but the communicator has " + std::to_string(size) +
                            " processes; start one process per rank (mpirun -np " +
                            std::to_string(schedule.rank_count()) + ").");
    // Tags: 0 carries failure notices; a message's header and payload take 2i+1 and 2i+2.
    const long long messages =
        static_cast<long long>(stages_) * microbatches_ * slices_ * directions_;
    int* upper = nullptr;
    int found = 0;
    detail::mpi::check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &upper, &found), "MPI_Comm_get_attr");
    const long long tag_ub = found && upper ? *upper : 32767;
    if (2 * messages + 2 > tag_ub)
      throw invalid_problem("mpi::Transport: " + std::to_string(stages_) + " stages × " +
                            std::to_string(microbatches_) + " microbatches × " +
                            std::to_string(slices_) + " slices need " +
                            std::to_string(2 * messages + 2) +
                            " message tags but this MPI "
                            "allows " +
                            std::to_string(tag_ub) + "; use fewer microbatches per step.");
    detail::mpi::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    detail::mpi::check(MPI_Comm_dup(job, &notices_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(notices_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(notices_, &job_rank_);
    MPI_Comm_size(notices_, &job_size_);
    ranks_ = size;
    sent_.assign(static_cast<std::size_t>(size), 0);
    received_.assign(static_cast<std::size_t>(size), 0);
    detail::mpi::tighten_timer_slack();
    post_notice_receive();
  }

  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  //! Cancels the receives still posted and gives sends a moment to complete; never blocks
  //! for long (a peer that is gone cannot make it wait).
  ~Transport() {
    if (!detail::mpi::initialized()) return;
    try {
      cancel_receives();
      if (notice_request_ != MPI_REQUEST_NULL) cancel(notice_request_);
      settle_sends(std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (...) {
    }
    MPI_Comm_free(&comm_);
    MPI_Comm_free(&notices_);
  }

  //! This process's pipeline rank.
  int rank() const noexcept { return rank_; }
  //! Processes (= pipeline ranks) in the communicator.
  int ranks() const noexcept { return ranks_; }
  //! The transport's own communicator (a duplicate of the one given).
  MPI_Comm communicator() const noexcept { return comm_; }
  //! The communicator of the whole job (a duplicate of `job`, or of `comm` without one): the
  //! failure notices go over it, and a process pipeline agrees over it on each step.
  MPI_Comm job() const noexcept { return notices_; }

  //! Starts sending `x` to rank `to` under `key`; returns at once (the tensor is kept until
  //! MPI is done with it).
  void send(int from, int to, const MessageKey& key, Tensor&& x) {
    check_self(from, "send from");
    check_peer(to, "send to");
    const int tag = header_tag(key);
    if (to == rank_) {  // a message to itself never touches MPI
      auto entry = std::make_unique<Incoming>();
      entry->tensor.emplace(std::move(x));
      entry->state = Incoming::Arrived;
      auto [it, fresh] = incoming_.try_emplace(tag, std::move(entry));
      if (!fresh) {
        if (it->second->state != Incoming::HeaderPosted || it->second->source != rank_)
          throw error("rank " + std::to_string(rank_) + " sent the " + detail::describe_key(key) +
                      " to itself twice in one step.");
        cancel(it->second->request);
        it->second = std::make_unique<Incoming>();
        it->second->tensor.emplace(std::move(x));
        it->second->state = Incoming::Arrived;
      }
      return;
    }
    auto out = std::make_unique<Outgoing>();
    out->header = wire<Tensor>::describe(x);
    out->tensor.emplace(std::move(x));
    const std::span<const std::byte> bytes = wire<Tensor>::payload(*out->tensor);
    if (bytes.size() != out->header.payload_bytes)
      throw error("wire<Tensor>::describe announces " + std::to_string(out->header.payload_bytes) +
                  " payload bytes but payload() has " + std::to_string(bytes.size()) + ".");
    if (bytes.size() > static_cast<std::size_t>(INT_MAX))
      throw error("a tensor of " + std::to_string(bytes.size()) +
                  " bytes is larger than one MPI message may be (2 GiB).");
    detail::mpi::check(
        MPI_Isend(&out->header, sizeof(WireHeader), MPI_BYTE, to, tag, comm_, &out->requests[0]),
        "MPI_Isend");
    ++sent_[static_cast<std::size_t>(to)];
    if (!bytes.empty()) {
      detail::mpi::check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to,
                                   tag + 1, comm_, &out->requests[1]),
                         "MPI_Isend");
      ++sent_[static_cast<std::size_t>(to)];
    }
    outgoing_.push_back(std::move(out));
    test_sends();
  }

  //! Posts the header receives of `keys` (the messages this rank will receive in the step,
  //! in order) so they match as soon as their senders send.
  void post_receives(int rank, std::span<const MessageKey> keys) {
    check_self(rank, "post receives on");
    for (const MessageKey& k : keys)
      entry(k);
  }

  //! Waits (sleeping between tests) until the message `key` has arrived and returns it.
  //! Throws receive_timeout after `timeout`; transport_aborted when another rank failed.
  Tensor receive(int rank, const MessageKey& key, std::chrono::duration<double> timeout) {
    check_self(rank, "receive on");
    Incoming& in = entry(key);
    const std::string what = "the " + detail::describe_key(key);
    const detail::Wait wait{what, detail::deadline_after(timeout), options_.poll_interval};
    if (!detail::poll_until(wait, [&] {
          progress();
          if (in.state == Incoming::Arrived) return true;
          if (failure_) throw transport_aborted(aborted_message(key));
          return false;
        }))
      throw receive_timeout("rank " + std::to_string(rank_) + " waited " +
                            detail::mpi::seconds_text(timeout.count()) + " s for " + what +
                            " from rank " + std::to_string(in.source) +
                            " and none came; is that process "
                            "alive and running the same schedule?");
    return take(key);
  }

  //! The message `key` if it has arrived; never waits.
  std::optional<Tensor> try_receive(int rank, const MessageKey& key) {
    check_self(rank, "receive on");
    Incoming& in = entry(key);
    progress();
    if (in.state != Incoming::Arrived) {
      if (failure_) throw transport_aborted(aborted_message(key));
      return std::nullopt;
    }
    return take(key);
  }

  //! Stops this process's waits and tells every other rank that this one failed (without
  //! details; see `notify_failure`).
  void abort() { notify_failure(FailureNotice{rank_, -1, Action{}, "rank aborted"}); }

  //! Tells every other rank that this one failed, and why; their waits then throw
  //! transport_aborted carrying `notice`. Never waits.
  void notify_failure(const FailureNotice& notice) {
    if (!failure_) failure_ = notice;
    if (notified_) return;
    notified_ = true;
    for (int r = 0; r < job_size_; ++r) {
      if (r == job_rank_) continue;
      auto out = std::make_unique<Outgoing>();
      out->notice = detail::mpi::encode(notice);
      out->notice.step = step_;
      // A peer that is gone may refuse; the others still hear of it.
      if (MPI_Isend(&out->notice, sizeof(detail::mpi::NoticeWire), MPI_BYTE, r, notice_tag,
                    notices_, &out->requests[0]) == MPI_SUCCESS)
        outgoing_.push_back(std::move(out));
    }
  }

  //! The failure this process heard of (its own or a peer's), if any.
  const std::optional<FailureNotice>& failure() const noexcept { return failure_; }

  //! Runs MPI's progress once: completes arrived headers (posting their payload receives),
  //! payloads, sends and failure notices. Receive and try_receive call it.
  void progress() {
    test_receives();
    test_notice();
    test_sends();
  }

  //! After a failed step in which every process is still alive and has called this: receives
  //! and drops every message still in flight to this rank, cancels posted receives and
  //! completes the sends, so the communicator is clean for the next step (collective over
  //! the transport's communicator; bounded by `timeout`; returns false when it could not).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    cancel_receives();
    // Everyone learns how many messages each peer sent it.
    std::vector<long long> to_me(static_cast<std::size_t>(ranks_), 0);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi::check(
        MPI_Ialltoall(sent_.data(), 1, MPI_LONG_LONG, to_me.data(), 1, MPI_LONG_LONG, comm_, &req),
        "MPI_Ialltoall");
    if (!wait(req, deadline)) return false;
    std::vector<std::byte> sink;
    for (int src = 0; src < ranks_; ++src) {
      auto& got = received_[static_cast<std::size_t>(src)];
      const auto all_in = [&] {
        for (;;) {
          if (got >= to_me[static_cast<std::size_t>(src)]) return true;
          int flag = 0;
          MPI_Message msg;
          MPI_Status st;
          detail::mpi::check(MPI_Improbe(src, MPI_ANY_TAG, comm_, &flag, &msg, &st), "MPI_Improbe");
          if (!flag) return false;
          if (st.MPI_TAG == notice_tag) {  // a notice is not counted; drop it
            detail::mpi::NoticeWire w;
            MPI_Mrecv(&w, sizeof w, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            continue;
          }
          int count = 0;
          MPI_Get_count(&st, MPI_BYTE, &count);
          sink.resize(static_cast<std::size_t>(std::max(count, 1)));
          detail::mpi::check(MPI_Mrecv(sink.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE),
                             "MPI_Mrecv");
          ++got;
        }
      };
      const detail::Wait wait{"the messages in flight after a failed step", deadline,
                              options_.poll_interval};
      if (!detail::poll_until(wait, all_in, [&] { test_sends(); })) return false;
    }
    if (!settle_sends(deadline)) return false;
    incoming_.clear();
    failure_.reset();
    notified_ = false;
    return true;
  }

  //! Waits for `request` while running progress, up to `deadline`; false when it did not
  //! complete in time.
  bool wait(MPI_Request& request, std::chrono::steady_clock::time_point deadline) {
    const detail::Wait wait{"a collective of the pipeline", deadline, options_.poll_interval};
    return detail::poll_until(
        wait, [&] { return detail::mpi::test(request); }, [&] { progress(); });
  }

  //! Per-step bookkeeping: called by mpi::Pipeline when a step starts.
  void begin_step() {
    ++step_;
    std::fill(sent_.begin(), sent_.end(), 0);
    std::fill(received_.begin(), received_.end(), 0);
  }

  //! Messages posted or arrived and not yet taken (0 after a clean step).
  std::size_t pending() const noexcept { return incoming_.size(); }

 private:
  static constexpr int notice_tag = 0;

  struct Incoming {
    enum State { HeaderPosted, PayloadPosted, Arrived };
    WireHeader header{};
    std::optional<Tensor> tensor;
    MPI_Request request = MPI_REQUEST_NULL;
    State state = HeaderPosted;
    int source = -1;
  };
  struct Outgoing {
    WireHeader header{};
    std::optional<Tensor> tensor;
    detail::mpi::NoticeWire notice;
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  };

  int header_tag(const MessageKey& k) const {
    check_key(k);
    const long long index =
        ((static_cast<long long>(k.stage) * microbatches_ + k.microbatch) * slices_ + k.slice) *
            directions_ +
        static_cast<int>(k.direction);
    return static_cast<int>(2 * index + 1);
  }

  // The receive of `key`, posting its header receive if this is the first time it is asked.
  Incoming& entry(const MessageKey& key) {
    const int tag = header_tag(key);
    auto it = incoming_.find(tag);
    if (it != incoming_.end()) return *it->second;
    auto in = std::make_unique<Incoming>();
    in->source = source_of(key);
    if (in->source != rank_) {
      detail::mpi::check(MPI_Irecv(&in->header, sizeof(WireHeader), MPI_BYTE, in->source, tag,
                                   comm_, &in->request),
                         "MPI_Irecv");
      active_.push_back(in.get());
    }
    return *incoming_.emplace(tag, std::move(in)).first->second;
  }

  Tensor take(const MessageKey& key) {
    auto it = incoming_.find(header_tag(key));
    Tensor x = std::move(*it->second->tensor);
    incoming_.erase(it);
    return x;
  }

  void test_receives() {
    bool finished = false;
    for (Incoming* in : active_) {
      for (;;) {
        int done = 0;
        MPI_Status st;
        detail::mpi::check(MPI_Test(&in->request, &done, &st), "MPI_Test");
        if (!done) break;
        ++received_[static_cast<std::size_t>(in->source)];
        if (in->state == Incoming::PayloadPosted) {
          in->state = Incoming::Arrived;
          finished = true;
          break;
        }
        // A header: make the tensor and receive the payload straight into it.
        in->tensor.emplace(wire<Tensor>::make(in->header));
        const std::span<std::byte> bytes = wire<Tensor>::payload(*in->tensor);
        if (bytes.empty()) {
          in->state = Incoming::Arrived;
          finished = true;
          break;
        }
        in->state = Incoming::PayloadPosted;
        detail::mpi::check(MPI_Irecv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE,
                                     in->source, st.MPI_TAG + 1, comm_, &in->request),
                           "MPI_Irecv");
      }
    }
    if (finished)
      std::erase_if(active_, [](const Incoming* in) { return in->state == Incoming::Arrived; });
  }

  void test_sends() {
    std::erase_if(outgoing_, [](std::unique_ptr<Outgoing>& out) {
      int done = 0;
      MPI_Testall(2, out->requests.data(), &done, MPI_STATUSES_IGNORE);
      return done != 0;
    });
  }

  // Completes the sends still in flight, up to `deadline`; false when some are left then.
  bool settle_sends(std::chrono::steady_clock::time_point deadline) {
    const detail::Wait wait{"the sends in flight", deadline, options_.poll_interval};
    return detail::poll_until(wait, [&] {
      test_sends();
      return outgoing_.empty();
    });
  }

  void post_notice_receive() {
    detail::mpi::check(MPI_Irecv(&notice_in_, sizeof notice_in_, MPI_BYTE, MPI_ANY_SOURCE,
                                 notice_tag, notices_, &notice_request_),
                       "MPI_Irecv");
  }

  void test_notice() {
    int done = 0;
    detail::mpi::check(MPI_Test(&notice_request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return;
    if (!failure_ && notice_in_.step == step_) failure_ = detail::mpi::decode(notice_in_);
    post_notice_receive();
  }

  void cancel(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);  // a cancelled or completed receive returns at once
  }

  // Cancels the posted header and payload receives; one that completed first is counted.
  void cancel_receives() {
    for (Incoming* in : active_) {
      if (in->request == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&in->request);
      MPI_Status st;
      MPI_Wait(&in->request, &st);
      int cancelled = 0;
      MPI_Test_cancelled(&st, &cancelled);
      if (!cancelled) ++received_[static_cast<std::size_t>(in->source)];
    }
    active_.clear();
  }

  std::string aborted_message(const MessageKey& key) const {
    const FailureNotice& f = *failure_;
    return "rank " + std::to_string(rank_) + " stopped waiting for the " +
           detail::describe_key(key) + ": rank " + std::to_string(f.rank) + " failed (" +
           f.message + ")";
  }

  TransportOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm notices_ = MPI_COMM_NULL;  // the job's: failure notices only
  int job_rank_ = 0, job_size_ = 1;
  std::unordered_map<int, std::unique_ptr<Incoming>> incoming_;  // by header tag
  std::vector<Incoming*> active_;  // receives still posted (header or payload)
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
  std::vector<long long> sent_, received_;  // messages this step, per peer
  detail::mpi::NoticeWire notice_in_;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  std::optional<FailureNotice> failure_;
  bool notified_ = false;
  std::int32_t step_ = 0;
};
}  // namespace pipesched::mpi
