// Activation offload as scheduled actions: a pass that moves the activations a rank cannot
// keep within its memory budget to host memory (OFFLOAD) and brings them back before their
// backward (RELOAD), so that the copies run on the rank's host link while it computes.
//
// Each rank's list is walked with the memory rule every replay uses (memory_effect). Where an
// action would take the rank over its budget, the pass offloads the unit held on the device
// whose backward comes last (it would stay away longest: Belady's choice, and its copy back has
// the most time to hide), until the action fits: the OFFLOAD goes right before that action (the
// copy started when the unit's forward ended, so the rank waits there only for what is left of
// it) and the RELOAD `prefetch` compute actions before the unit's backward (its copy back runs
// while they compute). A RELOAD takes its memory at its place, and the walk charges it like
// any growth, offloading another unit where it must. With `weigh_recompute` (the default) a unit
// is offloaded only where its copies keep the rank waiting less than recomputing it would take,
// on the rank's own clock (its compute back to back, the copies queued on the link's two
// directions), the next unit by its backward tried where they do not: offloads take the link's
// idle time, and recomputes the rest. What cannot be offloaded (a unit checkpointed, none held
// whose backward comes after the point, or none cheaper than its recompute) is left over the
// budget, for checkpointing to bring down (assemble_plan: offload, then recompute).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/checkpoint.hpp"

namespace pipesched {

//! How apply_offload offloads.
struct OffloadOptions {
  //! Most units each rank offloads; 0 = as many as its budget asks.
  int max_per_rank = 0;
  //! Compute actions a RELOAD is put before its unit's backward, so its copy back overlaps
  //! them (at least 0: right before the backward; the walk never moves it before the point
  //! where the unit was offloaded).
  int prefetch = 1;
  //! Offload a unit only where the time its copies keep the rank waiting is less than its
  //! recompute would take, by the rank's own clock (the cost's durations back to back, the
  //! copies at its host_copy_seconds on the link's two directions): where no held unit's copies
  //! are cheaper, the rest is left to checkpointing. False offloads whatever the budget asks.
  bool weigh_recompute = true;

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    if (max_per_rank < 0)
      throw invalid_problem(field("OffloadOptions.max_per_rank", max_per_rank) +
                            " is out of range; give 0 (as many as the budget asks) or a "
                            "positive count.");
    if (prefetch < 0 || prefetch > 1000)
      throw invalid_problem(field("OffloadOptions.prefetch", prefetch) +
                            " is out of range; give 0 (right before the backward) to 1000 "
                            "compute actions.");
  }
};

namespace detail {

//! One rank's `list` with its offloads inserted (see the file comment); `offloaded` marks the
//! units it offloads. `recomputed` marks the units with an R (never offloaded).
template <class Cost>
std::vector<Action> offload_list(const std::vector<Action>& list, const Problem& problem,
                                 const Cost& cost, const CostContext& ctx, double limit,
                                 const OffloadOptions& options, const std::vector<char>& recomputed,
                                 std::vector<char>& offloaded) {
  const UnitIndex unit(problem);
  std::vector<Action> out(list);
  auto is_ckpt = [&](const Action& x) { return recomputed[unit(x)] != 0; };
  auto busy = [&](const Action& x) {
    double t = 0;
    for_each_half(x, [&](const Action& c) {
      if (is_compute(c.kind)) t += static_cast<double>(cost.duration(ctx, c));
    });
    return t;
  };
  // The units resident on the device: forward run, backward not yet, not offloaded.
  std::vector<std::size_t> resident;
  auto backward_at = [&](std::size_t u, std::size_t from) -> std::size_t {
    for (std::size_t j = from; j < out.size(); ++j) {
      const Action& x = out[j];
      if (is_input_backward(x.kind) && unit(x) == u) return j;
      if (x.kind == OpKind::Overlap && unit(x.b_stage, x.b_microbatch, x.b_slice) == u) return j;
    }
    return out.size();
  };
  // The rank's own clock: its compute back to back, no wait for other ranks (which only leaves
  // copies more time than this reckons). `forward_end[u]`: when u's copy to host may start.
  double clock = 0;
  std::vector<double> forward_end(unit.size(), 0.0);
  std::vector<double> reloaded(unit.size(), 0.0);      // when an offloaded unit's copy back ends
  double to_host = 0;                                  // when the link to host memory frees
  std::vector<std::pair<double, double>> from_host;    // copies back reserved on the other way
  auto clock_at = [&](std::size_t i, std::size_t j) {  // at position j, from position i now
    double t = clock;
    for (std::size_t k = i; k < j; ++k)
      t += busy(out[k]);
    return t;
  };
  // The first start at or after `from` where `length` fits between the copies back reserved.
  auto first_fit = [&](double from, double length) {
    double start = from;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [a, b] : from_host)
        if (start < b && a < start + length) {
          start = b;
          moved = true;
        }
    }
    return start;
  };
  int count = 0;
  double held = 0;
  bool moved = false;  // a RELOAD was moved one place later: walk position i again
  for (std::size_t i = 0; i < out.size(); ++i) {
    const MemoryEffect e = memory_effect(cost, ctx, out[i], is_ckpt);
    while (e.grow > 0 && held + e.grow > limit + 1e-9 &&
           (options.max_per_rank == 0 || count < options.max_per_rank)) {
      // Belady: the resident units by their backward, the last first (ties: the lowest unit);
      // with weigh_recompute, the first whose copies keep the rank waiting less than its
      // recompute would take.
      std::vector<std::pair<std::size_t, std::size_t>> order;  // (backward position, unit)
      for (std::size_t u : resident) {
        if (offloaded[u]) continue;  // once only
        const std::size_t b = backward_at(u, i);
        if (b <= i || b >= out.size()) continue;  // needed now, or never here
        order.emplace_back(b, u);
      }
      std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : x.second < y.second;
      });
      bool done = false;
      for (const auto& [victim_bwd, victim] : order) {
        const int st = static_cast<int>(victim / (static_cast<std::size_t>(problem.microbatches) *
                                                  static_cast<std::size_t>(problem.slices)));
        const int mb = static_cast<int>(victim / static_cast<std::size_t>(problem.slices) %
                                        static_cast<std::size_t>(problem.microbatches));
        const int sl = static_cast<int>(victim % static_cast<std::size_t>(problem.slices));
        const Action off = Action::make(OpKind::Offload, st, mb, sl);
        const Action back = Action::make(OpKind::Reload, st, mb, sl);
        // The RELOAD: `prefetch` compute actions before the backward, never before the OFFLOAD.
        std::size_t at = victim_bwd;
        for (int n = 0; n < options.prefetch && at > i + 1;) {
          --at;
          n += is_compute(out[at].kind) ? 1 : 0;
        }
        const double copy_out = host_copy_seconds_of(cost, ctx, off);
        const double copy_back = host_copy_seconds_of(cost, ctx, back);
        const double out_end = std::max(to_host, forward_end[victim]) + copy_out;
        const double back_start = first_fit(std::max(clock_at(i, at), out_end), copy_back);
        const double waits = std::max(0.0, out_end - clock) +
                             std::max(0.0, back_start + copy_back - clock_at(i, victim_bwd));
        const double recompute =
            static_cast<double>(cost.duration(ctx, Action::make(OpKind::R, st, mb, sl)));
        if (options.weigh_recompute && waits >= recompute && waits > 0)
          continue;  // its copies cost more than its recompute: another, or checkpointing
        to_host = std::max(to_host, out_end);
        from_host.emplace_back(back_start, back_start + copy_back);
        clock = std::max(clock, out_end);  // the rank waits at the OFFLOAD for its copy
        reloaded[victim] = back_start + copy_back;
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), back);
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(i), off);
        held += memory_effect(cost, ctx, off, is_ckpt).net();
        std::erase(resident, victim);
        offloaded[victim] = 1;
        ++count;
        ++i;  // the action that needed the room is one further on
        done = true;
        break;
      }
      if (done) continue;
      // No unit to offload. A RELOAD waits: this one until right before its backward (where
      // the memory it takes is needed anyway), or the last one taken before this action whose
      // backward comes after it, until after it; the walk goes on from the action that now
      // stands here.
      if (out[i].kind == OpKind::Reload) {
        const std::size_t b = backward_at(unit(out[i]), i + 1);
        if (b < out.size() && b != i + 1) {
          const Action r = out[i];
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
          out.insert(out.begin() + static_cast<std::ptrdiff_t>(b - 1), r);
          moved = true;
        }
        break;
      }
      for (std::size_t k = i; k-- > 0;) {
        if (out[k].kind != OpKind::Reload || backward_at(unit(out[k]), i + 1) >= out.size())
          continue;
        const Action r = out[k];
        held -= memory_effect(cost, ctx, r, is_ckpt).grow;
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(k));
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(i), r);  // after this action
        --i;  // which now stands one place earlier
        moved = true;
        break;
      }
      break;
    }
    if (moved) {
      moved = false;
      --i;
      continue;
    }
    const Action& a = out[i];
    held += e.grow + e.shrink;
    clock += busy(a);
    if (a.kind == OpKind::F || a.kind == OpKind::Overlap) {
      const std::size_t u = unit(a);
      forward_end[u] = clock;  // an Overlap's forward half ends before its backward half: early
      if (!recomputed[u]) resident.push_back(u);
    }
    for_each_half(a, [&](const Action& c) {
      if (!is_input_backward(c.kind)) return;
      std::erase(resident, unit(c));
      // The backward of an offloaded unit waits for its copy back.
      if (offloaded[unit(c)]) clock = std::max(clock, reloaded[unit(c)] + busy(a));
    });
  }
  return out;
}

}  // namespace detail

//! `s` with activations offloaded where each rank's memory `budget` asks (see the file comment:
//! OFFLOAD before the action that needs the room, RELOAD `options.prefetch` compute actions
//! before the backward). A unit with a recompute in `s` is never offloaded; a schedule with
//! OFFLOAD actions already, or with slices (offloading is of whole microbatches), is refused, as
//! is an unlimited budget's nothing to do: `s` comes back unchanged then. Ranks may stay over
//! the budget where nothing more can be offloaded; checkpointing brings the rest down. The name
//! gains "+offload" when anything was offloaded.
template <cost_model Cost>
Schedule apply_offload(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                       const OffloadOptions& options = {}) {
  options.check();
  if (s.count(OpKind::Offload) + s.count(OpKind::Reload) > 0)
    throw invalid_problem("apply_offload: schedule '" + s.name +
                          "' already offloads (it holds OFFLOAD or RELOAD actions); offload a "
                          "schedule once.");
  if (!budget.limited()) return s;
  if (s.problem.slices > 1)
    throw invalid_problem("apply_offload: schedule '" + s.name + "' cuts microbatches into " +
                          std::to_string(s.problem.slices) +
                          " slices, and offloading is of whole microbatches (a slice's keys and "
                          "values stay in its microbatch's context); plan it with 1 slice, or "
                          "without offloading.");
  const detail::UnitIndex unit(s.problem);
  std::vector<char> recomputed(unit.size(), 0), offloaded(unit.size(), 0);
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::R) recomputed[unit(a)] = 1;
  const CostContext ctx{s.problem, s.placement, 1};
  Schedule out = s;
  bool any = false;
  for (int r = 0; r < s.rank_count(); ++r) {
    const double limit = budget.of(r);
    if (!std::isfinite(limit)) continue;
    auto& list = out.ranks[static_cast<std::size_t>(r)];
    const std::size_t before = list.size();
    list = detail::offload_list(list, s.problem, cost, ctx, limit, options, recomputed, offloaded);
    any = any || list.size() != before;
  }
  if (any) out.name = s.name + "+offload";
  return out;
}

//! `s` without the OFFLOAD and RELOAD of the units it recomputes (a unit keeps, recomputes or
//! offloads its activations: where a checkpoint policy chose to recompute an offloaded unit,
//! the recompute stands).
inline Schedule without_offload_of_recomputed(Schedule s) {
  const detail::UnitIndex unit(s.problem);
  auto inside = [&](const Action& a) {
    return a.stage >= 0 && a.stage < s.problem.stages && a.microbatch >= 0 &&
           a.microbatch < s.problem.microbatches && a.slice >= 0 && a.slice < s.problem.slices;
  };
  std::vector<char> recomputed(unit.size(), 0);
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::R && inside(a)) recomputed[unit(a)] = 1;
  for (auto& list : s.ranks)
    std::erase_if(list, [&](const Action& a) {
      return is_offload_action(a.kind) && inside(a) && recomputed[unit(a)];
    });
  return s;
}

//! `checkpoint(s)` or `checkpoint(apply_offload(s, cost, budget, options))` (its offloads of
//! units the checkpointing recomputes dropped), whichever simulates to the shorter step under
//! `cost`: the offloads are kept only where they pay (on a tie, the schedule without them).
//! Where only one of the two meets the budget (the other throws invalid_problem), that one;
//! where neither does, what the offloaded one threw. `checkpoint(schedule)` is the
//! checkpoint step (assemble_plan's, the command line's).
template <cost_model Cost, class Checkpoint>
Schedule offload_where_faster(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                              const OffloadOptions& options, Checkpoint&& checkpoint) {
  std::optional<Schedule> kept;
  try {
    kept = checkpoint(s);
  } catch (const invalid_problem&) {
  }
  const Schedule offloaded = apply_offload(s, cost, budget, options);
  if (offloaded.count(OpKind::Offload) == 0 && kept) return *kept;
  Schedule both;
  try {
    both = without_offload_of_recomputed(checkpoint(offloaded));
  } catch (const invalid_problem&) {
    if (kept) return *kept;
    throw;
  }
  if (!kept) return both;
  const SimulationResult a = simulate(*kept, cost), b = simulate(both, cost);
  if (b.deadlock || (!a.deadlock && b.makespan >= a.makespan)) return *kept;
  return both;
}

}  // namespace pipesched
