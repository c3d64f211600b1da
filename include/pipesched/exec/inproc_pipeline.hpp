// A whole pipeline in one process: one thread per rank, the in-process transport between
// them, one Executor each. The embedded default for examples and tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/detail/run_ranks.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/transport/inproc/inproc_transport.hpp"

namespace pipesched {

//! Runs a schedule on `stages` (one stage model per pipeline stage, indexed by stage; the
//! pipeline keeps pointers, they must outlive it) with one thread per rank. A failure on
//! any rank — a layer that throws, a receive that times out — stops every rank and is
//! rethrown by `step` as the execution_error of the rank that failed first; no thread is
//! left running.
template <class Stage>
class InprocPipeline {
 public:
  using tensor_type = typename Stage::tensor_type;

  InprocPipeline(const Schedule& schedule, std::span<Stage> stages, ExecutorOptions options = {})
      : transport_(schedule.rank_count() > 0 ? schedule.rank_count() : 1) {
    if (static_cast<int>(stages.size()) != schedule.problem.stages)
      throw invalid_problem("InprocPipeline: the schedule has " +
                            std::to_string(schedule.problem.stages) + " stages but " +
                            std::to_string(stages.size()) +
                            " stage models were given; pass one per stage.");
    for (int r = 0; r < schedule.rank_count(); ++r) {
      std::vector<Stage*> mine;
      for (int s : schedule.placement.stages_of(r))
        mine.push_back(&stages[s]);
      executors_.emplace_back(schedule, r, std::move(mine), transport_, HostDevice{}, options);
    }
  }

  //! Runs one training step on every rank and returns what they measured.
  StepResult step(const TrainingData<tensor_type>& data) {
    transport_.reset();
    const int n = static_cast<int>(executors_.size());
    std::vector<RankRun> runs(n);
    const HostDevice clock;
    const auto start = clock.mark();
    detail::run_ranks(
        n, [&](int r) { runs[r] = executors_[r].step(data, start); }, [&] { transport_.abort(); });
    return StepResult::from_runs(std::move(runs), executors_.front().schedule());
  }

  //! The transport (to inspect it in tests).
  InprocTransport<tensor_type>& transport() noexcept { return transport_; }

 private:
  InprocTransport<tensor_type> transport_;
  std::vector<Executor<Stage, InprocTransport<tensor_type>>> executors_;
};

}  // namespace pipesched
