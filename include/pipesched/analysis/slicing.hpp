// Slice lengths: where to cut each microbatch's sequence into K slices. Uniform cuts give
// every slice the same number of tokens; under causal attention a later slice attends to a
// longer prefix and costs more, so Balanced cuts give every slice the same forward time and
// TeraPipe cuts minimise TeraPipe's pipeline latency (Li et al. 2021, "TeraPipe: Token-Level
// Pipeline Parallelism for Training Large-Scale Language Models"), both under a cost model whose
// slices may differ in length (sliceable_cost, as TransformerCost).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! How a sequence is cut into slices.
enum class SlicingMode {
  Uniform,   //!< the same number of tokens per slice, the last taking the remainder
  Balanced,  //!< the same forward time per slice (a sliceable_cost)
  TeraPipe,  //!< the cut that minimises TeraPipe's latency Σ t_k + (p − 1)·max t_k
};

//! "uniform", "balanced" or "terapipe".
constexpr const char* to_string(SlicingMode m) noexcept {
  switch (m) {
    case SlicingMode::Uniform:
      return "uniform";
    case SlicingMode::Balanced:
      return "balanced";
    case SlicingMode::TeraPipe:
      return "terapipe";
  }
  return "?";
}

//! Reads a slicing mode: "uniform", "balanced" or "terapipe" (any case). Throws parse_error
//! naming the text and listing the choices.
inline SlicingMode parse_slicing_mode(std::string_view text) {
  std::string t(text);
  for (char& c : t)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  for (SlicingMode m : {SlicingMode::Uniform, SlicingMode::Balanced, SlicingMode::TeraPipe})
    if (t == to_string(m)) return m;
  throw parse_error("slicing mode '" + std::string(text) +
                        "' is unknown; choose uniform (the same number of tokens per slice), "
                        "balanced (the same forward time per slice) or terapipe (TeraPipe's "
                        "latency-optimal cut).",
                    0, 1);
}

namespace detail {

//! The name of the function that refused, before its message ("uniform_slices: "), as a
//! mention a front end may leave out.
inline Message who_prefix(const char* who) {
  return api_name(std::string(who) + ":", std::string(who) + ": ");
}

inline void check_slice_count(int sequence, int slices, const char* who) {
  if (slices < 1)
    throw invalid_problem(detail::who_prefix(who) + "slices = " + std::to_string(slices) +
                          " is out of range; use 1 for whole sequences or more to cut them.");
  if (sequence < 1)
    throw invalid_problem(detail::who_prefix(who) + "sequence = " + std::to_string(sequence) +
                          " is out of range; a sequence needs at least 1 token.");
  if (slices > sequence)
    throw invalid_problem(detail::who_prefix(who) + "slices = " + std::to_string(slices) +
                          " exceeds the sequence of " + std::to_string(sequence) +
                          " tokens; every slice needs at least one token, so use at most " +
                          std::to_string(sequence) + " slices.");
}

//! Times of one slice of a sliceable cost model, given by its span rather than its index: the
//! slice is placed among at most three (before it, it, after it) so that the cost model's
//! own formulas apply unchanged. Reuses one cost object, so timing a span allocates nothing.
template <sliceable_cost C>
class SpanTimer {
 public:
  //! Times through `stages` even stages of `base`'s model (one per rank, linear placement).
  //! A layered cost model's own layer split (which counts the stages of the schedule it
  //! prices) is replaced by the even one (evenly_layered): the lengths depend on the model and
  //! the rank count only, so any schedule of those ranks, whatever its stages, reproduces them.
  SpanTimer(const C& base, int stages)
      : cost_(evenly(base)),
        problem_{.ranks = stages, .stages = stages, .microbatches = 1, .slices = 1},
        placement_(Placement::linear(stages)) {
    cost_.slice_lengths.clear();
    cost_.slice_lengths.reserve(3);
    // Surfaces a bad model, device or stage count once, with the cost model's message.
    if constexpr (requires(const C& c, const CostContext& ctx) { c.check(ctx); })
      cost_.check(CostContext{problem_, placement_, 1});
  }

  int stages() const noexcept { return problem_.stages; }

  //! Seconds `kind` of tokens [span.offset, span.offset + span.length) takes on `stage`.
  double operator()(SliceSpan span, int stage, OpKind kind) {
    const int seq = cost_.sequence_tokens();
    auto& lengths = cost_.slice_lengths;
    lengths.clear();
    int index = 0;
    if (span.offset > 0) {
      lengths.push_back(span.offset);
      index = 1;
    }
    lengths.push_back(span.length);
    if (span.offset + span.length < seq) lengths.push_back(seq - span.offset - span.length);
    problem_.slices = static_cast<int>(lengths.size());
    return cost_.duration(CostContext{problem_, placement_, 1},
                          Action::make(kind, stage, 0, index));
  }

 private:
  static C evenly(const C& base) {
    if constexpr (layered_cost<C>)
      return base.evenly_layered();
    else
      return base;
  }

  C cost_;
  Problem problem_;
  Placement placement_;
};

//! The tokens slice boundaries go in multiples of when `slices` slices cut `base`'s sequence:
//! the cost model's slice_granule() where it has one (TransformerCost: a GEMM tile's rows,
//! so that no slice pays for a partly used tile that its neighbour could have filled) and the
//! sequence holds that many per slice; else 1.
template <class C>
int slice_granule(const C& base, int slices) {
  int g = 1;
  if constexpr (requires { base.slice_granule(); }) g = std::max(1, base.slice_granule());
  return static_cast<long long>(g) * slices <= base.sequence_tokens() ? g : 1;
}

//! Checks that `lengths` cut `sequence` into slices of at least one token.
inline void check_lengths(const std::vector<int>& lengths, int sequence, const char* who) {
  if (lengths.empty())
    throw invalid_problem(detail::who_prefix(who) +
                          "no slice lengths given; give one length per slice.");
  long long sum = 0;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    if (lengths[k] < 1)
      throw invalid_problem(detail::who_prefix(who) + "slice " + std::to_string(k) + " has " +
                            std::to_string(lengths[k]) +
                            " tokens; every slice needs at least one.");
    sum += lengths[k];
  }
  if (sum != sequence)
    throw invalid_problem(detail::who_prefix(who) + "the slice lengths sum to " +
                          std::to_string(sum) + " tokens but the sequence has " +
                          std::to_string(sequence) + "; they must cover it exactly.");
}

//! The TeraPipe time of a span: forward plus backward on the busier of the first stage (the
//! most layers when they do not divide evenly) and the last (which adds the LM head); the
//! stages between are never slower than the first.
template <class Timer>
double terapipe_span_time(Timer& time, SliceSpan span) {
  auto fb = [&](int stage) { return time(span, stage, OpKind::F) + time(span, stage, OpKind::B); };
  const int last = time.stages() - 1;
  return last == 0 ? fb(0) : std::max(fb(0), fb(last));
}

}  // namespace detail

//! K slices of a `sequence`-token sequence with sequence / K tokens each, the last taking the
//! remainder (TransformerCost's cut when slice_lengths is empty). Throws invalid_problem when
//! K < 1 or K > sequence.
inline std::vector<int> uniform_slices(int sequence, int slices) {
  detail::check_slice_count(sequence, slices, "uniform_slices");
  const int base = sequence / slices;
  std::vector<int> lengths(static_cast<std::size_t>(slices - 1), base);
  lengths.push_back(sequence - (slices - 1) * base);
  return lengths;
}

//! Seconds the forward of tokens [span.offset, span.offset + span.length) takes through the
//! whole model of `cost` (every layer and the LM head, as one stage): the time Balanced
//! slicing equalises. Throws invalid_problem for a span outside the sequence.
template <sliceable_cost C>
double slice_forward_time(const C& cost, SliceSpan span) {
  if (span.offset < 0 || span.length < 1 || span.offset + span.length > cost.sequence_tokens())
    throw invalid_problem("slice_forward_time: tokens [" + std::to_string(span.offset) + ", " +
                          std::to_string(span.offset + span.length) +
                          ") are not a slice of a sequence of " +
                          std::to_string(cost.sequence_tokens()) +
                          " tokens; give an offset >= 0 and a length >= 1 within it.");
  detail::SpanTimer time(cost, 1);
  return time(span, 0, OpKind::F);
}

//! K slice lengths, summing to `base.sequence_tokens()`, each >= 1, whose forwards take the same
//! time through the whole model (slice_forward_time) to within the cost of one granule of
//! tokens (detail::slice_granule: 1, or a GEMM tile's rows when the device quantises GEMMs,
//! so that the first K − 1 slices are whole tiles): the first K − 1 slices are cut as long
//! as a target time allows, in whole granules, the last takes the rest, and the target is
//! the least one at which the rest fits (bisection). A later slice attends to a longer
//! prefix, so the lengths never increase by more than a granule. `base.slice_lengths` and its layer
//! split (Parallelism::layers, split) are ignored. Throws invalid_problem for a bad model or
//! device, K < 1 or K > sequence.
template <sliceable_cost C>
std::vector<int> balanced_slices(const C& base, int slices) {
  constexpr const char* who = "balanced_slices";
  detail::check_slice_count(base.sequence_tokens(), slices, who);
  const int seq = base.sequence_tokens();
  detail::SpanTimer time(base, 1);
  auto forward = [&](int offset, int length) {
    return time(SliceSpan{offset, length}, 0, OpKind::F);
  };
  // The greedy cut for target `target`: each slice but the last as long as the target
  // allows, leaving a token for every slice after it; true when every slice fits.
  std::vector<int> lengths(static_cast<std::size_t>(slices));
  const int g = detail::slice_granule(base, slices);
  auto cut = [&](double target) {
    int offset = 0;
    for (int k = 0; k + 1 < slices; ++k) {
      if (forward(offset, g) > target) return false;  // not even one granule fits
      // The longest this slice may be, in granules: a granule for every slice after it.
      const int room = (seq - offset) / g - (slices - 1 - k);
      int lo = 1, hi = room;  // forward(offset, ·) does not decrease with the length
      while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (forward(offset, mid * g) <= target)
          lo = mid;
        else
          hi = mid - 1;
      }
      lengths[static_cast<std::size_t>(k)] = lo * g;
      offset += lo * g;
    }
    lengths.back() = seq - offset;
    return forward(offset, seq - offset) <= target;
  };
  // The whole sequence as one slice costs more than any slice, so the cut fits at `hi`.
  double lo = 0, hi = forward(0, seq);
  for (int i = 0; i < 200 && hi - lo > hi * 1e-13; ++i) {
    const double mid = lo + (hi - lo) / 2;
    (cut(mid) ? hi : lo) = mid;
  }
  cut(hi);
  return lengths;
}

//! TeraPipe's latency of a pipeline of `ranks` stages over slices of `lengths` tokens:
//! Σ t_k + (ranks − 1)·max t_k, t_k the forward plus backward time of slice k on the busiest
//! stage when `base`'s model is split evenly over `ranks` stages (one per rank). Throws
//! invalid_problem for lengths that do not cut the sequence or a model with fewer layers
//! than ranks.
template <sliceable_cost C>
double terapipe_objective(const C& base, const std::vector<int>& lengths, int ranks) {
  detail::check_lengths(lengths, base.sequence_tokens(), "terapipe_objective");
  if (ranks < 1)
    throw invalid_problem("terapipe_objective: ranks = " + std::to_string(ranks) +
                          " is out of range; a pipeline needs at least 1 rank.");
  detail::SpanTimer time(base, ranks);
  double sum = 0, most = 0;
  int offset = 0;
  for (int t : lengths) {
    const double x = detail::terapipe_span_time(time, SliceSpan{offset, t});
    sum += x;
    most = std::max(most, x);
    offset += t;
  }
  return sum + (ranks - 1) * most;
}

//! The number of grid steps terapipe_slices places its first boundaries on.
inline constexpr int terapipe_grid_steps = 256;
//! Grid points terapipe_slices tries on each side of a boundary when it refines the cut.
inline constexpr int terapipe_refine_points = 8;
//! The most slices terapipe_slices cuts (its DP grows with the square of the slice count).
inline constexpr int terapipe_max_slices = 32;

namespace detail {

//! The cut minimising TeraPipe's objective among cuts whose boundaries lie in `grid` (sorted
//! token positions from 0 to the sequence, at least `slices` + 1 of them), as the K + 1
//! boundary positions. For each candidate longest-slice time τ, from the least any cut
//! achieves upwards, a DP finds the least Σ t_k with every t_k <= τ; the search stops once
//! (ranks − 1)·τ alone rules out beating the best cut found.
template <class Timer>
std::vector<int> terapipe_cut(Timer& time, const std::vector<int>& grid, int slices, int ranks) {
  const int n = static_cast<int>(grid.size()) - 1;  // segments
  const auto width = static_cast<std::size_t>(n + 1);
  // t(i, j): the time of a slice from grid[i] to grid[j] (i < j).
  std::vector<double> table(width * width, 0.0);
  auto t = [&](int i, int j) -> double& { return table[static_cast<std::size_t>(i) * width + j]; };
  std::vector<double> candidates;
  candidates.reserve(static_cast<std::size_t>(n) * (n + 1) / 2);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j <= n; ++j) {
      t(i, j) = terapipe_span_time(time, SliceSpan{grid[i], grid[j] - grid[i]});
      candidates.push_back(t(i, j));
    }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> sums(static_cast<std::size_t>(slices + 1) * width);
  std::vector<int> from(sums.size());
  auto sum = [&](int k, int j) -> double& { return sums[static_cast<std::size_t>(k) * width + j]; };
  // Least Σ over cuts into `slices` slices each no slower than `cap`, with its grid indices
  // in `cut`; infinity when no cut fits.
  auto least_sum = [&](double cap, std::vector<int>& cut) {
    std::fill(sums.begin(), sums.end(), inf);
    sum(0, 0) = 0;
    for (int k = 1; k <= slices; ++k)
      for (int j = k; j <= n - (slices - k); ++j)
        for (int i = k - 1; i < j; ++i) {
          const double prev = sum(k - 1, i);
          if (prev == inf || t(i, j) > cap || prev + t(i, j) >= sum(k, j)) continue;
          sum(k, j) = prev + t(i, j);
          from[static_cast<std::size_t>(k) * width + j] = i;
        }
    const double total = sum(slices, n);
    if (total < inf) {
      cut.assign(static_cast<std::size_t>(slices + 1), n);
      for (int k = slices, j = n; k > 0; --k) {
        j = from[static_cast<std::size_t>(k) * width + j];
        cut[static_cast<std::size_t>(k - 1)] = j;
      }
    }
    return total;
  };
  auto objective = [&](const std::vector<int>& cut) {
    double total = 0, most = 0;
    for (std::size_t k = 0; k + 1 < cut.size(); ++k) {
      total += t(cut[k], cut[k + 1]);
      most = std::max(most, t(cut[k], cut[k + 1]));
    }
    return total + (ranks - 1) * most;
  };

  std::vector<int> best_cut, cut;
  const double floor_sum = least_sum(inf, best_cut);  // no cap: the least Σ of any cut
  double best = objective(best_cut);
  if (ranks > 1) {
    // The least cap some cut meets (bisection: a larger cap admits more cuts).
    std::size_t lo = 0, hi = candidates.size() - 1;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (least_sum(candidates[mid], cut) < inf)
        hi = mid;
      else
        lo = mid + 1;
    }
    for (std::size_t c = lo; c < candidates.size(); ++c) {
      if (floor_sum + (ranks - 1) * candidates[c] >= best) break;  // no larger cap can win
      if (least_sum(candidates[c], cut) == inf) continue;
      if (const double value = objective(cut); value < best) {
        best = value;
        best_cut = cut;
      }
    }
  }
  std::vector<int> positions;
  positions.reserve(best_cut.size());
  for (int i : best_cut)
    positions.push_back(grid[static_cast<std::size_t>(i)]);
  return positions;
}

}  // namespace detail

//! K slice lengths minimising TeraPipe's objective (terapipe_objective) for a pipeline of
//! `ranks` stages, by dynamic programming over slice boundaries on grids that keep the DP
//! small: first multiples of a step of ceil(sequence / 256) tokens (lowered when needed so
//! that K slices fit; every token for sequences up to 256) plus the boundaries of the uniform
//! cut; then, until the step is one token, the step is cut by 8 and the DP reruns on the
//! points within the old step of each boundary found (at most 8 new steps either side). The
//! result is exact on the first grid (and so for sequences up to 256 tokens) and, since the
//! uniform and balanced cuts are on every grid, never worse than uniform_slices or
//! balanced_slices on this objective. With ranks = 1 the objective is Σ t_k. The model is
//! split evenly whatever `base`'s layer split (Parallelism::layers, split). Throws
//! invalid_problem for a bad model or device, K < 1, K > sequence, K > terapipe_max_slices, or
//! more ranks than layers.
template <sliceable_cost C>
std::vector<int> terapipe_slices(const C& base, int slices, int ranks) {
  constexpr const char* who = "terapipe_slices";
  detail::check_slice_count(base.sequence_tokens(), slices, who);
  if (ranks < 1)
    throw invalid_problem(detail::who_prefix(who) + "ranks = " + std::to_string(ranks) +
                          " is out of range; a pipeline needs at least 1 rank.");
  if (slices > terapipe_max_slices)
    throw invalid_problem(detail::who_prefix(who) + "slices = " + std::to_string(slices) +
                          " is more than the " + std::to_string(terapipe_max_slices) +
                          " this search cuts; use at most " + std::to_string(terapipe_max_slices) +
                          " slices, or balanced_slices for more.");
  const int seq = base.sequence_tokens();
  if (slices == 1) return {seq};
  detail::SpanTimer time(base, ranks);

  // Every grid holds the uniform and the balanced cuts, so the result beats neither.
  std::vector<int> known_cuts = {0};
  for (const std::vector<int>& lengths :
       {uniform_slices(seq, slices), balanced_slices(base, slices)}) {
    int x = 0;
    for (int length : lengths)
      known_cuts.push_back(x += length);
  }
  auto sorted = [](std::vector<int> grid) {
    std::sort(grid.begin(), grid.end());
    grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
    return grid;
  };

  // Steps in whole granules (detail::slice_granule): boundaries on a GEMM tile's rows.
  const int g = detail::slice_granule(base, slices);
  auto granules = [g](int tokens) { return std::max(g, (tokens + g - 1) / g * g); };
  const int step = std::min(granules((seq + terapipe_grid_steps - 1) / terapipe_grid_steps),
                            std::max(g, seq / slices / g * g));
  std::vector<int> grid = known_cuts;
  for (int x = 0; x < seq; x += step)
    grid.push_back(x);
  std::vector<int> cut = detail::terapipe_cut(time, sorted(grid), slices, ranks);
  for (int fine = step; fine > g;) {
    fine = granules((fine + terapipe_refine_points - 1) / terapipe_refine_points);
    grid = known_cuts;
    for (int b : cut)
      for (int j = -terapipe_refine_points; j <= terapipe_refine_points; ++j)
        grid.push_back(std::clamp(b + j * fine, 0, seq));
    cut = detail::terapipe_cut(time, sorted(grid), slices, ranks);
  }
  std::vector<int> lengths(static_cast<std::size_t>(slices));
  for (std::size_t k = 0; k < lengths.size(); ++k)
    lengths[k] = cut[k + 1] - cut[k];
  return lengths;
}

//! The slice lengths of `mode`: uniform_slices, balanced_slices or terapipe_slices (with
//! `ranks` pipeline stages; ignored by the others).
template <sliceable_cost C>
std::vector<int> slice_lengths(const C& base, SlicingMode mode, int slices, int ranks = 1) {
  switch (mode) {
    case SlicingMode::Balanced:
      return balanced_slices(base, slices);
    case SlicingMode::TeraPipe:
      return terapipe_slices(base, slices, ranks);
    case SlicingMode::Uniform:
      break;
  }
  return uniform_slices(base.sequence_tokens(), slices);
}

//! `base` with its slice_lengths set by `mode` for `slices` slices (and `ranks` stages for
//! TeraPipe): the cost to simulate a slice-level schedule with.
template <sliceable_cost C>
C with_slicing(C base, SlicingMode mode, int slices, int ranks = 1) {
  base.slice_lengths = slice_lengths(base, mode, slices, ranks);
  return base;
}

}  // namespace pipesched
