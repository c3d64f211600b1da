// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): ZB-H1 with about twice
// as many forwards in flight, so the extra forwards fill the warm-up bubble as well.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/detail/greedy.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"

namespace pipesched::schedule {

namespace detail {

inline Schedule zero_bubble_h2_impl(Problem p, WGradMode wgrad, const CostRef* memory,
                                    const MemoryBudget* budget) {
  constexpr const char* generator = "zb-h2";
  p = detail::resolve_zero_bubble_linear(p, wgrad, generator);
  std::vector<int> limit(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r)
    limit[static_cast<std::size_t>(r)] = 2 * (p.ranks - r) - 1;
  return detail::greedy_schedule(generator, p, Placement::linear(p.ranks), std::move(limit), memory,
                                 budget, one_f_one_b_in_flight(p.ranks));  // ZB-H1 as the floor
}

}  // namespace detail

//! ZB-H2 on a linear placement (stage s on rank s), compute-only lists of F, I and W. Rank r of
//! p keeps at most 2(p − r) − 1 microbatches whose I has not run (rank 0: 2p − 1, the last
//! rank: 1), so the early ranks run forwards where ZB-H1 waits for the first gradient; W's
//! are deferred into waits. With unit durations (F = I = W = 1, no communication latency) the
//! makespan is ZB-H1's (no order beats 3M + p − 1: the last rank cannot start before p − 1 and
//! has 3M of work), but for M >= 2p − 1 rank r finishes at 3M + r, busy from its first forward
//! to its end (the paper's parallelogram), where ZB-H1 keeps every rank to 3M + p − 1. The price
//! is memory: up to 2p − 1 microbatches of activations on rank 0 instead of p. Needs `wgrad`
//! Split, `stages == ranks` (or 0) and `slices == 1`; throws invalid_problem otherwise.
inline Schedule zero_bubble_h2(Problem p, WGradMode wgrad = WGradMode::Split) {
  return detail::zero_bubble_h2_impl(p, wgrad, nullptr, nullptr);
}

//! The same, memory-bounded (Zero Bubble's `max_mem`): where the next forward would take a rank
//! over `budget` (in `cost`'s memory unit: its memory_delta of F, I and W, as the simulator
//! counts it), the rank first runs its pending weight gradients, oldest first. The plan's
//! clock stays the unit one, so a budget the unbounded schedule never reaches gives that
//! schedule. The peak stays within the budget wherever deferring less suffices; when even
//! running every W at once leaves a forward over it, the forward runs (the peak is then the
//! order's least, and checkpointing or a larger budget must make up the rest).
inline Schedule zero_bubble_h2_within(Problem p, WGradMode wgrad, CostRef cost,
                                      const MemoryBudget& budget) {
  return detail::zero_bubble_h2_impl(p, wgrad, &cost, &budget);
}

}  // namespace pipesched::schedule
