// Interleaved 1F1B (Narayanan et al., 2021; Megatron-LM's order): 1F1B over a looped
// placement where each rank holds several chunks (virtual stages).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/common.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace pipesched::schedule {

//! Interleaved 1F1B on an interleaved placement with V = stages / ranks chunks (default 2):
//! rank r holds stages r, r + p, ..., r + (V − 1)p. Microbatches go in groups of p (one
//! group of M when M < p); a rank's forward order is, group by group, chunk 0..V−1 over the
//! group's microbatches, and its backward order the same with the chunks reversed. Rank r
//! runs a warm-up of min(2(p − r − 1) + (V − 1)p, M·V) forwards, then (next forward, oldest
//! backward) pairs, then the backwards left; with V = 1 the warm-up is 1F1B's
//! min(p − r − 1, M), so V = 1 gives exactly `one_f_one_b`'s lists. With `wgrad` Split each
//! backward is I immediately followed by its W. Needs `slices == 1`, and with V > 1
//! microbatches a multiple of ranks or at most ranks; throws invalid_problem otherwise.
inline Schedule interleaved_1f1b(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "interleaved-1f1b";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 2, generator);
  detail::require_whole_sequences(p, generator);
  const int ranks = p.ranks;
  const int chunks = p.chunks();
  const int microbatches = p.microbatches;
  // A last group smaller than p can deadlock: for some remainders (e.g. p = 5, V = 2, M = 7)
  // rank 0's next forward needs a forward that rank p − 1 has put after a backward, and that
  // backward needs one that rank 0 has put after the forward. Whole groups never do, nor
  // does a single group (M <= p); other counts are refused rather than sorted out.
  if (chunks > 1 && microbatches > ranks && microbatches % ranks != 0)
    throw invalid_problem(
        std::string(generator) + ": microbatches = " + std::to_string(microbatches) +
        " does not fit ranks = " + std::to_string(ranks) +
        " with chunks = " + std::to_string(chunks) +
        " (microbatches go in groups of ranks, and a smaller last group "
        "deadlocks for some counts); use a multiple of ranks = " +
        std::to_string(ranks) + ", or at most " + std::to_string(ranks) + ", or chunks = 1.");

  Schedule s{generator, p, Placement::interleaved(ranks, chunks), {}};
  s.ranks.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> forwards, backwards;
    for (int first = 0; first < microbatches; first += ranks) {
      const int last = std::min(first + ranks, microbatches);
      for (int v = 0; v < chunks; ++v)
        for (int m = first; m < last; ++m)
          forwards.push_back(Action::make(OpKind::F, v * ranks + r, m));
      for (int v = chunks - 1; v >= 0; --v)
        for (int m = first; m < last; ++m)
          backwards.push_back(Action::make(OpKind::B, v * ranks + r, m));
    }
    const int warmup =
        chunks == 1 ? std::min(ranks - r - 1, microbatches)
                    : std::min(2 * (ranks - r - 1) + (chunks - 1) * ranks, microbatches * chunks);
    s.ranks[static_cast<std::size_t>(r)] =
        detail::merge_one_f_one_b(forwards, backwards, warmup, wgrad);
  }
  return s;
}

}  // namespace pipesched::schedule
