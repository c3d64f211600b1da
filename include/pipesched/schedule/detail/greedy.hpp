// The Zero Bubble planner: a rule on the list-scheduling engine (schedule/list_schedule.hpp)
// that, whenever a rank is free, starts the most urgent ready action (input gradient, then
// forward within the rank's in-flight limit, then the oldest weight gradient). The Zero Bubble
// generators are thin wrappers around it; it works on any placement.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/list_schedule.hpp"

namespace pipesched::schedule::detail {

//! Durations the list scheduler plans with: one forward, input-gradient and weight-gradient
//! action of one stage and microbatch. Any positive values; ties are broken deterministically.
struct GreedyDurations {
  double f = 1.0;
  double i = 1.0;
  double w = 1.0;
};

//! Which of several ready actions of the same kind on one rank goes first, by stage.
enum class StageOrder {
  LaterFirst,  //!< the higher stage (drains a V-shape: its second chunk feeds the backward)
  //! The lower stage. On a V-shape this can fill a rank's limit with first-chunk forwards
  //! before its second chunk's arrive; the planner then reports the limits as infeasible.
  EarlierFirst,
};

//! What the list scheduler is asked to plan.
struct GreedyOptions {
  const char* generator = "greedy";  //!< names the caller in error messages
  Placement placement;               //!< stage → rank; any map
  int microbatches = 1;
  //! Per rank: how many forwards may have run whose input gradient (I) has not. A forward
  //! that would exceed it waits until an I on that rank has run.
  std::vector<int> max_in_flight;
  GreedyDurations durations;
  //! Among ready forwards on a rank: which stage first (then the lowest microbatch).
  StageOrder forward_order = StageOrder::LaterFirst;
  //! Among ready input gradients on a rank: which stage first (after the lowest microbatch).
  StageOrder backward_order = StageOrder::EarlierFirst;
  //! A rank holding at least this many weight gradients whose I has run starts the oldest of
  //! them before a forward (input gradients still go first). The default never does: W only
  //! fills what would otherwise be a wait. Lower it to bound the memory W's inputs hold.
  int max_pending_w = std::numeric_limits<int>::max();
  //! Count a forward as in flight until its W has run (not only its I): then a rank never
  //! holds more than `max_in_flight` units' activations, whatever W keeps.
  bool in_flight_until_w = false;
  //! Memory-bounded planning (Zero Bubble's own `max_mem`): with a cost model here, a rank
  //! whose memory (the model's memory_delta of its F, I and W, counted from each start) would
  //! exceed `memory_cap` of that rank with the next forward runs its pending weight gradients
  //! first, oldest first, and starts the forward only once it fits or none is left to run.
  //! Durations stay those of `durations`: the cap changes where W runs, not the plan's clock,
  //! so a cap no schedule reaches gives the unbounded plan. Null: memory is not planned.
  const CostRef* memory_cost = nullptr;
  std::vector<double> memory_cap;  //!< per rank, with memory_cost (infinity: no cap)
  //! Per rank, with memory_cost: with no weight gradient left to run, a forward over the cap
  //! still starts while fewer than this many are in flight (empty: max_in_flight, i.e. memory
  //! never holds forwards back below the order's own limit). ZB-H2 gives ZB-H1's limits, so a
  //! tight cap turns it into ZB-H1 and no further.
  std::vector<int> min_in_flight;
  //! Apply `max_in_flight` only to forwards that start a microbatch on a rank, never to the
  //! later chunks of one it holds (CappedZeroBubbleRule): what a looped placement needs for
  //! its limit never to hold back the chunks its backwards wait on.
  bool limit_new_microbatches = false;
};

//! The planned lists and what the plan measured.
struct GreedyPlan {
  std::vector<std::vector<Action>> ranks;  //!< per rank: F, I and W actions in start order
  double makespan = 0.0;                   //!< end of the last action under `durations`
  std::vector<int> peak_in_flight;         //!< per rank: most forwards in flight at once
};

namespace greedy_detail {

inline std::string stage_mb(int stage, int mb) {
  return "(stage " + std::to_string(stage) + ", microbatch " + std::to_string(mb) + ")";
}

//! The planning durations as a cost model: F, I and W take what GreedyDurations says, nothing
//! crosses ranks slowly, memory is not the planner's concern (its limit is a count).
struct PlanningCost {
  GreedyDurations d;
  double duration(const CostContext&, const Action& a) const {
    return a.kind == OpKind::F ? d.f : a.kind == OpKind::I ? d.i : d.w;
  }
  double memory_delta(const CostContext&, const Action&, bool) const { return 0.0; }
  double transfer_time(const CostContext&, const Action&) const { return 0.0; }
};

//! The planning durations with a cost model's memory (none when null): what the
//! memory-bounded planner runs on.
struct BoundedPlanningCost {
  GreedyDurations d;
  const CostRef* memory;
  double duration(const CostContext& c, const Action& a) const {
    return PlanningCost{d}.duration(c, a);
  }
  double memory_delta(const CostContext& c, const Action& a, bool ckpt) const {
    return memory ? memory->memory_delta(c, a, ckpt) : 0.0;
  }
  double transfer_time(const CostContext&, const Action&) const { return 0.0; }
  MemoryUnit memory_unit() const noexcept {
    return memory ? memory->memory_unit() : MemoryUnit::Units;
  }
};

//! The Zero Bubble planner as a list-scheduling rule: a ready I first (lowest microbatch, then
//! the stage order asked for), then a forward within the rank's in-flight limit, then the
//! oldest weight gradient (before the forward once max_pending_w of them wait).
struct ZeroBubbleRule {
  const GreedyOptions* opt;
  std::int64_t span;  //!< > every microbatch and every stage key + stages: keys pack into one int
  // (class, a, b) packed as one integer, compared as the tuple would be: input gradients by
  // (microbatch, stage order), then forwards by (stage order, microbatch), then W in the
  // order their I ran (equal keys: ties go FIFO).
  std::int64_t pack(int cls, std::int64_t a, std::int64_t b) const {
    return (static_cast<std::int64_t>(cls) * span + a) * span + b;
  }
  std::int64_t stage_key(int stage, StageOrder order) const {
    return order == StageOrder::LaterFirst ? span / 2 - stage : span / 2 + stage;
  }
  std::int64_t key(const ReadyAction& r) const {
    const Action& a = r.action;
    switch (a.kind) {
      case OpKind::I:
        return pack(0, a.microbatch, stage_key(a.stage, opt->backward_order));
      case OpKind::F:
        return pack(1, stage_key(a.stage, opt->forward_order), a.microbatch);
      default:
        return pack(2, 0, 0);
    }
  }
  bool admit_kind(const RankState& st, OpKind k) const {
    if (k != OpKind::F) return true;
    const int in_flight =
        st.forwards - (opt->in_flight_until_w ? st.weight_gradients : st.backwards);
    if (in_flight >= opt->max_in_flight[static_cast<std::size_t>(st.rank)]) return false;
    const int pending_w = st.ready_count(OpKind::W);
    return !(pending_w > 0 && opt->max_pending_w <= pending_w);
  }
};

//! ZeroBubbleRule with either or both of two admissions of forwards, which need the action
//! (so per action, not per kind).
//! - New microbatches only (GreedyOptions::limit_new_microbatches): the in-flight limit holds
//!   back only a forward that starts a microbatch on the rank (at its first stage there); the
//!   later chunk forwards of a microbatch it holds always run. Otherwise a looped rank can
//!   fill its limit with first-chunk forwards whose backwards need the later chunks it no
//!   longer admits (p = 3, V = 4, M = 24 stalls so).
//! - Memory cap (GreedyOptions::memory_cost): a forward that starts a microbatch is admitted
//!   when what the rank holds, plus this forward, plus the later forwards on the rank of every
//!   microbatch it has started (they only add) stays within the cap. Otherwise the rank first
//!   runs its pending weight gradients (they free what they hold), and with none pending
//!   waits for an input gradient to free memory — unless it has fewer than its floor in flight
//!   (GreedyOptions::min_in_flight), when the forward runs anyway.
struct CappedZeroBubbleRule : ZeroBubbleRule {
  const std::vector<char>* starts_microbatch;  //!< per stage: the lowest stage of its rank
  const std::vector<double>* f_memory;         //!< per stage: what one forward adds (memory)
  const std::vector<double>* later_memory;     //!< per stage: the rank's later forwards
  std::vector<int> floor;                      //!< per rank: GreedyOptions::min_in_flight
  // Per rank, what the forwards still to come of its started microbatches will add, brought
  // up to date from RankState::started (only ever appended to) at each question.
  mutable std::vector<double> reserved;
  mutable std::vector<std::size_t> seen;

  bool admit_kind(const RankState& st, OpKind k) const {
    if (!opt->limit_new_microbatches) return ZeroBubbleRule::admit_kind(st, k);
    if (k != OpKind::F) return true;  // the in-flight limit is applied by admit
    const int pending_w = st.ready_count(OpKind::W);
    return !(pending_w > 0 && opt->max_pending_w <= pending_w);
  }
  bool admit(const RankState& st, const ReadyAction& r) const {
    if (r.action.kind != OpKind::F) return true;
    const auto ru = static_cast<std::size_t>(st.rank);
    const auto stage = static_cast<std::size_t>(r.action.stage);
    if (!(*starts_microbatch)[stage]) return true;
    for (; seen[ru] < st.started.size(); ++seen[ru]) {
      const Action& a = st.started[seen[ru]];
      if (a.kind != OpKind::F) continue;
      const auto s = static_cast<std::size_t>(a.stage);
      if (opt->memory_cost)
        reserved[ru] += (*starts_microbatch)[s] ? (*later_memory)[s] : -(*f_memory)[s];
    }
    if (opt->limit_new_microbatches && st.in_flight() >= opt->max_in_flight[ru]) return false;
    if (!opt->memory_cost) return true;
    const double cap = opt->memory_cap[ru];
    const double need = st.memory + r.memory + (*later_memory)[stage] + reserved[ru];
    if (need <= cap + 1e-9 * std::max(1.0, std::abs(cap))) return true;
    if (st.ready_count(OpKind::W) > 0) return false;
    return st.in_flight() < floor[ru];
  }
};

}  // namespace greedy_detail

//! Plans F, I and W for every (stage, microbatch) of `opt.placement` (one slice). A free rank
//! starts, in this order of preference: (1) a ready I, lowest microbatch first — the backward
//! chain is the critical path; (2) a ready F that keeps the rank within `max_in_flight`; (3) the
//! oldest W whose I has run (before (2) once `max_pending_w` of them wait). With none of these it
//! waits for the next action to finish anywhere. Dependencies: F(s,m) after F(s−1,m); I(s,m) after
//! F(s,m) and I(s+1,m); W(s,m) after I(s,m); crossing ranks costs nothing. This is
//! `list_schedule` with the rule above. Throws invalid_problem on bad options, or when the
//! in-flight limits leave no rank able to progress (naming the ranks and limits that block).
inline GreedyPlan greedy_list_schedule(const GreedyOptions& opt) {
  using namespace greedy_detail;
  const std::string gen = opt.generator;
  const Placement& pl = opt.placement;
  const int ranks = pl.ranks();
  const int stages = pl.stages();
  const int mbs = opt.microbatches;
  if (ranks < 1 || stages < 1)
    throw invalid_problem(gen + ": the placement has " + std::to_string(ranks) + " ranks and " +
                          std::to_string(stages) + " stages; a schedule needs at least 1 of each.");
  if (mbs < 1)
    throw invalid_problem(gen + ": microbatches = " + std::to_string(mbs) +
                          " is out of range; a step needs at least 1 microbatch.");
  if (static_cast<int>(opt.max_in_flight.size()) != ranks)
    throw invalid_problem(gen + ": max_in_flight has " + std::to_string(opt.max_in_flight.size()) +
                          " entries; give one limit per rank (" + std::to_string(ranks) + ").");
  for (int r = 0; r < ranks; ++r)
    if (opt.max_in_flight[static_cast<std::size_t>(r)] < 1)
      throw invalid_problem(gen + ": max_in_flight on rank " + std::to_string(r) + " = " +
                            std::to_string(opt.max_in_flight[static_cast<std::size_t>(r)]) +
                            "; a rank must be allowed at least 1 forward in flight.");
  if (opt.max_pending_w < 0)
    throw invalid_problem(gen + ": max_pending_w = " + std::to_string(opt.max_pending_w) +
                          " is out of range; use 0 (run each W right after its I) or more.");
  const double dur[3] = {opt.durations.f, opt.durations.i, opt.durations.w};
  constexpr const char* kind_name[3] = {"F", "I", "W"};
  for (int k = 0; k < 3; ++k)
    if (!(dur[k] > 0.0) || dur[k] == std::numeric_limits<double>::infinity())
      throw invalid_problem(gen + ": the planning duration of " + kind_name[k] + " is " +
                            std::to_string(dur[k]) + "; durations must be positive and finite.");

  ListProblem lp{.problem = Problem{.ranks = ranks, .stages = stages, .microbatches = mbs},
                 .placement = pl,
                 .wgrad = WGradMode::Split,
                 .name = gen};
  ListPlan lplan;
  if (opt.memory_cost && static_cast<int>(opt.memory_cap.size()) != ranks)
    throw invalid_problem(gen + ": memory_cap has " + std::to_string(opt.memory_cap.size()) +
                          " entries; give one cap per rank (" + std::to_string(ranks) + ").");
  try {
    const std::int64_t span = 2 * (static_cast<std::int64_t>(stages) + mbs) + 2;
    if (opt.memory_cost || opt.limit_new_microbatches) {
      // Per stage: whether it is its rank's first, what a forward adds, and what the rank's
      // later stages' forwards of the same microbatch add (microbatch 0 stands for all).
      const auto S = static_cast<std::size_t>(stages);
      std::vector<char> starts(S, 0);
      std::vector<double> f_mem(S, 0.0), later(S, 0.0);
      const CostContext ctx{lp.problem, pl, 1};
      if (opt.memory_cost)
        for (int st = 0; st < stages; ++st)
          f_mem[static_cast<std::size_t>(st)] = std::max(
              0.0, opt.memory_cost->memory_delta(ctx, Action::make(OpKind::F, st, 0), false));
      for (int r = 0; r < ranks; ++r) {
        std::vector<int> own = pl.stages_of(r);
        if (own.empty()) continue;
        std::sort(own.begin(), own.end());
        starts[static_cast<std::size_t>(own.front())] = 1;
        for (std::size_t i = 1; i < own.size(); ++i)
          later[static_cast<std::size_t>(own.front())] += f_mem[static_cast<std::size_t>(own[i])];
      }
      CappedZeroBubbleRule rule{{&opt, span}, &starts, &f_mem, &later, opt.min_in_flight, {}, {}};
      if (rule.floor.empty()) rule.floor = opt.max_in_flight;
      if (rule.floor.size() != static_cast<std::size_t>(ranks))
        throw invalid_problem(gen + ": min_in_flight has " + std::to_string(rule.floor.size()) +
                              " entries; give one per rank (" + std::to_string(ranks) + ").");
      for (int& f : rule.floor)
        f = std::max(f, 1);
      rule.reserved.assign(static_cast<std::size_t>(ranks), 0.0);
      rule.seen.assign(static_cast<std::size_t>(ranks), 0);
      if (opt.memory_cost)
        lplan = list_schedule_plan(lp, rule, BoundedPlanningCost{opt.durations, opt.memory_cost});
      else
        lplan = list_schedule_plan(lp, rule, PlanningCost{opt.durations});
    } else {
      lplan = list_schedule_plan(lp, ZeroBubbleRule{&opt, span}, PlanningCost{opt.durations});
    }
  } catch (const schedule_stalled& e) {
    // Only a forward held back by its rank's limit can be refused: say which limits block.
    std::string blocked;
    for (const RankStall& st : e.stalls()) {
      const Action& f = st.refused.front();
      const int in_flight =
          st.forwards - (opt.in_flight_until_w ? st.weight_gradients : st.backwards);
      blocked += (blocked.empty() ? "" : "; ") + std::string("rank ") + std::to_string(st.rank) +
                 " holds " + std::to_string(in_flight) +
                 " forwards whose input gradient has not run (max_in_flight = " +
                 std::to_string(opt.max_in_flight[static_cast<std::size_t>(st.rank)]) +
                 ") and cannot start F" + stage_mb(f.stage, f.microbatch);
    }
    throw invalid_problem(gen +
                          ": the in-flight limits leave no rank able to progress: " + blocked +
                          ". The backwards those forwards wait on need forwards that the "
                          "limits hold back; raise max_in_flight on those ranks.");
  }
  GreedyPlan plan;
  plan.ranks = std::move(lplan.schedule.ranks);
  plan.makespan = lplan.makespan;
  // In flight as the limit counts it: until the I, or until the W with in_flight_until_w.
  plan.peak_in_flight.assign(static_cast<std::size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r) {
    int n = 0, peak = 0;
    for (const Action& a : plan.ranks[static_cast<std::size_t>(r)]) {
      if (a.kind == OpKind::F) peak = std::max(peak, ++n);
      if (a.kind == (opt.in_flight_until_w ? OpKind::W : OpKind::I)) --n;
    }
    plan.peak_in_flight[static_cast<std::size_t>(r)] = peak;
  }
  return plan;
}

//! Refuses a fused backward for a generator that defers weight gradients; `instead` names the
//! schedule to use with a fused backward.
inline void require_split_backward(WGradMode wgrad, const char* generator, const char* instead) {
  if (wgrad != WGradMode::Split)
    throw invalid_problem(std::string(generator) + " needs split backward (" +
                          field("wgrad", "split") + "); with fused backward use " + instead +
                          ".");
}

//! A compute-only Schedule of `p` (already resolved: stages set) planned by the list scheduler
//! with unit durations on `placement` under per-rank `max_in_flight` limits.
//! With `memory` (a cost model) and `budget`, forwards wait for pending weight gradients where
//! they would take a rank over its budget (GreedyOptions::memory_cost).
inline Schedule greedy_schedule(const char* generator, const Problem& p, Placement placement,
                                std::vector<int> max_in_flight, const CostRef* memory = nullptr,
                                const MemoryBudget* budget = nullptr,
                                std::vector<int> min_in_flight = {},
                                bool limit_new_microbatches = false) {
  GreedyOptions opt;
  opt.generator = generator;
  opt.placement = std::move(placement);
  opt.microbatches = p.microbatches;
  opt.max_in_flight = std::move(max_in_flight);
  opt.limit_new_microbatches = limit_new_microbatches;
  if (memory && budget && budget->limited()) {
    opt.memory_cost = memory;
    for (int r = 0; r < p.ranks; ++r)
      opt.memory_cap.push_back(budget->of(r));
    opt.min_in_flight = std::move(min_in_flight);
  }
  GreedyPlan plan = greedy_list_schedule(opt);
  return Schedule{generator, p, std::move(opt.placement), std::move(plan.ranks)};
}

}  // namespace pipesched::schedule::detail
