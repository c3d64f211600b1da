// Ranks that share compute units: the simulation of a run whose N ranks have C < N processors
// between them (threads of an in-process pipeline on a machine's cores, every rank of
// cuda-local on one GPU).
//
// The sharing is processor sharing, the fluid form of a fair scheduler: while k ranks run an
// action, each progresses at min(1, C / k) of its own speed, so an action of duration d (the
// cost model's, its time alone) takes d while at most C ranks run and longer while more do.
// Everything else is `simulate`'s: a rank runs its list in order, an action starts once its
// rank is free and its dependencies (plus transfers) have ended, reductions use the ranks'
// links, memory is counted along each list. An action of no duration (a send, a receive, an
// idle slot in the built-in models) takes no processor. With C at least the rank count the
// result is `simulate`'s.
#pragma once

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! The compute units the ranks of a run share: `units` processors for all of them (2 for the
//! threads of an in-process pipeline on a 2-core machine; 1 for every rank of cuda-local on
//! one GPU). 0 means every rank has one of its own.
struct SharedCompute {
  int units = 0;  //!< processors the ranks share; 0: one per rank
};

namespace detail {

//! `simulate` with the ranks of `s` sharing `units` (≥ 1) processors, as the header says.
//! A rank's busy time is what it computed (its actions' durations alone); the rest of an
//! action's wall time it waited for a processor, which counts as idle, so the bubble is the
//! share of rank time not computing.
template <cost_model Cost>
SimulationResult simulate_shared(const Schedule& s, const Cost& cost, int units) {
  const DependencyGraph g(s);
  SimRecorder<Cost> rec(s, g, cost);
  const int nranks = s.rank_count();
  constexpr double never = std::numeric_limits<double>::infinity();
  std::vector<int> waiting(static_cast<std::size_t>(g.size()));  // unfinished dependencies
  for (int a = 0; a < g.size(); ++a)
    waiting[static_cast<std::size_t>(a)] = static_cast<int>(g.deps(a).size());
  struct Running {
    int id = -1;       // the action, or -1 when the rank runs none
    double start = 0;  // when it started
    double work = 0;   // its duration alone
    double left = 0;   // what is left of it, in its own time
  };
  std::vector<Running> running(static_cast<std::size_t>(nranks));
  std::vector<int> next(static_cast<std::size_t>(nranks), 0);  // into g.rank_actions(r)
  std::vector<double> wake(static_cast<std::size_t>(nranks), never);
  double now = 0;

  auto finish_action = [&](int id, double start, double end, double busy) {
    rec.record(id, start, end, busy);
    for (int d : g.dependents(id))
      --waiting[static_cast<std::size_t>(d)];
  };
  // Starts what rank r can start at `now` (and ends at once what takes no time); true when
  // anything changed.
  auto advance = [&](int r) {
    bool changed = false;
    Running& run = running[static_cast<std::size_t>(r)];
    const std::vector<int>& order = g.rank_actions(r);
    int& at = next[static_cast<std::size_t>(r)];
    wake[static_cast<std::size_t>(r)] = never;
    while (run.id < 0 && at < static_cast<int>(order.size())) {
      const int id = order[static_cast<std::size_t>(at)];
      if (waiting[static_cast<std::size_t>(id)] > 0) break;  // another rank has not got there
      const double ready = rec.ready_time(id);
      if (ready > now) {
        wake[static_cast<std::size_t>(r)] = ready;
        break;
      }
      ++at;
      changed = true;
      const double work = rec.duration(g.action(id));
      if (work > 0)
        run = {id, now, work, work};
      else
        finish_action(id, now, now, 0.0);
    }
    return changed;
  };

  for (;;) {
    for (bool changed = true; changed;) {
      changed = false;
      for (int r = 0; r < nranks; ++r)
        changed = advance(r) || changed;
    }
    int busy_ranks = 0;
    double next_event = never;
    for (int r = 0; r < nranks; ++r) {
      next_event = std::min(next_event, wake[static_cast<std::size_t>(r)]);
      if (running[static_cast<std::size_t>(r)].id >= 0) ++busy_ranks;
    }
    if (busy_ranks == 0 && next_event == never) break;  // every list done, or a deadlock
    const double rate = busy_ranks > units ? static_cast<double>(units) / busy_ranks : 1.0;
    int first = -1;  // the running action that ends first
    for (int r = 0; r < nranks; ++r) {
      const Running& run = running[static_cast<std::size_t>(r)];
      if (run.id < 0) continue;
      const double end = now + run.left / rate;
      if (end < next_event) {
        next_event = end;
        first = r;
      }
    }
    const double dt = next_event - now;
    now = next_event;
    for (int r = 0; r < nranks; ++r) {
      Running& run = running[static_cast<std::size_t>(r)];
      if (run.id < 0) continue;
      run.left = r == first ? 0.0 : run.left - rate * dt;
      if (run.left <= 1e-12 * run.work) {
        finish_action(run.id, run.start, now, run.work);
        run.id = -1;
      }
    }
  }

  ReplayResult rr;
  rr.stuck_at.resize(static_cast<std::size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    const std::vector<int>& order = g.rank_actions(r);
    const int at = next[static_cast<std::size_t>(r)];
    if (at < static_cast<int>(order.size())) {
      rr.complete = false;
      rr.stuck_at[static_cast<std::size_t>(r)] =
          g.ref(order[static_cast<std::size_t>(at)]).position;
    } else {
      rr.stuck_at[static_cast<std::size_t>(r)] = static_cast<int>(s.ranks[r].size());
    }
  }
  return rec.finish(rr);
}

}  // namespace detail

//! Simulates `s` under `cost` with its ranks sharing `shared.units` processors (see the
//! header): the step time of an in-process pipeline whose threads outnumber the machine's
//! cores. With no sharing (`units` 0, or at least the rank count) the result is
//! `simulate(s, cost)`'s; a negative count throws invalid_argument.
template <cost_model Cost>
SimulationResult simulate(const Schedule& s, const Cost& cost, SharedCompute shared) {
  if (shared.units < 0)
    throw invalid_argument("simulate: " + field("SharedCompute.units", shared.units) +
                               " is out of range; give the processors the ranks share (1 or "
                               "more), or 0 for one per rank.",
                           "SharedCompute.units", std::to_string(shared.units));
  if (shared.units == 0 || shared.units >= s.rank_count()) return simulate(s, cost);
  return detail::simulate_shared(s, cost, shared.units);
}

}  // namespace pipesched
