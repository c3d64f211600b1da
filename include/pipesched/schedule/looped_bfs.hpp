// Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022; PyTorch's
// ScheduleLoopedBFS): each rank runs one chunk for every microbatch before the next chunk.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

namespace pipesched::schedule {

//! Looped BFS on an interleaved placement with V = stages / ranks chunks (default 2): rank r
//! runs the forwards of its chunk 0 (stage r) for microbatches 0..M−1, then chunk 1, ...,
//! then the backwards of its last chunk, ..., down to chunk 0. Backwards take microbatches
//! in increasing order (PyTorch's ScheduleLoopedBFS takes them in decreasing order; both
//! are valid and time the same), so weight gradients accumulate in the order sequential
//! training adds them and a pipelined step is bit-identical to it. With `wgrad` Split each backward
//! is I immediately followed by its W. Needs `slices == 1`; throws invalid_problem otherwise.
inline Schedule looped_bfs(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "looped-bfs";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 2, generator);
  detail::require_whole_sequences(p, generator);
  const int ranks = p.ranks;
  const int chunks = p.chunks();

  Schedule s{generator, p, Placement::interleaved(ranks, chunks), {}};
  s.ranks.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    auto& list = s.ranks[static_cast<std::size_t>(r)];
    for (int v = 0; v < chunks; ++v)
      for (int m = 0; m < p.microbatches; ++m)
        list.push_back(Action::make(OpKind::F, v * ranks + r, m));
    for (int v = chunks - 1; v >= 0; --v)
      for (int m = 0; m < p.microbatches; ++m)
        detail::push_backward(list, v * ranks + r, m, wgrad);
  }
  return s;
}

}  // namespace pipesched::schedule
