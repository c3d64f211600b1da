// The step loop of a pipeline whose ranks are threads of this process (inproc::Pipeline,
// cuda_local::Pipeline): one Executor per rank over one shared transport, every rank's list run
// on its own thread from a common start, the first failure stopping every rank; the updates
// applied only once every list has run, and undone on every rank whose optimizer ran when one
// fails.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/detail/commit.hpp"
#include "pipesched/exec/detail/run_ranks.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"

namespace pipesched::detail {

//! What differs between thread pipelines is the device of a rank and the step's common
//! start; `Ranks` says both:
//!   Device device(Transport&, int rank)         the Executor's device of rank `rank`
//!   Mark start(Transport&)                      the zero of every rank's timeline
//!   void enter(Transport&, int rank)            on rank `rank`'s thread, before its list
template <class Stage, class Transport, class Device, class Ranks>
class ThreadPipeline {
 public:
  using tensor_type = typename Stage::tensor_type;

  //! Runs one training step on every rank and returns what they measured. A failure on any
  //! rank stops every rank and is rethrown as the execution_error of the rank that failed
  //! first; no thread is left running. The step commits on every rank or on none: the
  //! optimizer hooks run once every rank has finished its list, and when a snapshot or
  //! optimizer hook throws, the rollback hook undoes the update of every rank whose optimizer
  //! ran (the error's `rolled_back()`).
  StepResult step(const TrainingData<tensor_type>& data) {
    transport_.reset();
    const int n = static_cast<int>(executors_.size());
    std::vector<RankRun> runs(static_cast<std::size_t>(n));
    const auto start = Ranks::start(transport_);
    try {
      run_ranks(
          n,
          [&](int r) {
            Ranks::enter(transport_, r);
            runs[static_cast<std::size_t>(r)] =
                executors_[static_cast<std::size_t>(r)].step(data, start);
          },
          [&] { transport_.abort(); });
    } catch (const execution_error& e) {
      throw rolled_back(e);  // no rank has applied its update yet
    }
    commit();
    return StepResult::from_runs(std::move(runs), executors_.front().schedule());
  }

  //! The transport (to inspect it in tests).
  Transport& transport() noexcept { return transport_; }

 protected:
  //! `who` names the pipeline in errors; the transport is built from `transport_args`.
  template <class... TransportArgs>
  ThreadPipeline(const char* who, const Schedule& schedule, std::span<Stage> stages,
                 const ExecutorOptions& options, TransportArgs&&... transport_args)
      : transport_(std::forward<TransportArgs>(transport_args)...) {
    if (static_cast<int>(stages.size()) != schedule.problem.stages)
      throw invalid_problem(std::string(who) + ": the schedule has " +
                            std::to_string(schedule.problem.stages) + " stages but " +
                            std::to_string(stages.size()) +
                            " stage models were given; pass one per stage.");
    executors_.reserve(static_cast<std::size_t>(schedule.rank_count()));
    for (int r = 0; r < schedule.rank_count(); ++r) {
      std::vector<Stage*> mine;
      for (int s : schedule.placement.stages_of(r))
        mine.push_back(&stages[static_cast<std::size_t>(s)]);
      executors_.emplace_back(schedule, r, std::move(mine), transport_,
                              Ranks::device(transport_, r), options);
    }
  }

  Transport transport_;
  std::vector<Executor<Stage, Transport, Device>> executors_;

 private:
  // Every rank applies its update, each on its own thread; when one fails, the update of
  // every rank whose optimizer ran is undone. A rank whose snapshot hook threw never changed
  // its parameters, and is left alone: its rollback would restore an older snapshot.
  void commit() {
    if (!executors_.front().has_update()) return;
    const int n = static_cast<int>(executors_.size());
    auto each = [&](auto&& fn) {
      run_ranks(
          n,
          [&](int r) {
            Ranks::enter(transport_, r);
            fn(executors_[static_cast<std::size_t>(r)]);
          },
          [] {});
    };
    try {
      each([](auto& e) { e.apply_update(); });
    } catch (const execution_error& failed) {
      bool changed = false;
      for (const auto& e : executors_)
        changed = changed || e.optimizer_ran();
      if (!changed) throw update_failed(failed, true, "");  // no parameters moved anywhere
      if (!executors_.front().can_roll_back()) throw update_failed(failed, false, no_rollback_hook);
      try {
        each([](auto& e) { e.roll_back_update(); });
      } catch (const execution_error& undo) {
        throw update_failed(failed, false, undo.what());
      }
      throw update_failed(failed, true, "");
    }
  }
};

}  // namespace pipesched::detail
