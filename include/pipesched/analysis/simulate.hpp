// Time-and-memory simulation of a schedule under a cost model.
//
// Each rank runs its list in order. An action starts at max(the rank is free, every
// dependency has finished, plus the transfer time when the dependency is on another rank).
// In a schedule with communication a receive is posted where it stands and takes no wait;
// its consumer starts once the data has arrived (the send's end plus the transfer time), as
// PyTorch's runtime and pipesched's MPI transport run it. A WAIT_SEND ends once its send has
// been delivered (the send's end plus the transfer time) and the peer has posted the receive.
// A cost model with a `step_tail(ctx, rank)` (TransformerCost: the gradient all-reduce over
// data-parallel replicas and the optimizer step) adds that time after each rank's last
// action, so the makespan is the step time.
// Makespan is the last end; bubble ratio = 1 − Σ busy / (ranks × makespan). Memory: the running sum
// of memory deltas along each rank's list (a forward's activations count from its start, a backward
// frees at its end); the per-rank peak is its maximum.
#pragma once

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! When an action ran in the simulation.
struct ActionTiming {
  double start = 0;  //!< when it started
  double end = 0;    //!< when it ended
};

//! One point of a rank's memory curve: from `time` on, the rank holds `value`.
struct MemoryPoint {
  double time = 0;   //!< when the held memory changed
  double value = 0;  //!< what the rank holds from then on
};

//! Per-rank figures.
struct RankSummary {
  double busy = 0;                  //!< time spent computing (and in the rank's share of transfers)
  double idle = 0;                  //!< makespan − busy
  double peak_memory = 0;           //!< largest held memory along the list
  double end = 0;                   //!< when the rank's last action ends
  std::vector<MemoryPoint> memory;  //!< the memory curve, in time order
};

//! What `simulate` computes.
struct SimulationResult {
  bool deadlock = false;        //!< true when some rank could not finish its list
  std::string deadlock_report;  //!< which rank waits for what, when deadlock
  double makespan = 0;          //!< when the last rank ends (its step tail included)
  //! The idle share of ranks × makespan: 1 − Σ busy / (ranks · makespan).
  double bubble_ratio = 0;
  double peak_memory_max = 0;      //!< max over ranks of peak_memory
  std::vector<RankSummary> ranks;  //!< each rank's figures, by rank
  //! timing[r][i] for the action at rank r, position i (idle slots: start = end).
  std::vector<std::vector<ActionTiming>> timing;
};

//! A cost model that charges each rank some time after its last action (step_tail).
template <class C>
concept has_step_tail = requires(const C& c, const CostContext& ctx, int rank) {
  { c.step_tail(ctx, rank) } -> std::convertible_to<double>;
};

namespace detail {

inline bool is_checkpointed(const DependencyGraph& g, const Action& a) {
  return g.recompute_of(a.stage, a.microbatch, a.slice) != DependencyGraph::none;
}

}  // namespace detail

//! Simulates `s` under `cost`. Throws invalid_schedule if `s` breaks a structural rule
//! the simulation cannot proceed without (a dependency later on the same rank, a missing
//! receive); a deadlock is reported in the result, not thrown. Linear in actions.
template <cost_model Cost>
SimulationResult simulate(const Schedule& s, const Cost& cost) {
  detail::DependencyGraph g(s);
  if (!g.issues().empty())
    throw invalid_schedule("cannot simulate schedule '" + s.name +
                           "': " + g.issues().front().message);
  int parts = 1;  // the largest part index + 1 (a part of INT_MAX counts as INT_MAX parts)
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::W && a.part >= parts) parts = a.part == INT_MAX ? INT_MAX : a.part + 1;
  const CostContext ctx{s.problem, s.placement, parts};

  SimulationResult res;
  const int nranks = s.rank_count();
  res.ranks.assign(nranks, {});
  res.timing.resize(nranks);
  for (int r = 0; r < nranks; ++r)
    res.timing[r].assign(s.ranks[r].size(), {});
  std::vector<double> end(g.size(), 0.0);
  std::vector<double> free_at(nranks, 0.0);
  std::vector<double> held(nranks, 0.0);
  std::vector<int> last_pos(nranks, -1);  // last simulated position, to time idle slots

  auto duration = [&](const Action& a) -> double {
    if (a.kind == OpKind::Overlap)
      return static_cast<double>(cost.duration(ctx, a.forward_half())) +
             static_cast<double>(cost.duration(ctx, a.backward_half()));
    if (a.kind == OpKind::Idle) return 0.0;
    return cost.duration(ctx, a);
  };
  auto checkpointed = [&](const Action& x) { return detail::is_checkpointed(g, x); };

  detail::ReplayResult rr = detail::replay(g, [&](int id) {
    const detail::ActionRef& ref = g.ref(id);
    const Action& a = g.action(id);
    const int r = ref.rank;
    double start = free_at[r];
    for (int d : g.deps(id)) {
      const detail::ActionRef& dref = g.ref(d);
      double ready = end[d];
      if (is_wait_send(a.kind)) {
        // Delivered: the send's end plus the transfer; the peer's receive only needs posting.
        if (dref.rank == r) ready += cost.transfer_time(ctx, g.action(d));
      } else if (dref.rank != r) {
        ready += cost.transfer_time(ctx, g.action(d));
      }
      start = std::max(start, ready);
    }
    const double dur = duration(a);
    end[id] = start + dur;
    free_at[r] = end[id];
    // Idle slots between the previous action and this one take no time.
    for (int p = last_pos[r] + 1; p < ref.position; ++p)
      res.timing[r][p] = {start, start};
    last_pos[r] = ref.position;
    res.timing[r][ref.position] = {start, end[id]};
    RankSummary& rs = res.ranks[r];
    rs.busy += dur;  // transfers count with their share on the rank (0 in the built-in models)
    const MemoryEffect mem = memory_effect(cost, ctx, a, checkpointed);
    if (mem.grow != 0) {
      held[r] += mem.grow;
      rs.memory.push_back({start, held[r]});
      rs.peak_memory = std::max(rs.peak_memory, held[r]);
    }
    if (mem.shrink != 0) {
      held[r] += mem.shrink;
      rs.memory.push_back({end[id], held[r]});
    }
    rs.end = std::max(rs.end, end[id]);
  });

  if (!rr.complete) {
    res.deadlock = true;
    res.deadlock_report = detail::describe_deadlock(g, rr);
  }
  if constexpr (has_step_tail<Cost>) {
    if (rr.complete)
      for (int r = 0; r < nranks; ++r)
        res.ranks[r].end += static_cast<double>(cost.step_tail(ctx, r));
  }
  double busy = 0;
  for (int r = 0; r < nranks; ++r) {
    res.makespan = std::max(res.makespan, res.ranks[r].end);
    busy += res.ranks[r].busy;
    for (int p = last_pos[r] + 1; p < static_cast<int>(s.ranks[r].size()); ++p)
      res.timing[r][p] = {free_at[r], free_at[r]};
  }
  for (int r = 0; r < nranks; ++r) {
    res.ranks[r].idle = res.makespan - res.ranks[r].busy;
    res.peak_memory_max = std::max(res.peak_memory_max, res.ranks[r].peak_memory);
  }
  res.bubble_ratio = res.makespan > 0 ? 1.0 - busy / (nranks * res.makespan) : 0.0;
  return res;
}

//! Simulates under UniformCost defaults (f = 1, b = 2, w = 1, r = 1, comm = 0).
inline SimulationResult simulate(const Schedule& s) {
  return simulate(s, UniformCost{});
}

}  // namespace pipesched
