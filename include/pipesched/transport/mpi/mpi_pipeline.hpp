// A pipeline whose ranks are MPI processes: each process runs the Executor of its own rank
// over the MPI transport. Every process calls `step` with the same schedule and data; every
// process gets every rank's measurements back, and every process throws the same error
// (naming the failing rank and action) when a rank fails.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/detail/commit.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/mpi/mpi_transport.hpp"

namespace pipesched {

namespace detail::mpi {

// A RankRun as doubles, to gather every rank's measurements on every process.
inline void append(std::vector<double>& out, const RankRun& run) {
  out.insert(out.end(), {double(run.rank), run.loss, run.peak_bytes, run.end, double(run.filled),
                         double(run.timing.size()), double(run.memory.size())});
  for (const ActionTiming& t : run.timing)
    out.insert(out.end(), {t.start, t.end});
  for (const MemoryPoint& m : run.memory)
    out.insert(out.end(), {m.time, m.value});
}

inline RankRun read_run(const double*& p) {
  RankRun run;
  run.rank = static_cast<int>(p[0]);
  run.loss = p[1];
  run.peak_bytes = p[2];
  run.end = p[3];
  run.filled = static_cast<int>(p[4]);
  const auto timings = static_cast<std::size_t>(p[5]);
  const auto points = static_cast<std::size_t>(p[6]);
  p += 7;
  run.timing.resize(timings);
  for (ActionTiming& t : run.timing) {
    t = {p[0], p[1]};
    p += 2;
  }
  run.memory.resize(points);
  for (MemoryPoint& m : run.memory) {
    m = {p[0], p[1]};
    p += 2;
  }
  return run;
}

}  // namespace detail::mpi

namespace detail::mpi {

// A pipeline whose ranks are processes: this process runs its rank's Executor over `Transport`
// (MpiTransport, or NcclTransport for GPUs) on `Device`; every step starts after a barrier, ends
// with an agreement on whether (and which) a rank failed, and gathers every rank's figures on
// every process. The transport provides rank(), ranks(), communicator(), begin_step(),
// wait(request, deadline), notify_failure(), failure() and drain(timeout).
template <class Stage, class Transport, class Device>
class ProcessPipeline {
 public:
  using tensor_type = typename Stage::tensor_type;

  //! This process's pipeline rank.
  int rank() const noexcept { return transport_.rank(); }
  //! Pipeline ranks (= processes).
  int ranks() const noexcept { return transport_.ranks(); }

  //! Runs one training step: every process must call it. Returns every rank's measurements
  //! (times since a common start taken after a barrier) and the total loss, on every process.
  //! The step commits on every process or on none: the optimizer hooks run once every rank
  //! has finished its list, and when one throws, every rank's update is undone by the
  //! rollback hook (the error's `rolled_back()`, on every process).
  StepResult step(const TrainingData<tensor_type>& data) {
    if (broken_)
      throw peer_lost("rank " + std::to_string(rank()) +
                      ": an earlier step lost contact with a peer process; the job cannot run "
                      "more steps (end it with MpiSession::abort).");
    MPI_Comm comm = transport_.communicator();
    transport_.begin_step();
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
    if (!transport_.wait(request, deadline()))
      lost("not every process reached the start of the step");
    if constexpr (requires(const Device& d) { d.activate(); }) device_.activate();
    const auto start = device_.mark();

    RankRun run;
    std::optional<FailureNotice> local, heard;
    try {
      run = executor_->step(data, start);
    } catch (const transport_aborted&) {
      // Another rank failed; the agreement below names it.
      heard = transport_.failure();
    } catch (const execution_error& e) {
      local = FailureNotice{e.rank(), e.position(), e.action(), e.what()};
    } catch (...) {
      // The executor attaches what a layer or the optimizer throws; anything else still
      // reaches every process, as this rank's failure outside its list.
      local = FailureNotice{rank(), -1, Action{},
                            "rank " + std::to_string(rank()) + ": " + current_exception_text()};
    }
    if (local) transport_.notify_failure(*local);

    // Every process learns whether (and which) a rank failed.
    int failed = local ? rank() : INT_MAX;
    int lowest = INT_MAX;
    check(MPI_Iallreduce(&failed, &lowest, 1, MPI_INT, MPI_MIN, comm, &request), "MPI_Iallreduce");
    if (!transport_.wait(request, deadline()))
      lost(local   ? local->message
           : heard ? "rank " + std::to_string(heard->rank) + " failed (" + heard->message + ")"
                   : std::string("the other processes did not finish the step"));
    if (lowest != INT_MAX) fail(lowest, local);
    commit();
    return gather(std::move(run));
  }

  //! The transport (to inspect it in tests).
  Transport& transport() noexcept { return transport_; }
  //! The executed (lowered) schedule.
  const Schedule& schedule() const noexcept { return executor_->schedule(); }

 protected:
  template <class... TransportArgs>
  ProcessPipeline(const char* who, const Schedule& schedule, std::span<Stage> stages, Device device,
                  ExecutorOptions options, TransportArgs&&... transport_args)
      : transport_(std::forward<TransportArgs>(transport_args)...),
        device_(std::move(device)),
        timeout_(options.receive_timeout) {
    if (static_cast<int>(stages.size()) != schedule.problem.stages)
      throw invalid_problem(std::string(who) + ": the schedule has " +
                            std::to_string(schedule.problem.stages) + " stages but " +
                            std::to_string(stages.size()) +
                            " stage models were given; pass one per stage (indexed by stage).");
    std::vector<Stage*> mine;
    for (int s : schedule.placement.stages_of(transport_.rank()))
      mine.push_back(&stages[static_cast<std::size_t>(s)]);
    executor_.emplace(schedule, transport_.rank(), std::move(mine), transport_, device_,
                      std::move(options));
  }

 private:
  std::chrono::steady_clock::time_point deadline() const {
    return detail::deadline_after(timeout_);
  }

  [[noreturn]] void lost(const std::string& what) {
    broken_ = true;
    throw peer_lost("rank " + std::to_string(rank()) + ": " + what + "; no answer from every " +
                    "process within " + seconds_text(timeout_.count()) +
                    " s, so a process has died or hangs. End the job (MpiSession::abort).");
  }

  // Rank `who` failed in its list: every process gets its notice, the messages still in
  // flight are dropped, and the failure is thrown here as that rank's execution_error (no
  // rank has applied its update: the step is rolled back).
  [[noreturn]] void fail(int who, const std::optional<FailureNotice>& local) {
    const FailureNotice notice = notice_of(who, local);
    if (!transport_.drain(timeout_)) lost(notice.message);
    throw rolled_back(
        execution_error(notice.message, notice.rank, notice.position, notice.action));
  }

  // Rank `who`'s notice (`local` on that rank), on every process.
  FailureNotice notice_of(int who, const std::optional<FailureNotice>& local) {
    NoticeWire wire;
    if (who == rank()) wire = encode(*local);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(&wire, sizeof wire, MPI_BYTE, who, transport_.communicator(), &request),
          "MPI_Ibcast");
    if (!transport_.wait(request, deadline())) lost("rank " + std::to_string(who) + " failed");
    return decode(wire);
  }

  // The lowest rank of those for which `mine` holds on their process (INT_MAX for none),
  // agreed by every process; `what` says what was agreed on when a process does not answer.
  int lowest_where(bool mine, const std::string& what) {
    int in = mine ? rank() : INT_MAX, lowest = INT_MAX;
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(&in, &lowest, 1, MPI_INT, MPI_MIN, transport_.communicator(), &request),
          "MPI_Iallreduce");
    if (!transport_.wait(request, deadline())) lost(what);
    return lowest;
  }

  // Every list ran: every process applies its update; when one fails anywhere, every
  // process undoes its own, and all throw the failing rank's error.
  void commit() {
    if (!executor_->has_update()) return;
    std::optional<FailureNotice> local;
    try {
      executor_->apply_update();
    } catch (const execution_error& e) {
      local = FailureNotice{e.rank(), e.position(), e.action(), e.what()};
    }
    const int who = lowest_where(local.has_value(), "applying the step's updates stalled");
    if (who == INT_MAX) return;
    std::string why = no_rollback_hook;
    bool undone = executor_->can_roll_back();
    if (undone) {
      try {
        executor_->roll_back_update();
      } catch (const execution_error& e) {
        undone = false;
        why = e.what();
      }
    }
    // Every process learns whether every process undid its update, and the first that did not.
    const int stuck = lowest_where(!undone, "rolling back the step's updates stalled");
    std::optional<FailureNotice> mine;
    if (stuck == rank()) mine = FailureNotice{rank(), -1, Action{}, why};
    if (stuck != INT_MAX) why = notice_of(stuck, mine).message;
    const FailureNotice notice = notice_of(who, local);
    throw update_failed(
        execution_error(notice.message, notice.rank, notice.position, notice.action),
        stuck == INT_MAX, why);
  }

  StepResult gather(RankRun run) {
    MPI_Comm comm = transport_.communicator();
    std::vector<double> mine;
    append(mine, run);
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(ranks()));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm, &request),
          "MPI_Iallgather");
    if (!transport_.wait(request, deadline())) lost("gathering the step's measurements stalled");
    std::vector<int> offsets(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i)
      offsets[i] = offsets[i - 1] + counts[i - 1];
    std::vector<double> all(static_cast<std::size_t>(offsets.back() + counts.back()));
    check(MPI_Iallgatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                          MPI_DOUBLE, comm, &request),
          "MPI_Iallgatherv");
    if (!transport_.wait(request, deadline())) lost("gathering the step's measurements stalled");
    std::vector<RankRun> runs;
    const double* p = all.data();
    for (int r = 0; r < ranks(); ++r)
      runs.push_back(read_run(p));
    return StepResult::from_runs(std::move(runs), executor_->schedule());
  }

  Transport transport_;
  Device device_;
  std::optional<Executor<Stage, Transport, Device>> executor_;
  std::chrono::duration<double> timeout_;
  bool broken_ = false;
};

}  // namespace detail::mpi

//! Runs a schedule with one MPI process per rank (`comm`'s size must equal the schedule's
//! rank count; rank r of `comm` runs pipeline rank r). `stages` is indexed by stage like
//! InprocPipeline's; a process touches only the stages its rank holds (the others may be
//! cheap placeholders). A failure on any rank — a layer that throws, a receive that times
//! out — makes `step` throw on every process: the failing rank's execution_error (its rank,
//! position and action), after which the communicator is clean and the next step may run; or
//! peer_lost when some process stopped answering (dead or hung) within the receive timeout —
//! then end the job with `MpiSession::abort`.
template <class Stage>
class MpiPipeline
    : public detail::mpi::ProcessPipeline<Stage, MpiTransport<typename Stage::tensor_type>,
                                          HostDevice> {
 public:
  //! A pipeline running this process's rank of `schedule` over `comm`: `stages` under `options`,
  //! with MpiTransport's `transport_options`.
  MpiPipeline(const Schedule& schedule, std::span<Stage> stages, MPI_Comm comm = MPI_COMM_WORLD,
              ExecutorOptions options = {}, MpiTransportOptions transport_options = {})
      : MpiPipeline::ProcessPipeline("MpiPipeline", schedule, stages, HostDevice{},
                                     std::move(options), schedule, comm, transport_options) {}
};

}  // namespace pipesched
