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
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace pipesched::schedule {

//! Interleaved 1F1B on an interleaved placement with V = stages / ranks chunks (default 2):
//! rank r holds stages r, r + p, ..., r + (V − 1)p. Microbatches go in rounds, as PyTorch's
//! ScheduleInterleaved1F1B and Megatron-LM cut them: max(1, ⌊M / p⌋) rounds of at least p
//! microbatches each (one round of M when M < p), where PyTorch needs M to divide evenly and
//! here the first M mod rounds rounds take one more (p = 4, M = 10: two rounds of 5; M = 11:
//! 6 and 5). A rank's forward order is, round by round, chunk 0..V−1 over the round's
//! microbatches, and its backward order the same with the chunks reversed. Rank r runs a
//! warm-up of min(2(p − r − 1) + (V − 1)·max(g, p), M·V) forwards, g the first round's size,
//! then (next forward, oldest backward) pairs, then the backwards left; with V = 1 the
//! warm-up is 1F1B's min(p − r − 1, M), so V = 1 gives exactly `one_f_one_b`'s lists. Every
//! microbatch count runs without deadlock (a round smaller than p can deadlock, e.g.
//! p = 5, V = 2 with a last round of 2: rank 0's next forward needs one that rank p − 1 put
//! after a backward, which needs one rank 0 put after that forward; rounds are never smaller
//! than p, and the tests validate every p ≤ 16, V ≤ 5, M ≤ 70). With `wgrad` Split each
//! backward is I immediately followed by its W. Needs `slices == 1`; throws invalid_problem
//! otherwise.
inline Schedule interleaved_1f1b(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "interleaved-1f1b";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 2, generator);
  detail::require_whole_sequences(p, generator);
  const int ranks = p.ranks;
  const int chunks = p.chunks();
  const int microbatches = p.microbatches;
  const int rounds = std::max(1, microbatches / ranks);
  std::vector<int> round_size(static_cast<std::size_t>(rounds), microbatches / rounds);
  for (int i = 0; i < microbatches % rounds; ++i)
    ++round_size[static_cast<std::size_t>(i)];

  Schedule s{generator, p, Placement::interleaved(ranks, chunks), {}};
  s.ranks.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> forwards, backwards;
    int first = 0;
    for (int g : round_size) {
      const int last = first + g;
      for (int v = 0; v < chunks; ++v)
        for (int m = first; m < last; ++m)
          forwards.push_back(Action::make(OpKind::F, v * ranks + r, m));
      for (int v = chunks - 1; v >= 0; --v)
        for (int m = first; m < last; ++m)
          backwards.push_back(Action::make(OpKind::B, v * ranks + r, m));
      first = last;
    }
    const int group = std::max(round_size.front(), ranks);
    const int warmup =
        chunks == 1 ? std::min(ranks - r - 1, microbatches)
                    : std::min(2 * (ranks - r - 1) + (chunks - 1) * group, microbatches * chunks);
    s.ranks[static_cast<std::size_t>(r)] =
        detail::merge_one_f_one_b(forwards, backwards, warmup, wgrad);
  }
  return s;
}

}  // namespace pipesched::schedule
