// Time-and-memory simulation of a schedule under a cost model.
//
// Each rank runs its list in order. An action starts at max(the rank is free, every
// dependency has finished, plus the transfer time when the dependency is on another rank).
// In a schedule with communication a receive is posted where it stands and takes no wait;
// its consumer starts once the data has arrived (the send's end plus the transfer time), as
// PyTorch's runtime and pipesched's MPI transport run it. A WAIT_SEND ends once its send has
// been delivered (the send's end plus the transfer time) and the peer has posted the receive.
// A REDUCE_GRAD starts its stage's data-parallel gradient reduction as a transfer on the rank's
// data-parallel link: from when the rank reaches it (or the link frees: a rank's reductions
// share one link and run one after another) for the cost's `reduce_seconds(ctx, rank, stage)`
// (0 for a cost without the hook), without occupying the rank, like a send. Its
// WAIT_REDUCE_GRAD starts no earlier than that transfer's end, and the rank ends no earlier
// either, so a reduction overlaps whatever the rank runs between the two and only what
// outlasts the list lengthens the step.
// A cost model with a `step_tail(ctx, rank)` (TransformerCost: the optimizer step and, when the
// schedule holds no REDUCE_GRAD, the gradient all-reduce over data-parallel replicas) adds that
// time after each rank's last action, so the makespan is the step time.
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
  double busy = 0;         //!< time spent computing (and in the rank's share of transfers)
  double idle = 0;         //!< makespan − busy
  double peak_memory = 0;  //!< largest held memory along the list
  //! When the rank's last action (or its last gradient reduction) ends, its step tail included.
  double end = 0;
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
  const CostContext ctx{s.problem, s.placement, parts, s.has_gradient_reduction()};

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
  // Gradient reductions: when each rank's data-parallel link frees, when each stage's ends.
  std::vector<double> link_free(nranks, 0.0);
  std::vector<double> reduced_at(static_cast<std::size_t>(std::max(s.problem.stages, 0)), 0.0);
  auto reduction_end = [&](int stage) -> double& {
    if (stage >= static_cast<int>(reduced_at.size()))
      reduced_at.resize(static_cast<std::size_t>(stage) + 1, 0.0);
    return reduced_at[static_cast<std::size_t>(stage)];
  };

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
    if (a.kind == OpKind::WaitReduceGrad && a.stage >= 0)
      start = std::max(start, reduction_end(a.stage));
    const double dur = duration(a);
    end[id] = start + dur;
    if (a.kind == OpKind::ReduceGrad && a.stage >= 0) {
      // On the link, not the rank: from when it is reached or the link frees.
      link_free[r] = std::max(start, link_free[r]) + reduce_seconds_of(cost, ctx, r, a.stage);
      reduction_end(a.stage) = link_free[r];
    }
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
    rs.end = std::max({rs.end, end[id], link_free[r]});  // reduced gradients end the step
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
