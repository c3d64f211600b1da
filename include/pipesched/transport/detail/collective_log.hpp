// The all-reduces a tensor group started in one step, and the agreement after a failed step on
// which of them a member missed: the same for the MPI and the NCCL tensor group, which differ
// only in how they run an all-reduce.
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
#include <vector>

#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched::detail {

//! One step's all-reduces of a tensor group, in the order they started, and the group's
//! agreement over an MPI communicator of its own (a duplicate of `control`, whose processes are
//! the group's members, ranked alike).
class CollectiveLog {
 public:
  //! An all-reduce: its value count and type.
  struct Entry {
    long long count = 0;
    int type = 0;  //!< 0 double, 1 float
  };

  //! A log whose agreements run over a duplicate of `control` (collective over it).
  explicit CollectiveLog(MPI_Comm control) {
    mpi::check(MPI_Comm_dup(control, &control_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(control_, &rank_);
  }
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;
  //! Frees the communicator (unless MPI is already finalized).
  ~CollectiveLog() {
    if (control_ != MPI_COMM_NULL && mpi::initialized()) MPI_Comm_free(&control_);
  }

  //! Notes an all-reduce started.
  void add(long long count, int type) { entries_.push_back({count, type}); }
  //! All-reduces started since the step began.
  std::size_t size() const noexcept { return entries_.size(); }
  //! A step starts.
  void clear() noexcept { entries_.clear(); }

  //! After a failed step, collective over the group: the all-reduces the most advanced member
  //! started and this one did not, in order (the lowest member that started them all tells the
  //! others their sizes); nothing when the agreement could not finish by `deadline`.
  std::optional<std::vector<Entry>> missed(std::chrono::steady_clock::time_point deadline) {
    long long mine = static_cast<long long>(entries_.size()), most = 0;
    if (!agree(&mine, &most, MPI_LONG_LONG, MPI_MAX, deadline)) return std::nullopt;
    if (most == 0) return std::vector<Entry>{};
    int candidate = mine == most ? rank_ : INT_MAX, leader = INT_MAX;
    if (!agree(&candidate, &leader, MPI_INT, MPI_MIN, deadline)) return std::nullopt;
    std::vector<Entry> list(static_cast<std::size_t>(most));
    if (rank_ == leader) std::copy(entries_.begin(), entries_.end(), list.begin());
    MPI_Request r = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibcast(list.data(), static_cast<int>(list.size() * sizeof(Entry)), MPI_BYTE,
                          leader, control_, &r),
               "MPI_Ibcast");
    if (!wait_until(r, deadline)) return std::nullopt;
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(entries_.size()));
    return list;
  }

 private:
  bool agree(const void* in, void* out, MPI_Datatype type, MPI_Op op,
             std::chrono::steady_clock::time_point deadline) {
    MPI_Request r = MPI_REQUEST_NULL;
    mpi::check(MPI_Iallreduce(in, out, 1, type, op, control_, &r), "MPI_Iallreduce");
    return wait_until(r, deadline);
  }

  static bool wait_until(MPI_Request& r, std::chrono::steady_clock::time_point deadline) {
    return poll_until({"the tensor group's agreement after a failed step", deadline},
                      [&] { return mpi::test(r); });
  }

  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace pipesched::detail
