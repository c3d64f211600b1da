// A tensor-parallel group over MPI: the TensorGroup a stage model of a pp × dp × tp job sums
// its partial results over (mpi::Groups::tensor()). Each all-reduce runs non-blocking on a
// buffer of its own and is waited for with the pipeline's progress running, so a failure on
// another process stops the wait; after a failed step `drain` completes every all-reduce some
// member started, so the communicator is clean for the next step.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/transport/detail/collective_log.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched::mpi {

//! The tensor-parallel group of this process over MPI (a duplicate of `comm`, e.g.
//! mpi::Groups::tensor()). `poll` runs between completion tests of a wait (the pipeline's
//! progress; it throws when the step is being stopped); a wait longer than `timeout` throws
//! receive_timeout. mpi::Pipeline makes one for stage models that ask for their group.
class TensorGroup final : public pipesched::TensorGroup {
 public:
  //! A group over a duplicate of `comm`.
  TensorGroup(MPI_Comm comm, std::function<void()> poll, std::chrono::duration<double> timeout)
      : poll_(std::move(poll)), timeout_(timeout), log_(comm) {
    detail::mpi::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_rank(comm_, &rank_);
  }
  TensorGroup(const TensorGroup&) = delete;
  TensorGroup& operator=(const TensorGroup&) = delete;
  //! Frees the communicators (an all-reduce still in flight is abandoned: the job is ending).
  ~TensorGroup() override {
    if (detail::mpi::initialized() && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int size() const noexcept override { return size_; }
  int rank() const noexcept override { return rank_; }
  void all_reduce(std::span<double> values) override { run(values, MPI_DOUBLE, 0); }
  void all_reduce(std::span<float> values) override { run(values, MPI_FLOAT, 1); }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }

  //! All-reduces started since the step began.
  std::size_t started() const noexcept { return log_.size(); }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    log_.clear();
    pending_.clear();
  }

  //! After a failed step: every member learns how many all-reduces the most advanced one
  //! started and of what sizes, starts the ones it did not on scratch buffers and completes
  //! them all (collective over the group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    const auto missed = log_.missed(deadline);
    if (!missed) return false;
    for (const detail::CollectiveLog::Entry& e : *missed) {
      Pending& p = pending_.emplace_back();
      const bool dbl = e.type == 0;
      p.buffer.assign(static_cast<std::size_t>(e.count) * (dbl ? sizeof(double) : sizeof(float)),
                      std::byte{0});
      begin(p, e.count, dbl ? MPI_DOUBLE : MPI_FLOAT);
    }
    std::vector<MPI_Request> all;
    for (Pending& p : pending_)
      all.push_back(p.request);
    const bool clean =
        detail::poll_until({"the tensor group's all-reduces after a failed step", deadline},
                           [&] { return detail::mpi::test_all(all.data(), all.size()); });
    begin_step();
    return clean;
  }

 private:
  struct Pending {
    std::vector<std::byte> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  template <class V>
  void run(std::span<V> values, MPI_Datatype type, int code) {
    log_.add(static_cast<long long>(values.size()), code);
    // A buffer of its own: when the wait is stopped, the all-reduce stays in flight (until
    // `drain`) while the caller's tensor goes away.
    Pending& p = pending_.emplace_back();
    p.buffer.resize(values.size_bytes());
    std::memcpy(p.buffer.data(), values.data(), values.size_bytes());
    begin(p, static_cast<long long>(values.size()), type);
    const std::string what =
        "a tensor-parallel all-reduce of " + std::to_string(values.size()) + " values";
    detail::poll_or_throw<receive_timeout>(
        {what, detail::deadline_after(timeout_), detail::poll_interval::tensor}, timeout_,
        "does every member of the tensor group run the same schedule?",
        [&] { return detail::mpi::test(p.request); },
        [&] {
          if (poll_) poll_();
        });
    std::memcpy(values.data(), p.buffer.data(), values.size_bytes());
    pending_.pop_back();
  }

  // Starts the all-reduce of `p`'s buffer (`count` values of `type`).
  void begin(Pending& p, long long count, MPI_Datatype type) {
    detail::mpi::check(MPI_Iallreduce(MPI_IN_PLACE, p.buffer.data(), static_cast<int>(count), type,
                                      MPI_SUM, comm_, &p.request),
                       "MPI_Iallreduce");
  }

  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  detail::CollectiveLog log_;      // this step's all-reduces, in order, and the drain's agreement
  MPI_Comm comm_ = MPI_COMM_NULL;  // the all-reduces
  int size_ = 1, rank_ = 0;
  std::vector<Pending> pending_;  // started and not completed (after a failure: abandoned)
};
}  // namespace pipesched::mpi
