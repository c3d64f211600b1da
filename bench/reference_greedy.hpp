// The Zero Bubble list scheduler as it was before it became a rule on the public engine
// (schedule/list_schedule.hpp), kept unchanged so that bench/list_schedule.cpp can time the
// engine against it in one run and tests can check that both give the same lists.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

namespace pipesched::bench_reference {

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
};

//! The planned lists and what the plan measured.
struct GreedyPlan {
  std::vector<std::vector<Action>> ranks;  //!< per rank: F, I and W actions in start order
  double makespan = 0.0;                   //!< end of the last action under `durations`
  std::vector<int> peak_in_flight;         //!< per rank: most forwards in flight at once
};

namespace greedy_detail {

// Kinds the planner handles, as dense indices.
inline constexpr int kind_f = 0;
inline constexpr int kind_i = 1;
inline constexpr int kind_w = 2;

inline std::string stage_mb(int stage, int mb) {
  return "(stage " + std::to_string(stage) + ", microbatch " + std::to_string(mb) + ")";
}

}  // namespace greedy_detail

//! Plans F, I and W for every (stage, microbatch) of `opt.placement` (one slice). A free rank
//! starts, in this order of preference: (1) a ready I, lowest microbatch first — the backward
//! chain is the critical path; (2) a ready F that keeps the rank within `max_in_flight`; (3) the
//! oldest W whose I has run (before (2) once `max_pending_w` of them wait). With none of these it
//! waits for the next action to finish anywhere. Dependencies: F(s,m) after F(s−1,m); I(s,m) after
//! F(s,m) and I(s+1,m); W(s,m) after I(s,m); crossing ranks costs nothing. Throws invalid_problem
//! on bad options, or when the in-flight limits leave no rank able to progress (naming the ranks
//! and limits that block). Cost: O(actions · (ranks + log actions)).
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

  const std::size_t units = static_cast<std::size_t>(stages) * static_cast<std::size_t>(mbs);
  auto id = [&](int kind, int s, int m) {
    return static_cast<std::size_t>(kind) * units +
           static_cast<std::size_t>(s) * static_cast<std::size_t>(mbs) +
           static_cast<std::size_t>(m);
  };
  // Unfinished dependencies per action; an action becomes ready when this reaches 0.
  std::vector<std::uint8_t> waiting(3 * units, 0);
  for (int s = 0; s < stages; ++s)
    for (int m = 0; m < mbs; ++m) {
      waiting[id(kind_f, s, m)] = s > 0 ? 1 : 0;
      waiting[id(kind_i, s, m)] = s + 1 < stages ? 2 : 1;
      waiting[id(kind_w, s, m)] = 1;
    }

  // Ready sets per rank. Forwards and input gradients are keyed so that begin() is the
  // preferred one; weight gradients are kept in the order their I ran.
  using Key = std::pair<int, int>;  // (primary, secondary), smaller first
  const auto fwd_key = [&](int s, int m) {
    return opt.forward_order == StageOrder::LaterFirst ? Key{-s, m} : Key{s, m};
  };
  const auto bwd_key = [&](int s, int m) {
    return Key{m, opt.backward_order == StageOrder::LaterFirst ? -s : s};
  };
  const auto from_fwd_key = [&](Key k) {
    return opt.forward_order == StageOrder::LaterFirst ? Key{-k.first, k.second} : k;
  };
  const auto from_bwd_key = [&](Key k) {
    return Key{opt.backward_order == StageOrder::LaterFirst ? -k.second : k.second, k.first};
  };
  std::vector<std::set<Key>> ready_f(static_cast<std::size_t>(ranks));
  std::vector<std::set<Key>> ready_i(static_cast<std::size_t>(ranks));
  std::vector<std::deque<Key>> ready_w(static_cast<std::size_t>(ranks));
  auto make_ready = [&](int kind, int s, int m) {
    const auto r = static_cast<std::size_t>(pl.rank_of(s));
    if (kind == kind_f) ready_f[r].insert(fwd_key(s, m));
    if (kind == kind_i) ready_i[r].insert(bwd_key(s, m));
    if (kind == kind_w) ready_w[r].emplace_back(s, m);
  };
  for (int m = 0; m < mbs; ++m)
    make_ready(kind_f, 0, m);

  // Running actions, finishing first on top; ties resolve in start order.
  struct Running {
    double end;
    std::uint64_t seq;
    int kind, stage, mb;
    bool operator>(const Running& o) const { return end != o.end ? end > o.end : seq > o.seq; }
  };
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  auto finish = [&](const Running& a) {
    auto release = [&](int kind, int s, int m) {
      if (--waiting[id(kind, s, m)] == 0) make_ready(kind, s, m);
    };
    if (a.kind == kind_f) {
      if (a.stage + 1 < stages) release(kind_f, a.stage + 1, a.mb);
      release(kind_i, a.stage, a.mb);
    } else if (a.kind == kind_i) {
      if (a.stage > 0) release(kind_i, a.stage - 1, a.mb);
      release(kind_w, a.stage, a.mb);
    }
  };

  GreedyPlan plan;
  plan.ranks.assign(static_cast<std::size_t>(ranks), {});
  plan.peak_in_flight.assign(static_cast<std::size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r)
    plan.ranks[static_cast<std::size_t>(r)].reserve(3 * pl.stages_of(r).size() *
                                                    static_cast<std::size_t>(mbs));
  std::vector<double> free_at(static_cast<std::size_t>(ranks), 0.0);
  std::vector<int> in_flight(static_cast<std::size_t>(ranks), 0);
  std::size_t left = 3 * units;
  std::uint64_t seq = 0;
  double now = 0.0;

  auto start = [&](int r, int kind, int s, int m) {
    const auto ru = static_cast<std::size_t>(r);
    const OpKind op = kind == kind_f ? OpKind::F : kind == kind_i ? OpKind::I : OpKind::W;
    plan.ranks[ru].push_back(Action::make(op, s, m));
    if (kind == kind_f)
      plan.peak_in_flight[ru] = std::max(plan.peak_in_flight[ru], ++in_flight[ru]);
    if (kind == (opt.in_flight_until_w ? kind_w : kind_i)) --in_flight[ru];
    free_at[ru] = now + dur[kind];
    plan.makespan = std::max(plan.makespan, free_at[ru]);
    running.push(Running{free_at[ru], seq++, kind, s, m});
    --left;
  };

  while (left > 0) {
    // Every action that has finished by `now` releases its dependents before anyone picks,
    // so the ranks' choices at one instant do not depend on the order they are visited in.
    while (!running.empty() && running.top().end <= now) {
      finish(running.top());
      running.pop();
    }
    for (int r = 0; r < ranks; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      if (free_at[ru] > now) continue;
      const bool w_due =
          !ready_w[ru].empty() && static_cast<std::size_t>(opt.max_pending_w) <= ready_w[ru].size();
      if (!ready_i[ru].empty()) {
        const Key k = from_bwd_key(*ready_i[ru].begin());
        ready_i[ru].erase(ready_i[ru].begin());
        start(r, kind_i, k.first, k.second);
      } else if (!ready_f[ru].empty() && in_flight[ru] < opt.max_in_flight[ru] && !w_due) {
        const Key k = from_fwd_key(*ready_f[ru].begin());
        ready_f[ru].erase(ready_f[ru].begin());
        start(r, kind_f, k.first, k.second);
      } else if (!ready_w[ru].empty()) {
        // Also the tail: once a rank has no F or I left, its deferred W's run in I order.
        const Key k = ready_w[ru].front();
        ready_w[ru].pop_front();
        start(r, kind_w, k.first, k.second);
      }
    }
    if (left == 0) break;
    if (running.empty()) {
      // Nothing runs and nothing could start: only a forward held back by its rank's limit
      // can be ready (the dependency graph is acyclic), so the limits are too tight.
      std::string blocked;
      for (int r = 0; r < ranks; ++r) {
        const auto ru = static_cast<std::size_t>(r);
        if (ready_f[ru].empty()) continue;
        const Key k = from_fwd_key(*ready_f[ru].begin());
        blocked += (blocked.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                   " holds " + std::to_string(in_flight[ru]) +
                   " forwards whose input gradient has not run (max_in_flight = " +
                   std::to_string(opt.max_in_flight[ru]) + ") and cannot start F" +
                   stage_mb(k.first, k.second);
      }
      throw invalid_problem(gen + ": the in-flight limits leave no rank able to progress with " +
                            std::to_string(left) + " actions left: " + blocked +
                            ". The backwards those forwards wait on need forwards that the "
                            "limits hold back; raise max_in_flight on those ranks.");
    }
    now = running.top().end;
  }
  return plan;
}

}  // namespace pipesched::bench_reference
