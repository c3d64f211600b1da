// The simulator's replay of a measured step: what the schedule's dependencies alone make of
// the times each action measured, so that the measured step over the replay is what the run
// added between actions (hand-offs, waking a waiting rank, bookkeeping).
#pragma once

#include <map>
#include <tuple>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/step_result.hpp"

namespace pipesched {

//! A cost model of the compute actions of one measured step (`StepResult`), each at the time
//! it measured (end − start); transfers and memory free. An action it has no time for takes 0.
class MeasuredTimes {
 public:
  //! The compute actions of `r` (its executed lists and their timings) at their times.
  explicit MeasuredTimes(const StepResult& r) {
    for (std::size_t i = 0; i < r.ranks.size() && i < r.executed.ranks.size(); ++i) {
      const auto& list = r.executed.ranks[i];
      const auto& timing = r.ranks[i].timing;
      for (std::size_t p = 0; p < list.size() && p < timing.size(); ++p)
        if (is_compute(list[p].kind)) seconds_[key(list[p])] = timing[p].end - timing[p].start;
    }
  }
  //! Seconds `a` took in the measured step (0 for an action it did not run).
  double duration(const CostContext&, const Action& a) const {
    const auto it = seconds_.find(key(a));
    return it == seconds_.end() ? 0.0 : it->second;
  }
  //! 0: the replay is of time, not memory.
  double memory_delta(const CostContext&, const Action&, bool) const { return 0.0; }
  //! 0: a message's time is what the replay leaves to the run (measured over replayed).
  double transfer_time(const CostContext&, const Action&) const { return 0.0; }

 private:
  using Key = std::tuple<int, int, int, int, int>;
  static Key key(const Action& a) {
    return {static_cast<int>(a.kind), a.stage, a.microbatch, a.slice, a.part};
  }
  std::map<Key, double> seconds_;
};

//! The simulator's run of `schedule` (the schedule the step ran, as given to the pipeline)
//! with every compute action at the time `r` measured for it and no time between dependent
//! actions: the step the measured actions allow. `r.seconds / replay(...).makespan` is what
//! the executor and transport added; 1.0 would be nothing.
inline SimulationResult replay(const Schedule& schedule, const StepResult& r) {
  return simulate(schedule, MeasuredTimes(r));
}

}  // namespace pipesched
