// Shared by the NCCL test programs' sources (run under mpirun): the job's size and this
// process's rank, where each process's GPU is (decided by every process together), the skips
// of tests that need GPUs or processes the job does not have, and generated schedules.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <gtest/gtest.h>

#include <string>

#include "../mpi/mpi_support.hpp"
#include "gpu_test.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/policy/registry.hpp"

namespace nccl_test {

namespace ps = pipesched;

// The job's size, this process's rank and generated schedules, as the host MPI tests have them.
using mpi_test::generated;
using mpi_test::world_rank;
using mpi_test::world_size;

// Where this process's GPU is: its rank among the processes of its node, modulo the GPUs the
// node has (-1 without a GPU); whether every process has a GPU, and one of its own; why not.
struct GpuPlace {
  int ordinal = -1;
  bool everywhere = false;  // every process has a GPU
  bool own_each = false;    // ... and no two processes of a node share one
  std::string missing;      // why not, when not (what the test skips with)
};

// Decided together: a test that one process skips and another runs would leave the runner
// waiting in a collective call.
inline GpuPlace gpu_place() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, locals = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &locals);
  MPI_Comm_free(&node);
  const ps::GpuStatus status = ps::gpu_status();
  GpuPlace p;
  std::string why;
  if (!status.available()) {
    why = status.reason;
  } else {
    p.ordinal = local % status.devices;
    if (locals > status.devices)
      why = std::to_string(locals) + " processes on this node share " +
            std::to_string(status.devices) + " GPU(s); NCCL needs one GPU per rank";
  }
  int mine[2] = {status.available() ? 1 : 0, why.empty() ? 1 : 0}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  p.everywhere = all[0] == 1;
  p.own_each = all[1] == 1;
  p.missing = !why.empty() ? why : !p.own_each ? "another process has no GPU of its own" : "";
  return p;
}

// Skips (on every process) unless every process has a GPU — fails instead when
// PIPESCHED_REQUIRE_GPU is set; `own_gpu_each` asks for one GPU per process (what NCCL needs
// between ranks), whose lack is a skip even then: too few GPUs is not a broken one.
#define PIPESCHED_NCCL_NEEDS_GPUS(place, own_gpu_each)                                             \
  const GpuPlace place = gpu_place();                                                              \
  do {                                                                                             \
    const std::string why =                                                                        \
        place.missing.empty() ? std::string("a process has no GPU") : place.missing;               \
    if (!place.everywhere) {                                                                       \
      if (::pipesched::testing_support::gpu_required())                                            \
        GTEST_FAIL() << "every process needs a GPU and PIPESCHED_REQUIRE_GPU is set, but " << why; \
      GTEST_SKIP() << why;                                                                         \
    }                                                                                              \
    if ((own_gpu_each) && !place.own_each) GTEST_SKIP() << why;                                    \
  } while (0)

#define PIPESCHED_NEEDS_PROCESSES(n)                                                   \
  do {                                                                                 \
    if (world_size() < (n))                                                            \
      GTEST_SKIP() << "needs " << (n) << " processes (mpirun -np " << (n) << "), has " \
                   << world_size();                                                    \
  } while (0)

// The first `n` processes of the job (MPI_COMM_NULL on the others).
inline MPI_Comm first_processes(int n) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < n ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

}  // namespace nccl_test
