// The tuner's enumeration: every configuration of the search (scenario, base, chunks,
// microbatch size, slices, fine W, fitted) in grid order, with the cost model of each
// (scenario, microbatch size), built before any thread starts. A configuration's position in
// the grid is its identity: ties between plans and the order of notes go by it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/core/detail/parallel_for.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/request.hpp"

namespace pipesched::detail {

//! True when `cost` splits its layers by LayerSplit::Balanced and that gives the same layers
//! per stage as LayerSplit::Even, for `stages` stages and for half as many (two replicas):
//! the cluster search, which runs both splits, then skips the balanced duplicate. Always
//! false for a cost model that is not both layered_cost and parallel_cost.
template <class Cost>
bool same_layers_as_even(const Cost& cost, int stages) {
  if constexpr (layered_cost<Cost> && parallel_cost<Cost>) {
    const Parallelism& par = cost.parallelism();
    if (par.split != LayerSplit::Balanced || !par.layers.empty()) return false;
    const Cost even = cost.evenly_layered();
    for (int S : {stages, stages / 2}) {
      if (S < 1 || S > cost.layer_count()) continue;
      const Problem p{.ranks = S, .stages = S};
      const Placement placement = Placement::linear(S);
      const CostContext ctx{p, placement, 1};
      for (int st = 0; st < S; ++st)
        if (cost.layers_of(ctx, st) != even.layers_of(ctx, st)) return false;
    }
    return true;
  } else {
    (void)cost;
    (void)stages;
    return false;
  }
}

//! One configuration of the search (scenario, base, chunks, microbatch size, slices, fine
//! W, fitted) and what phase one learned about it.
template <class Cost>
struct TuneConfig {
  std::size_t scenario = 0;
  std::size_t cost = 0;  //!< index of its (scenario, microbatch size) cost model
  const GeneratorInfo* generator = nullptr;
  int ranks = 1;
  int chunks = 1;
  int microbatch_size = 1;
  int microbatches = 1;
  int slices = 1;
  bool fine = false;
  bool fitted = false;           //!< base from the order's memory-bounded generator
  bool offloaded = false;        //!< activations offloaded where the budget asks (apply_offload)
  bool vocabulary = false;       //!< output layer split by vocabulary (vocabulary passes)
  std::string cluster;           //!< "pp 4 x dp 2 x tp 2, " in a cluster search, else empty
  bool layout_searched = false;  //!< its cost model's layers per stage from a layout search
  double work_bound = 0;         //!< average_work_bound
  double lower_bound = 0;
  bool refused = false;
  bool base_fits = false;
  bool full_fits = false;

  std::string label() const {
    std::string s = cluster + std::string(generator->name);
    if (generator->chunks_vary) s += " with " + std::to_string(chunks) + " chunks";
    s += ", microbatch size " + std::to_string(microbatch_size) + " (" +
         std::to_string(microbatches) + " microbatches)";
    if (slices > 1) s += ", " + std::to_string(slices) + " slices";
    if (fine) s += ", fine W";
    if (fitted) s += ", fitted to the budget";
    if (offloaded) s += ", offloaded";
    if (vocabulary) s += ", vocabulary parallel";
    if (layout_searched) s += ", layout searched";
    return s;
  }
};

//! The configurations of a search and their cost models. Each configuration is evaluated by
//! one thread at a time, which alone writes what phase one learns into it; the cost models
//! are read only.
template <class Cost>
struct TuneGrid {
  //! One per (scenario, microbatch size); empty where the factory refused that size.
  std::vector<std::optional<Cost>> costs;
  std::vector<Message> cost_refusal;      //!< the factory's message where it refused
  std::vector<TuneConfig<Cost>> configs;  //!< in grid order
  //! Slice lengths by (cost model, slices, ranks), as cut_slices finds them (TeraPipe's DP
  //! takes a fraction of a second, and many configurations share each cut); where the cut is
  //! refused, its message. Written before any thread starts, then read only.
  std::map<std::tuple<std::size_t, int, int>, std::pair<std::vector<int>, Message>> cuts;

  //! The cost model of `cfg`, cut into its slices (its output layer and input embedding split
  //! by vocabulary for a vocabulary-parallel configuration); throws invalid_problem with the
  //! factory's message where the factory refused its microbatch size, or the slicing's where it
  //! refused the cut.
  Cost cost_of(const TuneConfig<Cost>& cfg, SlicingMode slicing) const {
    if (!costs[cfg.cost]) throw invalid_problem(cost_refusal[cfg.cost]);
    Cost cost = *costs[cfg.cost];
    if constexpr (requires { cost.parallel.vocabulary = true; }) {
      if (cfg.vocabulary) cost.parallel.vocabulary = cost.parallel.input_vocabulary = true;
    } else if constexpr (requires { cost.input_vocabulary = true; }) {
      if (cfg.vocabulary) cost.input_vocabulary = true;
    }
    if constexpr (sliceable_cost<Cost>) {
      if (cfg.slices > 1) {
        const auto at = cuts.find({cfg.cost, cfg.slices, cfg.ranks});
        if (at == cuts.end()) {
          cost = with_slicing(std::move(cost), slicing, cfg.slices, cfg.ranks);
        } else {
          if (at->second.first.empty()) throw invalid_problem(at->second.second);
          cost.slice_lengths = at->second.first;
        }
      }
    } else {
      (void)slicing;
    }
    return cost;
  }
};

//! Cuts the slices of every (cost model, slices, ranks) of `grid` once, into grid.cuts, on
//! `threads` threads, calling `tick()` (serialised) after each cut; stops where `stop()` says
//! so (cost_of then cuts what is left itself).
template <class Cost, class Stop, class Tick>
void cut_slices(TuneGrid<Cost>& grid, SlicingMode slicing, int threads, Stop&& stop, Tick&& tick) {
  if constexpr (sliceable_cost<Cost>) {
    std::vector<std::tuple<std::size_t, int, int>> keys;
    for (const auto& cfg : grid.configs) {
      if (cfg.slices < 2 || !grid.costs[cfg.cost]) continue;
      const std::tuple<std::size_t, int, int> key{cfg.cost, cfg.slices, cfg.ranks};
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    std::vector<std::optional<std::pair<std::vector<int>, Message>>> cuts(keys.size());
    std::mutex ticking;
    parallel_for(
        keys.size(), threads,
        [&](std::size_t n) {
          const auto& [ci, slices, ranks] = keys[n];
          auto& cut = cuts[n].emplace();
          try {
            cut.first = slice_lengths(*grid.costs[ci], slicing, slices, ranks);
          } catch (const invalid_problem& e) {
            cut.first.clear();
            cut.second = e.message();
          }
          std::lock_guard<std::mutex> lock(ticking);
          tick();
        },
        stop);
    for (std::size_t n = 0; n < keys.size(); ++n)
      if (cuts[n]) grid.cuts.emplace(keys[n], std::move(*cuts[n]));
  } else {
    (void)grid;
    (void)slicing;
    (void)threads;
    (void)stop;
    (void)tick;
  }
}

//! Whether order `g` pipelines one model replica (Chimera pipelines two), as a small problem of
//! it shows; an order that refuses the small problem is taken as one replica (its own
//! configurations say why).
inline bool one_replica(const GeneratorInfo& g) {
  try {
    return g.generate(Problem{.ranks = 2, .microbatches = 4}, g.default_wgrad).problem.replicas <=
           1;
  } catch (const error&) {
    return true;
  }
}

//! Appends the configurations of base `g` in scenario `si` at microbatch size `b` (cost model
//! `ci`): chunks, then slices, then fine W, then fitted, then offloaded, then vocabulary
//! parallel, innermost last. Vocabulary parallelism is tried without offloading, on orders of
//! one model replica.
template <class Cost>
void add_configs(TuneGrid<Cost>& grid, const tuning::Request& request, const TuneScenario<Cost>& sc,
                 std::size_t si, std::size_t ci, int b, const GeneratorInfo* g,
                 const std::vector<int>& chunk_counts) {
  const std::vector<int> own{g->default_chunks}, whole{1};
  std::vector<bool> fines{false};
  if (request.fine_wgrad && g->split) fines.push_back(true);
  std::vector<bool> fitting{false};
  if (g->generate_within) fitting.push_back(true);
  const bool split_head = request.vocabulary && one_replica(*g);  // vocabulary parallel too
  std::vector<int> ks;
  for (int k : g->slices ? request.slices : whole)
    if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  for (int c : g->chunks_vary ? chunk_counts : own) {
    if (grid.costs[ci] && same_layers_as_even(*grid.costs[ci], sc.ranks * c)) continue;
    for (int k : ks)
      for (bool fine : fines)
        for (bool fitted : fitting)
          for (bool offloaded : {false, true})
            for (bool vocabulary : {false, true}) {
              if (offloaded && (!request.offload || k > 1)) continue;  // whole microbatches only
              if (vocabulary && (!split_head || offloaded)) continue;
              TuneConfig<Cost> cfg;
              cfg.scenario = si;
              cfg.cost = ci;
              cfg.generator = g;
              cfg.ranks = sc.ranks;
              cfg.chunks = c;
              cfg.microbatch_size = b;
              cfg.microbatches = sc.global_batch / b;
              cfg.slices = k;
              cfg.fine = fine;
              cfg.fitted = fitted;
              cfg.offloaded = offloaded;
              cfg.vocabulary = vocabulary;
              if (sc.cluster)
                cfg.cluster = "pp " + std::to_string(sc.ranks) + " x dp " +
                              std::to_string(sc.data) + " x tp " + std::to_string(sc.tensor) + ", ";
              grid.configs.push_back(std::move(cfg));
            }
  }
}

//! Every configuration of `scenarios` under `space`, scenarios outermost, then microbatch
//! sizes (those dividing the scenario's batch, without duplicates), then bases. Builds the cost
//! model of each (scenario, microbatch size) on the calling thread; a size the factory refuses
//! (invalid_problem) keeps its configurations, which evaluation refuses with its message.
template <class Cost>
TuneGrid<Cost> enumerate(const tuning::Request& request, const SearchSpace& space,
                         const std::vector<TuneScenario<Cost>>& scenarios) {
  TuneGrid<Cost> grid;
  for (std::size_t si = 0; si < scenarios.size(); ++si) {
    const TuneScenario<Cost>& sc = scenarios[si];
    std::vector<int> sizes;
    for (int b : request.microbatch_sizes)
      if (sc.global_batch % b == 0 && std::find(sizes.begin(), sizes.end(), b) == sizes.end())
        sizes.push_back(b);
    for (int b : sizes) {
      const std::size_t ci = grid.costs.size();
      grid.costs.emplace_back();
      grid.cost_refusal.emplace_back();
      try {
        grid.costs.back().emplace(sc.make_cost(b));
      } catch (const invalid_problem& e) {
        grid.cost_refusal.back() = e.message();
      }
      // The request's chunk counts, then (every_equal_chunks) those cutting the model into
      // equal stages over this scenario's ranks.
      std::vector<int> chunk_counts, extra;
      if constexpr (layered_cost<Cost>)
        if (request.every_equal_chunks && grid.costs.back())
          extra = equal_split_chunks(grid.costs.back()->layer_count(), sc.ranks);
      for (const std::vector<int>* list :
           {&request.chunks, static_cast<const std::vector<int>*>(&extra)})
        for (int c : *list)
          if (std::find(chunk_counts.begin(), chunk_counts.end(), c) == chunk_counts.end())
            chunk_counts.push_back(c);
      for (const GeneratorInfo* g : space.bases)
        add_configs(grid, request, sc, si, ci, b, g, chunk_counts);
    }
  }
  return grid;
}

}  // namespace pipesched::detail
