// mpi::Session: initializes MPI for a program's lifetime (and finalizes it), and ends a job
// that can no longer finish cleanly.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! A step could not be agreed on because a peer process stopped answering (it died, hangs or
//! was stopped): the message names the processes that went silent (those that did not answer
//! the other processes' roll call within the receive timeout). The job cannot continue or
//! finalize cleanly; end it with `mpi::Session::abort`.
class peer_lost : public error {
 public:
  using error::error;
  void throw_after(const Message& prefix) const override { throw peer_lost(prefix + message()); }
};

namespace mpi {

//! Initializes MPI unless the program already did, and finalizes it on destruction if it
//! initialized it. It asks for MPI_THREAD_MULTIPLE, so that a data-parallel reducer can drive
//! MPI's progress from a thread of its own while the pipeline computes (see
//! mpi::ReducerOptions::progress_thread); an MPI that gives less still runs everything else,
//! which calls MPI from one thread.
class Session {
 public:
  //! Initializes MPI with `main`'s arguments, unless it is initialized already; throws
  //! pipesched::error when MPI_Init_thread fails.
  Session(int& argc, char**& argv) {
    int done = 0;
    MPI_Initialized(&done);
    if (!done) {
      int provided = 0;
      if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        throw error("MPI_Init_thread failed; is the program started by mpirun (or alone)?");
      owns_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }

  //! This process's rank in MPI_COMM_WORLD.
  int rank() const noexcept { return rank_; }
  //! Processes in MPI_COMM_WORLD.
  int size() const noexcept { return size_; }

  //! Ends every process of the job with `code` (MPI_Abort): what a program does after a
  //! peer_lost, when waiting for the others could hang.
  [[noreturn]] void abort(int code) const {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, the process still ends
  }

 private:
  bool owns_ = false;
  int rank_ = 0;
  int size_ = 1;
};
}  // namespace mpi

}  // namespace pipesched
