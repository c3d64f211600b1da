// The automatic layout: how many transformer layers each stage of a pipeline holds, chosen
// by the step of the plan built on it. The ends are priced as the cost model prices them (the
// first stage's embedding, the last stage's LM head and loss), and the plan is built as the
// caller builds it, so a memory budget shapes the choice as it shapes the plan.
//
// The search (search_layout):
//  1. A stage's work per microbatch (its forward and backward over every slice) is linear in
//     its layers, w_s(n) = c_s·n + e_s; c_s and e_s are read from the cost model itself (each
//     stage priced at two layer counts, both in whole-model splits the cost accepts).
//  2. Seeds: the even split, and greedy splits that give each next layer to the stage whose
//     ranks would be least busy after it: ties go to the lowest rank, the highest, or spread
//     over the pipeline (bit-reversed rank order), and within a rank to its earlier or its
//     later stage (a V's later chunk holds fewer microbatches in flight). Each seed is built
//     and simulated by the caller's `evaluate`.
//  3. From the best seed, single-layer moves from a stage of a busier rank to a stage of a
//     less busy one (or between a rank's own stages), first improvement taken, until none
//     improves or the evaluations run out.
// Deterministic: the same inputs give the same layout.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched {

//! A layered cost model whose layers per stage can be set: Parallelism::layers in its
//! `parallel` member (TransformerCost).
template <class C>
concept layout_cost = layered_cost<C> && std::copyable<C> && requires(C& c) {
  requires std::same_as<std::remove_cvref_t<decltype(c.parallel.layers)>, std::vector<int>>;
};

//! How far search_layout looks.
struct LayoutSearchOptions {
  //! Layouts built and simulated at most, the seeds included (each is one call of the
  //! caller's `evaluate`). 1 to 100,000.
  int max_evaluations = 2000;

  //! Throws invalid_argument naming the field when it is out of range.
  void check() const {
    if (max_evaluations < 1 || max_evaluations > 100000)
      throw invalid_argument(field("LayoutSearchOptions.max_evaluations", max_evaluations) +
                                 " is out of range; give 1 to 100,000 layouts to try.",
                             "LayoutSearchOptions.max_evaluations",
                             std::to_string(max_evaluations));
  }
};

//! What search_layout found.
struct LayoutSearchResult {
  std::vector<int> layers;  //!< layers of each model stage (Parallelism::layers)
  //! `evaluate(layers)`: the step of the plan built on them; infinity when no layout tried
  //! could be built (the budget is out of reach of every one).
  double step = std::numeric_limits<double>::infinity();
  std::vector<int> even;  //!< the even split, the first layout tried
  //! `evaluate(even)`; infinity when its plan could not be built.
  double even_step = std::numeric_limits<double>::infinity();
  int evaluations = 0;  //!< layouts built and simulated
};

namespace detail::layout_search {

// Work of each model stage per microbatch (forward and backward over every slice), under
// `cost` with its layers per stage set to `layers`.
template <class Cost>
std::vector<double> stage_work(Cost cost, const Problem& p, const Placement& placement,
                               const std::vector<int>& layers) {
  cost.parallel.layers = layers;
  const CostContext ctx{p, placement, 1};
  std::vector<double> w(layers.size(), 0.0);
  for (std::size_t ms = 0; ms < layers.size(); ++ms)
    for (int k = 0; k < p.slices; ++k)
      for (OpKind kind : {OpKind::F, OpKind::B})
        w[ms] += cost.duration(ctx, Action::make(kind, static_cast<int>(ms), 0, k));
  return w;
}

// `r` with its bits reversed within `bits` bits: 0, 8, 4, 12, ... over 16 ranks.
inline int reversed(int r, int bits) {
  int out = 0;
  for (int i = 0; i < bits; ++i)
    out |= ((r >> i) & 1) << (bits - 1 - i);
  return out;
}

}  // namespace detail::layout_search

//! The layers of each model stage that give the shortest `evaluate(layers)` among those the
//! search tries (see the file comment): `evaluate` builds the plan on a cost model with
//! Parallelism::layers = `layers` and returns its simulated step, or infinity where it cannot
//! be built (a budget out of reach; an invalid_problem it throws counts as that too).
//! `placement` is the plan's (which rank runs each stage); `p` its problem. A single-stage
//! pipeline has one layout. Throws invalid_problem when the model has fewer layers than the
//! pipeline has stages.
template <layout_cost Cost, class Evaluate>
LayoutSearchResult search_layout(const Cost& cost, const Problem& p, const Placement& placement,
                                 Evaluate&& evaluate, const LayoutSearchOptions& options = {}) {
  options.check();
  const int replicas = p.replicas > 1 ? p.replicas : 1;
  const int stages = placement.stages() > 0 ? placement.stages() : p.stages;
  const int S = stages / replicas;  // model stages
  const int L = cost.layer_count();
  if (S < 1) throw invalid_problem("search_layout: the problem has no stages.");
  if (L < S)
    throw invalid_problem("search_layout: the model's " + std::to_string(L) +
                          " layers are fewer than the pipeline's " + std::to_string(S) +
                          " stages; the search starts from one layer or more on each, so use "
                          "at most " +
                          std::to_string(L) + " stages (or give the layout).");
  const Cost even_cost = cost.evenly_layered();
  const CostContext ctx{p, placement, 1};
  std::vector<int> even(static_cast<std::size_t>(S));
  for (int ms = 0; ms < S; ++ms)
    even[static_cast<std::size_t>(ms)] = even_cost.layers_of(ctx, ms);

  LayoutSearchResult out;
  out.even = even;
  std::map<std::vector<int>, double> seen;  // each layout tried, and its step
  auto step_of = [&](const std::vector<int>& layers) -> std::pair<double, bool> {
    if (const auto at = seen.find(layers); at != seen.end()) return {at->second, false};
    if (out.evaluations >= options.max_evaluations)
      return {std::numeric_limits<double>::infinity(), false};
    double s = std::numeric_limits<double>::infinity();
    try {
      s = static_cast<double>(evaluate(layers));
    } catch (const invalid_problem&) {
      // the plan cannot be built on this layout (its budget is out of reach)
    }
    if (!(s == s)) s = std::numeric_limits<double>::infinity();
    ++out.evaluations;
    seen.emplace(layers, s);
    if (s < out.step) {
      out.step = s;
      out.layers = layers;
    }
    return {s, true};
  };
  out.even_step = step_of(even).first;
  out.layers = out.even_step < std::numeric_limits<double>::infinity() ? out.layers : even;
  if (S == 1) return out;

  // Ranks holding each model stage; the least a stage may hold (the ends may hold none).
  std::vector<std::vector<int>> ranks_of(static_cast<std::size_t>(S));
  for (int st = 0; st < stages; ++st)
    ranks_of[static_cast<std::size_t>(st % S)].push_back(placement.rank_of(st));
  std::vector<int> least(static_cast<std::size_t>(S), 1);
  least.front() = least.back() = 0;

  // 1. w_s(n) = c_s·n + e_s, from the even split and, per stage, the even split with one layer
  //    more on it (taken from the stage with the most layers besides it).
  const std::vector<double> w0 = detail::layout_search::stage_work(cost, p, placement, even);
  std::vector<double> c(static_cast<std::size_t>(S)), e(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    const auto us = static_cast<std::size_t>(s);
    int donor = -1;
    for (int d = 0; d < S; ++d)
      if (d != s && even[static_cast<std::size_t>(d)] > least[static_cast<std::size_t>(d)] &&
          (donor < 0 || even[static_cast<std::size_t>(d)] > even[static_cast<std::size_t>(donor)]))
        donor = d;
    if (donor < 0) {  // every other stage at its least: only this one can take layers
      c[us] = 0;
      e[us] = w0[us];
      continue;
    }
    std::vector<int> more = even;
    ++more[us];
    --more[static_cast<std::size_t>(donor)];
    const double w1 = detail::layout_search::stage_work(cost, p, placement, more)[us];
    c[us] = w1 - w0[us];
    e[us] = w0[us] - c[us] * even[us];
  }
  const int ranks = p.ranks;
  auto rank_work = [&](const std::vector<int>& layers) {
    std::vector<double> w(static_cast<std::size_t>(ranks), 0.0);
    for (int s = 0; s < S; ++s)
      for (int r : ranks_of[static_cast<std::size_t>(s)])
        w[static_cast<std::size_t>(r)] +=
            c[static_cast<std::size_t>(s)] * layers[static_cast<std::size_t>(s)] +
            e[static_cast<std::size_t>(s)];
    return w;
  };

  // 2. Greedy seeds.
  int bits = 0;
  while ((1 << bits) < ranks)
    ++bits;
  for (int tie = 0; tie < 3; ++tie) {
    for (int later = 0; later < 2; ++later) {
      std::vector<int> n = least;
      int left = L;
      for (int v : n)
        left -= v;
      std::vector<double> w = rank_work(n);
      auto rank_key = [&](int r) {
        return tie == 0 ? r : tie == 1 ? ranks - 1 - r : detail::layout_search::reversed(r, bits);
      };
      for (; left > 0; --left) {
        int pick = -1;
        std::tuple<double, int, int> best{};
        for (int s = 0; s < S; ++s) {
          double after = 0;
          int first_rank = ranks;
          for (int r : ranks_of[static_cast<std::size_t>(s)]) {
            after =
                std::max(after, w[static_cast<std::size_t>(r)] + c[static_cast<std::size_t>(s)]);
            first_rank = std::min(first_rank, rank_key(r));
          }
          // Busy times equal to a part in 10^9 are a tie.
          const double rounded = static_cast<double>(static_cast<long long>(after * 1e9 + 0.5));
          const std::tuple<double, int, int> key{rounded, first_rank, later ? -s : s};
          if (pick < 0 || key < best) {
            best = key;
            pick = s;
          }
        }
        ++n[static_cast<std::size_t>(pick)];
        for (int r : ranks_of[static_cast<std::size_t>(pick)])
          w[static_cast<std::size_t>(r)] += c[static_cast<std::size_t>(pick)];
      }
      step_of(n);
    }
  }
  if (out.step == std::numeric_limits<double>::infinity()) return out;

  // 3. Single-layer moves from the best, busier ranks' stages first.
  for (;;) {
    if (out.evaluations >= options.max_evaluations) break;
    const std::vector<int> at = out.layers;
    const double at_step = out.step;
    const std::vector<double> w = rank_work(at);
    auto heaviest = [&](int s) {
      double m = 0;
      for (int r : ranks_of[static_cast<std::size_t>(s)])
        m = std::max(m, w[static_cast<std::size_t>(r)]);
      return m;
    };
    std::vector<std::tuple<double, double, int, int>> moves;  // (-from's, to's, from, to)
    for (int a = 0; a < S; ++a) {
      if (at[static_cast<std::size_t>(a)] <= least[static_cast<std::size_t>(a)]) continue;
      for (int b = 0; b < S; ++b)
        if (b != a && heaviest(b) <= heaviest(a))
          moves.emplace_back(-heaviest(a), heaviest(b), a, b);
    }
    std::sort(moves.begin(), moves.end());
    bool improved = false;
    for (const auto& [fa, fb, a, b] : moves) {
      if (out.evaluations >= options.max_evaluations) break;
      std::vector<int> n = at;
      --n[static_cast<std::size_t>(a)];
      ++n[static_cast<std::size_t>(b)];
      step_of(n);
      if (out.step < at_step * (1 - 1e-9)) {
        improved = true;
        break;
      }
    }
    if (!improved) break;
  }
  return out;
}

//! search_layout over the plans of `order` for `p` as assemble_plan builds them (the same
//! `budget`, `recipe` and checkpoint `policy`), each simulated: the layers per stage whose
//! plan simulates fastest. The placement is the order's own for `p`. Throws what
//! search_layout throws; a layout whose plan cannot meet the budget is passed over.
template <layout_cost Cost>
LayoutSearchResult search_plan_layout(const GeneratorInfo& order, const Problem& p,
                                      const Cost& cost, const MemoryBudget& budget,
                                      const PlanRecipe& recipe, const CheckpointInfo& policy,
                                      const LayoutSearchOptions& options = {}) {
  const Schedule shape = order.generate(p, recipe.wgrad);
  auto evaluate = [&](const std::vector<int>& layers) {
    Cost c = cost;
    c.parallel.layers = layers;
    const AssembledPlan<Cost> plan = assemble_plan(order, shape.problem, c, budget, recipe, policy);
    const SimulationResult r = simulate(plan.schedule, plan.cost);
    return r.deadlock ? std::numeric_limits<double>::infinity() : r.makespan;
  };
  return search_layout(cost, shape.problem, shape.placement, evaluate, options);
}

}  // namespace pipesched
