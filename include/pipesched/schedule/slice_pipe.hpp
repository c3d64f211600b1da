// Slice-level schedules (MEPipe, EuroSys '25): sequences cut into K slices, the pipeline
// scheduling (microbatch, slice, chunk) units so a rank holds the activations of a few
// slices rather than of whole microbatches.
//
// - `seq_1f1b`: 1F1B over (microbatch, slice) units on a linear placement.
// - `slice_pipe`: MEPipe's sequence × virtual pipeline (SVPP): the same over an interleaved
//   placement with V chunks per rank, the number of forwards before the first backward a knob.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/list_schedule.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace pipesched::schedule {

//! Knobs of slice_pipe beyond the Problem.
struct SlicePipeOptions {
  //! Rank 0's warm-up: the forwards it runs before its steady one-forward-one-backward pairs
  //! (warmup_of). -1: the default, (V − 1)·g + (K − 1) + (p − 1), g the units per group (p when
  //! the slice count divides it) — enough for the backward of the first microbatch's last slice
  //! to come back as rank 0 finishes its forwards; rank r's default is that minus r. A smaller
  //! warm-up caps every rank's at it (a rank whose default is smaller keeps its own), and the
  //! forwards and backwards are interleaved in simulated time so the pipeline loses as little as
  //! that memory allows (see slice_pipe).
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

//! SVPP under a warm-up cap, as a rule on list_schedule: rank r keeps at most cap[r] + 1
//! forwards in flight (its warm-up, then the forward that opens a pair); a forward goes first
//! whenever it is admitted, else the backward; a W (split backward) right when it is ready.
//! `in_order` keeps the SVPP order of each kind (`pos`: a unit's place among its rank's
//! forwards, resp. backwards); otherwise any ready unit may go, the deeper chunk first, then the
//! SVPP order — which reaches a rank's first backward with fewer forwards in flight.
struct CappedSliceRule {
  const std::vector<int>* fpos = nullptr;  // by unit (stage, microbatch, slice)
  const std::vector<int>* bpos = nullptr;
  std::vector<int> cap;
  int ranks = 1, microbatches = 1, slices = 1;
  bool in_order = true;

  std::size_t unit(const Action& a) const {
    return (static_cast<std::size_t>(a.stage) * microbatches + a.microbatch) * slices + a.slice;
  }
  std::tuple<int, int, int> priority(const RankState&, const ReadyAction& r) const {
    const Action& a = r.action;
    if (a.kind == OpKind::W) return {-1, 0, 0};
    if (a.kind == OpKind::F) return {0, in_order ? 0 : -(a.stage / ranks), (*fpos)[unit(a)]};
    return {1, 0, (*bpos)[unit(a)]};
  }
  bool admit(const RankState& st, const ReadyAction& r) const {
    const Action& a = r.action;
    if (a.kind == OpKind::W) return true;
    if (a.kind == OpKind::F)
      return st.in_flight() <= cap[static_cast<std::size_t>(st.rank)] &&
             (!in_order || (*fpos)[unit(a)] == st.forwards);
    return !in_order || (*bpos)[unit(a)] == st.backwards;
  }
};

//! slice-pipe with rank 0's warm-up `w` below the default: the fastest, under unit costs, of
//! the SVPP lists with each rank's warm-up w − r (never below the order's floor) and the
//! capped rule — on SVPP's groups in order and out of order, and in order on groups of one
//! microbatch — with caps min(default_r, max(min(w, floor), ⌈w − s·r⌉)), s = 0, 1/2, 1.
//! Throws invalid_problem when none of them can run.
inline Schedule capped_slice_pipe(const Problem& p, WGradMode wgrad, int w, int floor,
                                  int first_round, const Schedule& own) {
  const int ranks = p.ranks, chunks = p.chunks(), slices = p.slices;
  const UniformCost clock;
  std::optional<Schedule> best;
  double best_time = 0;
  auto consider = [&](Schedule s) {
    s.name = own.name;
    const double t = simulate(s, clock).makespan;
    if (!best || t < best_time - 1e-9) {
      best_time = t;
      best = std::move(s);
    }
  };
  if (w >= floor) {
    Schedule strict =
        sliced_one_f_one_b("slice-pipe", p, wgrad, [&](int r) { return std::max(floor, w - r); });
    if (check(strict).ok()) consider(std::move(strict));
  }
  const std::size_t units = static_cast<std::size_t>(p.stages) * p.microbatches * slices;
  std::vector<int> fpos(units, 0), bpos(units, 0);
  for (const auto& list : own.ranks) {
    int f = 0, b = 0;
    for (const Action& a : list) {
      const std::size_t u =
          (static_cast<std::size_t>(a.stage) * p.microbatches + a.microbatch) * slices + a.slice;
      if (a.kind == OpKind::F) fpos[u] = f++;
      if (is_input_backward(a.kind)) bpos[u] = b++;
    }
  }
  // MEPipe's other SVPP variant: groups of one microbatch (each microbatch's slices on chunk 0,
  // then on chunk 1, ...), whose own order needs only V·K − 1 forwards before a backward.
  std::vector<int> fpos1(units, 0), bpos1(units, 0);
  for (int st = 0; st < p.stages; ++st)
    for (int m = 0; m < p.microbatches; ++m)
      for (int k = 0; k < slices; ++k) {
        const std::size_t u = (static_cast<std::size_t>(st) * p.microbatches + m) * slices + k;
        const int c = st / ranks;
        fpos1[u] = (m * chunks + c) * slices + k;
        bpos1[u] = (m * chunks + (chunks - 1 - c)) * slices + (slices - 1 - k);
      }
  const int floor1 = chunks * slices - 1;
  const ListProblem lp{p, Placement::interleaved(ranks, chunks), wgrad, "slice-pipe"};
  struct Variant {
    bool svpp_groups, in_order;
    double slope;
  };
  for (const Variant& v :
       {Variant{true, true, 0.0}, Variant{true, false, 0.0}, Variant{true, false, 0.5},
        Variant{true, false, 1.0}, Variant{false, true, 0.0}, Variant{false, true, 0.5},
        Variant{false, true, 1.0}}) {
    CappedSliceRule rule{v.svpp_groups ? &fpos : &fpos1,
                         v.svpp_groups ? &bpos : &bpos1,
                         {},
                         ranks,
                         p.microbatches,
                         slices,
                         v.in_order};
    const int least = v.svpp_groups ? floor : floor1;
    for (int r = 0; r < ranks; ++r) {
      const int own_default = slice_warmup(ranks, chunks, slices, r, first_round);
      const int sloped = static_cast<int>(std::ceil(w - v.slope * r - 1e-9));
      rule.cap.push_back(std::min(own_default, std::max(std::min(w, least), sloped)));
    }
    try {
      consider(list_schedule(lp, rule, clock));
    } catch (const invalid_problem&) {
      // this variant cannot reach some backward within its caps
    }
  }
  if (!best)
    throw invalid_problem("slice-pipe: warmup = " + std::to_string(w) +
                          " cannot run: with so few forwards in flight some rank never reaches "
                          "the backward its order needs next; use a larger one, at most the "
                          "default " +
                          std::to_string(slice_warmup(ranks, chunks, slices, 0, first_round)) +
                          ".");
  return std::move(*best);
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
//! microbatch's slices from last to first; rank r runs (V − 1)·g + (K − 1) + (p − 1 − r) warm-up
//! forwards before alternating. With V chunks and K slices a unit holds 1/(V·K) of a
//! microbatch's activations, so the warm-up costs little memory. Any microbatch count runs:
//! units go in rounds of whole microbatches, each at least g units, the larger first
//! (detail::slice_rounds; g then is the first round's size), since a smaller last group can
//! deadlock, as in interleaved 1F1B.
//!
//! A smaller `warmup` w (MEPipe's memory/bubble knob) caps every rank's warm-up at w: the
//! fixed alternation would then stall once per pair (rank r waits on rank r + 1 every step), so
//! the forwards and backwards are interleaved in simulated time (unit costs) instead — the
//! fastest of a few legal variants (detail::capped_slice_pipe): SVPP's order kept or not, caps
//! even or sloped across ranks. Rank 0 holds at most w + 1 units' activations; the step grows
//! gradually as w falls (p = 16, K = 8, M = 32: 1.06x at two fewer than the default 38, 1.43x
//! at 23, SVPP's own floor, 2.09x at 15, the least any variant runs). A warm-up none of them can
//! run is refused, naming what the order needs.
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
  if (options.warmup != -1 && (options.warmup < 1 || options.warmup > units * chunks))
    throw invalid_problem(
        std::string(generator) + ": warmup = " + std::to_string(options.warmup) +
        " is out of range; give 1 to " + std::to_string(units * chunks) +
        " (all forwards; SVPP's own order needs (V − 1)·g + K − 1 = " + std::to_string(floor) +
        ", fewer runs out of order where it can), or -1 for "
        "the default " +
        std::to_string(most) + ".");
  Schedule own = detail::sliced_one_f_one_b(generator, p, wgrad, [&](int r) {
    return detail::slice_warmup(ranks, chunks, slices, r, first_round);
  });
  if (options.warmup == -1 || options.warmup == most) return own;
  if (options.warmup > most) {  // more forwards in flight than the default: the fixed order
    Schedule s = detail::sliced_one_f_one_b(
        generator, p, wgrad, [&](int r) { return std::max(floor, options.warmup - r); });
    ValidationReport rep = check(s);
    if (!rep.ok())
      throw invalid_problem(std::string(generator) +
                            ": warmup = " + std::to_string(options.warmup) + " cannot run (" +
                            rep.violations.front().rule + "); the default " + std::to_string(most) +
                            " is always safe.");
    return s;
  }
  return detail::capped_slice_pipe(p, wgrad, options.warmup, std::min(floor, units * chunks),
                                   first_round, own);
}

//! slice-pipe fitted to a per-rank memory budget (in `cost`'s memory unit): the largest
//! warm-up, from the default down to the least that runs, whose simulated peak fits every
//! rank — more warm-up forwards fill more of the pipeline, fewer hold fewer slices (a binary
//! search: a handful of candidate schedules). Throws invalid_problem when even the least
//! warm-up that runs does not fit, naming it and the peak it needs.
template <class Cost>
Schedule slice_pipe_within(Problem p, WGradMode wgrad, const Cost& cost,
                           const std::vector<double>& budget_per_rank) {
  const Schedule first = slice_pipe(p, wgrad);
  const Problem q = first.problem;
  const int first_round = detail::slice_rounds(q.ranks, q.slices, q.microbatches).front();
  auto fits = [&](const SimulationResult& r) {
    for (std::size_t i = 0; i < r.ranks.size(); ++i)
      if (i < budget_per_rank.size() && r.ranks[i].peak_memory > budget_per_rank[i] + 1e-9)
        return false;
    return true;
  };
  SimulationResult r = simulate(first, cost);
  if (fits(r)) return first;
  // Memory falls as the warm-up does and a warm-up that runs makes every larger one run, so the
  // warm-ups that run and fit are an interval: binary search for its top below the default.
  int lo = 1, hi = detail::slice_warmup(q.ranks, q.chunks(), q.slices, 0, first_round) - 1;
  std::optional<Schedule> best;
  double least = r.peak_memory_max;
  int least_w = hi + 1;
  while (lo <= hi) {
    const int w = lo + (hi - lo) / 2;
    std::optional<Schedule> s;
    try {
      s = slice_pipe(q, wgrad, {.warmup = w});
    } catch (const invalid_problem&) {
      lo = w + 1;  // too few forwards to run
      continue;
    }
    r = simulate(*s, cost);
    if (fits(r)) {
      best = std::move(s);
      lo = w + 1;
    } else {
      if (w < least_w) {
        least = r.peak_memory_max;
        least_w = w;
      }
      hi = w - 1;
    }
  }
  if (best) return std::move(*best);
  throw invalid_problem(
      "slice-pipe: no warm-up fits the memory budget; even the least that runs (" +
      std::to_string(least_w) + ") holds " + std::to_string(least) +
      "; use more slices or chunks, checkpointing, or a larger budget.");
}

}  // namespace pipesched::schedule
