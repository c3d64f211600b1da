// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the backward split into
// an input gradient I (on the critical path) and a weight gradient W (deferred into what
// would be bubbles), with 1F1B's limit on forwards in flight.
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

//! 1F1B's forwards in flight per rank, p − r: ZB-H1's limit and ZB-H2's floor under a cap.
inline std::vector<int> one_f_one_b_in_flight(int ranks) {
  std::vector<int> limit(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    limit[static_cast<std::size_t>(r)] = ranks - r;
  return limit;
}

//! Checks and resolves a problem for a Zero Bubble generator on a linear placement.
inline Problem resolve_zero_bubble_linear(Problem p, WGradMode wgrad, const char* generator) {
  check_problem(p, generator);
  require_split_backward(wgrad, generator, "1f1b");
  p = resolve_problem(p, 1, generator);
  require_whole_sequences(p, generator);
  if (p.stages != p.ranks)
    throw invalid_problem(
        std::string(generator) + ": stages = " + std::to_string(p.stages) +
        " does not fit its linear placement with ranks = " + std::to_string(p.ranks) +
        "; use stages = " + std::to_string(p.ranks) + " (one stage per rank) or 0.");
  return p;
}

inline Schedule zero_bubble_h1_impl(Problem p, WGradMode wgrad, const CostRef* memory,
                                    const MemoryBudget* budget) {
  constexpr const char* generator = "zb-h1";
  p = detail::resolve_zero_bubble_linear(p, wgrad, generator);
  std::vector<int> limit = one_f_one_b_in_flight(p.ranks);
  return detail::greedy_schedule(generator, p, Placement::linear(p.ranks), std::move(limit), memory,
                                 budget);
}

}  // namespace detail

//! ZB-H1 on a linear placement (stage s on rank s), compute-only lists of F, I and W. Rank r of
//! p keeps at most p − r microbatches whose I has not run, as 1F1B does, so its F/I order is
//! 1F1B's; each W is deferred until the rank would otherwise wait, and the rest run at the end.
//! With unit durations (F = I = W = 1, no communication latency) the makespan is 3M + p − 1
//! for M >= p microbatches (bubble (p − 1)/(3M + p − 1)); for M < p it is 2p + 2M − 1, because
//! the last rank's limit of one forward in flight makes it alternate F and I, which spaces the
//! backward chains two apart. Needs `wgrad` Split, `stages == ranks` (or 0) and `slices == 1`;
//! throws invalid_problem otherwise.
inline Schedule zero_bubble_h1(Problem p, WGradMode wgrad = WGradMode::Split) {
  return detail::zero_bubble_h1_impl(p, wgrad, nullptr, nullptr);
}

//! The same, memory-bounded (Zero Bubble's `max_mem`): where the next forward would take a rank
//! over `budget` (in `cost`'s memory unit: its memory_delta of F, I and W, as the simulator
//! counts it), the rank first runs its pending weight gradients, oldest first. The plan's
//! clock stays the unit one, so a budget the unbounded schedule never reaches gives that
//! schedule. The peak stays within the budget wherever deferring less suffices; when even
//! running every W at once leaves a forward over it, the forward runs (the peak is then the
//! order's least, and checkpointing or a larger budget must make up the rest).
inline Schedule zero_bubble_h1_within(Problem p, WGradMode wgrad, CostRef cost,
                                      const MemoryBudget& budget) {
  return detail::zero_bubble_h1_impl(p, wgrad, &cost, &budget);
}

}  // namespace pipesched::schedule
