// What one pipelined step measured on every rank, and its timeline in the simulator's shape.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/executor.hpp"

namespace pipesched {

//! What a pipelined step measured on every rank.
struct StepResult {
  double loss = 0;             //!< the step loss (sum of every rank's contributions)
  double seconds = 0;          //!< wall time of the step (the latest rank end)
  std::vector<RankRun> ranks;  //!< what each rank measured, by rank
  Schedule executed;           //!< the schedule as run (lowered to sends and receives)

  //! The step of `runs` (one per rank, in rank order) of `executed`: the loss is their sum,
  //! the step time the latest end.
  static StepResult from_runs(std::vector<RankRun> runs, Schedule executed) {
    StepResult res;
    res.ranks = std::move(runs);
    res.executed = std::move(executed);
    for (const RankRun& run : res.ranks) {
      res.loss += run.loss;
      res.seconds = std::max(res.seconds, run.end);
    }
    return res;
  }

  //! The measured run in the simulator's shape, for `render_svg`, `render_chrome_trace` and
  //! `render_text_grid`: compute actions with their measured start and end, sends and
  //! receives as instants (a wait shows as idle), memory in bytes.
  SimulationResult timeline() const {
    SimulationResult r;
    r.ranks.resize(ranks.size());
    r.timing.resize(ranks.size());
    double busy = 0;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const RankRun& run = ranks[i];
      const auto& list = executed.ranks[i];
      r.timing[i] = run.timing;
      RankSummary& rs = r.ranks[i];
      for (std::size_t p = 0; p < list.size(); ++p) {
        if (!is_compute(list[p].kind))
          r.timing[i][p].start = r.timing[i][p].end;
        else
          rs.busy += r.timing[i][p].end - r.timing[i][p].start;
      }
      rs.peak_memory = run.peak_bytes;
      rs.peak_host_memory = run.peak_host_bytes;
      rs.memory = run.memory;
      rs.end = run.end;
      r.makespan = std::max(r.makespan, run.end);
      r.peak_memory_max = std::max(r.peak_memory_max, run.peak_bytes);
      r.peak_host_memory_max = std::max(r.peak_host_memory_max, run.peak_host_bytes);
      busy += rs.busy;
    }
    for (auto& rs : r.ranks)
      rs.idle = r.makespan - rs.busy;
    r.bubble_ratio = r.makespan > 0 ? 1.0 - busy / (ranks.size() * r.makespan) : 0.0;
    return r;
  }
};

}  // namespace pipesched
