// Mario (PPoPP '25, "Near Zero-cost Activation Checkpointing in Pipeline Parallelism"):
// recompute as a scheduled action hidden in pipeline bubbles.
//
// Three moves, each checked with the simulator:
//   (a) hoisting — each recompute R runs in a wait of its rank (a moment the rank would sit
//       idle for a message) when it fits there and the memory it brings back fits the budget
//       until its backward; otherwise it stays right before its backward;
//   (b) preposing — checkpointed forwards are cheap in memory, so a rank may run more
//       forwards before its first backward than the base schedule does, filling its warm-up
//       bubble; their recomputes later take the slots those forwards left;
//   (c) choosing what to checkpoint — the units a rank's budget requires, preferring those
//       whose recompute can hide.
// The pass searches (b) and (c) and keeps the fastest schedule whose every rank fits its budget.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/core/stop_token.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/detail/filler.hpp"

namespace pipesched {

//! Knobs of the Mario pass. The defaults search everything.
struct MarioOptions {
  bool hoist = true;     //!< (a) move recomputes into waits
  bool prepose = true;   //!< (b) search extra forwards before the first backward
  int max_prepose = -1;  //!< most extra forwards per rank; -1 = what the rank's bubble holds
  bool choose = true;    //!< (c) try more than one rule for what to checkpoint
  int passes = 3;        //!< hoisting rounds (each plans with the previous round's timing)
};

namespace detail {

//! Selective checkpointing with a choice rule; R right before each backward. Returns false
//! when some rank cannot fit its budget even with everything checkpointed; throws
//! work_stopped once `stop` says stop (polled before each unit chosen).
template <class Cost>
bool select_checkpoints(const Schedule& base, const Cost& cost, const MemoryBudget& budget,
                        PickRule rule, std::vector<char>& ckpt, const StopToken& stop = {}) {
  const UnitIndex unit(base.problem);
  ckpt.assign(unit.size(), 0);
  const CostContext ctx{base.problem, base.placement, 1};
  for (int r = 0; r < base.rank_count(); ++r) {
    const double limit = budget.of(r);
    if (!std::isfinite(limit)) continue;
    const auto& list = base.ranks[static_cast<std::size_t>(r)];
    std::vector<int> fwd_at(unit.size(), -1), bwd_at(unit.size(), -1);
    unit_positions(list, unit, fwd_at, bwd_at);
    std::vector<std::size_t> on_rank;
    units_of_list(list, unit, on_rank);
    auto is_ckpt = [&](const Action& x) { return ckpt[unit(x)] != 0; };
    for (;;) {
      stop.throw_if_stopped("Mario checkpointing");
      // Walk the list with R right before each checkpointed backward.
      double held = 0;
      int over_at = -1;
      bool over_is_r = false;
      for (int i = 0; i < static_cast<int>(list.size()) && over_at < 0; ++i) {
        const Action& a = list[static_cast<std::size_t>(i)];
        auto step = [&](const Action& x, bool is_r) {
          held += memory_effect(cost, ctx, x, is_ckpt).net();
          if (held > limit + 1e-9 && over_at < 0) {
            over_at = i;
            over_is_r = is_r;
          }
        };
        auto backward = [&](const Action& b) {
          if (ckpt[unit(b)]) step(Action::make(OpKind::R, b.stage, b.microbatch, b.slice), true);
          if (over_at < 0) step(b, false);
        };
        if (a.kind == OpKind::Overlap) {
          step(a.forward_half(), false);
          if (over_at < 0) backward(a.backward_half());
        } else if (is_input_backward(a.kind)) {
          backward(a);
        } else if (is_compute(a.kind)) {
          step(a, false);
        }
      }
      if (over_at < 0) break;
      const int best = pick_live_unit(on_rank, ckpt, fwd_at, bwd_at, over_at, over_is_r, rule);
      if (best < 0) return false;
      ckpt[static_cast<std::size_t>(best)] = 1;
    }
  }
  return true;
}

//! Moves up to `extra[r]` forwards that follow rank r's first backward to just before it
//! (keeping the order of forwards among themselves and of everything else).
inline Schedule prepose_forwards(const Schedule& s, const std::vector<int>& extra) {
  Schedule out = s;
  for (int r = 0; r < s.rank_count(); ++r) {
    auto& list = out.ranks[static_cast<std::size_t>(r)];
    int e = extra[static_cast<std::size_t>(r)];
    if (e <= 0) continue;
    auto first_b = std::find_if(list.begin(), list.end(), [](const Action& a) {
      return is_input_backward(a.kind) || a.kind == OpKind::Overlap;
    });
    if (first_b == list.end()) continue;
    std::vector<Action> moved, rest;
    for (auto it = first_b; it != list.end(); ++it) {
      if (e > 0 && it->kind == OpKind::F) {
        moved.push_back(*it);
        --e;
      } else {
        rest.push_back(*it);
      }
    }
    std::vector<Action> next(list.begin(), first_b);
    next.insert(next.end(), moved.begin(), moved.end());
    next.insert(next.end(), rest.begin(), rest.end());
    list = std::move(next);
  }
  return out;
}

//! How many forwards fit in each rank's idle time before its first backward, in `sim`.
template <class Cost>
std::vector<int> warmup_capacity(const Schedule& s, const SimulationResult& sim, const Cost& cost) {
  const CostContext ctx{s.problem, s.placement, 1};
  std::vector<int> cap(s.rank_count(), 0);
  for (int r = 0; r < s.rank_count(); ++r) {
    const auto& list = s.ranks[static_cast<std::size_t>(r)];
    double idle = 0, last_end = 0, f = 0;
    bool seen_f = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const ActionTiming& t = sim.timing[static_cast<std::size_t>(r)][i];
      if (is_input_backward(a.kind) || a.kind == OpKind::Overlap) {
        idle += std::max(0.0, t.start - last_end);
        break;
      }
      if (a.kind == OpKind::F) {
        if (seen_f) idle += std::max(0.0, t.start - last_end);
        seen_f = true;
        f = std::max(f, static_cast<double>(cost.duration(ctx, a)));
        last_end = t.end;
      }
    }
    cap[static_cast<std::size_t>(r)] = f > 0 ? static_cast<int>(std::floor(idle / f + 1e-9)) : 0;
  }
  return cap;
}

//! The hoisting engine: the shared filler (pass/detail/filler.hpp) with recomputes floating.
//! It replays every rank without R and runs each pending recompute in a wait of its rank when
//! (1) the wait covers `min_fit` of it — known from the dependency's end when it has run, else
//! estimated from `estimate` (the previous round's start of the rank's next action) — and (2)
//! the memory it brings back fits the rank's budget at every point until its backward. A
//! recompute not hoisted runs right before its backward.
template <class Cost>
Schedule hoist_recompute(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                         const std::vector<std::vector<double>>& estimate, double min_fit = 1.0) {
  return fill_bubbles(s, cost, budget, estimate,
                      FillOptions{.float_recompute = true, .min_fit = min_fit}, "Mario");
}

// Start of each rank's non-R actions in a simulation, in list order: the estimates the
// hoisting engine plans waits with.
inline std::vector<std::vector<double>> main_starts(const Schedule& s,
                                                    const SimulationResult& sim) {
  return fixed_starts(s, sim, FillOptions{.float_recompute = true});
}

}  // namespace detail

//! Mario checkpointing of `base` (1F1B, Interleaved 1F1B or Zero Bubble H1, or any schedule
//! without recomputes) under `cost` and a per-rank memory `budget` in the cost model's memory
//! unit. Returns the fastest schedule found whose every rank's simulated peak fits its budget.
//! Throws invalid_problem when no configuration fits (the message gives the least budget that
//! full checkpointing needs). The search simulates many candidates of `base`: `stop` is polled
//! between them and inside each choice of units, and once it says stop the pass throws
//! work_stopped (the best found so far is not returned: it is not the pass's answer).
template <cost_model Cost>
Schedule checkpoint_mario(const Schedule& base_in, const Cost& cost, const MemoryBudget& budget,
                          const MarioOptions& options = {}, const StopToken& stop = {}) {
  constexpr const char* pass = "Mario checkpointing";
  stop.throw_if_stopped(pass);
  if (base_in.has_comm())
    throw invalid_problem("Mario: schedule '" + base_in.name +
                          "' already has sends and receives; give the compute-only schedule "
                          "(lowering comes after checkpointing).");
  const Schedule base = detail::without_recompute(base_in);
  const SimulationResult base_sim = simulate(base, cost);
  stop.throw_if_stopped(pass);
  if (base_sim.deadlock)
    throw invalid_schedule("Mario: the base schedule '" + base.name + "' deadlocks:\n" +
                           base_sim.deadlock_report);
  auto fits = [&](const SimulationResult& r) {
    for (int q = 0; q < static_cast<int>(r.ranks.size()); ++q)
      if (r.ranks[static_cast<std::size_t>(q)].peak_memory > budget.of(q) + 1e-9) return false;
    return true;
  };
  // Nothing to do when the base fits.
  if (fits(base_sim)) {
    Schedule out = base;
    out.name = base.name + "+mario";
    return out;
  }

  std::vector<int> cap = detail::warmup_capacity(base, base_sim, cost);
  int max_cap = 0;
  for (int c : cap)
    max_cap = std::max(max_cap, c);
  if (options.max_prepose >= 0) max_cap = std::min(max_cap, options.max_prepose);
  std::vector<int> levels{0};
  if (options.prepose)
    for (int e = 1; e <= max_cap; e = e < 4 ? e + 1 : e * 2)
      levels.push_back(e);
  if (options.prepose && max_cap > 0 && levels.back() != max_cap) levels.push_back(max_cap);
  std::vector<detail::PickRule> rules{detail::PickRule::LatestBackward};
  if (options.choose) rules.push_back(detail::PickRule::EarliestBackward);

  Schedule best;
  double best_time = std::numeric_limits<double>::infinity();
  bool any = false;
  for (int e : levels) {
    std::vector<int> extra(cap.size());
    for (std::size_t r = 0; r < cap.size(); ++r)
      extra[r] = std::min(e, cap[r]);
    stop.throw_if_stopped(pass);
    const Schedule pre = e == 0 ? base : detail::prepose_forwards(base, extra);
    if (e > 0 && !check(pre).ok()) continue;  // this much preposing deadlocks
    for (detail::PickRule rule : rules) {
      std::vector<char> ckpt;
      if (!detail::select_checkpoints(pre, cost, budget, rule, ckpt, stop)) continue;
      Schedule cand = detail::insert_recompute_before_backward(pre, ckpt);
      stop.throw_if_stopped(pass);
      SimulationResult sim = simulate(cand, cost);
      if (sim.deadlock || !fits(sim)) continue;
      auto consider = [&](Schedule& s, const SimulationResult& r) {
        if (r.makespan < best_time - 1e-12) {
          best_time = r.makespan;
          best = s;
          any = true;
        }
      };
      consider(cand, sim);
      if (!options.hoist) continue;
      for (double min_fit : {1.0, 0.5, 0.0}) {
        Schedule cur = cand;
        SimulationResult cur_sim = sim;
        for (int round = 0; round < std::max(1, options.passes); ++round) {
          stop.throw_if_stopped(pass);
          Schedule h = detail::hoist_recompute(cur, cost, budget, detail::main_starts(cur, cur_sim),
                                               min_fit);
          stop.throw_if_stopped(pass);
          SimulationResult hs = simulate(h, cost);
          if (hs.deadlock || !fits(hs)) break;
          consider(h, hs);
          if (hs.makespan >= cur_sim.makespan - 1e-12) break;
          cur = std::move(h);
          cur_sim = std::move(hs);
        }
      }
    }
  }
  if (!any) {
    stop.throw_if_stopped(pass);
    // Report the least budget that full checkpointing needs on the tightest rank.
    const SimulationResult full = simulate(checkpoint_full(base), cost);
    const MemoryUnit mu = memory_unit_of(cost);
    for (int r = 0; r < base.rank_count(); ++r) {
      const double least = full.ranks[static_cast<std::size_t>(r)].peak_memory;
      if (least > budget.of(r) + 1e-9)
        throw budget_error("Mario: no schedule of '" + base.name +
                               "' fits the memory budget: rank " + std::to_string(r) +
                               " needs at least " + memory_amount(least, mu) +
                               " even with every unit checkpointed, over its budget " +
                               memory_amount(budget.of(r), mu, false) +
                               ". Give a larger budget, or more ranks or microbatches.",
                           r, least, budget.of(r), mu);
    }
    throw invalid_problem("Mario: no schedule of '" + base.name +
                          "' fits the memory budget. Give a larger budget, or more ranks or "
                          "microbatches.");
  }
  best.name = base.name + "+mario";
  return best;
}

}  // namespace pipesched
