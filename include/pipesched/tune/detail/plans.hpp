// Facts the tuner reads off a simulated schedule (per-rank peaks, whether they fit a budget,
// recomputes) and the order it ranks plans in (better_plan: shorter step, then fewer
// recomputes, then the simpler checkpoint mode, then the earlier configuration).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::detail {

inline bool fits_budget(const std::vector<double>& peaks, const MemoryBudget& budget) {
  for (std::size_t r = 0; r < peaks.size(); ++r) {
    const double limit = budget.of(static_cast<int>(r));
    if (peaks[r] > limit + 1e-9 * std::max(1.0, std::abs(limit))) return false;
  }
  return true;
}

inline std::vector<double> peaks_of(const SimulationResult& sim) {
  std::vector<double> peaks;
  peaks.reserve(sim.ranks.size());
  for (const RankSummary& r : sim.ranks)
    peaks.push_back(r.peak_memory);
  return peaks;
}

//! True when `a` is the better plan: shorter step, then fewer recomputes, then the simpler
//! mode (None, Full, Selective, Mario in enum order), then the earlier configuration.
inline bool better_plan(const tuning::Plan& a, const tuning::Plan& b) {
  const double tol = 1e-12 * std::max(1.0, std::abs(b.makespan));
  if (a.makespan < b.makespan - tol) return true;
  if (a.makespan > b.makespan + tol) return false;
  if (a.recomputes != b.recomputes) return a.recomputes < b.recomputes;
  if (a.checkpoint != b.checkpoint)
    return static_cast<int>(a.checkpoint) < static_cast<int>(b.checkpoint);
  return a.order < b.order;
}

inline void keep_better(std::optional<tuning::Plan>& slot, const tuning::Plan& p) {
  if (!slot || better_plan(p, *slot)) slot = p;
}

}  // namespace pipesched::detail
