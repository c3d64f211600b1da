// Compiles against the NCCL and CUDA runtime headers pipesched::nccl found and calls into the
// libraries it links (calls that need no GPU), checking that headers and libraries agree.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>

#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/version.hpp"

int main() {
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) != ncclSuccess || nccl_version != NCCL_VERSION_CODE) {
    std::fprintf(stderr, "pipesched NCCL consumer: libnccl is version %d, nccl.h %d\n",
                 nccl_version, NCCL_VERSION_CODE);
    return 1;
  }
  int runtime_version = 0;
  if (cudaRuntimeGetVersion(&runtime_version) != cudaSuccess || runtime_version != CUDART_VERSION) {
    std::fprintf(stderr,
                 "pipesched NCCL consumer: the CUDA runtime is version %d, its headers %d\n",
                 runtime_version, CUDART_VERSION);
    return 1;
  }
  int mpi_major = 0;
  int mpi_minor = 0;
  MPI_Get_version(&mpi_major, &mpi_minor);  // allowed before MPI_Init
  std::printf("pipesched %s NCCL consumer: NCCL %d, CUDA runtime %d, MPI %d.%d\n",
              pipesched::version_string, nccl_version, runtime_version, mpi_major, mpi_minor);
  return 0;
}
