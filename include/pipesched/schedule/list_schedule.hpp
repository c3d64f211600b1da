// A schedule written as a rule: list scheduling in simulated time.
//
// `list_schedule` runs every rank of a pipeline under a cost model. Whenever a rank is free it
// collects the actions whose inputs have arrived — forwards, backwards (B, or I then W) of every
// (stage, microbatch, slice) the rank holds — and asks a user **rule** two questions: may this
// one start now (`admit`: a memory cap, a count of forwards in flight, a warm-up), and which of
// those that may goes first (`priority`: smallest first). Dependencies, durations, transfer
// times and each rank's memory are tracked as the simulator tracks them, and the result is an
// ordinary compute-only `Schedule`, which validation, simulation, lowering, rendering, the
// tuner and the executor take like any other. A rule that refuses everything while nothing
// runs gets `schedule_stalled`, naming every rank, the time, and the ready actions it refused.
//
//   struct OneFOneB {  // 1F1B: backwards first; rank r keeps at most p − r forwards in flight
//     int ranks;
//     int key(const ReadyAction& a) const { return a.action.kind == OpKind::F; }
//     bool admit_kind(const RankState& st, OpKind k) const {
//       return k != OpKind::F || st.in_flight() < ranks - st.rank;
//     }
//   };
//   Schedule s = list_schedule({.problem = {.ranks = 4, .microbatches = 8},
//                               .placement = Placement::linear(4)}, OneFOneB{4});
#pragma once

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/list_engine.hpp"
#include "pipesched/schedule/list_rule.hpp"

namespace pipesched {

//! Builds a schedule of `lp` by list scheduling under `cost` with `rule` (see the file
//! comment). Dependencies are the rules of core/rules.hpp (F(s,m,k) after F(s−1,m,k) and
//! F(s,m,k−1); B/I(s,m,k) after F(s,m,k), B/I(s+1,m,k) and B/I(s,m,k+1); W after its I). A
//! dependency on another rank adds the cost model's transfer time. Memory: each action's
//! memory_effect (no checkpointing) counts from its start, so `RankState::memory` is what the
//! simulator reports along the list. Throws invalid_problem for a problem or placement that does
//! not fit, a cost model giving a negative or non-finite duration, and schedule_stalled when the
//! rule starves every rank. A type that is not a list_rule gets one error naming what it lacks.
//! Cost: per decision, a pass over the rank's ready actions (priority rules) or a logarithm (key
//! rules).
template <class Rule, cost_model Cost = UniformCost>
ListPlan list_schedule_plan(const ListProblem& lp, const Rule& rule, const Cost& cost = {}) {
  static_assert(check_list_rule<Rule>());
  if constexpr (list_rule<Rule>) {
    return detail::list::run(lp, rule, cost);
  } else {
    return {};
  }
}

//! The schedule of list_schedule_plan.
template <class Rule, cost_model Cost = UniformCost>
Schedule list_schedule(const ListProblem& lp, const Rule& rule, const Cost& cost = {}) {
  return list_schedule_plan(lp, rule, cost).schedule;
}

}  // namespace pipesched
