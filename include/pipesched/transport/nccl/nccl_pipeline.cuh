// A pipeline whose ranks are GPUs, one per MPI process: each process runs the Executor of its
// own rank on its CudaDevice over the NCCL transport. Every process calls `step` with the same
// schedule and data; every process gets every rank's measurements back, and every process
// throws the same error (naming the failing rank and action) when a rank fails — the MPI
// pipeline's agreement, with payloads on NCCL.
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

#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/nccl/nccl_transport.cuh"

namespace pipesched {

//! Runs a schedule with one MPI process and one GPU per rank (`comm`'s size must equal the
//! schedule's rank count; rank r of `comm` runs pipeline rank r on `device`). `stages` is
//! indexed by stage like MpiPipeline's; a process touches only the stages its rank holds (the
//! others may be cheap placeholders) and makes them with `device`, whose compute stream they
//! enqueue on. Times are GPU times on each rank from an event recorded on its compute stream
//! right after the processes meet at the step's start. A failure on any rank makes `step`
//! throw on every process: the failing rank's execution_error, after which NCCL and MPI are
//! clean and the next step may run; or peer_lost when some process stopped answering within
//! the receive timeout — then end the job with `MpiSession::abort`.
template <class Stage>
class NcclPipeline
    : public detail::mpi::ProcessPipeline<Stage, NcclTransport<typename Stage::tensor_type>,
                                          CudaDevice> {
 public:
  //! A pipeline running this process's rank of `schedule` over `comm` on `device`: `stages`
  //! under `options`, with NcclTransport's `transport_options`.
  NcclPipeline(const Schedule& schedule, CudaDevice device, std::span<Stage> stages,
               MPI_Comm comm = MPI_COMM_WORLD, ExecutorOptions options = {},
               NcclTransportOptions transport_options = {})
      : NcclPipeline::ProcessPipeline("NcclPipeline", schedule, stages, device, std::move(options),
                                      schedule, device, comm, transport_options) {}

  //! This rank's GPU.
  CudaDevice& device() noexcept { return this->transport().device(); }
};

}  // namespace pipesched
