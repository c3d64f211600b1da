// A per-rank memory budget: what checkpointing, the memory-bounded generators and the tuner
// fit a schedule into.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace pipesched {

//! A per-rank memory budget in the cost model's memory unit (UniformCost: microbatches of one
//! rank's activations; TransformerCost and ProfiledCost: bytes). `per_rank`, when not empty,
//! overrides `all` rank by rank (a tuner gives each rank its device memory minus its weights).
struct MemoryBudget {
  double all = std::numeric_limits<double>::infinity();  //!< every rank's budget (infinite: none)
  std::vector<double> per_rank = {};  //!< rank r's budget at r; ranks beyond its end get `all`

  //! The budget of `rank`: `per_rank[rank]` when given, else `all`.
  double of(int rank) const {
    return rank < static_cast<int>(per_rank.size()) ? per_rank[static_cast<std::size_t>(rank)]
                                                    : all;
  }
  //! True when some rank's budget is finite.
  bool limited() const {
    if (std::isfinite(all)) return true;
    for (double b : per_rank)
      if (std::isfinite(b)) return true;
    return false;
  }
};

}  // namespace pipesched
