// Activation checkpointing as scheduled recompute: passes that choose which (stage,
// microbatch, slice) units keep only their input and insert their recompute R.
//
// - Full: every unit is checkpointed; its recompute runs right before its backward.
// - Selective: the conventional way — just the units a per-rank memory budget requires,
//   chosen by a greedy walk of each rank's list; recompute right before its backward.
// Both place the recompute as Megatron-LM runs it by default: a late recompute RL, which waits
// for the gradient its backward consumes (the recompute is part of the backward call), or, with
// RecomputeTiming::Early (`full-early`, `selective-early`), a plain R, which runs as soon as the
// previous action on its rank ends — while the gradient is still on its way.
// - Mario (pass/mario.hpp): R moved into bubbles, forwards preposed, the checkpointed set
//   chosen with the simulator.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/core/stop_token.hpp"

namespace pipesched {

namespace detail {

//! A unit (stage, microbatch, slice) as a dense index.
struct UnitIndex {
  int stages = 0, microbatches = 0, slices = 0;
  explicit UnitIndex(const Problem& p)
      : stages(p.stages), microbatches(p.microbatches), slices(p.slices) {}
  std::size_t size() const { return static_cast<std::size_t>(stages) * microbatches * slices; }
  std::size_t operator()(int s, int m, int k) const {
    return (static_cast<std::size_t>(s) * microbatches + m) * slices + k;
  }
  std::size_t operator()(const Action& a) const { return (*this)(a.stage, a.microbatch, a.slice); }
};

//! The units whose actions are in `list` (an Overlap's two), once each, in increasing index,
//! into `out` (returned).
inline std::vector<std::size_t>& units_of_list(const std::vector<Action>& list,
                                               const UnitIndex& unit,
                                               std::vector<std::size_t>& out) {
  out.clear();
  for (const Action& a : list) {
    if (!is_compute(a.kind) && a.kind != OpKind::Overlap) continue;
    out.push_back(unit(a));
    if (a.kind == OpKind::Overlap) out.push_back(unit(a.b_stage, a.b_microbatch, a.b_slice));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

//! Which live unit a selection step checkpoints first: the one whose backward comes last
//! (it would stay resident longest: conventional selective checkpointing) or first.
enum class PickRule { LatestBackward, EarliestBackward };

//! Records in `fwd_at` and `bwd_at` the position in `list` of each unit's forward and input
//! backward (an Overlap is both: its forward's unit and its backward's).
inline void unit_positions(const std::vector<Action>& list, const UnitIndex& unit,
                           std::vector<int>& fwd_at, std::vector<int>& bwd_at) {
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[static_cast<std::size_t>(i)];
    if (a.kind == OpKind::F || a.kind == OpKind::Overlap) fwd_at[unit(a)] = i;
    if (is_input_backward(a.kind)) bwd_at[unit(a)] = i;
    if (a.kind == OpKind::Overlap) bwd_at[unit(a.b_stage, a.b_microbatch, a.b_slice)] = i;
  }
}

//! The selection step both selective checkpointing and Mario take: among `candidates` (unit
//! indices, in increasing order: ties go to the lowest), the unit not yet checkpointed that is
//! live at base position `at` (its forward at or before it, its backward after it, or at it
//! when the action there is that unit's recompute) whose backward comes last or first as
//! `rule` says; -1 when none is.
template <class Units>
int pick_live_unit(const Units& candidates, const std::vector<char>& ckpt,
                   const std::vector<int>& fwd_at, const std::vector<int>& bwd_at, int at,
                   bool at_is_recompute, PickRule rule) {
  int best = -1, best_bwd = rule == PickRule::LatestBackward ? -1 : (1 << 30);
  for (std::size_t u : candidates) {
    if (ckpt[u] || fwd_at[u] < 0 || fwd_at[u] > at) continue;
    if (bwd_at[u] < at || (bwd_at[u] == at && !at_is_recompute)) continue;
    const bool better =
        rule == PickRule::LatestBackward ? bwd_at[u] > best_bwd : bwd_at[u] < best_bwd;
    if (better) {
      best_bwd = bwd_at[u];
      best = static_cast<int>(u);
    }
  }
  return best;
}

//! `s` without R actions.
inline Schedule without_recompute(const Schedule& s) {
  Schedule out = s;
  for (auto& list : out.ranks)
    std::erase_if(list, [](const Action& a) { return a.kind == OpKind::R; });
  return out;
}

//! One rank's `list` with a recompute of every unit u with `checkpointed[u]` right before its
//! backward (B, I or the backward half of an Overlap): RL when `timing` is Late, R when Early;
//! the OFFLOAD and RELOAD of such a unit are dropped (a unit recomputes or offloads its
//! activations). With `from`, the position in `list` of each action of the result (-1 for a
//! recompute).
inline std::vector<Action> list_with_recompute(const std::vector<Action>& list,
                                               const UnitIndex& unit,
                                               const std::vector<char>& checkpointed,
                                               RecomputeTiming timing = RecomputeTiming::Late,
                                               std::vector<int>* from = nullptr) {
  auto recompute = [&](int stage, int mb, int slice) {
    Action r = Action::make(OpKind::R, stage, mb, slice);
    r.late = timing == RecomputeTiming::Late;
    return r;
  };
  std::vector<Action> next;
  next.reserve(list.size() + list.size() / 2);
  if (from) {
    from->clear();
    from->reserve(list.size() + list.size() / 2);
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (is_offload_action(a.kind) && checkpointed[unit(a)]) continue;
    if (is_input_backward(a.kind) && checkpointed[unit(a)]) {
      next.push_back(recompute(a.stage, a.microbatch, a.slice));
      if (from) from->push_back(-1);
    }
    if (a.kind == OpKind::Overlap && checkpointed[unit(a.b_stage, a.b_microbatch, a.b_slice)]) {
      next.push_back(recompute(a.b_stage, a.b_microbatch, a.b_slice));
      if (from) from->push_back(-1);
    }
    next.push_back(a);
    if (from) from->push_back(static_cast<int>(i));
  }
  return next;
}

//! Inserts a recompute of every unit u with `checkpointed[u]` right before its backward (B, I
//! or the backward half of an Overlap): RL when `timing` is Late, R when Early; drops such a
//! unit's OFFLOAD and RELOAD.
inline Schedule insert_recompute_before_backward(const Schedule& s,
                                                 const std::vector<char>& checkpointed,
                                                 RecomputeTiming timing = RecomputeTiming::Late) {
  const UnitIndex unit(s.problem);
  Schedule out = s;
  for (auto& list : out.ranks)
    list = list_with_recompute(list, unit, checkpointed, timing);
  return out;
}

//! Memory held along one rank's `list` of a schedule of `problem` (running sum of the cost
//! model's deltas), given which units are checkpointed; returns the peak and, through `where`,
//! its first position.
template <class Cost>
double list_peak(const std::vector<Action>& list, const Problem& problem, const Cost& cost,
                 const CostContext& ctx, const std::vector<char>& checkpointed,
                 int* where = nullptr) {
  const UnitIndex unit(problem);
  double held = 0, peak = 0;
  int at = -1;
  auto is_checkpointed = [&](const Action& x) { return checkpointed[unit(x)] != 0; };
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const MemoryEffect e =
        memory_effect(cost, ctx, list[static_cast<std::size_t>(i)], is_checkpointed);
    held += e.grow;  // the simulator's rule: growth from the start, release at the end
    if (held > peak + 1e-12) {
      peak = held;
      at = i;
    }
    held += e.shrink;
  }
  if (where) *where = at;
  return peak;
}

//! The same along rank `rank`'s list of `s`.
template <class Cost>
double list_peak(const Schedule& s, int rank, const Cost& cost, const CostContext& ctx,
                 const std::vector<char>& checkpointed, int* where = nullptr) {
  return list_peak(s.ranks[static_cast<std::size_t>(rank)], s.problem, cost, ctx, checkpointed,
                   where);
}

}  // namespace detail

//! `s` with the units for which `recompute(stage, microbatch, slice)` is true checkpointed:
//! each such unit's forward keeps only its input, and its recompute runs right before its
//! backward — RL (Late: once the gradient is there) or R (Early: free to run while it is on
//! its way). Any recompute already in `s` is replaced. The building block of a checkpoint
//! policy of one's own (policy/checkpoint.hpp): it chooses the units, this places them.
template <class Choose>
requires std::predicate<const Choose&, int, int, int> Schedule with_recomputes(
    const Schedule& s, const Choose& recompute, RecomputeTiming timing = RecomputeTiming::Late) {
  Schedule base = detail::without_recompute(s);
  const detail::UnitIndex unit(base.problem);
  std::vector<char> chosen(unit.size(), 0);
  for (int st = 0; st < base.problem.stages; ++st)
    for (int m = 0; m < base.problem.microbatches; ++m)
      for (int k = 0; k < base.problem.slices; ++k)
        chosen[unit(st, m, k)] = recompute(st, m, k) ? 1 : 0;
  return detail::insert_recompute_before_backward(base, chosen, timing);
}

//! Every unit checkpointed, its recompute right before its backward: RL (Late, Megatron-LM's
//! way, the default) or R (Early). Any recompute already in `s` is replaced.
inline Schedule checkpoint_full(const Schedule& s, RecomputeTiming timing = RecomputeTiming::Late) {
  Schedule base = detail::without_recompute(s);
  std::vector<char> all(detail::UnitIndex(base.problem).size(), 1);
  Schedule out = detail::insert_recompute_before_backward(base, all, timing);
  out.name = base.name + (timing == RecomputeTiming::Late ? "+full" : "+full-early");
  return out;
}

//! Conventional selective checkpointing: for each rank, walk its list with R right before
//! each backward and, wherever the held memory exceeds the rank's budget, checkpoint the live
//! unit whose backward comes last (it would stay resident longest), until the rank fits. A unit
//! the schedule offloads (OFFLOAD, pass/offload.hpp) is checkpointed only where no other live
//! unit is left to checkpoint; it then keeps no offload (a unit recomputes or offloads).
//! Throws invalid_problem naming the rank, its budget and the least it needs when even
//! checkpointing every unit does not fit. Returns the units chosen through `chosen`. The
//! recompute is RL (Late, the default) or R (Early), as for checkpoint_full; the units chosen
//! are the same either way (a recompute holds its bytes from its start to its backward's end).
//! Each step walks one rank's list, so a rank of n actions needing k units checkpointed costs
//! about k · n: `stop` is polled before every step, and once it says stop the pass throws
//! work_stopped (nothing is returned).
template <cost_model Cost>
Schedule checkpoint_selective(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                              std::vector<char>* chosen = nullptr,
                              RecomputeTiming timing = RecomputeTiming::Late,
                              const StopToken& stop = {}) {
  constexpr const char* pass = "selective checkpointing";
  stop.throw_if_stopped(pass);
  Schedule base = detail::without_recompute(s);
  const detail::UnitIndex unit(base.problem);
  std::vector<char> ckpt(unit.size(), 0);
  const CostContext ctx{base.problem, base.placement, 1};
  std::vector<int> fwd_at(unit.size(), -1), bwd_at(unit.size(), -1), from;
  // Units the schedule offloads (pass/offload.hpp) are candidates after the others.
  std::vector<char> offloaded(unit.size(), 0);
  for (const auto& list : base.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::Offload && a.stage >= 0 && a.stage < base.problem.stages &&
          a.microbatch >= 0 && a.microbatch < base.problem.microbatches && a.slice >= 0 &&
          a.slice < base.problem.slices)
        offloaded[unit(a)] = 1;
  for (int r = 0; r < base.rank_count(); ++r) {
    const double limit = budget.of(r);
    if (!std::isfinite(limit)) continue;
    const auto& list = base.ranks[static_cast<std::size_t>(r)];
    // Position of each unit's forward and backward on this rank, to find the live units at a
    // point, and the units met on it (in increasing index: ties go to the lowest).
    std::vector<std::size_t> on_rank, kept;
    for (std::size_t u : detail::units_of_list(list, unit, on_rank)) {
      fwd_at[u] = -1;
      bwd_at[u] = -1;
      if (!offloaded[u]) kept.push_back(u);
    }
    detail::unit_positions(list, unit, fwd_at, bwd_at);
    for (;;) {
      stop.throw_if_stopped(pass);
      int where = -1;
      // The list with R before each checkpointed backward, walked for its peak.
      const std::vector<Action> trial =
          detail::list_with_recompute(list, unit, ckpt, RecomputeTiming::Late, &from);
      const double peak = detail::list_peak(trial, base.problem, cost, ctx, ckpt, &where);
      if (peak <= limit + 1e-9) break;
      // The base list position of the action at the peak; for a recompute materializing,
      // the position of its backward.
      const Action& at = trial[static_cast<std::size_t>(where)];
      const int base_pos =
          at.kind == OpKind::R ? bwd_at[unit(at)] : from[static_cast<std::size_t>(where)];
      // Live units at that point: forward at or before it, backward after it (a unit whose
      // R is the peak counts too: checkpointing another live unit lowers the peak).
      int best = detail::pick_live_unit(kept, ckpt, fwd_at, bwd_at, base_pos, at.kind == OpKind::R,
                                        detail::PickRule::LatestBackward);
      if (best < 0 && kept.size() < on_rank.size())
        best = detail::pick_live_unit(on_rank, ckpt, fwd_at, bwd_at, base_pos, at.kind == OpKind::R,
                                      detail::PickRule::LatestBackward);
      if (best < 0) {
        std::vector<char> all(unit.size(), 1);
        const std::vector<Action> full = detail::list_with_recompute(list, unit, all);
        const double least = detail::list_peak(full, base.problem, cost, ctx, all);
        const MemoryUnit mu = memory_unit_of(cost);
        throw budget_error("memory budget " + memory_amount(limit, mu, false) +
                               " is too small for rank " + std::to_string(r) + " of '" + base.name +
                               "': even with every unit checkpointed it holds " +
                               memory_amount(least, mu) + "; give a budget of at least " +
                               memory_amount(least, mu) + ", or more ranks or microbatches.",
                           r, least, limit, mu);
      }
      ckpt[static_cast<std::size_t>(best)] = 1;
    }
  }
  Schedule out = detail::insert_recompute_before_backward(base, ckpt, timing);
  out.name = base.name + (timing == RecomputeTiming::Late ? "+selective" : "+selective-early");
  if (chosen) *chosen = std::move(ckpt);
  return out;
}

}  // namespace pipesched
