// 1F1B (PipeDream-Flush, Narayanan et al., 2021): a warm-up of forwards, then one forward
// and one backward in turn, then the remaining backwards.
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

namespace pipesched::schedule {
namespace detail {

//! One rank's 1F1B list from its forward order `forwards` (F actions) and backward order
//! `backwards` (B actions, same length): the first `warmup` forwards, then pairs
//! (next forward, oldest backward), then the backwards left. Shared by 1F1B and
//! Interleaved 1F1B, which differ only in the two orders and the warm-up count.
inline std::vector<Action> merge_one_f_one_b(const std::vector<Action>& forwards,
                                             const std::vector<Action>& backwards, int warmup,
                                             WGradMode wgrad) {
  const int n = static_cast<int>(forwards.size());
  warmup = std::clamp(warmup, 0, n);
  std::vector<Action> list;
  list.reserve(forwards.size() + backwards.size() * (wgrad == WGradMode::Split ? 2 : 1));
  auto backward = [&](int k) {
    const Action& b = backwards[static_cast<std::size_t>(k)];
    push_backward(list, b.stage, b.microbatch, wgrad, b.slice);
  };
  for (int k = 0; k < warmup; ++k)
    list.push_back(forwards[static_cast<std::size_t>(k)]);
  for (int k = 0; k < n - warmup; ++k) {
    list.push_back(forwards[static_cast<std::size_t>(warmup + k)]);
    backward(k);
  }
  for (int k = n - warmup; k < n; ++k)
    backward(k);
  return list;
}

}  // namespace detail

//! 1F1B on a linear placement (stage s on rank s). Rank r runs a warm-up of
//! min(p − r − 1, M) forwards, then M − warm-up pairs (forward of the next microbatch,
//! backward of the oldest one), then the warm-up's backwards; microbatches go in
//! increasing order. With `wgrad` Split each backward is I immediately followed by its W.
//! Needs `stages == ranks` (or 0) and `slices == 1`; throws invalid_problem otherwise.
inline Schedule one_f_one_b(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "1f1b";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 1, generator);
  detail::require_whole_sequences(p, generator);
  if (p.stages != p.ranks)
    throw invalid_problem(
        std::string(generator) + ": stages = " + std::to_string(p.stages) +
        " does not fit its linear placement with ranks = " + std::to_string(p.ranks) +
        "; use stages = " + std::to_string(p.ranks) + " (one stage per rank) or 0.");

  Schedule s{generator, p, Placement::linear(p.ranks), {}};
  s.ranks.resize(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r) {
    std::vector<Action> forwards, backwards;
    for (int m = 0; m < p.microbatches; ++m) {
      forwards.push_back(Action::make(OpKind::F, r, m));
      backwards.push_back(Action::make(OpKind::B, r, m));
    }
    const int warmup = std::min(p.ranks - r - 1, p.microbatches);
    s.ranks[static_cast<std::size_t>(r)] =
        detail::merge_one_f_one_b(forwards, backwards, warmup, wgrad);
  }
  return s;
}

}  // namespace pipesched::schedule
