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

//! The filler's state and its named phases, for one call of fill_bubbles: set-up (part_count,
//! mark_units, plan_rank: each rank's fixed list, levels and pending recomputes), the
//! questions it asks about an action (ready, duration, growth, net, over), the event loop
//! (replay, step) with its three ways forward at a rank's turn (run_forced, run_next,
//! fill_wait: hoist_recompute, then the oldest weight-gradient part, else wait) and the end
//! (check_finished, result).
template <class Cost>
class BubbleFiller {
 public:
  //! Plans the fixed lists of `s`, with floating work per `opt`, under `cost` and `budget`;
  //! `estimate` as fill_bubbles takes it. The filler keeps references to all five.
  BubbleFiller(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
               const std::vector<std::vector<double>>& estimate, const FillOptions& opt)
      : s_(s),
        cost_(cost),
        budget_(budget),
        estimate_(estimate),
        opt_(opt),
        p_(s.problem),
        unit_(p_),
        nranks_(s.rank_count()),
        parts_(part_count(s, opt)),
        ctx_{p_, s.placement, parts_},
        ckpt_(unit_.size(), 0),
        has_w_(unit_.size(), 0),
        rk_(nranks_),
        bwd_pos_(unit_.size(), -1),
        end_f_(unit_.size(), -1),
        end_bi_(unit_.size(), -1),
        end_r_(unit_.size(), -1),
        parked_(nranks_, 0),
        parked_at_(nranks_, 0) {
    mark_units();
    for (int r = 0; r < nranks_; ++r)
      plan_rank(r);
  }

  //! Replays every rank and returns `s` with each rank's list as run. `pass` names the caller
  //! in the error thrown when `s` cannot run to the end. Call it once.
  Schedule run(const std::string& pass) {
    replay();
    check_finished(pass);
    return result();
  }

 private:
  static constexpr double inf = std::numeric_limits<double>::infinity();

  //! Per rank: the fixed list, its baseline memory levels, what is still to place.
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
  using Item = std::pair<double, int>;

  // ---- Set-up --------------------------------------------------------------------------

  //! Parts of a weight gradient, as the simulator will count them in the result.
  static int part_count(const Schedule& s, const FillOptions& opt) {
    int parts = 1;
    if (opt.float_wgrad) {
      parts = std::max(1, opt.wgrad_parts);
    } else {
      for (const auto& list : s.ranks)
        for (const Action& a : list)
          if (a.kind == OpKind::W) parts = std::max(parts, a.part + 1);
    }
    return parts;
  }

  //! Which units the schedule recomputes (an R exists) and which have a W.
  void mark_units() {
    for (const auto& list : s_.ranks)
      for (const Action& a : list) {
        if (a.kind == OpKind::R) ckpt_[unit_(a)] = 1;
        if (a.kind == OpKind::W) has_w_[unit_(a)] = 1;
      }
  }

  //! Rank r's fixed list, each of its units' backward position, its baseline memory levels
  //! and the recomputes pending.
  void plan_rank(int r) {
    Rank& R = rk_[r];
    for (const Action& a : s_.ranks[static_cast<std::size_t>(r)])
      if (!is_floating(a, opt_)) R.main.push_back(a);
    // Levels assume each floating weight gradient runs right after its I: the lowest the
    // rank can hold, which the forced parts below can always reach.
    double held = 0;
    R.level.assign(R.main.size(), 0);
    R.extra.assign(R.main.size(), 0);
    for (std::size_t i = 0; i < R.main.size(); ++i) {
      const Action& a = R.main[i];
      double lvl = held;
      auto apply = [&](const Action& x) {
        held += effect(x).net();
        lvl = std::max(lvl, held);
      };
      auto backward = [&](const Action& b) {
        if (opt_.float_recompute && ckpt_[unit_(b)]) {
          apply(Action::make(OpKind::R, b.stage, b.microbatch, b.slice));
          bwd_pos_[unit_(b)] = static_cast<int>(i);
          R.pending.push_back(static_cast<int>(unit_(b)));
        }
        apply(b);
        if (opt_.float_wgrad && b.kind == OpKind::I && has_w_[unit_(b)]) held += whole_w_delta(b);
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

  // ---- What the filler asks about an action ---------------------------------------------

  //! The memory effect of `x` in this schedule (its unit checkpointed when it has an R).
  MemoryEffect effect(const Action& x) const {
    auto is_ckpt = [&](const Action& y) { return ckpt_[unit_(y)] != 0; };
    return memory_effect(cost_, ctx_, x, is_ckpt);
  }

  //! Net memory of the whole weight gradient of input gradient `i`'s unit (all its parts).
  double whole_w_delta(const Action& i) const {
    return parts_ * effect(Action::make(OpKind::W, i.stage, i.microbatch, i.slice)).net();
  }

  int rank_of(int stage) const { return s_.placement.rank_of(stage); }

  //! When the inputs of `a` (on rank r) are ready; inf if some have not been planned yet.
  double ready(int r, const Action& a) const {
    double t = 0;
    auto need = [&](const std::vector<double>& ends, int st, int mb, int sl, bool cross,
                    const Action& producer) {
      const double e = ends[unit_(st, mb, sl)];
      if (e < 0) {
        t = inf;
        return;
      }
      t = std::max(t, e + (cross ? static_cast<double>(cost_.transfer_time(ctx_, producer)) : 0.0));
    };
    auto one = [&](const Action& x) {
      for_each_dependency(p_, x, [&](const Dependency& d) {
        const std::vector<double>* ends = nullptr;
        Action producer = x;
        switch (d.role) {
          case Role::Forward:
            ends = &end_f_;
            producer = Action::make(OpKind::F, d.stage, d.microbatch, d.slice);
            break;
          case Role::Backward:
            ends = &end_bi_;
            producer = Action::make(OpKind::B, d.stage, d.microbatch, d.slice);
            break;
          case Role::Recompute:
            if (!ckpt_[unit_(x)]) return;  // no R for the unit
            ends = &end_r_;
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
  }

  //! Time `a` occupies its rank (an Overlap: both halves; idle and messages: none).
  double duration(const Action& a) const {
    if (a.kind == OpKind::Overlap)
      return static_cast<double>(cost_.duration(ctx_, a.forward_half())) +
             static_cast<double>(cost_.duration(ctx_, a.backward_half()));
    if (a.kind == OpKind::Idle || is_comm(a.kind)) return 0.0;
    return cost_.duration(ctx_, a);
  }

  // Memory an action adds at its start, and its net change once it has ended.
  double growth(const Action& a) const { return effect(a).grow; }
  double net(const Action& a) const { return effect(a).net(); }

  //! True when running `a` next would take rank r over its budget.
  bool over(int r, const Action& a) const {
    const double limit = budget_.of(r);
    const double g = growth(a);
    return g > 0 && rk_[r].held + g > limit + 1e-9 * std::max(1.0, std::abs(limit));
  }

  // ---- Events --------------------------------------------------------------------------

  //! Records when `a` ends, for the actions that wait on it.
  void record_end(const Action& a, double e) {
    if (a.kind == OpKind::F) end_f_[unit_(a)] = e;
    if (is_input_backward(a.kind)) end_bi_[unit_(a)] = e;
    if (a.kind == OpKind::R) end_r_[unit_(a)] = e;
    if (a.kind == OpKind::Overlap) {
      end_f_[unit_(a)] = e;
      end_bi_[unit_(a.b_stage, a.b_microbatch, a.b_slice)] = e;
    }
  }

  //! Puts every parked rank (waiting on work not yet planned) back in the queue.
  void wake() {
    for (int q = 0; q < nranks_; ++q)
      if (parked_[q]) {
        parked_[q] = 0;
        heap_.push({parked_at_[q], q});
      }
  }

  //! Runs `a` on rank r from `start`: its end, the rank's list and memory, the parts of its
  //! weight gradient when `a` is an I whose W floats.
  void run_action(int r, const Action& a, double start) {
    const double e = start + duration(a);
    record_end(a, e);
    rk_[r].out.push_back(a);
    rk_[r].free_at = e;
    rk_[r].held += net(a);
    if (opt_.float_wgrad && a.kind == OpKind::I && has_w_[unit_(a)])
      for (int j = 0; j < parts_; ++j)
        rk_[r].wgrad.push_back(Action::make(OpKind::W, a.stage, a.microbatch, a.slice, j));
    heap_.push({e, r});
    wake();
  }

  //! Runs the oldest pending weight-gradient part of rank r at `t`.
  void run_wgrad(int r, double t) {
    const Action w = rk_[r].wgrad.front();
    rk_[r].wgrad.pop_front();
    run_action(r, w, t);
  }

  // ---- The event loop ------------------------------------------------------------------

  //! Every rank from time 0, a turn at a time in time order, until none has anything left.
  void replay() {
    for (int r = 0; r < nranks_; ++r)
      heap_.push({0.0, r});
    while (!heap_.empty()) {
      auto [t, r] = heap_.top();
      heap_.pop();
      step(t, r);
    }
  }

  //! Rank r's turn at `t`: a forced recompute, else its next fixed action when ready, else
  //! floating work in the wait.
  void step(double t, int r) {
    Rank& R = rk_[r];
    if (R.pos >= R.main.size()) {
      // The list is done: weight gradients still pending are due now.
      if (!R.wgrad.empty()) run_wgrad(r, std::max(t, R.free_at));
      return;
    }
    t = std::max(t, R.free_at);
    const Action& a = R.main[R.pos];
    if (run_forced(r, a, t)) return;
    const double rt = ready(r, a);
    if (rt <= t + 1e-12) {
      run_next(r, a, t);
      return;
    }
    fill_wait(r, a, t, rt);
  }

  //! A backward `a` whose recompute has not run: the recompute goes first (or, when it would
  //! take the rank over its budget, a pending weight-gradient part). False when `a` forces
  //! nothing.
  bool run_forced(int r, const Action& a, double t) {
    Rank& R = rk_[r];
    const int forced = [&]() -> int {
      if (!opt_.float_recompute) return -1;
      Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
      if ((is_input_backward(b.kind) || a.kind == OpKind::Overlap) && ckpt_[unit_(b)] &&
          end_r_[unit_(b)] < 0)
        return static_cast<int>(unit_(b));
      return -1;
    }();
    if (forced < 0) return false;
    Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
    const Action rc = Action::make(OpKind::R, b.stage, b.microbatch, b.slice);
    if (!R.wgrad.empty() && over(r, rc)) {
      run_wgrad(r, t);
      return true;
    }
    std::erase(R.pending, forced);
    run_action(r, rc, t);
    return true;
  }

  //! Rank r's next fixed action `a`, ready at `t` (after a pending weight-gradient part when
  //! `a` would take the rank over its budget).
  void run_next(int r, const Action& a, double t) {
    Rank& R = rk_[r];
    if (!R.wgrad.empty() && over(r, a)) {
      run_wgrad(r, t);
      return;
    }
    ++R.pos;
    if (R.pos == R.main.size()) ++finished_;
    run_action(r, a, t);
  }

  //! Rank r would wait at `t` for its next action `a`, ready at `rt` (inf: not yet planned):
  //! a hoisted recompute, else the oldest weight-gradient part, else the rank waits (parked
  //! when `rt` is unknown).
  void fill_wait(int r, const Action& a, double t, double rt) {
    Rank& R = rk_[r];
    const double gap_end = rt < inf ? rt
                                    : (R.pos < estimate_[static_cast<std::size_t>(r)].size()
                                           ? estimate_[static_cast<std::size_t>(r)][R.pos]
                                           : -inf);
    if (hoist_recompute(r, t, gap_end)) return;
    // Else the oldest weight-gradient part: when it fits the wait, or when the next action
    // will need the memory it frees anyway.
    if (!R.wgrad.empty()) {
      const bool fits_wait =
          opt_.min_fit <= 0 || t + opt_.min_fit * duration(R.wgrad.front()) <= gap_end + 1e-9;
      if (fits_wait || over(r, a)) {
        run_wgrad(r, t);
        return;
      }
    }
    if (rt < inf) {
      heap_.push({rt, r});
    } else {
      parked_[r] = 1;
      parked_at_[r] = t;
    }
  }

  //! Runs at `t` the pending recompute of rank r needed soonest whose forward has run, when
  //! the wait (until `gap_end`) covers `min_fit` of it and what it brings back fits the budget
  //! until its backward. False when none does.
  bool hoist_recompute(int r, double t, double gap_end) {
    Rank& R = rk_[r];
    for (int u : R.pending) {
      const Action& b = R.main[static_cast<std::size_t>(bwd_pos_[static_cast<std::size_t>(u)])];
      const Action rc = Action::make(OpKind::R, b.kind == OpKind::Overlap ? b.b_stage : b.stage,
                                     b.kind == OpKind::Overlap ? b.b_microbatch : b.microbatch,
                                     b.kind == OpKind::Overlap ? b.b_slice : b.slice);
      if (end_f_[unit_(rc)] < 0 || end_f_[unit_(rc)] > t + 1e-12) continue;  // forward not done
      // The wait must cover at least `min_fit` of the recompute (1: it must fit whole).
      if (t + opt_.min_fit * duration(rc) > gap_end + 1e-9) break;  // pending: backward order
      const double grow = effect(rc).net();                         // rc's unit has an R
      const int bp = bwd_pos_[static_cast<std::size_t>(u)];
      // With weight gradients pending the rank may hold more than its levels say right now.
      bool fits = !(opt_.float_wgrad && over(r, rc));
      for (int i = static_cast<int>(R.pos); i < bp && fits; ++i)
        fits = R.level[static_cast<std::size_t>(i)] + R.extra[static_cast<std::size_t>(i)] + grow <=
               budget_.of(r) + 1e-9;
      if (!fits) continue;
      for (int i = static_cast<int>(R.pos); i < bp; ++i)
        R.extra[static_cast<std::size_t>(i)] += grow;
      std::erase(R.pending, u);
      run_action(r, rc, t);
      return true;
    }
    return false;
  }

  // ---- The end -------------------------------------------------------------------------

  //! Throws invalid_schedule (naming `pass`) when some rank did not reach the end of its list.
  void check_finished(const std::string& pass) const {
    if (finished_ < nranks_) {
      int done = 0;
      for (const Rank& R : rk_)
        done += R.pos >= R.main.size();
      if (done < nranks_)
        throw invalid_schedule(pass + ": the base schedule '" + s_.name +
                               "' cannot run to the end (a rank waits for an action that never "
                               "runs); validate it first.");
    }
  }

  //! `s` with each rank's list as run.
  Schedule result() {
    Schedule out = s_;
    for (int r = 0; r < nranks_; ++r)
      out.ranks[static_cast<std::size_t>(r)] = std::move(rk_[r].out);
    return out;
  }

  const Schedule& s_;
  const Cost& cost_;
  const MemoryBudget& budget_;
  const std::vector<std::vector<double>>& estimate_;
  const FillOptions& opt_;
  const Problem& p_;
  const UnitIndex unit_;
  const int nranks_;
  const int parts_;
  const CostContext ctx_;
  std::vector<char> ckpt_, has_w_;
  std::vector<Rank> rk_;
  std::vector<int> bwd_pos_;
  std::vector<double> end_f_, end_bi_, end_r_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap_;
  std::vector<char> parked_;
  std::vector<double> parked_at_;
  int finished_ = 0;
};

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
  return BubbleFiller<Cost>(s, cost, budget, estimate, opt).run(pass);
}

}  // namespace pipesched::detail
