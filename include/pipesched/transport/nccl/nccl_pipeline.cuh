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

namespace pipesched {

//! What an NcclPipeline of a pp × dp × tp job takes besides its schedule, stages and groups, set
//! by name: `{.executor = options, .reducer = {.zero = 1, .optimizer = sgd_shards(0.1)}}`.
struct NcclPipelineOptions {
  ExecutorOptions executor{};        //!< the executor's hooks and timeouts
  NcclTransportOptions transport{};  //!< the transport's timeouts
  NcclReducerOptions reducer{};      //!< the data-parallel reduction: buckets, ZeRO, optimizer
};

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
    : public detail::ProcessPipeline<Stage, NcclTransport<typename Stage::tensor_type>,
                                     CudaDevice> {
  using Base =
      detail::ProcessPipeline<Stage, NcclTransport<typename Stage::tensor_type>, CudaDevice>;

 public:
  //! A pipeline running this process's rank of `schedule` over `comm` on `device`: `stages`
  //! under `options`, with NcclTransport's `transport_options`.
  NcclPipeline(const Schedule& schedule, CudaDevice device, std::span<Stage> stages,
               MPI_Comm comm = MPI_COMM_WORLD, ExecutorOptions options = {},
               NcclTransportOptions transport_options = {})
      : NcclPipeline::ProcessPipeline("NcclPipeline", schedule, stages, device, std::move(options),
                                      schedule, device, comm, transport_options) {}

  //! This process's pipeline of a pp × dp × tp job, on `groups.device()`: it runs pipeline
  //! rank `groups.coordinates().pipeline` of `schedule` over `groups.mpi().pipeline()`. With
  //! replicas (`groups.grid().data > 1`) each stage's weight gradients are averaged over
  //! `groups.data()` by scheduled actions: a REDUCE_GRAD after each stage's last weight
  //! gradient starts its bucketed ncclAllReduce on a stream of its own (after the compute
  //! stream's work), overlapping the rest of the list, and a WAIT_REDUCE_GRAD before the
  //! optimizer waits for it (NcclGradientReducer, tuned by `reducer_options`). With
  //! `reducer_options.zero` 1 or 2 (ZeRO) each bucket is reduce-scattered instead, each replica
  //! steps its shard with `reducer_options.optimizer` (ExecutorOptions' optimizer, snapshot and
  //! rollback hooks must then be empty) and the replicas all-gather the updated weights once
  //! the job agreed to commit; a rolled-back step leaves weights and optimizer state as they
  //! were. With tp > 1 every stage this process holds must be built for its place in the
  //! tensor group (`tensor_parallel_stage`, checked on every process together) and is given an
  //! NcclTensorGroup over `groups.tensor()`, which sums its partial results on the GPU. Every
  //! process of the job calls `step` together; a failure anywhere stops every process and rolls the
  //! step back on all of them. `groups` must outlive the pipeline.
  NcclPipeline(const Schedule& schedule, std::span<Stage> stages, const NcclGroups& groups,
               ExecutorOptions options = {}, NcclTransportOptions transport_options = {},
               NcclReducerOptions reducer_options = {})
      : NcclPipeline(schedule, stages, groups,
                     data_parallel(schedule, stages, groups, std::move(options), reducer_options),
                     transport_options) {}

  //! This process's pipeline of a pp × dp × tp job, as above, with every option in one
  //! aggregate.
  NcclPipeline(const Schedule& schedule, std::span<Stage> stages, const NcclGroups& groups,
               NcclPipelineOptions options)
      : NcclPipeline(schedule, stages, groups, std::move(options.executor), options.transport,
                     std::move(options.reducer)) {}

  //! This rank's GPU.
  CudaDevice& device() noexcept { return this->transport().device(); }

 private:
  using Prepared = typename Base::Prepared;

  NcclPipeline(const Schedule& schedule, std::span<Stage> stages, const NcclGroups& groups,
               Prepared prepared, NcclTransportOptions transport_options)
      : Base(Base::with_reduction, "NcclPipeline", schedule, stages, groups.device(),
             std::move(prepared.options), std::move(prepared.reduction), schedule, groups.device(),
             groups.mpi().pipeline(), transport_options, groups.mpi().job()) {
    this->name_replica(groups.coordinates().data, groups.grid().data);
    this->join_tensor_group(
        "NcclPipeline", schedule, stages, groups.grid(), groups.coordinates(), [&] {
          return std::make_unique<TensorLink>(groups.tensor(), groups.mpi().tensor(),
                                              groups.device(), this->wait_limit());
        });
  }

  // An NcclTensorGroup as the pipeline's collective of the tensor group.
  struct TensorLink final : Base::Reduction {
    TensorLink(ncclComm_t tensor, MPI_Comm control, const CudaDevice& device,
               std::chrono::duration<double> timeout)
        : group(tensor, control, device, std::function<void()>(), timeout) {}
    void attach(std::function<void()> p) override { group.set_poll(std::move(p)); }
    void begin_step() override { group.begin_step(); }
    bool drain(std::chrono::duration<double> t) override { return group.drain(t); }
    NcclTensorGroup group;
  };

  static Prepared data_parallel(const Schedule& schedule, std::span<Stage> stages,
                                const NcclGroups& groups, ExecutorOptions options,
                                const NcclReducerOptions& reducer_options) {
    reducer_options.validate();
    if (groups.grid().data <= 1 && reducer_options.zero < 1)
      return Prepared{std::move(options), nullptr};
    if constexpr (device_reducible_stage<Stage>) {
      return Base::template replicate<NcclGradientReducer<Stage>>(
          "NcclPipeline", schedule, groups.grid(), groups.coordinates().pipeline,
          std::move(options), reducer_options,
          [&](ExecutorOptions& o, auto& reducer) {
            if (reducer_options.zero >= 1)
              detail::shard_optimizer("NcclPipeline", "NcclReducerOptions", o, reducer);
          },
          groups.data(), groups.mpi().data(), groups.device(), stages);
    } else {
      throw Base::not_reducible("NcclPipeline", groups.grid(),
                                "device_gradients() of float or double device memory (see "
                                "device_reducible_stage)");
    }
  }
};

}  // namespace pipesched
