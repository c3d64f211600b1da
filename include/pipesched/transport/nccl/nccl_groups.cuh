// The NCCL communicators of a pp × dp × tp job: one job-wide communicator bootstrapped over MPI
// (rank 0 makes the unique id, MPI broadcasts it), split by ncclCommSplit (NCCL 2.18 and
// later; the CUDA 13 toolkit has 2.28) into this process's pipeline, data-parallel and tensor
// group, in ProcessGrid's (Megatron-LM's) numbering — beside mpi::Groups' MPI communicators of
// the same groups, which the pipeline's control plane and the bootstrap use.
#pragma once

#include <nccl.h>

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "pipesched/core/error.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/detail/setup.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"

namespace pipesched::nccl {

//! This process's groups of a `ProcessGrid` job as NCCL communicators it owns, on its GPU: the
//! processes of its pipeline (ranked by pipeline rank), of its data-parallel group (ranked by
//! replica: nccl::Pipeline all-reduces the gradients there) and of its tensor group (ranked by
//! tensor rank), split from one communicator of the whole job; and the same groups as MPI
//! communicators (`mpi()`). Collective over `world`, whose size must be the grid's; every
//! process needs a GPU of its own (NCCL refuses two ranks of one communicator on one GPU).
class Groups {
 public:
  //! The groups of `grid` over `world` (process g of `world` is process g of the grid), with
  //! this process on `device`. A job of another size is refused on every process before any
  //! GPU is touched; a process whose GPU cannot be used makes every process throw.
  Groups(const ProcessGrid& grid, CudaDevice device, MPI_Comm world = MPI_COMM_WORLD)
      : Groups(
            grid, [&] { return std::move(device); }, world, 0) {}

  //! As above, on GPU `ordinal` (usually the process's local rank on its node).
  Groups(const ProcessGrid& grid, int ordinal, MPI_Comm world = MPI_COMM_WORLD)
      : Groups(
            grid, [ordinal] { return CudaDevice(ordinal); }, world, 0) {}

  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  //! Ends the communicators: when every process says its communicators report no error, each
  //! is finalized (tensor, data, pipeline, then the job's, the one order every process takes)
  //! and destroyed; otherwise, or when a finalize fails or stalls, they are aborted (which never
  //! waits for a peer).
  ~Groups() {
    try {
      device_.activate();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      detail::nccl::Link* order[] = {&tensor_, &data_, &pipeline_, &job_};
      bool healthy = true;  // no communicator of this process reports an error
      for (detail::nccl::Link* l : order) {
        ncclResult_t state = ncclSuccess;
        healthy = healthy &&
                  (l->get() == nullptr || (ncclCommGetAsyncError(l->get(), &state) == ncclSuccess &&
                                           state == ncclSuccess));
      }
      bool clean = every_process(healthy, deadline);
      for (detail::nccl::Link* l : order)
        clean = clean && l->finalize(deadline);
      for (detail::nccl::Link* l : order)
        clean ? l->destroy() : l->abort();
    } catch (...) {
      // Each Link's destructor aborts what is left.
    }
  }

  //! The grid.
  const ProcessGrid& grid() const noexcept { return mpi_.grid(); }
  //! This process's pipeline rank, replica and tensor rank.
  const ProcessGrid::Coordinates& coordinates() const noexcept { return mpi_.coordinates(); }
  //! The same groups as MPI communicators (the pipeline's control plane runs over them).
  const mpi::Groups& mpi() const noexcept { return mpi_; }
  //! This process's GPU (a handle sharing the streams of the one the groups were made with).
  const CudaDevice& device() const noexcept { return device_; }
  //! Every process of the job; its rank there is its process number g.
  ncclComm_t job() const noexcept { return job_.get(); }
  //! The processes of this process's pipeline; its rank there is the pipeline rank.
  ncclComm_t pipeline() const noexcept { return pipeline_.get(); }
  //! The replicas of this process's pipeline rank and tensor rank; its rank there is its
  //! replica.
  ncclComm_t data() const noexcept { return data_.get(); }
  //! The tensor ranks of this process's pipeline rank and replica; its rank there is its
  //! tensor rank.
  ncclComm_t tensor() const noexcept { return tensor_.get(); }

 private:
  template <class MakeDevice>
  Groups(const ProcessGrid& grid, MakeDevice&& make, MPI_Comm world, int)
      : mpi_(grid, world),
        device_(detail::nccl::agreed_device(
            make, mpi_.job(), detail::poll_interval::collective,
            std::chrono::duration<double>(detail::default_startup_timeout_s))) {
    device_.activate();
    const ProcessGrid& g = mpi_.grid();
    const int size = g.size(), rank = mpi_.process();
    detail::nccl::UniqueId id{};
    if (rank == 0) PIPESCHED_NCCL_CHECK(ncclGetUniqueId(&id.id));
    detail::mpi::check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_.job()), "MPI_Bcast");
    detail::nccl::check(ncclCommInitRank(job_.out(), size, id.id, rank), "ncclCommInitRank",
                        __FILE__, __LINE__,
                        "nccl::Groups: each process needs a GPU of its own (give each process "
                        "the CudaDevice of its local rank on the node) and NCCL must reach "
                        "every other process");
    // The same colours and keys as mpi::Groups: a group's colour is the coordinates it shares,
    // its key the one it runs along. Every process splits in this one order.
    const ProcessGrid::Coordinates c = mpi_.coordinates();
    split(c.data * g.tensor + c.tensor, c.pipeline, pipeline_, "pipeline");
    split(c.pipeline * g.tensor + c.tensor, c.data, data_, "data-parallel");
    split(c.pipeline * g.data + c.data, c.tensor, tensor_, "tensor");
  }

  void split(int colour, int key, detail::nccl::Link& out, const char* what) {
    const ncclResult_t r = ncclCommSplit(job_.get(), colour, key, out.out(), nullptr);
    if (r != ncclSuccess)
      detail::nccl::check(r, "ncclCommSplit", __FILE__, __LINE__,
                          (std::string("nccl::Groups: splitting the ") + what + " groups of " +
                           mpi_.grid().describe() + " failed")
                              .c_str());
  }

  // Whether `mine` holds on every process of the job, by `deadline` (false when some process
  // does not take part in time).
  bool every_process(bool mine, std::chrono::steady_clock::time_point deadline) noexcept {
    if (!detail::mpi::initialized() || mpi_.job() == MPI_COMM_NULL) return false;
    return detail::mpi::every_process(mine, mpi_.job(), deadline, detail::poll_interval::teardown);
  }

  mpi::Groups mpi_;
  CudaDevice device_;
  detail::nccl::Link job_, pipeline_, data_, tensor_;
};
}  // namespace pipesched::nccl
