// A plan from `pipesched tune --json`, run over MPI: the job's size checked against the plan's
// grid, this process's groups, and what an mpi::Pipeline of the plan needs (its schedule, the
// stages this process holds, ZeRO from the plan). The caller brings its stage model and its
// optimizer; docs/mpi.md, "Running a plan".
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <string>
#include <utility>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/exec/shard_optimizer.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/mpi/mpi_gradient_reducer.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"

namespace pipesched::mpi {

//! A plan (tuning::Plan, as read_plan_file reads it) placed on this MPI job: built collectively by
//! every process of `world`, it checks that the job has the plan's pp·dp·tp processes and splits
//! `world` into this process's groups. Give `schedule()`, your stages (indexed by stage: `stages()`
//! of them, those with `holds(stage)` the ones this process runs), `groups()` and
//! `reducer_options(...)` to an mpi::Pipeline:
//!
//!     pipesched::mpi::PlanRun run(pipesched::read_plan_file(path), path);
//!     pipesched::mpi::Pipeline<Stage> pipe(
//!         run.schedule(), stages, run.groups(),
//!         {.executor = options, .reducer = run.reducer_options(pipesched::sgd_shards(0.1))});
//!
//! Whatever the plan's ZeRO stage, the weights are updated by the ShardOptimizer given to
//! reducer_options (ZeRO-0's shard is the whole tensor), and the ExecutorOptions' optimizer,
//! snapshot and rollback hooks stay empty. A tensor-parallel plan
//! (tp > 1) needs stage models that take their tensor group (`tensor_parallel_stage`), each
//! built for `tensor_shard()`; mpi::Pipeline gives them the group and refuses others.
class PlanRun {
 public:
  //! Places `plan` (read from `source`, which the messages name) on `world`. Throws
  //! invalid_problem on every process when the job's size is not the plan's
  //! (`plan.json is for pp 2 × dp 2 × tp 1 = 4 processes, but the job has 3; start it
  //! with mpirun -np 4.`).
  explicit PlanRun(tuning::Plan plan, const std::string& source = "the plan",
                   MPI_Comm world = MPI_COMM_WORLD)
      : plan_(std::move(plan)), groups_(checked(plan_, source, world), world) {}

  //! The plan as read.
  const tuning::Plan& plan() const noexcept { return plan_; }
  //! The schedule every pipeline of the job runs (the plan's, validated when it was read).
  const Schedule& schedule() const noexcept { return plan_.schedule; }
  //! This process's pipeline, data-parallel and tensor groups.
  const Groups& groups() const noexcept { return groups_; }
  //! This process's pipeline rank, replica and tensor rank.
  const ProcessGrid::Coordinates& coordinates() const noexcept { return groups_.coordinates(); }
  //! The schedule's stages: one replica's model stages (`plan().layers_per_stage` has one count
  //! per stage when the plan was made with a model), or with Chimera's two replicas both
  //! replicas' stages, stage st computing model stage `schedule().problem.model_stage(st)`.
  int stages() const noexcept { return plan_.schedule.problem.stages; }
  //! Whether this process runs `stage` (its pipeline rank holds it); the other stages of the
  //! span given to mpi::Pipeline may be cheap placeholders.
  bool holds(int stage) const {
    return plan_.schedule.placement.rank_of(stage) == coordinates().pipeline;
  }
  //! The tensor shard this process's stage models are built for: {its tensor rank, tp}.
  TensorShard tensor_shard() const noexcept { return {coordinates().tensor, plan_.tensor}; }
  //! The ZeRO stage of the plan: 0, 1 or 2.
  int zero() const noexcept { return plan_.zero; }
  //! Sequences in one step of the whole job: replicas × microbatches × microbatch size.
  long long global_batch() const noexcept {
    return static_cast<long long>(plan_.data) * plan_.microbatches * plan_.microbatch_size;
  }

  //! `base` with the plan's ZeRO stage and `optimizer`, the update rule the reducer steps this
  //! process's shard of the weights with (with ZeRO-0 the whole weights), whatever the plan's
  //! ZeRO stage. Give it to mpi::Pipeline as its mpi::ReducerOptions, and leave ExecutorOptions'
  //! optimizer, snapshot and rollback hooks empty.
  ReducerOptions reducer_options(ShardOptimizer optimizer, ReducerOptions base = {}) const {
    base.zero = plan_.zero;
    base.optimizer = std::move(optimizer);
    return base;
  }

 private:
  // Runs before the groups are split, so a refused plan throws on every process before any
  // collective call.
  static ProcessGrid checked(const tuning::Plan& plan, const std::string& source, MPI_Comm world) {
    if (!detail::mpi::initialized())
      throw error(
          "mpi::PlanRun: MPI is not initialized; create a pipesched::mpi::Session (or call "
          "MPI_Init_thread) first.");
    int size = 0;
    detail::mpi::check(MPI_Comm_size(world, &size), "MPI_Comm_size");
    const ProcessGrid g = plan.grid();
    if (size != g.size())
      throw invalid_problem(source + " is for pp " + std::to_string(g.pipeline) + " × dp " +
                            std::to_string(g.data) + " × tp " + std::to_string(g.tensor) + " = " +
                            std::to_string(g.size()) + " processes, but the job has " +
                            std::to_string(size) + "; start it with mpirun -np " +
                            std::to_string(g.size()) + ".");
    return g;
  }

  tuning::Plan plan_;
  Groups groups_;
};
}  // namespace pipesched::mpi
