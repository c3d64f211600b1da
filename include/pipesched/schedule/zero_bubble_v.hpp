// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): split backward on a
// V-shape placement of two chunks per rank, within 1F1B's peak activation memory.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/detail/greedy.hpp"

namespace pipesched::schedule {

namespace detail {

inline Schedule zero_bubble_v_impl(Problem p, WGradMode wgrad, const CostRef* memory,
                                   const MemoryBudget* budget) {
  constexpr const char* generator = "zb-v";
  detail::check_problem(p, generator);
  detail::require_split_backward(wgrad, generator, "1f1b or interleaved 1f1b");
  p = detail::resolve_problem(p, 2, generator);
  detail::require_whole_sequences(p, generator);
  if (p.chunks() != 2)
    throw invalid_problem(std::string(generator) + ": chunks = " + std::to_string(p.chunks()) +
                          " (stages = " + std::to_string(p.stages) +
                          " over ranks = " + std::to_string(p.ranks) +
                          ") is not accepted; zb-v holds exactly 2 chunks per rank, so use "
                          "stages = " +
                          std::to_string(2 * p.ranks) + " or 0.");
  std::vector<int> limit(static_cast<std::size_t>(p.ranks), 2 * p.ranks);
  // Under a cap, a rank may hold as few forwards as it must: ZB-V promises 1F1B's memory,
  // which takes fewer chunks in flight where its two stages hold more than 1F1B's one (a rank
  // with both the embedding and the LM head).
  return detail::greedy_schedule(generator, p, Placement::v_shape(p.ranks, 2), std::move(limit),
                                 memory, budget,
                                 std::vector<int>(static_cast<std::size_t>(p.ranks), 1));
}

}  // namespace detail

//! ZB-V, compute-only lists of F, I and W. Rank r of p holds stages r and 2p − 1 − r, so the
//! first and last stage share rank 0 and the backward starts where the forward ends. A chunk
//! forward holds half a microbatch of its rank's activations, so the limit of 2p chunk
//! forwards in flight per rank keeps the peak at 1F1B's p microbatches (rank 0 of 1F1B). When
//! several forwards are ready a rank runs the later stage first, which drains the V; W's are
//! deferred into waits. With unit durations per chunk action (half of a ZB-H1 action) and no
//! communication latency, for M >= 2p − 1 rank r finishes at 6M + r, so the makespan is
//! 6M + p − 1 chunk units, 3M + (p − 1)/2 in ZB-H1's units; for fewer microbatches it stays
//! within ZB-H1's makespan too. Needs `wgrad` Split, `stages == 2 × ranks` (or 0) and
//! `slices == 1`; throws invalid_problem otherwise.
inline Schedule zero_bubble_v(Problem p, WGradMode wgrad = WGradMode::Split) {
  return detail::zero_bubble_v_impl(p, wgrad, nullptr, nullptr);
}

//! The same, memory-bounded (Zero Bubble's `max_mem`): where the next forward would take a rank
//! over `budget` (in `cost`'s memory unit: its memory_delta of F, I and W, as the simulator
//! counts it), the rank first runs its pending weight gradients, oldest first. The plan's
//! clock stays the unit one, so a budget the unbounded schedule never reaches gives that
//! schedule. The peak stays within the budget wherever deferring less suffices; when even
//! running every W at once leaves a forward over it, the forward runs (the peak is then the
//! order's least, and checkpointing or a larger budget must make up the rest).
inline Schedule zero_bubble_v_within(Problem p, WGradMode wgrad, CostRef cost,
                                     const MemoryBudget& budget) {
  return detail::zero_bubble_v_impl(p, wgrad, &cost, &budget);
}

}  // namespace pipesched::schedule
