// The bubble filler shared by the passes that move work into waits: Mario's recompute
// hoisting (pass/mario.hpp) and fine-grained weight gradients (pass/fill_weight_gradients.hpp).
//
// One event-driven list scheduler replays every rank of a schedule with the cost model's
// durations. Each rank runs its fixed actions in list order; the work that may move
// ("floating" work) leaves the lists and is placed where a rank would otherwise wait:
//   R(s,m,k)    eligible once its F has run; due right before its backward; brings memory
//               back, so it runs early only when that memory fits the budget until the
//               backward;
//   W(s,m,k,j)  eligible once its I has run; frees memory, so it runs early freely; due at
//               the end of the rank's list, or earlier when a growing action would otherwise
//               take the rank over its budget (then the pending parts run first, oldest first).
// In a wait a rank runs the most urgent floating work that fits: a recompute (the one whose
// backward comes first), then the oldest weight-gradient part.
#pragma once

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/checkpoint.hpp"

namespace pipesched::detail {

//! Which work floats, and how much of a wait it must fill.
struct FillOptions {
  bool float_recompute = false;  //!< R leaves the lists: hoisted into waits, else before its B/I
  bool float_wgrad = false;      //!< W leaves the lists, cut into `wgrad_parts` parts
  int wgrad_parts = 1;           //!< parts per weight gradient when `float_wgrad`
  //! Share of a floating action's duration a wait must cover for it to run there (1: it must
  //! fit whole; 0: any wait will do).
  double min_fit = 1.0;
};

//! True when `a` floats under `opt` (it leaves the rank's list and is placed by the filler).
inline bool is_floating(const Action& a, const FillOptions& opt) noexcept {
  return (a.kind == OpKind::R && opt.float_recompute) || (a.kind == OpKind::W && opt.float_wgrad);
}

//! Start of each rank's fixed (non-floating) actions in a simulation of `s`, in list order:
//! the estimates the filler plans waits with when the length of a wait is not yet known.
inline std::vector<std::vector<double>> fixed_starts(const Schedule& s, const SimulationResult& sim,
                                                     const FillOptions& opt) {
  std::vector<std::vector<double>> est(s.rank_count());
  for (int r = 0; r < s.rank_count(); ++r)
    for (std::size_t i = 0; i < s.ranks[static_cast<std::size_t>(r)].size(); ++i)
      if (!is_floating(s.ranks[static_cast<std::size_t>(r)][i], opt))
        est[static_cast<std::size_t>(r)].push_back(
            sim.timing[static_cast<std::size_t>(r)][i].start);
  return est;
}

//! The filler: replays `s` with its floating work (per `opt`) taken out and placed as the file
//! comment describes. A wait's length is known from the dependency's end once it has been
//! planned, else estimated from `estimate` (a previous round's start of the rank's next fixed
//! action, from fixed_starts). Memory: a recompute runs early only when what it brings back fits
//! the rank's budget at every point until its backward; before any action that grows the
//! rank's memory past its budget, pending weight-gradient parts run (oldest first) while there
//! are any. `pass` names the caller in the error thrown when `s` cannot run to the end.
template <class Cost>
Schedule fill_bubbles(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                      const std::vector<std::vector<double>>& estimate, const FillOptions& opt,
                      const std::string& pass) {
  const Problem& p = s.problem;
  const UnitIndex unit(p);
  const int nranks = s.rank_count();
  // Parts of a weight gradient, as the simulator will count them in the result.
  int parts = 1;
  if (opt.float_wgrad) {
    parts = std::max(1, opt.wgrad_parts);
  } else {
    for (const auto& list : s.ranks)
      for (const Action& a : list)
        if (a.kind == OpKind::W) parts = std::max(parts, a.part + 1);
  }
  const CostContext ctx{p, s.placement, parts};
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<char> ckpt(unit.size(), 0), has_w(unit.size(), 0);
  for (const auto& list : s.ranks)
    for (const Action& a : list) {
      if (a.kind == OpKind::R) ckpt[unit(a)] = 1;
      if (a.kind == OpKind::W) has_w[unit(a)] = 1;
    }
  auto is_ckpt = [&](const Action& x) { return ckpt[unit(x)] != 0; };
  auto whole_w_delta = [&](const Action& i) {
    return parts *
           memory_effect(cost, ctx, Action::make(OpKind::W, i.stage, i.microbatch, i.slice),
                         is_ckpt)
               .net();
  };

  // Per rank: the fixed list, each unit's backward position, baseline memory levels.
  struct Rank {
    std::vector<Action> main;
    std::vector<double> level;  // highest held memory during main[i] (forced R included)
    std::vector<double> extra;  // memory added over main[i] by hoisted recomputes
    std::vector<int> pending;   // units with R not yet run, in backward order
    std::deque<Action> wgrad;   // weight-gradient parts not yet run, oldest first
    std::size_t pos = 0;
    double free_at = 0;
    double held = 0;  // memory held after the actions emitted so far
    std::vector<Action> out;
  };
  std::vector<Rank> rk(nranks);
  std::vector<int> bwd_pos(unit.size(), -1);
  for (int r = 0; r < nranks; ++r) {
    Rank& R = rk[r];
    for (const Action& a : s.ranks[static_cast<std::size_t>(r)])
      if (!is_floating(a, opt)) R.main.push_back(a);
    // Levels assume each floating weight gradient runs right after its I: the lowest the
    // rank can hold, which the forced parts below can always reach.
    double held = 0;
    R.level.assign(R.main.size(), 0);
    R.extra.assign(R.main.size(), 0);
    for (std::size_t i = 0; i < R.main.size(); ++i) {
      const Action& a = R.main[i];
      double lvl = held;
      auto apply = [&](const Action& x) {
        held += memory_effect(cost, ctx, x, is_ckpt).net();
        lvl = std::max(lvl, held);
      };
      auto backward = [&](const Action& b) {
        if (opt.float_recompute && ckpt[unit(b)]) {
          apply(Action::make(OpKind::R, b.stage, b.microbatch, b.slice));
          bwd_pos[unit(b)] = static_cast<int>(i);
          R.pending.push_back(static_cast<int>(unit(b)));
        }
        apply(b);
        if (opt.float_wgrad && b.kind == OpKind::I && has_w[unit(b)]) held += whole_w_delta(b);
      };
      if (a.kind == OpKind::Overlap) {
        apply(a.forward_half());
        backward(a.backward_half());
      } else if (is_input_backward(a.kind)) {
        backward(a);
      } else if (is_compute(a.kind)) {
        apply(a);
      }
      R.level[i] = lvl;
    }
  }

  std::vector<double> end_f(unit.size(), -1), end_bi(unit.size(), -1), end_r(unit.size(), -1);
  auto rank_of = [&](int stage) { return s.placement.rank_of(stage); };
  // When the inputs of `a` (on rank r) are ready; inf if some have not been planned yet.
  auto ready = [&](int r, const Action& a) {
    double t = 0;
    auto need = [&](const std::vector<double>& ends, int st, int mb, int sl, bool cross,
                    const Action& producer) {
      const double e = ends[unit(st, mb, sl)];
      if (e < 0) {
        t = inf;
        return;
      }
      t = std::max(t, e + (cross ? static_cast<double>(cost.transfer_time(ctx, producer)) : 0.0));
    };
    auto one = [&](const Action& x) {
      for_each_dependency(p, x, [&](const Dependency& d) {
        const std::vector<double>* ends = nullptr;
        Action producer = x;
        switch (d.role) {
          case Role::Forward:
            ends = &end_f;
            producer = Action::make(OpKind::F, d.stage, d.microbatch, d.slice);
            break;
          case Role::Backward:
            ends = &end_bi;
            producer = Action::make(OpKind::B, d.stage, d.microbatch, d.slice);
            break;
          case Role::Recompute:
            if (!ckpt[unit(x)]) return;  // no R for the unit
            ends = &end_r;
            break;
          default:
            return;
        }
        need(*ends, d.stage, d.microbatch, d.slice, d.crosses_stage && rank_of(d.stage) != r,
             producer);
      });
    };
    if (a.kind == OpKind::Overlap) {
      one(a.forward_half());
      Action b = a.backward_half();
      // The backward half's recompute is run before the Overlap starts (forced below).
      one(b);
    } else {
      one(a);
    }
    return t;
  };
  auto duration = [&](const Action& a) -> double {
    if (a.kind == OpKind::Overlap)
      return static_cast<double>(cost.duration(ctx, a.forward_half())) +
             static_cast<double>(cost.duration(ctx, a.backward_half()));
    if (a.kind == OpKind::Idle || is_comm(a.kind)) return 0.0;
    return cost.duration(ctx, a);
  };
  // Memory an action adds at its start, and its net change once it has ended.
  auto growth = [&](const Action& a) { return memory_effect(cost, ctx, a, is_ckpt).grow; };
  auto net = [&](const Action& a) { return memory_effect(cost, ctx, a, is_ckpt).net(); };
  // True when running `a` next would take rank r over its budget.
  auto over = [&](int r, const Action& a) {
    const double limit = budget.of(r);
    const double g = growth(a);
    return g > 0 && rk[r].held + g > limit + 1e-9 * std::max(1.0, std::abs(limit));
  };
  auto record_end = [&](const Action& a, double e) {
    if (a.kind == OpKind::F) end_f[unit(a)] = e;
    if (is_input_backward(a.kind)) end_bi[unit(a)] = e;
    if (a.kind == OpKind::R) end_r[unit(a)] = e;
    if (a.kind == OpKind::Overlap) {
      end_f[unit(a)] = e;
      end_bi[unit(a.b_stage, a.b_microbatch, a.b_slice)] = e;
    }
  };

  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  std::vector<char> parked(nranks, 0);
  std::vector<double> parked_at(nranks, 0);
  for (int r = 0; r < nranks; ++r)
    heap.push({0.0, r});
  int finished = 0;
  auto wake = [&] {
    for (int q = 0; q < nranks; ++q)
      if (parked[q]) {
        parked[q] = 0;
        heap.push({parked_at[q], q});
      }
  };
  auto run = [&](int r, const Action& a, double start) {
    const double e = start + duration(a);
    record_end(a, e);
    rk[r].out.push_back(a);
    rk[r].free_at = e;
    rk[r].held += net(a);
    if (opt.float_wgrad && a.kind == OpKind::I && has_w[unit(a)])
      for (int j = 0; j < parts; ++j)
        rk[r].wgrad.push_back(Action::make(OpKind::W, a.stage, a.microbatch, a.slice, j));
    heap.push({e, r});
    wake();
  };
  // Runs the oldest pending weight-gradient part of rank r at `t`.
  auto run_wgrad = [&](int r, double t) {
    const Action w = rk[r].wgrad.front();
    rk[r].wgrad.pop_front();
    run(r, w, t);
  };
  while (!heap.empty()) {
    auto [t, r] = heap.top();
    heap.pop();
    Rank& R = rk[r];
    if (R.pos >= R.main.size()) {
      // The list is done: weight gradients still pending are due now.
      if (!R.wgrad.empty()) run_wgrad(r, std::max(t, R.free_at));
      continue;
    }
    t = std::max(t, R.free_at);
    const Action& a = R.main[R.pos];
    // A backward whose recompute has not run: the recompute goes first.
    auto forced = [&]() -> int {
      if (!opt.float_recompute) return -1;
      Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
      if ((is_input_backward(b.kind) || a.kind == OpKind::Overlap) && ckpt[unit(b)] &&
          end_r[unit(b)] < 0)
        return static_cast<int>(unit(b));
      return -1;
    }();
    if (forced >= 0) {
      Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
      const Action rc = Action::make(OpKind::R, b.stage, b.microbatch, b.slice);
      if (!R.wgrad.empty() && over(r, rc)) {
        run_wgrad(r, t);
        continue;
      }
      std::erase(R.pending, forced);
      run(r, rc, t);
      continue;
    }
    const double rt = ready(r, a);
    if (rt <= t + 1e-12) {
      if (!R.wgrad.empty() && over(r, a)) {
        run_wgrad(r, t);
        continue;
      }
      ++R.pos;
      if (R.pos == R.main.size()) ++finished;
      run(r, a, t);
      continue;
    }
    // The rank would wait: hoist the pending recompute needed soonest, if it fits.
    const double gap_end = rt < inf ? rt
                                    : (R.pos < estimate[static_cast<std::size_t>(r)].size()
                                           ? estimate[static_cast<std::size_t>(r)][R.pos]
                                           : -inf);
    bool hoisted = false;
    for (int u : R.pending) {
      const Action& b = R.main[static_cast<std::size_t>(bwd_pos[static_cast<std::size_t>(u)])];
      const Action rc = Action::make(OpKind::R, b.kind == OpKind::Overlap ? b.b_stage : b.stage,
                                     b.kind == OpKind::Overlap ? b.b_microbatch : b.microbatch,
                                     b.kind == OpKind::Overlap ? b.b_slice : b.slice);
      if (end_f[unit(rc)] < 0 || end_f[unit(rc)] > t + 1e-12) continue;  // forward not done
      // The wait must cover at least `min_fit` of the recompute (1: it must fit whole).
      if (t + opt.min_fit * duration(rc) > gap_end + 1e-9) break;  // pending: backward order
      const double grow = memory_effect(cost, ctx, rc, is_ckpt).net();  // rc's unit has an R
      const int bp = bwd_pos[static_cast<std::size_t>(u)];
      // With weight gradients pending the rank may hold more than its levels say right now.
      bool fits = !(opt.float_wgrad && over(r, rc));
      for (int i = static_cast<int>(R.pos); i < bp && fits; ++i)
        fits = R.level[static_cast<std::size_t>(i)] + R.extra[static_cast<std::size_t>(i)] + grow <=
               budget.of(r) + 1e-9;
      if (!fits) continue;
      for (int i = static_cast<int>(R.pos); i < bp; ++i)
        R.extra[static_cast<std::size_t>(i)] += grow;
      std::erase(R.pending, u);
      run(r, rc, t);
      hoisted = true;
      break;
    }
    if (hoisted) continue;
    // Else the oldest weight-gradient part: when it fits the wait, or when the next action
    // will need the memory it frees anyway.
    if (!R.wgrad.empty()) {
      const bool fits_wait =
          opt.min_fit <= 0 || t + opt.min_fit * duration(R.wgrad.front()) <= gap_end + 1e-9;
      if (fits_wait || over(r, a)) {
        run_wgrad(r, t);
        continue;
      }
    }
    if (rt < inf) {
      heap.push({rt, r});
    } else {
      parked[r] = 1;
      parked_at[r] = t;
    }
  }
  if (finished < nranks) {
    int done = 0;
    for (const Rank& R : rk)
      done += R.pos >= R.main.size();
    if (done < nranks)
      throw invalid_schedule(pass + ": the base schedule '" + s.name +
                             "' cannot run to the end (a rank waits for an action that never "
                             "runs); validate it first.");
  }
  Schedule out = s;
  for (int r = 0; r < nranks; ++r)
    out.ranks[static_cast<std::size_t>(r)] = std::move(rk[r].out);
  return out;
}

}  // namespace pipesched::detail
