// GPipe (Huang et al., 2019): every rank runs all forwards of a step, then all backwards.
#pragma once

#include <string>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

//! The generators: one function per schedule order, from a Problem to a Schedule.
namespace pipesched::schedule {

//! GPipe on a linear placement (stage s on rank s). Rank r runs F(r, m) for every
//! microbatch m in increasing order, then the backward of every microbatch in the same
//! order: B, or I immediately followed by its W when `wgrad` is Split. With K > 1 slices
//! this is TeraPipe's order (Li et al., 2021): the forwards of each microbatch's slices in
//! order, then each microbatch's backwards from its last slice to its first. Needs
//! `stages == ranks` (or 0); throws invalid_problem otherwise.
inline Schedule gpipe(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "gpipe";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 1, generator);
  if (p.stages != p.ranks)
    throw invalid_problem(
        std::string(generator) + ": stages = " + std::to_string(p.stages) +
        " does not fit its linear placement with ranks = " + std::to_string(p.ranks) +
        "; use stages = " + std::to_string(p.ranks) + " (one stage per rank) or 0.");

  Schedule s{generator, p, Placement::linear(p.ranks), {}};
  s.ranks.resize(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r) {
    auto& list = s.ranks[static_cast<std::size_t>(r)];
    list.reserve(static_cast<std::size_t>(p.microbatches) * p.slices * 3);
    for (int m = 0; m < p.microbatches; ++m)
      for (int k = 0; k < p.slices; ++k)
        list.push_back(Action::make(OpKind::F, r, m, k));
    for (int m = 0; m < p.microbatches; ++m)
      for (int k = p.slices - 1; k >= 0; --k)
        detail::push_backward(list, r, m, wgrad, k);
  }
  return s;
}

}  // namespace pipesched::schedule
