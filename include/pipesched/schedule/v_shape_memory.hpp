// V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024): V-shape
// schedules whose activation memory is about a half and a third of 1F1B's, built as Zero
// Bubble V planned within that share of 1F1B's peak (schedule::zero_bubble_v_within).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace pipesched::schedule {
namespace detail {

//! ZB-V within `share(p)` / p of 1F1B's rank-0 peak under `cost` with its layers split evenly
//! (1F1B's rank 0 holds p microbatches, so the cap is share(p) microbatches' activations), and
//! within `budget`.
inline Schedule controllable_v(const char* generator, Problem p, WGradMode wgrad, CostRef cost,
                               const MemoryBudget* budget, int (*share)(int)) {
  detail::check_problem(p, generator);
  detail::require_split_backward(wgrad, generator, "dualpipe-v");
  if (p.stages != 0 && p.stages != 2 * p.ranks)
    throw invalid_problem(std::string(generator) + ": stages = " + std::to_string(p.stages) +
                          " is not accepted; it holds exactly 2 chunks per rank in a V, so use "
                          "stages = " +
                          std::to_string(2 * p.ranks) + " or 0.");
  detail::require_whole_sequences(p, generator);
  const Problem linear{.ranks = p.ranks, .stages = p.ranks, .microbatches = p.microbatches};
  // 1F1B's own peak: its layers split evenly over its p stages, whatever layers per stage the
  // V is given (Parallelism::layers lists the V's 2p stages).
  double peak = 0.0;
  cost.with_evenly_layered([&](const CostRef& even) {
    const SimulationResult one = simulate(one_f_one_b(linear), even);
    peak = one.ranks.empty() ? 0.0 : one.ranks.front().peak_memory;
  });
  MemoryBudget cap;
  cap.all = peak * std::min(1.0, static_cast<double>(share(p.ranks)) / p.ranks);
  if (budget)
    for (int r = 0; r < p.ranks; ++r)
      cap.per_rank.push_back(std::min(cap.all, budget->of(r)));
  Schedule s = zero_bubble_v_within(p, wgrad, cost, cap);
  s.name = generator;
  return s;
}

inline int half_share(int p) {
  return (p + 1) / 2 + 1;
}
inline int third_share(int p) {
  return (p + 2) / 3 + 1;
}

}  // namespace detail

//! V-Half: two chunks per rank in a V-shape (rank r holds stages r and 2p − 1 − r), split
//! backward, planned as ZB-V with each rank held to ⌈p/2⌉ + 1 microbatches' activations —
//! about half of 1F1B's p (Qi et al. 2024 give V-Half about half of 1F1B's memory at a
//! throughput close to 1F1B's or better): a forward that would exceed it waits for pending
//! weight gradients, then for an input gradient. The memory is measured with a uniform cost;
//! the overloads below use the cost given. Needs `wgrad` Split, `stages == 2 × ranks` (or 0)
//! and `slices == 1`; throws invalid_problem otherwise.
inline Schedule v_half(Problem p, WGradMode wgrad = WGradMode::Split) {
  return detail::controllable_v("v-half", p, wgrad, UniformCost{}, nullptr, &detail::half_share);
}
//! V-Half with `cost`'s memory.
inline Schedule v_half(Problem p, WGradMode wgrad, CostRef cost) {
  return detail::controllable_v("v-half", p, wgrad, cost, nullptr, &detail::half_share);
}
//! V-Half with `cost`'s memory, each rank also held within `budget`.
inline Schedule v_half_within(Problem p, WGradMode wgrad, CostRef cost,
                              const MemoryBudget& budget) {
  return detail::controllable_v("v-half", p, wgrad, cost, &budget, &detail::half_share);
}

//! V-Min: as v_half with each rank held to ⌈p/3⌉ + 1 microbatches' activations — about a
//! third of 1F1B's, the least of Qi et al.'s V-shape family, at some cost in bubbles.
inline Schedule v_min(Problem p, WGradMode wgrad = WGradMode::Split) {
  return detail::controllable_v("v-min", p, wgrad, UniformCost{}, nullptr, &detail::third_share);
}
//! V-Min with `cost`'s memory.
inline Schedule v_min(Problem p, WGradMode wgrad, CostRef cost) {
  return detail::controllable_v("v-min", p, wgrad, cost, nullptr, &detail::third_share);
}
//! V-Min with `cost`'s memory, each rank also held within `budget`.
inline Schedule v_min_within(Problem p, WGradMode wgrad, CostRef cost, const MemoryBudget& budget) {
  return detail::controllable_v("v-min", p, wgrad, cost, &budget, &detail::third_share);
}

}  // namespace pipesched::schedule
