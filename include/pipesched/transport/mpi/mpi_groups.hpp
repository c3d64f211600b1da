// The MPI communicators of a pp × dp × tp job: each process's pipeline, data-parallel and
// tensor-parallel group, split from one communicator in ProcessGrid's (Megatron-LM's) numbering.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <string>
#include <utility>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched::mpi {

//! This process's three groups of a `ProcessGrid` job, as MPI communicators it owns: the
//! processes of its pipeline (ranked by pipeline rank: give it to mpi::Pipeline), of its
//! data-parallel group (ranked by replica: its gradients are all-reduced there) and of its
//! tensor group (ranked by tensor rank: its layers' all-reduces run there). Collective over
//! `world`, whose size must be the grid's.
class Groups {
 public:
  //! Splits `world` (MPI_Comm_split) into the groups of `grid`; process g of `world` is
  //! process g of the grid.
  explicit Groups(const ProcessGrid& grid, MPI_Comm world = MPI_COMM_WORLD) : grid_(grid) {
    grid_.check();
    if (!detail::mpi::initialized())
      throw error(
          "mpi::Groups: MPI is not initialized; create a pipesched::mpi::Session (or call "
          "MPI_Init_thread) first.");
    int size = 0, rank = 0;
    detail::mpi::check(MPI_Comm_size(world, &size), "MPI_Comm_size");
    detail::mpi::check(MPI_Comm_rank(world, &rank), "MPI_Comm_rank");
    if (size != grid_.size())
      throw invalid_problem("mpi::Groups: a grid of " + grid_.describe() + " needs " +
                            std::to_string(grid_.size()) + " processes but the communicator has " +
                            std::to_string(size) + "; start the job with mpirun -np " +
                            std::to_string(grid_.size()) + ".");
    process_ = rank;
    detail::mpi::check(MPI_Comm_dup(world, &job_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(job_, MPI_ERRORS_RETURN);
    at_ = grid_.coordinates(rank);
    const ProcessGrid& g = grid_;
    const ProcessGrid::Coordinates c = at_;
    // A group's colour is the coordinates it shares, its key the one it runs along.
    split(world, c.data * g.tensor + c.tensor, c.pipeline, pipeline_);
    split(world, c.pipeline * g.tensor + c.tensor, c.data, data_);
    split(world, c.pipeline * g.data + c.data, c.tensor, tensor_);
  }

  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;
  //! Takes `o`'s communicators (`o` is left without any).
  Groups(Groups&& o) noexcept
      : grid_(o.grid_),
        process_(o.process_),
        at_(o.at_),
        job_(std::exchange(o.job_, MPI_COMM_NULL)),
        pipeline_(std::exchange(o.pipeline_, MPI_COMM_NULL)),
        data_(std::exchange(o.data_, MPI_COMM_NULL)),
        tensor_(std::exchange(o.tensor_, MPI_COMM_NULL)) {}
  Groups& operator=(Groups&&) = delete;

  //! Frees the communicators (unless MPI is already finalized).
  ~Groups() {
    if (!detail::mpi::initialized()) return;
    for (MPI_Comm* c : {&job_, &pipeline_, &data_, &tensor_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }

  //! The grid.
  const ProcessGrid& grid() const noexcept { return grid_; }
  //! This process's rank in the communicator the groups were split from.
  int process() const noexcept { return process_; }
  //! This process's pipeline rank, replica and tensor rank.
  const ProcessGrid::Coordinates& coordinates() const noexcept { return at_; }
  //! Every process of the job (a duplicate of the communicator the groups were split from).
  MPI_Comm job() const noexcept { return job_; }
  //! The processes of this process's pipeline; its rank there is the pipeline rank.
  MPI_Comm pipeline() const noexcept { return pipeline_; }
  //! The replicas of this process's pipeline rank and tensor rank; its rank there is its
  //! replica.
  MPI_Comm data() const noexcept { return data_; }
  //! The tensor ranks of this process's pipeline rank and replica; its rank there is its
  //! tensor rank.
  MPI_Comm tensor() const noexcept { return tensor_; }

 private:
  static void split(MPI_Comm world, int colour, int key, MPI_Comm& out) {
    detail::mpi::check(MPI_Comm_split(world, colour, key, &out), "MPI_Comm_split");
    MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  }

  ProcessGrid grid_;
  int process_ = 0;
  ProcessGrid::Coordinates at_{};
  MPI_Comm job_ = MPI_COMM_NULL;
  MPI_Comm pipeline_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm tensor_ = MPI_COMM_NULL;
};
}  // namespace pipesched::mpi
