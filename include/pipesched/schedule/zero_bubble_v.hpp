// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): split backward on a
// V-shape placement of two chunks per rank, within 1F1B's peak activation memory.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/common.hpp"
#include "pipesched/schedule/detail/greedy.hpp"

namespace pipesched::schedule {

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
  return detail::greedy_schedule(generator, p, Placement::v_shape(p.ranks, 2), std::move(limit));
}

}  // namespace pipesched::schedule
