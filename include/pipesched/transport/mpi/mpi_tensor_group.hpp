// A tensor-parallel group over MPI: the TensorGroup a stage model of a pp × dp × tp job sums
// its partial results over (MpiGroups::tensor()). Each all-reduce runs non-blocking on a
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
#include <climits>
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
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched {

//! The tensor-parallel group of this process over MPI (a duplicate of `comm`, e.g.
//! MpiGroups::tensor()). `poll` runs between completion tests of a wait (the pipeline's
//! progress; it throws when the step is being stopped); a wait longer than `timeout` throws
//! receive_timeout. MpiPipeline makes one for stage models that ask for their group.
class MpiTensorGroup final : public TensorGroup {
 public:
  //! A group over a duplicate of `comm`.
  MpiTensorGroup(MPI_Comm comm, std::function<void()> poll, std::chrono::duration<double> timeout)
      : poll_(std::move(poll)), timeout_(timeout) {
    detail::mpi::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    detail::mpi::check(MPI_Comm_dup(comm, &control_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_rank(comm_, &rank_);
  }
  MpiTensorGroup(const MpiTensorGroup&) = delete;
  MpiTensorGroup& operator=(const MpiTensorGroup&) = delete;
  //! Frees the communicators (an all-reduce still in flight is abandoned: the job is ending).
  ~MpiTensorGroup() override {
    if (!detail::mpi::initialized()) return;
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  }

  int size() const noexcept override { return size_; }
  int rank() const noexcept override { return rank_; }
  void all_reduce(std::span<double> values) override { run(values, MPI_DOUBLE, 0); }
  void all_reduce(std::span<float> values) override { run(values, MPI_FLOAT, 1); }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }

  //! All-reduces started since the step began.
  std::size_t started() const noexcept { return started_.size(); }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    started_.clear();
    pending_.clear();
  }

  //! After a failed step: every member learns how many all-reduces the most advanced one
  //! started and of what sizes, starts the ones it did not on scratch buffers and completes
  //! them all (collective over the group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    long long mine = static_cast<long long>(started_.size()), most = 0;
    if (!agree(&mine, &most, MPI_LONG_LONG, MPI_MAX, deadline)) return false;
    if (most > 0) {
      // The lowest member that started `most` tells the others what they missed.
      int candidate = mine == most ? rank_ : INT_MAX, leader = INT_MAX;
      if (!agree(&candidate, &leader, MPI_INT, MPI_MIN, deadline)) return false;
      std::vector<Started> list(static_cast<std::size_t>(most));
      if (rank_ == leader) std::copy(started_.begin(), started_.end(), list.begin());
      MPI_Request r = MPI_REQUEST_NULL;
      detail::mpi::check(MPI_Ibcast(list.data(), static_cast<int>(most * sizeof(Started)), MPI_BYTE,
                                    leader, control_, &r),
                         "MPI_Ibcast");
      if (!wait_until(&r, 1, deadline)) return false;
      for (std::size_t i = started_.size(); i < list.size(); ++i) {
        Pending& p = pending_.emplace_back();
        const bool dbl = list[i].type == 0;
        p.buffer.assign(
            static_cast<std::size_t>(list[i].count) * (dbl ? sizeof(double) : sizeof(float)),
            std::byte{0});
        begin(p, list[i].count, dbl ? MPI_DOUBLE : MPI_FLOAT);
      }
    }
    std::vector<MPI_Request> all;
    for (Pending& p : pending_)
      all.push_back(p.request);
    const bool clean = wait_until(all.data(), static_cast<int>(all.size()), deadline);
    begin_step();
    return clean;
  }

 private:
  struct Started {
    long long count = 0;
    int type = 0;  // 0 double, 1 float
  };
  struct Pending {
    std::vector<std::byte> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  template <class V>
  void run(std::span<V> values, MPI_Datatype type, int code) {
    started_.push_back({static_cast<long long>(values.size()), code});
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

  bool agree(const void* in, void* out, MPI_Datatype type, MPI_Op op,
             std::chrono::steady_clock::time_point deadline) {
    MPI_Request r = MPI_REQUEST_NULL;
    detail::mpi::check(MPI_Iallreduce(in, out, 1, type, op, control_, &r), "MPI_Iallreduce");
    return wait_until(&r, 1, deadline);
  }

  static bool wait_until(MPI_Request* requests, int n,
                         std::chrono::steady_clock::time_point deadline) {
    return detail::poll_until(
        {"the tensor group's all-reduces after a failed step", deadline},
        [&] { return detail::mpi::test_all(requests, static_cast<std::size_t>(n)); });
  }

  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;     // the all-reduces
  MPI_Comm control_ = MPI_COMM_NULL;  // the drain's agreement
  int size_ = 1, rank_ = 0;
  std::vector<Started> started_;  // this step's all-reduces, in order
  std::vector<Pending> pending_;  // started and not completed (after a failure: abandoned)
};

}  // namespace pipesched
