// A pipeline whose ranks are MPI processes: each process runs the Executor of its own rank
// over the MPI transport. Every process calls `step` with the same schedule and data; every
// process gets every rank's measurements back, and every process throws the same error
// (naming the failing rank and action) when a rank fails.
// The step loop, its agreements and the replicas' wiring are detail::ProcessPipeline's.
#pragma once

#include "pipesched/device/host/host_device.hpp"
#include "pipesched/transport/detail/process_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_gradient_reducer.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/mpi/mpi_tensor_group.hpp"
#include "pipesched/transport/mpi/mpi_transport.hpp"
#include "pipesched/transport/pipeline_options.hpp"

namespace pipesched::mpi {

//! The knobs of mpi::GradientReducer (one ReducerOptions serves both reducers), and what an
//! mpi::Pipeline of a pp × dp × tp job takes besides its schedule, stages and groups.
using ReducerOptions = pipesched::ReducerOptions;
using PipelineOptions = ProcessPipelineOptions<TransportOptions>;

//! Runs a schedule with one MPI process per rank (`comm`'s size must equal the schedule's
//! rank count; rank r of `comm` runs pipeline rank r). `stages` is indexed by stage like
//! inproc::Pipeline's; a process touches only the stages its rank holds (the others may be
//! cheap placeholders). A failure on any rank — a layer that throws, a receive that times
//! out — makes `step` throw on every process: the failing rank's execution_error (its rank,
//! position and action), after which the communicator is clean and the next step may run; or
//! peer_lost when some process stopped answering (dead or hung) within the receive timeout —
//! then end the job with `mpi::Session::abort`.
template <class Stage>
class Pipeline
    : public detail::ProcessPipeline<Stage, Transport<typename Stage::tensor_type>, HostDevice> {
  using Base = detail::ProcessPipeline<Stage, Transport<typename Stage::tensor_type>, HostDevice>;

 public:
  //! A pipeline running this process's rank of `schedule` over `comm`: `stages` under `options`,
  //! with mpi::Transport's `transport_options`.
  Pipeline(const Schedule& schedule, std::span<Stage> stages, MPI_Comm comm = MPI_COMM_WORLD,
           ExecutorOptions options = {}, TransportOptions transport_options = {})
      : Base("mpi::Pipeline", schedule, stages, HostDevice{}, std::move(options), schedule, comm,
             transport_options) {}

  //! This process's pipeline of a pp × dp × tp job: it runs pipeline rank
  //! `groups.coordinates().pipeline` of `schedule` over `groups.pipeline()`. With replicas
  //! (`groups.grid().data > 1`) each stage's weight gradients are averaged over
  //! `groups.data()` by scheduled actions: the executor places a REDUCE_GRAD after each
  //! stage's last weight gradient (its all-reduce, bucketed by `options.reducer`, overlaps the
  //! rest of the list) and a WAIT_REDUCE_GRAD before the optimizer. With
  //! `options.reducer.optimizer` set the reducer steps the weights (its shard with ZeRO 1 or 2,
  //! all of them with 0; even without replicas), and ExecutorOptions' optimizer, snapshot and
  //! rollback hooks must be empty. Every process of the job calls `step` together; a failure
  //! anywhere stops every process and rolls the step back on all of them.
  Pipeline(const Schedule& schedule, std::span<Stage> stages, const Groups& groups,
           PipelineOptions options = {})
      : Pipeline(
            schedule, stages, groups,
            data_parallel(schedule, stages, groups, std::move(options.executor), options.reducer),
            options.transport) {}

 private:
  using Prepared = typename Base::Prepared;

  Pipeline(const Schedule& schedule, std::span<Stage> stages, const Groups& groups,
           Prepared prepared, TransportOptions transport_options)
      : Base(Base::with_reduction, "mpi::Pipeline", schedule, stages, HostDevice{},
             std::move(prepared.options), std::move(prepared.reduction), schedule,
             groups.pipeline(), transport_options, groups.job()) {
    this->name_replica(groups.coordinates().data, groups.grid().data);
    this->join_tensor_group(
        "mpi::Pipeline", schedule, stages, groups.grid(), groups.coordinates(), [&] {
          return std::make_unique<typename Base::template GroupLink<TensorGroup>>(
              groups.tensor(), std::function<void()>(), this->wait_limit());
        });
  }

  static Prepared data_parallel(const Schedule& schedule, std::span<Stage> stages,
                                const Groups& groups, ExecutorOptions options,
                                const ReducerOptions& reducer_options) {
    if constexpr (reducible_stage<Stage>)
      return Base::template reduce_with<GradientReducer<Stage>>(
          "mpi::Pipeline", "mpi::ReducerOptions", schedule, groups.grid(),
          groups.coordinates().pipeline, std::move(options), reducer_options, groups.data(),
          stages);
    else
      return Base::without_reducer("mpi::Pipeline", "mpi::ReducerOptions", groups.grid(),
                                   std::move(options), reducer_options,
                                   "parameters() and gradients() of the same tensors, with a "
                                   "wire<> form (see reducible_stage)");
  }
};
}  // namespace pipesched::mpi
