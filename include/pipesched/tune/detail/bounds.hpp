// The tuner's pruning: lower bounds on the step time of a configuration's plans, and the
// orders in which configurations are evaluated so that good plans come early and the bounds
// skip the rest. All of it is safe: a candidate is skipped only where its bound cannot beat the
// best plan already kept for its (base, mode) pair, so it would not have been kept either.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/tune/detail/grid.hpp"
#include "pipesched/tune/request.hpp"

namespace pipesched::detail {

//! A lower bound on the step time of any schedule over the same units, placement and cost as
//! `s` (with or without recomputes, with or without the gradient reduction as actions): a rank
//! cannot start before the forwards of the stages ahead of its first stage have run and reached
//! it, and then has its own compute to do, and its step_tail, where the cost model has one —
//! with the reduction as actions (has_reduce_seconds) only what no overlap hides: the tail
//! without the reduction, plus the shortest reduction of its stages (the one its last weight
//! gradient starts runs after all of its compute).
template <class Cost>
double makespan_lower_bound(const Schedule& s, const Cost& cost, const SimulationResult& sim) {
  const Problem& p = s.problem;
  const CostContext ctx{p, s.placement, 1};
  // ahead[st] = least time, over microbatches, before a forward of stage st can start.
  std::vector<double> ahead(static_cast<std::size_t>(p.stages),
                            std::numeric_limits<double>::infinity());
  for (int mb = 0; mb < p.microbatches; ++mb) {
    double t = 0;
    for (int st = 0; st < p.stages; ++st) {
      if (!p.has_unit(st, mb)) continue;  // another replica's stage
      ahead[static_cast<std::size_t>(st)] = std::min(ahead[static_cast<std::size_t>(st)], t);
      const Action f = Action::make(OpKind::F, st, mb);
      t += static_cast<double>(cost.duration(ctx, f));
      if (st + 1 < p.stages && s.placement.rank_of(st) != s.placement.rank_of(st + 1))
        t += static_cast<double>(cost.transfer_time(ctx, f));
    }
  }
  double bound = 0;
  for (int r = 0; r < s.rank_count(); ++r) {
    const auto& stages = s.placement.stages_of(r);
    if (stages.empty()) continue;
    double first = std::numeric_limits<double>::infinity();  // its earliest stage's start
    for (int st : stages)
      first = std::min(first, ahead[static_cast<std::size_t>(st)]);
    double tail = 0;
    if constexpr (has_step_tail<Cost>) tail = static_cast<double>(cost.step_tail(ctx, r));
    if constexpr (has_step_tail<Cost> && has_reduce_seconds<Cost>) {
      CostContext scheduled = ctx;
      scheduled.scheduled_reduction = true;
      double shortest = std::numeric_limits<double>::infinity();
      for (int st : stages)
        shortest = std::min(shortest, static_cast<double>(cost.reduce_seconds(ctx, r, st)));
      tail = std::min(tail, static_cast<double>(cost.step_tail(scheduled, r)) + shortest);
    }
    bound = std::max(bound, first + sim.ranks[static_cast<std::size_t>(r)].busy + tail);
  }
  return bound;
}

//! A lower bound on the step time of every schedule of `microbatches` microbatches in
//! `slices` slices over `ranks` ranks under `cost`, whatever its order, placement or
//! checkpointing: the ranks share the compute of every microbatch through the whole model
//! (F + B of each slice on one stage holding every layer; the durations are sums over
//! layers, so any split adds up to the same). Cheap: it needs no schedule.
template <class Cost>
double average_work_bound(const Cost& cost, int ranks, int microbatches, int slices) {
  // One stage holds every layer: a per-stage layer list would not fit it.
  Cost one = cost;
  if constexpr (layered_cost<Cost>) one = cost.evenly_layered();
  const Problem p{.ranks = 1, .stages = 1, .microbatches = 1, .slices = slices};
  const Placement placement = Placement::linear(1);
  const CostContext ctx{p, placement, 1};
  double work = 0;
  for (int k = 0; k < slices; ++k)
    work += static_cast<double>(one.duration(ctx, Action::make(OpKind::F, 0, 0, k))) +
            static_cast<double>(one.duration(ctx, Action::make(OpKind::B, 0, 0, k)));
  return work * microbatches / ranks;
}

//! True when a candidate whose step time is at least `bound` cannot beat a kept plan of step
//! time `rival` (infinity while its pair has none): it would lose, or at best tie and lose on
//! the earlier configuration.
inline bool cannot_beat(double bound, double rival) {
  return bound >= rival - 1e-12 * std::max(1.0, std::abs(rival));
}

//! Sets each configuration's work bound (average_work_bound), cheap as it needs no schedule;
//! 0 where the cost model is refused or cannot be sliced (evaluation then says why).
//! Stops where `stop()` says so (the rest keep 0).
template <class Cost, class Stop>
void set_work_bounds(TuneGrid<Cost>& grid, const tuning::Request& request, Stop&& stop) {
  for (auto& cfg : grid.configs)
    if (grid.costs[cfg.cost]) {
      if (stop()) return;
      try {
        const Cost cost = grid.cost_of(cfg, request.slicing);
        cfg.work_bound = average_work_bound(cost, cfg.ranks, cfg.microbatches, cfg.slices);
      } catch (const std::exception&) {
        cfg.work_bound = 0;  // the build says why
      }
    }
}

//! Phase one's order: every configuration, in increasing work bound (grid order among equals).
template <class Cost>
std::vector<std::size_t> by_work_bound(const std::vector<TuneConfig<Cost>>& configs) {
  std::vector<std::size_t> order(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].work_bound < configs[b].work_bound;
  });
  return order;
}

//! Phase two's order: the configurations that need selective or Mario checkpointing (built,
//! over the budget as they are, within it with full checkpointing), in increasing lower bound
//! (grid order among equals).
template <class Cost>
std::vector<std::size_t> needing_recompute_by_bound(const std::vector<TuneConfig<Cost>>& configs) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!configs[i].refused && !configs[i].base_fits && configs[i].full_fits) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].lower_bound < configs[b].lower_bound;
  });
  return order;
}

//! The configurations phase one built (not pruned nor refused), in increasing lower bound.
template <class Cost>
std::vector<std::size_t> built_by_bound(const std::vector<TuneConfig<Cost>>& configs) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!configs[i].refused) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].lower_bound < configs[b].lower_bound;
  });
  return order;
}

}  // namespace pipesched::detail
