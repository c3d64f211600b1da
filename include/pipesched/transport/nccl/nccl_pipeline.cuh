// A pipeline whose ranks are GPUs, one per MPI process: each process runs the Executor of its
// own rank on its CudaDevice over the NCCL transport. Every process calls `step` with the same
// schedule and data; every process gets every rank's measurements back, and every process
// throws the same error (naming the failing rank and action) when a rank fails — the MPI
// pipeline's agreement, with payloads on NCCL.
// The step loop, its agreements and the replicas' wiring are detail::ProcessPipeline's.
#pragma once

#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/transport/detail/process_pipeline.hpp"
#include "pipesched/transport/nccl/nccl_gradient_reducer.cuh"
#include "pipesched/transport/nccl/nccl_groups.cuh"
#include "pipesched/transport/nccl/nccl_tensor_group.cuh"
#include "pipesched/transport/nccl/nccl_transport.cuh"
#include "pipesched/transport/pipeline_options.hpp"

namespace pipesched::nccl {

//! The knobs of nccl::GradientReducer (one ReducerOptions serves both reducers), and what a
//! nccl::Pipeline of a pp × dp × tp job takes besides its schedule, stages and groups.
using ReducerOptions = pipesched::ReducerOptions;
using PipelineOptions = ProcessPipelineOptions<TransportOptions>;

//! Runs a schedule with one MPI process and one GPU per rank (`comm`'s size must equal the
//! schedule's rank count; rank r of `comm` runs pipeline rank r on `device`). `stages` is
//! indexed by stage like mpi::Pipeline's; a process touches only the stages its rank holds (the
//! others may be cheap placeholders) and makes them with `device`, whose compute stream they
//! enqueue on. Times are GPU times on each rank from an event recorded on its compute stream
//! right after the processes meet at the step's start. A failure on any rank makes `step`
//! throw on every process: the failing rank's execution_error, after which NCCL and MPI are
//! clean and the next step may run; or peer_lost when some process stopped answering within
//! the receive timeout — then end the job with `mpi::Session::abort`.
template <class Stage>
class Pipeline
    : public detail::ProcessPipeline<Stage, Transport<typename Stage::tensor_type>, CudaDevice> {
  using Base = detail::ProcessPipeline<Stage, Transport<typename Stage::tensor_type>, CudaDevice>;

 public:
  //! A pipeline running this process's rank of `schedule` over `comm` on `device`: `stages`
  //! under `options`, with nccl::Transport's `transport_options`.
  Pipeline(const Schedule& schedule, CudaDevice device, std::span<Stage> stages,
           MPI_Comm comm = MPI_COMM_WORLD, ExecutorOptions options = {},
           TransportOptions transport_options = {})
      : Pipeline::ProcessPipeline("nccl::Pipeline", schedule, stages, device, std::move(options),
                                  schedule, device, comm, transport_options) {}

  //! This process's pipeline of a pp × dp × tp job, on `groups.device()`: it runs pipeline
  //! rank `groups.coordinates().pipeline` of `schedule` over `groups.mpi().pipeline()`. With
  //! replicas (`groups.grid().data > 1`) each stage's weight gradients are averaged over
  //! `groups.data()` by scheduled actions: a REDUCE_GRAD after each stage's last weight
  //! gradient starts its bucketed ncclAllReduce on a stream of its own (after the compute
  //! stream's work), overlapping the rest of the list, and a WAIT_REDUCE_GRAD before the
  //! optimizer waits for it (nccl::GradientReducer, tuned by `options.reducer`). With
  //! `options.reducer.zero` 1 or 2 (ZeRO) each bucket is reduce-scattered instead, each replica
  //! steps its shard with `options.reducer.optimizer` and the replicas all-gather the updated
  //! weights once the job agreed to commit; with ZeRO-0 and that optimizer set, every replica
  //! steps the whole weights the same way. When the reducer steps the weights, ExecutorOptions'
  //! optimizer, snapshot and rollback hooks must be empty; a rolled-back step leaves weights
  //! and optimizer state as they were. With tp > 1 every stage this process holds must be built for
  //! its place in the tensor group (`tensor_parallel_stage`, checked on every process together) and
  //! is given an nccl::TensorGroup over `groups.tensor()`, which sums its partial results on the
  //! GPU. Every process of the job calls `step` together; a failure anywhere stops every process
  //! and rolls the step back on all of them. `groups` must outlive the pipeline.
  Pipeline(const Schedule& schedule, std::span<Stage> stages, const Groups& groups,
           PipelineOptions options = {})
      : Pipeline(
            schedule, stages, groups,
            data_parallel(schedule, stages, groups, std::move(options.executor), options.reducer),
            options.transport) {}

  //! This rank's GPU.
  CudaDevice& device() noexcept { return this->transport().device(); }

 private:
  using Prepared = typename Base::Prepared;

  Pipeline(const Schedule& schedule, std::span<Stage> stages, const Groups& groups,
           Prepared prepared, TransportOptions transport_options)
      : Base(Base::with_reduction, "nccl::Pipeline", schedule, stages, groups.device(),
             std::move(prepared.options), std::move(prepared.reduction), schedule, groups.device(),
             groups.mpi().pipeline(), transport_options, groups.mpi().job()) {
    this->name_replica(groups.coordinates().data, groups.grid().data);
    this->join_tensor_group(
        "nccl::Pipeline", schedule, stages, groups.grid(), groups.coordinates(), [&] {
          return std::make_unique<typename Base::template GroupLink<TensorGroup>>(
              groups.tensor(), groups.mpi().tensor(), groups.device(), std::function<void()>(),
              this->wait_limit());
        });
  }

  static Prepared data_parallel(const Schedule& schedule, std::span<Stage> stages,
                                const Groups& groups, ExecutorOptions options,
                                const ReducerOptions& reducer_options) {
    if constexpr (device_reducible_stage<Stage>)
      return Base::template reduce_with<GradientReducer<Stage>>(
          "nccl::Pipeline", "nccl::ReducerOptions", schedule, groups.grid(),
          groups.coordinates().pipeline, std::move(options), reducer_options, groups.data(),
          groups.mpi().data(), groups.device(), stages);
    else
      return Base::without_reducer("nccl::Pipeline", "nccl::ReducerOptions", groups.grid(),
                                   std::move(options), reducer_options,
                                   "device_gradients() of float or double device memory (see "
                                   "device_reducible_stage)");
  }
};
}  // namespace pipesched::nccl
