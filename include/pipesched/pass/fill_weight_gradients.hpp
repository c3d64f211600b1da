// Fine-grained weight gradients placed in bubbles (MEPipe, EuroSys '25: "weight-gradient GEMMs
// are split off and run whenever a device would wait on a neighbour"), planned statically with
// the cost model: each W of a split-backward schedule is cut into parts and the shared filler
// (pass/detail/filler.hpp) runs the parts in the waits, where memory forces them, or at the end.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/detail/filler.hpp"

namespace pipesched {
namespace detail {

//! `s` with each unit's weight gradient cut into W parts 0..parts−1, run back to back where
//! the unit's first W action stood (any parts `s` already had are merged first).
inline Schedule cut_weight_gradients_in_place(const Schedule& s, int parts) {
  const UnitIndex unit(s.problem);
  std::vector<char> placed(unit.size(), 0);
  Schedule out = s;
  for (auto& list : out.ranks) {
    std::vector<Action> next;
    next.reserve(list.size() + list.size() / 3 * static_cast<std::size_t>(parts));
    for (const Action& a : list) {
      if (a.kind != OpKind::W) {
        next.push_back(a);
        continue;
      }
      if (placed[unit(a)]) continue;
      placed[unit(a)] = 1;
      for (int j = 0; j < parts; ++j)
        next.push_back(Action::make(OpKind::W, a.stage, a.microbatch, a.slice, j));
    }
    list = std::move(next);
  }
  return out;
}

//! `s` (W's already cut) with every unit's W parts moved right after its I: the placement that
//! holds the least memory at every point of every rank.
inline Schedule weight_gradients_after_input(const Schedule& s) {
  const UnitIndex unit(s.problem);
  Schedule out = s;
  for (auto& list : out.ranks) {
    std::vector<std::vector<Action>> parts_of(unit.size());
    for (const Action& a : list)
      if (a.kind == OpKind::W) parts_of[unit(a)].push_back(a);
    std::vector<Action> next;
    next.reserve(list.size());
    for (const Action& a : list) {
      if (a.kind == OpKind::W) continue;
      next.push_back(a);
      if (a.kind == OpKind::I)
        for (const Action& w : parts_of[unit(a)])
          next.push_back(w);
    }
    list = std::move(next);
  }
  return out;
}

}  // namespace detail

//! Cuts every weight gradient of `split` (a compute-only schedule with split backward: I and W
//! for every unit) into `parts` actions W(s, m, k, 0..parts−1) and places them with the cost
//! model: a rank about to wait for a neighbour runs its oldest pending part when it fits the
//! wait; parts also run where the rank's memory `budget` (in the cost model's memory unit: a
//! deferred W holds the inputs of its weight GEMMs) would otherwise be exceeded, and the rest
//! at the end of the rank's list. Forwards, input gradients and recomputes keep their order.
//! The result validates, fits the budget on every rank and simulates no slower than `split`.
//! Throws invalid_problem when `parts` <= 0, when `split` has fused backwards (B or Overlap),
//! sends and receives, or a budget that no placement of the W's fits (the message gives the
//! least such budget); invalid_schedule when `split` itself is invalid.
template <cost_model Cost>
Schedule fill_weight_gradients(const Schedule& split, const Cost& cost, const MemoryBudget& budget,
                               int parts) {
  const std::string pass = "fill_weight_gradients";
  if (parts <= 0)
    throw invalid_argument(pass + ": " + field("parts", parts) +
                               " is out of range; cut each weight gradient into at least 1 part.",
                           "parts", std::to_string(parts));
  auto check_budget = [&](double b, const std::string& name) {
    if (std::isnan(b) || b <= 0)
      throw invalid_argument(pass + ": " + field(name, b) +
                                 " is out of range; a memory budget must be positive (infinity "
                                 "for no limit).",
                             name, detail::format_general(b));
  };
  check_budget(budget.all, "MemoryBudget.all");
  for (std::size_t r = 0; r < budget.per_rank.size(); ++r)
    check_budget(budget.per_rank[r], "MemoryBudget.per_rank[" + std::to_string(r) + "]");
  if (split.has_comm())
    throw invalid_problem(pass + ": schedule '" + split.name +
                          "' already has sends and receives; give the compute-only schedule "
                          "(lower communication after filling).");
  for (int r = 0; r < split.rank_count(); ++r)
    for (const Action& a : split.ranks[static_cast<std::size_t>(r)])
      if (a.kind == OpKind::B || a.kind == OpKind::Overlap)
        throw invalid_problem(pass + ": schedule '" + split.name + "' runs " + to_string(a) +
                              " on rank " + std::to_string(r) +
                              ", a fused backward with no weight gradient to move; generate it "
                              "with split backward (" +
                              enumerator("WGradMode", "Split", "split") +
                              ": I then W for every unit).");
  const ValidationReport rep = check(split);
  if (!rep.ok())
    throw invalid_schedule(pass + ": schedule '" + split.name + "' is not valid:\n" +
                           rep.summary());

  auto fits = [&](const SimulationResult& sim) {
    for (std::size_t r = 0; r < sim.ranks.size(); ++r) {
      const double limit = budget.of(static_cast<int>(r));
      if (sim.ranks[r].peak_memory > limit + 1e-9 * std::max(1.0, std::abs(limit))) return false;
    }
    return true;
  };
  Schedule best;
  double best_time = std::numeric_limits<double>::infinity();
  bool any = false;
  auto consider = [&](const Schedule& s, const SimulationResult& sim) {
    if (sim.deadlock || !fits(sim)) return;
    if (!any || sim.makespan < best_time - 1e-9 * std::max(1.0, best_time)) {
      best = s;
      best_time = sim.makespan;
      any = true;
    }
  };

  // The filler, from the input's order and timing, then again from each better result's
  // timing (its estimates of waits not yet planned come from the previous round).
  const Schedule in_place = detail::cut_weight_gradients_in_place(split, parts);
  const SimulationResult in_place_sim = simulate(in_place, cost);
  for (double min_fit : {1.0, 0.5, 0.0}) {
    const detail::FillOptions opt{.float_wgrad = true, .wgrad_parts = parts, .min_fit = min_fit};
    Schedule cur = in_place;
    SimulationResult cur_sim = in_place_sim;
    for (int round = 0; round < 3; ++round) {
      Schedule filled = detail::fill_bubbles(cur, cost, budget,
                                             detail::fixed_starts(cur, cur_sim, opt), opt, pass);
      SimulationResult sim = simulate(filled, cost);
      consider(filled, sim);
      if (sim.deadlock || !fits(sim) || sim.makespan >= cur_sim.makespan - 1e-12) break;
      cur = std::move(filled);
      cur_sim = std::move(sim);
    }
  }
  // The fallback: the input itself, W's cut in place, is one legal placement; it wins when every
  // filled schedule is slower (or over the budget). Then every W right after its I, the
  // placement that holds the least memory, for a budget the input itself exceeds.
  consider(in_place, in_place_sim);
  const Schedule eager = detail::weight_gradients_after_input(in_place);
  const SimulationResult eager_sim = simulate(eager, cost);
  consider(eager, eager_sim);
  if (!any) {
    const MemoryUnit mu = memory_unit_of(cost);
    for (std::size_t r = 0; r < eager_sim.ranks.size(); ++r) {
      const double held = eager_sim.ranks[r].peak_memory, limit = budget.of(static_cast<int>(r));
      if (held > limit + 1e-9 * std::max(1.0, std::abs(limit)))
        throw budget_error(pass + ": no placement of the weight gradients of '" + split.name +
                               "' fits the memory budget: rank " + std::to_string(r) + " holds " +
                               memory_amount(held, mu) +
                               " even with every weight gradient right after its input "
                               "gradient, over its budget " +
                               memory_amount(limit, mu, false) + "; give a budget of at least " +
                               memory_amount(held, mu) + ", or checkpoint activations first.",
                           static_cast<int>(r), held, limit, mu);
    }
    throw invalid_problem(pass + ": no placement of the weight gradients of '" + split.name +
                          "' fits the memory budget.");
  }
  best.name = split.name + "+fine-w";
  return best;
}

}  // namespace pipesched
