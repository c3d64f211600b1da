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

namespace pipesched {

//! What an MpiPipeline of a pp × dp × tp job takes besides its schedule, stages and groups, set
//! by name: `{.executor = options, .reducer = run.reducer_options(sgd_shards(0.1))}`.
struct MpiPipelineOptions {
  ExecutorOptions executor{};       //!< the executor's hooks and timeouts
  MpiTransportOptions transport{};  //!< the transport's timeouts
  MpiReducerOptions reducer{};      //!< the data-parallel reduction: buckets, ZeRO stage, optimizer
};

//! Runs a schedule with one MPI process per rank (`comm`'s size must equal the schedule's
//! rank count; rank r of `comm` runs pipeline rank r). `stages` is indexed by stage like
//! InprocPipeline's; a process touches only the stages its rank holds (the others may be
//! cheap placeholders). A failure on any rank — a layer that throws, a receive that times
//! out — makes `step` throw on every process: the failing rank's execution_error (its rank,
//! position and action), after which the communicator is clean and the next step may run; or
//! peer_lost when some process stopped answering (dead or hung) within the receive timeout —
//! then end the job with `MpiSession::abort`.
template <class Stage>
class MpiPipeline
    : public detail::ProcessPipeline<Stage, MpiTransport<typename Stage::tensor_type>, HostDevice> {
  using Base =
      detail::ProcessPipeline<Stage, MpiTransport<typename Stage::tensor_type>, HostDevice>;

 public:
  //! A pipeline running this process's rank of `schedule` over `comm`: `stages` under `options`,
  //! with MpiTransport's `transport_options`.
  MpiPipeline(const Schedule& schedule, std::span<Stage> stages, MPI_Comm comm = MPI_COMM_WORLD,
              ExecutorOptions options = {}, MpiTransportOptions transport_options = {})
      : Base("MpiPipeline", schedule, stages, HostDevice{}, std::move(options), schedule, comm,
             transport_options) {}

  //! This process's pipeline of a pp × dp × tp job: it runs pipeline rank
  //! `groups.coordinates().pipeline` of `schedule` over `groups.pipeline()`. With replicas
  //! (`groups.grid().data > 1`) each stage's weight gradients are averaged over
  //! `groups.data()` by scheduled actions: the executor places a REDUCE_GRAD after each
  //! stage's last weight gradient (its all-reduce, bucketed by `reducer_options`, overlaps the
  //! rest of the list) and a WAIT_REDUCE_GRAD before the optimizer. Every process of the job
  //! calls `step` together; a failure anywhere stops every process and rolls the step back
  //! on all of them.
  MpiPipeline(const Schedule& schedule, std::span<Stage> stages, const MpiGroups& groups,
              ExecutorOptions options = {}, MpiTransportOptions transport_options = {},
              MpiReducerOptions reducer_options = {})
      : MpiPipeline(schedule, stages, groups,
                    data_parallel(schedule, stages, groups, std::move(options), reducer_options),
                    transport_options) {}

  //! This process's pipeline of a pp × dp × tp job, as above, with every option in one
  //! aggregate.
  MpiPipeline(const Schedule& schedule, std::span<Stage> stages, const MpiGroups& groups,
              MpiPipelineOptions options)
      : MpiPipeline(schedule, stages, groups, std::move(options.executor), options.transport,
                    std::move(options.reducer)) {}

 private:
  using Prepared = typename Base::Prepared;

  MpiPipeline(const Schedule& schedule, std::span<Stage> stages, const MpiGroups& groups,
              Prepared prepared, MpiTransportOptions transport_options)
      : Base(Base::with_reduction, "MpiPipeline", schedule, stages, HostDevice{},
             std::move(prepared.options), std::move(prepared.reduction), schedule,
             groups.pipeline(), transport_options, groups.job()) {
    this->name_replica(groups.coordinates().data, groups.grid().data);
    this->join_tensor_group(
        "MpiPipeline", schedule, stages, groups.grid(), groups.coordinates(),
        [&] { return std::make_unique<TensorLink>(groups.tensor(), this->wait_limit()); });
  }

  // An MpiTensorGroup as the pipeline's collective of the tensor group.
  struct TensorLink final : Base::Reduction {
    TensorLink(MPI_Comm comm, std::chrono::duration<double> timeout)
        : group(comm, std::function<void()>(), timeout) {}
    void attach(std::function<void()> p) override { group.set_poll(std::move(p)); }
    void begin_step() override { group.begin_step(); }
    bool drain(std::chrono::duration<double> t) override { return group.drain(t); }
    MpiTensorGroup group;
  };

  static Prepared data_parallel(const Schedule& schedule, std::span<Stage> stages,
                                const MpiGroups& groups, ExecutorOptions options,
                                const MpiReducerOptions& reducer_options) {
    reducer_options.validate();
    if (groups.grid().data <= 1 && reducer_options.zero < 1)
      return Prepared{std::move(options), nullptr};
    if constexpr (reducible_stage<Stage>) {
      return Base::template replicate<MpiGradientReducer<Stage>>(
          "MpiPipeline", schedule, groups.grid(), groups.coordinates().pipeline, std::move(options),
          reducer_options,
          [&](ExecutorOptions& o, auto& reducer) {
            if (reducer_options.zero >= 1)
              detail::shard_optimizer("MpiPipeline", "MpiReducerOptions", o, reducer);
          },
          groups.data(), stages);
    } else {
      throw Base::not_reducible("MpiPipeline", groups.grid(),
                                "gradients() whose tensors have a wire<> form (see "
                                "reducible_stage)");
    }
  }
};

}  // namespace pipesched
