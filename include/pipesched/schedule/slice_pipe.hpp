// Slice-level schedules (MEPipe, EuroSys '25): sequences cut into K slices, the pipeline
// scheduling (microbatch, slice, chunk) units so a rank holds the activations of a few
// slices rather than of whole microbatches.
//
// - `seq_1f1b`: 1F1B over (microbatch, slice) units on a linear placement.
// - `slice_pipe`: MEPipe's sequence × virtual pipeline (SVPP): the same over an interleaved
//   placement with V chunks per rank, the number of forwards before the first backward a knob.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/common.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace pipesched::schedule {

//! Knobs of slice_pipe beyond the Problem.
struct SlicePipeOptions {
  //! Forwards rank 0 runs before its first backward (its warm-up); rank r runs that many
  //! minus r, but never fewer than (V − 1)·g + K − 1, the forwards its own order puts before
  //! its first backward. -1: the default, (V − 1)·g + (K − 1) + (p − 1), g the units per group (p
  //! when the slice count divides it) — enough for the backward of
  //! the first microbatch's last slice to come back as rank 0 finishes its forwards.
  int warmup = -1;
};

namespace detail {

//! Units per group: the smallest multiple of K that is at least p, so a group holds whole
//! microbatches (a microbatch's backwards start from its last slice, which must be in the
//! same group as its first). Equals p when K divides p.
inline int slice_group(int ranks, int slices) {
  return (ranks + slices - 1) / slices * slices;
}

//! The rounds units go in, in units: whole microbatches, at least slice_group units each —
//! max(1, ⌊M / (g / K)⌋) rounds, the first M mod rounds one microbatch larger (as
//! interleaved_1f1b's rounds; a round smaller than g can deadlock, a larger one cannot).
inline std::vector<int> slice_rounds(int ranks, int slices, int microbatches) {
  const int per = slice_group(ranks, slices) / slices;  // microbatches in the smallest round
  const int rounds = std::max(1, microbatches / per);
  std::vector<int> units(static_cast<std::size_t>(rounds), microbatches / rounds * slices);
  for (int i = 0; i < microbatches % rounds; ++i)
    units[static_cast<std::size_t>(i)] += slices;
  return units;
}

//! The default warm-up of rank r: (V − 1)·g + (K − 1) + (p − 1 − r) forwards, g the first
//! round's units when `first_round` exceeds the group size (slice_rounds), else the group
//! size. With V = 1 this is seq-1f1b's published min(p − r − 2 + K, M·K) before the cap.
inline int slice_warmup(int ranks, int chunks, int slices, int rank, int first_round = 0) {
  const int g = std::max(slice_group(ranks, slices), first_round);
  return (chunks - 1) * g + (slices - 1) + (ranks - 1 - rank);
}

//! The lists of an SVPP schedule: units (microbatch, slice) in a stream, forwards with
//! slices ascending, backwards with slices descending (a slice's backward needs the next
//! slice's), grouped by slice_group units; within a group chunk 0..V−1 for forwards and V−1..0
//! for backwards; 1F1B alternation after `warmup(r)` forwards.
template <class Warmup>
Schedule sliced_one_f_one_b(const char* generator, const Problem& p, WGradMode wgrad,
                            Warmup&& warmup) {
  const int ranks = p.ranks, chunks = p.chunks(), slices = p.slices;
  const int units = p.microbatches * slices;
  Schedule s{generator,
             p,
             chunks == 1 ? Placement::linear(ranks) : Placement::interleaved(ranks, chunks),
             {}};
  s.ranks.resize(static_cast<std::size_t>(ranks));
  auto fwd_unit = [&](int i) { return std::pair{i / slices, i % slices}; };
  auto bwd_unit = [&](int i) { return std::pair{i / slices, slices - 1 - i % slices}; };
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> forwards, backwards;
    forwards.reserve(static_cast<std::size_t>(units) * chunks);
    backwards.reserve(static_cast<std::size_t>(units) * chunks);
    int first = 0;
    for (int round : slice_rounds(ranks, slices, p.microbatches)) {
      const int last = first + round;
      for (int v = 0; v < chunks; ++v)
        for (int i = first; i < last; ++i) {
          auto [m, k] = fwd_unit(i);
          forwards.push_back(Action::make(OpKind::F, v * ranks + r, m, k));
        }
      for (int v = chunks - 1; v >= 0; --v)
        for (int i = first; i < last; ++i) {
          auto [m, k] = bwd_unit(i);
          backwards.push_back(Action::make(OpKind::B, v * ranks + r, m, k));
        }
      first = last;
    }
    const int w = std::clamp(warmup(r), 0, units * chunks);
    s.ranks[static_cast<std::size_t>(r)] = merge_one_f_one_b(forwards, backwards, w, wgrad);
  }
  return s;
}

}  // namespace detail

//! seq-1f1b: 1F1B over (microbatch, slice) units on a linear placement. Rank r runs
//! min(p − r − 2 + K, M·K) forwards before pairing each next forward with the oldest
//! backward; a microbatch's backwards go from its last slice to its first. With uniform slice
//! costs its bubble is (p − 1)/(K·M + p − 1). K = 1 gives 1F1B.
inline Schedule seq_1f1b(Problem p, WGradMode wgrad = WGradMode::Fused) {
  constexpr const char* generator = "seq-1f1b";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 1, generator);
  if (p.stages != p.ranks)
    throw invalid_problem(
        std::string(generator) + ": stages = " + std::to_string(p.stages) +
        " does not fit its linear placement with ranks = " + std::to_string(p.ranks) +
        "; use stages = " + std::to_string(p.ranks) + " or 0.");
  const int ranks = p.ranks, slices = p.slices;
  return detail::sliced_one_f_one_b(generator, p, wgrad, [&](int r) {
    return std::min(ranks - r - 2 + slices, p.microbatches * slices);
  });
}

//! slice-pipe (MEPipe's SVPP) on an interleaved placement with V = stages / ranks chunks
//! (default 2) and K = Problem.slices: units (microbatch, slice) go in groups of g (p, or
//! the smallest multiple of K above it, so a group holds whole microbatches), a
//! group's forwards chunk by chunk, its backwards chunk by chunk in reverse with each
//! microbatch's slices from last to first; rank r runs `warmup − r` forwards (default
//! (V − 1)·g + (K − 1) + (p − 1)) before alternating. With V chunks and K slices a unit holds
//! 1/(V·K) of a microbatch's activations, so the warm-up costs little memory. Any microbatch
//! count runs: units go in rounds of whole microbatches, each at least g units, the larger
//! first (detail::slice_rounds; g then is the first round's size), since a smaller last group
//! can deadlock, as in interleaved 1F1B. A warm-up too small to run is refused (the schedule
//! is dry-run).
inline Schedule slice_pipe(Problem p, WGradMode wgrad = WGradMode::Fused,
                           const SlicePipeOptions& options = {}) {
  constexpr const char* generator = "slice-pipe";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 2, generator);
  const int ranks = p.ranks, chunks = p.chunks(), slices = p.slices;
  const int units = p.microbatches * slices;
  const int first_round = detail::slice_rounds(ranks, slices, p.microbatches).front();
  const int group = std::max(detail::slice_group(ranks, slices), first_round);
  // Every rank's first backward is of its last chunk's first backward unit, which its own
  // forward order reaches only after (V − 1)·g + K − 1 forwards: the least warm-up there is.
  const int floor = (chunks - 1) * group + slices - 1;
  const int most = detail::slice_warmup(ranks, chunks, slices, 0, first_round);
  if (options.warmup != -1 &&
      (options.warmup < std::min(floor, units * chunks) || options.warmup > units * chunks))
    throw invalid_problem(
        std::string(generator) + ": warmup = " + std::to_string(options.warmup) +
        " is out of range; rank 0 must run at least (V − 1)·g + K − 1 = " + std::to_string(floor) +
        " forwards before its first backward and can run "
        "at most all " +
        std::to_string(units * chunks) + "; the default is " + std::to_string(most) +
        " (or give -1).");
  const int w0 = options.warmup > 0 ? options.warmup : most;
  Schedule s = detail::sliced_one_f_one_b(generator, p, wgrad, [&](int r) {
    return options.warmup > 0 ? std::max(floor, w0 - r)
                              : detail::slice_warmup(ranks, chunks, slices, r, first_round);
  });
  if (options.warmup > 0) {
    ValidationReport rep = check(s);
    if (!rep.ok())
      throw invalid_problem(std::string(generator) +
                            ": warmup = " + std::to_string(options.warmup) + " cannot run (" +
                            rep.violations.front().rule +
                            "); use a larger warm-up, at most the default " + std::to_string(most) +
                            " is always safe.");
  }
  return s;
}

//! slice-pipe fitted to a per-rank memory budget (in `cost`'s memory unit): the largest
//! warm-up, from the default down to the least that runs, whose simulated peak fits every
//! rank — more warm-up forwards fill more of the pipeline, fewer hold fewer slices. Throws
//! invalid_problem when even the least warm-up does not fit, naming the peak it needs.
template <class Cost>
Schedule slice_pipe_within(Problem p, WGradMode wgrad, const Cost& cost,
                           const std::vector<double>& budget_per_rank) {
  const Schedule first = slice_pipe(p, wgrad);
  const Problem q = first.problem;
  const int first_round = detail::slice_rounds(q.ranks, q.slices, q.microbatches).front();
  const int group = std::max(detail::slice_group(q.ranks, q.slices), first_round);
  const int floor =
      std::min((q.chunks() - 1) * group + q.slices - 1, q.microbatches * q.slices * q.chunks());
  auto fits = [&](const SimulationResult& r) {
    for (std::size_t i = 0; i < r.ranks.size(); ++i)
      if (i < budget_per_rank.size() && r.ranks[i].peak_memory > budget_per_rank[i] + 1e-9)
        return false;
    return true;
  };
  SimulationResult r = simulate(first, cost);
  if (fits(r)) return first;
  double least = 0;
  for (int w = detail::slice_warmup(q.ranks, q.chunks(), q.slices, 0, first_round) - 1; w >= floor;
       --w) {
    Schedule s = slice_pipe(q, wgrad, {.warmup = w});
    r = simulate(s, cost);
    if (fits(r)) return s;
    least = r.peak_memory_max;
  }
  throw invalid_problem("slice-pipe: no warm-up fits the memory budget; even the least (" +
                        std::to_string(floor) + " forwards before rank 0's first backward) holds " +
                        std::to_string(least) +
                        "; use more slices or chunks, checkpointing, or "
                        "a larger budget.");
}

}  // namespace pipesched::schedule
