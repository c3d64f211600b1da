// The tuner: searches pipeline configuration (schedule, chunks, microbatch size) and
// activation checkpointing together, with the simulator, under a per-rank memory budget.
//
// What is searched, for a pipeline of `ranks` ranks and a global batch of `global_batch`
// sequences:
//   base schedule      each name in TuneRequest::bases (a generator of schedule/registry.hpp)
//                      with its default backward (fused B, or I + W for Zero Bubble);
//   chunks per rank    TuneRequest::chunks for generators that take a chunk count
//                      (interleaved-1f1b, looped-bfs), the generator's own count otherwise;
//   microbatch size    each of TuneRequest::microbatch_sizes that divides global_batch;
//                      microbatches = global_batch / microbatch size;
//   memory fitting     for orders with a memory knob (GeneratorInfo::generate_within: the
//                      Zero Bubble orders, slice-pipe), the order's own schedule and the one
//                      fitted to the budget (TunePlan::fitted);
//   checkpointing      each of TuneRequest::checkpoints (none, selective, mario by default),
//                      and full checkpointing as a fallback when nothing else fits.
// A configuration a generator or the cost model refuses (too few microbatches for DualPipeV,
// more stages than layers, weights alone over the device memory) is
// skipped, as is every plan whose simulated peak exceeds the budget on some rank.
//
// A cluster search (tune_cluster) runs the same search over every pipeline x data x tensor
// factorization of its GPUs and each layer split: each is a scenario (a pipeline size, its
// share of the global batch, a cost factory), and the configurations of every scenario are
// searched together, with one set of baselines.
//
// The search runs on TuneRequest::threads threads (default: one per core). Plans compete for
// the slot of their (base, checkpoint mode) pair (TuneResult::baselines); the overall bests are
// the bests of those. Pruning, all of it safe (it never drops a plan that would have been
// kept for its pair):
//   - configurations are taken in increasing order of a bound that needs no schedule: the
//     compute of every microbatch through the whole model, shared over the ranks
//     (average_work_bound); one whose bound cannot beat the best plan of any of its pairs is
//     not built;
//   - a configuration whose schedule fits without checkpointing gets that schedule as its
//     selective and Mario plan too (both passes would return it unchanged);
//   - selective and Mario are not run where even full checkpointing does not fit (they
//     cannot hold less than full checkpointing of the same order);
//   - selective and Mario are run in increasing order of a lower bound on their step time,
//     max over ranks of (earliest a rank can start + its compute time + its step tail), and
//     not run where that bound cannot beat the best plan of their pair already found:
//     recomputes only add compute time.
// Ties go to the earlier configuration of the grid, so the result does not depend on the
// threads. TuneRequest::time_limit stops the search with what it has (TuneResult::cut).
// Cost: a cluster search of Llama 2 13B over 64 A100 40GB (pipeline x data parallelism, 1F1B,
// interleaved and Chimera, Mario included) takes 1.6 s on one core, 0.9 s on two
// (bench/tune_threads); MEPipe's scenarios (bench/mepipe_cluster) up to half a minute.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/detail/parallel_for.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/schedule/registry.hpp"
#include "pipesched/tune/cost_factory.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

namespace detail {

inline bool fits_budget(const std::vector<double>& peaks, const MemoryBudget& budget) {
  for (std::size_t r = 0; r < peaks.size(); ++r) {
    const double limit = budget.of(static_cast<int>(r));
    if (peaks[r] > limit + 1e-9 * std::max(1.0, std::abs(limit))) return false;
  }
  return true;
}

inline std::vector<double> peaks_of(const SimulationResult& sim) {
  std::vector<double> peaks;
  peaks.reserve(sim.ranks.size());
  for (const RankSummary& r : sim.ranks)
    peaks.push_back(r.peak_memory);
  return peaks;
}

inline int count_recomputes(const Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind == OpKind::R;
  return n;
}

//! True when `a` is the better plan: shorter step, then fewer recomputes, then the simpler
//! mode (None, Full, Selective, Mario in enum order), then the earlier configuration.
inline bool better_plan(const TunePlan& a, const TunePlan& b) {
  const double tol = 1e-12 * std::max(1.0, std::abs(b.makespan));
  if (a.makespan < b.makespan - tol) return true;
  if (a.makespan > b.makespan + tol) return false;
  if (a.recomputes != b.recomputes) return a.recomputes < b.recomputes;
  if (a.checkpoint != b.checkpoint)
    return static_cast<int>(a.checkpoint) < static_cast<int>(b.checkpoint);
  return a.order < b.order;
}

inline void keep_better(std::optional<TunePlan>& slot, const TunePlan& p) {
  if (!slot || better_plan(p, *slot)) slot = p;
}

//! A lower bound on the step time of any schedule over the same units, placement and cost as
//! `s` (with or without recomputes): a rank cannot start before the forwards of the stages
//! ahead of its first stage have run and reached it, and then has its own compute to do (and
//! its step_tail, where the cost model has one).
template <class Cost>
double makespan_lower_bound(const Schedule& s, const Cost& cost, const SimulationResult& sim) {
  const Problem& p = s.problem;
  const CostContext ctx{p, s.placement, 1};
  // ahead[st] = least time, over microbatches, before a forward of stage st can start.
  std::vector<double> ahead(static_cast<std::size_t>(p.stages),
                            std::numeric_limits<double>::infinity());
  for (int mb = 0; mb < p.microbatches; ++mb) {
    double t = 0;
    for (int st = 0; st < p.stages; ++st) {
      if (!p.has_unit(st, mb)) continue;  // another replica's stage
      ahead[static_cast<std::size_t>(st)] = std::min(ahead[static_cast<std::size_t>(st)], t);
      const Action f = Action::make(OpKind::F, st, mb);
      t += static_cast<double>(cost.duration(ctx, f));
      if (st + 1 < p.stages && s.placement.rank_of(st) != s.placement.rank_of(st + 1))
        t += static_cast<double>(cost.transfer_time(ctx, f));
    }
  }
  double bound = 0;
  for (int r = 0; r < s.rank_count(); ++r) {
    const auto& stages = s.placement.stages_of(r);
    if (stages.empty()) continue;
    double first = std::numeric_limits<double>::infinity();  // its earliest stage's start
    for (int st : stages)
      first = std::min(first, ahead[static_cast<std::size_t>(st)]);
    double tail = 0;
    if constexpr (has_step_tail<Cost>) tail = static_cast<double>(cost.step_tail(ctx, r));
    bound = std::max(bound, first + sim.ranks[static_cast<std::size_t>(r)].busy + tail);
  }
  return bound;
}

//! A lower bound on the step time of every schedule of `microbatches` microbatches in
//! `slices` slices over `ranks` ranks under `cost`, whatever its order, placement or
//! checkpointing: the ranks share the compute of every microbatch through the whole model
//! (F + B of each slice on one stage holding every layer; the durations are sums over
//! layers, so any split adds up to the same). Cheap: it needs no schedule.
template <class Cost>
double average_work_bound(const Cost& cost, int ranks, int microbatches, int slices) {
  Cost one = cost;
  if constexpr (std::is_base_of_v<TransformerCost, Cost>) one.parallel.layers.clear();
  const Problem p{.ranks = 1, .stages = 1, .microbatches = 1, .slices = slices};
  const Placement placement = Placement::linear(1);
  const CostContext ctx{p, placement, 1};
  double work = 0;
  for (int k = 0; k < slices; ++k)
    work += static_cast<double>(one.duration(ctx, Action::make(OpKind::F, 0, 0, k))) +
            static_cast<double>(one.duration(ctx, Action::make(OpKind::B, 0, 0, k)));
  return work * microbatches / ranks;
}

//! True when `cost` splits its layers by LayerSplit::Balanced and that gives the same layers
//! per stage as LayerSplit::Even, for `stages` stages and for half as many (two replicas):
//! the cluster search, which runs both splits, then skips the balanced duplicate.
template <class Cost>
bool same_layers_as_even(const Cost& cost, int stages) {
  if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
    if (cost.parallel.split != LayerSplit::Balanced || !cost.parallel.layers.empty()) return false;
    TransformerCost even = cost;
    even.parallel.split = LayerSplit::Even;
    for (int S : {stages, stages / 2}) {
      if (S < 1 || S > cost.model.layers) continue;
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

//! One pipeline the search runs: its size, its share of the global batch, and how to get
//! the cost model of a microbatch size. A fixed-pipeline search has one; a cluster search
//! one per (pipeline, data, tensor) factorization and layer split.
template <class Cost>
struct TuneScenario {
  int ranks = 1;
  int global_batch = 1;  //!< this pipeline's sequences per step
  std::function<Cost(int)> make_cost;
  // What the plans of this scenario report about the cluster.
  int data = 1, tensor = 1, zero = 0;
  bool sequence_parallel = false;
  std::optional<MemoryBudget> budget{};  //!< as TuneRequest::budget
  bool cluster = false;                  //!< part of a cluster search: labels name the degrees
};

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
  bool fitted = false;    //!< base from the order's memory-bounded generator
  std::string cluster;    //!< "pp 4 x dp 2 x tp 2, " in a cluster search, else empty
  double work_bound = 0;  //!< average_work_bound
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
    return s;
  }
};

//! The search engine behind every `tune`: the configurations of `request` over each
//! scenario, phase one (base, none, full) and then selective and Mario, in parallel.
template <class Cost>
TuneResult run_tune(const TuneRequest& request, const std::vector<TuneScenario<Cost>>& scenarios,
                    const ProgressFn& progress) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const bool limited = request.time_limit > 0;
  const auto deadline =
      started + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(limited ? request.time_limit : 0.0));
  const int threads = thread_count(request.threads);

  // The modes searched; full checkpointing on its own footing when named, else as fallback.
  auto named = [&](CheckpointMode m) {
    return std::find(request.checkpoints.begin(), request.checkpoints.end(), m) !=
           request.checkpoints.end();
  };
  const bool want_none = named(CheckpointMode::None);
  const bool want_full = named(CheckpointMode::Full);
  const bool want_selective = named(CheckpointMode::Selective);
  const bool want_mario = named(CheckpointMode::Mario);
  const bool want_full_early = named(CheckpointMode::FullEarly);
  const bool want_selective_early = named(CheckpointMode::SelectiveEarly);
  const bool fallback_full = !want_full && request.full_fallback;
  const int modes = want_none + want_full + want_selective + want_mario + fallback_full +
                    want_full_early + want_selective_early;

  TuneResult result;
  result.threads = threads;
  // The pairs: bases (without duplicates) × modes named; full as fallback is kept aside.
  std::vector<const GeneratorInfo*> bases;
  for (const std::string& name : request.bases) {
    const GeneratorInfo& g = find_generator(name);
    if (std::find(bases.begin(), bases.end(), &g) == bases.end()) bases.push_back(&g);
  }
  std::vector<CheckpointMode> pair_modes;
  for (CheckpointMode m : request.checkpoints)
    if (std::find(pair_modes.begin(), pair_modes.end(), m) == pair_modes.end())
      pair_modes.push_back(m);
  for (const GeneratorInfo* g : bases)
    for (CheckpointMode m : pair_modes)
      result.baselines.push_back(TuneBaseline{std::string(g->name), m, std::nullopt});
  std::vector<std::optional<TunePlan>> best_full(bases.size());  // fallback full, per base
  auto base_index = [&](const GeneratorInfo* g) {
    return static_cast<std::size_t>(std::find(bases.begin(), bases.end(), g) - bases.begin());
  };
  auto mode_index = [&](CheckpointMode m) {
    return static_cast<std::size_t>(std::find(pair_modes.begin(), pair_modes.end(), m) -
                                    pair_modes.begin());
  };
  // The slot a plan of (base, mode) competes for.
  auto slot_of = [&](const GeneratorInfo* g, CheckpointMode m) -> std::optional<TunePlan>& {
    if (m == CheckpointMode::Full && fallback_full) return best_full[base_index(g)];
    return result.baselines[base_index(g) * pair_modes.size() + mode_index(m)].plan;
  };

  // Cost models, one per (scenario, microbatch size), built before the threads start.
  std::vector<std::optional<Cost>> costs;
  std::vector<std::string> cost_refusal;
  std::vector<detail::TuneConfig<Cost>> configs;
  for (std::size_t si = 0; si < scenarios.size(); ++si) {
    const TuneScenario<Cost>& sc = scenarios[si];
    std::vector<int> sizes, chunk_counts;
    for (int b : request.microbatch_sizes)
      if (sc.global_batch % b == 0 && std::find(sizes.begin(), sizes.end(), b) == sizes.end())
        sizes.push_back(b);
    for (int c : request.chunks)
      if (std::find(chunk_counts.begin(), chunk_counts.end(), c) == chunk_counts.end())
        chunk_counts.push_back(c);
    for (int b : sizes) {
      const std::size_t ci = costs.size();
      costs.emplace_back();
      cost_refusal.emplace_back();
      try {
        costs.back().emplace(sc.make_cost(b));
      } catch (const invalid_problem& e) {
        cost_refusal.back() = e.what();
      }
      for (const GeneratorInfo* g : bases) {
        const std::vector<int> own{g->default_chunks}, whole{1};
        std::vector<bool> fines{false};
        if (request.fine_wgrad && g->split) fines.push_back(true);
        std::vector<bool> fitting{false};
        if (g->generate_within) fitting.push_back(true);
        std::vector<int> ks;
        for (int k : g->slices ? request.slices : whole)
          if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
        for (int c : g->chunks_vary ? chunk_counts : own) {
          if (costs.back() && same_layers_as_even(*costs.back(), sc.ranks * c)) continue;
          for (int k : ks)
            for (bool fine : fines)
              for (bool fitted : fitting) {
                detail::TuneConfig<Cost> cfg;
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
                if (sc.cluster)
                  cfg.cluster = "pp " + std::to_string(sc.ranks) + " x dp " +
                                std::to_string(sc.data) + " x tp " + std::to_string(sc.tensor) +
                                ", ";
                configs.push_back(std::move(cfg));
              }
        }
      }
    }
  }

  std::mutex mutex;  // guards result, the slots and the progress calls
  const int total = static_cast<int>(configs.size()) * modes;
  result.candidates_total = total;
  auto settle_locked = [&](int n, int* counter) {
    for (int i = 0; i < n; ++i) {
      ++result.candidates_tried;
      if (counter) ++*counter;
      if (progress) progress(result.candidates_tried, total, result.best ? &*result.best : nullptr);
    }
  };
  auto settle = [&](int n, int* counter) {
    std::lock_guard<std::mutex> lock(mutex);
    settle_locked(n, counter);
  };
  // Repeats are counted, not stored: a grid can refuse thousands of configurations for a
  // handful of reasons.
  auto note_locked = [&](const std::string& configuration, const std::string& reason,
                         std::size_t index) {
    auto same = std::find_if(result.notes.begin(), result.notes.end(),
                             [&](const TuneNote& n) { return n.reason == reason; });
    if (same == result.notes.end()) {
      result.notes.push_back(TuneNote{configuration, reason, 1, index});
      return;
    }
    ++same->count;
    if (index < same->first) {
      same->configuration = configuration;
      same->first = index;
    }
  };
  auto refuse = [&](const detail::TuneConfig<Cost>& cfg, const std::string& configuration,
                    const std::string& reason, int n) {
    std::lock_guard<std::mutex> lock(mutex);
    note_locked(configuration, reason, static_cast<std::size_t>(&cfg - configs.data()));
    settle_locked(n, &result.candidates_refused);
  };
  // Mario where the base's order says it applies (GeneratorInfo::mario); elsewhere the
  // candidate is counted as refused, with one note per base.
  std::string mario_orders;  // the generators Mario runs on, for the note
  for (const GeneratorInfo& g : generators())
    if (g.mario) mario_orders += (mario_orders.empty() ? "" : ", ") + std::string(g.name);
  auto mario_applies = [&](const detail::TuneConfig<Cost>& cfg) {
    if (cfg.generator->mario) return true;
    refuse(cfg, cfg.cluster + std::string(cfg.generator->name),
           "checkpoint mario does not apply to " + std::string(cfg.generator->name) +
               " (it plans on a one-forward-one-backward rhythm: " + mario_orders + ")",
           1);
    return false;
  };
  // The step time a candidate must beat to be kept for its pair; infinity while none.
  auto rival_of = [&](const detail::TuneConfig<Cost>& cfg, CheckpointMode m) {
    std::lock_guard<std::mutex> lock(mutex);
    const std::optional<TunePlan>& slot = slot_of(cfg.generator, m);
    return slot ? slot->makespan : std::numeric_limits<double>::infinity();
  };
  auto cannot_beat = [](double bound, double rival) {
    return bound >= rival - 1e-12 * std::max(1.0, std::abs(rival));
  };
  auto keep = [&](TunePlan&& p, const detail::TuneConfig<Cost>& cfg) {
    std::lock_guard<std::mutex> lock(mutex);
    detail::keep_better(slot_of(cfg.generator, p.checkpoint), p);
    if (!(p.checkpoint == CheckpointMode::Full && fallback_full)) {
      detail::keep_better(result.best, p);
      if (p.checkpoint == CheckpointMode::None)
        detail::keep_better(result.best_without_checkpoint, p);
      if (is_selective(p.checkpoint) || is_full(p.checkpoint))
        detail::keep_better(result.best_conventional, p);
      if (p.checkpoint == CheckpointMode::Mario) detail::keep_better(result.best_mario, p);
    }
    settle_locked(1, nullptr);
  };
  auto out_of_time = [&] { return limited && Clock::now() >= deadline; };

  // The base schedule of a configuration, its cost model (sliced) and budget; throws
  // invalid_problem / invalid_schedule when refused. Built again where phase two needs it:
  // keeping every configuration's schedule would hold the whole grid in memory.
  struct same_as_own {};  // a fitted configuration without a budget: nothing to fit
  struct Built {
    Cost cost;
    MemoryBudget budget;
    Schedule base;
  };
  auto build = [&](const detail::TuneConfig<Cost>& cfg) -> Built {
    if (!costs[cfg.cost]) throw invalid_problem(cost_refusal[cfg.cost]);
    Cost cost = *costs[cfg.cost];
    if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
      if (cfg.slices > 1)
        static_cast<TransformerCost&>(cost) =
            with_slicing(cost, request.slicing, cfg.slices, cfg.ranks);
    }
    const Problem problem{.ranks = cfg.ranks,
                          .stages = cfg.ranks * cfg.chunks,
                          .microbatches = cfg.microbatches,
                          .slices = cfg.slices};
    const WGradMode wgrad = cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad;
    // A model too shallow for the stages is refused before the schedule is built (it could
    // be far larger than any the model can run): every rank holds a stage of at least one
    // layer, and a looped order ranks x chunks of them.
    if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
      const int stages = cfg.generator->chunks_vary ? cfg.ranks * cfg.chunks : cfg.ranks;
      if (stages > cost.model.layers) {
        const Problem shape{.ranks = stages, .stages = stages, .microbatches = 1};
        const Placement none;
        cost.check(CostContext{shape, none, 1});  // throws the model's own message
      }
    }
    Schedule base = cfg.generator->generate(problem, wgrad);
    const TuneScenario<Cost>& sc = scenarios[cfg.scenario];
    MemoryBudget budget =
        sc.budget ? *sc.budget : default_memory_budget(cost, base.problem, base.placement);
    // An order with a memory knob (Zero Bubble's capped W deferral, slice-pipe's warm-up)
    // is searched twice: as it is, and fitted to the budget before checkpointing (what it
    // cannot fit, checkpointing brings down below). Neither dominates: a fitted base may
    // need no recompute, the order's own may leave Mario more bubble to hide recomputes in.
    if (cfg.fitted) {
      if (!budget.limited()) throw same_as_own{};
      base = cfg.generator->generate_within(problem, wgrad, cost, budget);
    }
    if (cfg.fine) {
      int parts = request.wgrad_parts;
      if (parts == 0) {  // one part per weight GEMM of the stage with the most
        if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
          cost.wgrad_split = WGradSplit::PerGemm;
          const CostContext ctx{base.problem, base.placement, 1};
          for (int st = 0; st < base.problem.stages; ++st)
            parts = std::max(parts, cost.weight_gemms(ctx, st));
        } else {
          throw invalid_problem(
              "TuneRequest.wgrad_parts = 0 cuts each W per weight GEMM, which only "
              "TransformerCost knows; give a number of parts");
        }
      }
      try {
        base = fill_weight_gradients(base, cost, budget, parts);
      } catch (const invalid_problem&) {
        // The base is over the budget whatever the W placement: place W's for speed and
        // let checkpointing bring the memory down.
        base = fill_weight_gradients(base, cost, MemoryBudget{}, parts);
      }
    }
    return Built{std::move(cost), std::move(budget), std::move(base)};
  };
  auto make_plan = [&](const detail::TuneConfig<Cost>& cfg, std::size_t index, CheckpointMode mode,
                       const Built& b, const Schedule& s, const SimulationResult& sim) {
    const TuneScenario<Cost>& sc = scenarios[cfg.scenario];
    TunePlan p;
    p.base = std::string(cfg.generator->name);
    p.chunks = cfg.chunks;
    p.microbatch_size = cfg.microbatch_size;
    p.microbatches = cfg.microbatches;
    p.checkpoint = mode;
    p.schedule = s;
    p.makespan = sim.makespan;
    p.data = sc.data;
    p.tensor = sc.tensor;
    p.zero = sc.zero;
    p.sequence_parallel = sc.sequence_parallel;
    p.gpus = cfg.ranks * sc.data * sc.tensor;
    p.global_batch = sc.global_batch * sc.data;
    p.throughput = sim.makespan > 0 ? p.global_batch / sim.makespan : 0.0;
    p.bubble_ratio = sim.bubble_ratio;
    p.peak_per_rank = detail::peaks_of(sim);
    for (int r = 0; r < cfg.ranks; ++r)
      p.budget_per_rank.push_back(b.budget.of(r));
    p.recomputes = detail::count_recomputes(s);
    p.slices = cfg.slices;
    p.fine_wgrad = cfg.fine;
    p.fitted = cfg.fitted;
    p.wgrad = cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad;
    p.warmup = warmup_of(s, 0);
    p.order = index;
    for (double peak : p.peak_per_rank)
      p.peak_memory = std::max(p.peak_memory, peak);
    if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
      const CostContext ctx{s.problem, s.placement, 1};
      p.peak_memory = 0;
      for (int r = 0; r < cfg.ranks; ++r)
        p.peak_memory = std::max(p.peak_memory, b.cost.static_bytes(ctx, r) +
                                                    p.peak_per_rank[static_cast<std::size_t>(r)]);
      const int S = TransformerCost::model_stage_count(ctx);
      for (int st = 0; st < S; ++st)
        p.layers_per_stage.push_back(b.cost.layers_of(ctx, st));
      if (sim.makespan > 0)
        p.mfu = p.global_batch * b.cost.model.training_flops_per_sequence() /
                (p.gpus * b.cost.device.peak_flops * sim.makespan);
    }
    return p;
  };
  // The modes a configuration takes part in.
  std::vector<CheckpointMode> config_modes = pair_modes;
  if (fallback_full) config_modes.push_back(CheckpointMode::Full);

  // Work bounds first (cheap, no schedule), then phase one in increasing bound order, so
  // that the best plans come early and prune the rest.
  for (auto& cfg : configs)
    if (costs[cfg.cost]) {
      try {
        Cost cost = *costs[cfg.cost];
        if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
          if (cfg.slices > 1)
            static_cast<TransformerCost&>(cost) =
                with_slicing(cost, request.slicing, cfg.slices, cfg.ranks);
        }
        cfg.work_bound = average_work_bound(cost, cfg.ranks, cfg.microbatches, cfg.slices);
      } catch (const std::exception&) {
        cfg.work_bound = 0;  // the build below says why
      }
    }
  std::vector<std::size_t> by_bound(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i)
    by_bound[i] = i;
  std::stable_sort(by_bound.begin(), by_bound.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].work_bound < configs[b].work_bound;
  });

  // Phase one, every configuration: base schedule, budget, base and full checkpointing
  // simulated (both cheap); plans without recompute and with full recompute.
  std::atomic<bool> cut{false};
  auto stop = [&] {
    if (out_of_time()) cut = true;
    return cut.load();
  };
  detail::parallel_for(
      by_bound.size(), threads,
      [&](std::size_t n) {
        const std::size_t index = by_bound[n];
        auto& cfg = configs[index];
        // Safe: the work bound holds for every plan of this configuration, whatever mode.
        bool all_beaten = true;
        for (CheckpointMode m : config_modes)
          all_beaten = all_beaten && cannot_beat(cfg.work_bound, rival_of(cfg, m));
        if (all_beaten) {
          cfg.refused = true;  // nothing left to do for it
          settle(modes, &result.candidates_pruned);
          return;
        }
        std::optional<Built> b;
        SimulationResult sim;
        try {
          b.emplace(build(cfg));
          sim = simulate(b->base, b->cost);
          if (sim.deadlock)
            throw invalid_problem("the base schedule deadlocks: " + sim.deadlock_report);
        } catch (const same_as_own&) {
          cfg.refused = true;
          settle(modes, &result.candidates_pruned);
          return;
        } catch (const invalid_problem& e) {
          cfg.refused = true;
          refuse(cfg, cfg.label(), e.what(), modes);
          return;
        } catch (const invalid_schedule& e) {
          cfg.refused = true;
          refuse(cfg, cfg.label(), e.what(), modes);
          return;
        }
        const Cost& cost = b->cost;
        cfg.base_fits = detail::fits_budget(detail::peaks_of(sim), b->budget);
        cfg.lower_bound =
            std::max(cfg.work_bound, detail::makespan_lower_bound(b->base, cost, sim));
        if (want_none) {
          if (cfg.base_fits)
            keep(make_plan(cfg, index, CheckpointMode::None, *b, b->base, sim), cfg);
          else
            settle(1, &result.candidates_over_budget);
        }
        // Full checkpointing holds the least any checkpointing of this order can: where it does
        // not fit, neither does selective nor Mario.
        const bool need_full = want_full || fallback_full || !cfg.base_fits;
        if (need_full) {
          const Schedule full = checkpoint_full(b->base);
          const SimulationResult full_sim = simulate(full, cost);
          cfg.full_fits =
              !full_sim.deadlock && detail::fits_budget(detail::peaks_of(full_sim), b->budget);
          if (want_full || fallback_full) {
            if (cfg.full_fits)
              keep(make_plan(cfg, index, CheckpointMode::Full, *b, full, full_sim), cfg);
            else
              settle(1, &result.candidates_over_budget);
          }
        }
        // The early recompute holds what the late one holds (the same list, the same units).
        if (want_full_early) {
          if (cfg.full_fits) {
            const Schedule early = checkpoint_full(b->base, RecomputeTiming::Early);
            keep(make_plan(cfg, index, CheckpointMode::FullEarly, *b, early, simulate(early, cost)),
                 cfg);
          } else {
            settle(1, &result.candidates_over_budget);
          }
        }
        // Both passes return the base unchanged when it fits.
        if (cfg.base_fits) {
          for (CheckpointMode m :
               {CheckpointMode::Selective, CheckpointMode::SelectiveEarly, CheckpointMode::Mario}) {
            if (!named(m)) continue;
            if (m == CheckpointMode::Mario && !mario_applies(cfg)) continue;
            TunePlan p = make_plan(cfg, index, m, *b, b->base, sim);
            p.schedule.name += std::string("+") + to_string(m);
            keep(std::move(p), cfg);
          }
        } else if (!cfg.full_fits) {
          settle(want_selective + want_selective_early + want_mario,
                 &result.candidates_over_budget);
        }
      },
      stop);

  // Phase two: selective and Mario on the configurations that need them, most promising
  // (lowest bound) first so that the bound prunes the rest.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!configs[i].refused && !configs[i].base_fits && configs[i].full_fits) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].lower_bound < configs[b].lower_bound;
  });
  // One pool for all three passes (Mario's candidates take far longer than selective's, so
  // separate pools would leave threads idle at each pass's end); each configuration's passes
  // in turn, in bound order, which keeps each pair's candidates in bound order for pruning.
  std::vector<std::pair<std::size_t, CheckpointMode>> tasks;
  for (std::size_t i : order)
    for (CheckpointMode m :
         {CheckpointMode::Mario, CheckpointMode::Selective, CheckpointMode::SelectiveEarly})
      if (named(m)) tasks.emplace_back(i, m);
  detail::parallel_for(
      tasks.size(), threads,
      [&](std::size_t n) {
        const auto [index, mode] = tasks[n];
        const auto& cfg = configs[index];
        if (mode == CheckpointMode::Mario && !mario_applies(cfg)) return;
        if (cannot_beat(cfg.lower_bound, rival_of(cfg, mode))) {
          settle(1, &result.candidates_pruned);
          return;
        }
        try {
          const Built b = build(cfg);
          const Schedule s =
              is_selective(mode)
                  ? checkpoint_selective(b.base, b.cost, b.budget, nullptr, timing_of(mode))
                  : checkpoint_mario(b.base, b.cost, b.budget, request.mario);
          const SimulationResult sim = simulate(s, b.cost);
          if (sim.deadlock || !detail::fits_budget(detail::peaks_of(sim), b.budget)) {
            settle(1, &result.candidates_over_budget);
            return;
          }
          keep(make_plan(cfg, index, mode, b, s, sim), cfg);
        } catch (const invalid_problem&) {
          // The pass found nothing within the budget.
          settle(1, &result.candidates_over_budget);
        } catch (const invalid_schedule& e) {
          refuse(cfg, cfg.label() + ", " + to_string(mode), e.what(), 1);
        }
      },
      stop);

  // Full checkpointing as the fallback: only when nothing else fits.
  if (fallback_full && !result.best) {
    std::optional<TunePlan> full;
    for (const auto& f : best_full)
      if (f) detail::keep_better(full, *f);
    if (full) {
      result.best = full;
      detail::keep_better(result.best_conventional, *full);
    }
  }
  std::stable_sort(result.notes.begin(), result.notes.end(),
                   [](const TuneNote& a, const TuneNote& b) { return a.first < b.first; });
  result.cut = cut.load();
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace detail

//! Searches the configurations and checkpoint modes of `request` (see the file comment for
//! what is searched and pruned) with cost models from `make_cost` (microbatch size → cost
//! model), and returns the fastest plans that fit the budget: overall, without
//! checkpointing, with conventional (selective or full) checkpointing, with Mario, and for
//! each (base, mode) pair. Plans that do not fit, and configurations a generator or the cost
//! model refuses, are skipped and counted; a result with no plan is not an error. Throws
//! invalid_problem when the request itself is out of range (TuneRequest::check).
template <class Factory>
requires cost_factory<Factory> TuneResult tune(const TuneRequest& request, const Factory& make_cost,
                                               const ProgressFn& progress = {}) {
  using Cost = std::remove_cvref_t<decltype(make_cost(1))>;
  request.check();
  detail::TuneScenario<Cost> one;
  one.ranks = request.ranks;
  one.global_batch = request.global_batch;
  one.make_cost = [&make_cost](int b) { return make_cost(b); };
  one.budget = request.budget;
  return detail::run_tune<Cost>(request, {one}, progress);
}

//! Searches `request` for `model` on GPUs of `device`: each factorization N = pp · d · t
//! (t inside a node; d dividing the global batch) and layer split is a pipeline of pp ranks
//! with the global batch / d sequences, searched as `tune` searches a fixed pipeline, all of
//! them in one parallel search with one set of baselines. Plans carry their degrees, step
//! time with the gradient all-reduce and optimizer step, largest GPU's memory and MFU.
inline TuneResult tune_cluster(const ClusterRequest& request, const ModelShape& model,
                               DeviceSpec device, const ProgressFn& progress = {}) {
  request.check();
  model.check();
  if (request.gpus_per_node > 0) device.ranks_per_node = request.gpus_per_node;
  device.check();
  const int N = request.gpus, G = device.ranks_per_node;
  std::vector<TuneNote> notes;
  auto note = [&](const std::string& configuration, const std::string& reason) {
    auto same = std::find_if(notes.begin(), notes.end(),
                             [&](const TuneNote& n) { return n.reason == reason; });
    if (same != notes.end())
      ++same->count;
    else
      notes.push_back(TuneNote{configuration, reason, 1, 0});
  };
  auto wanted = [](const std::vector<int>& list, int v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<detail::TuneScenario<TransformerCost>> scenarios;
  for (int t = 1; t <= std::min(N, G); ++t) {
    if (N % t != 0 || G % t != 0 || !wanted(request.tensor, t)) continue;
    if (model.heads % t != 0 || model.key_value_heads() % t != 0 || model.ffn() % t != 0) {
      if (!request.tensor.empty())
        note("tensor " + std::to_string(t),
             "tensor parallelism of " + std::to_string(t) +
                 " does not divide the model's heads, key/value heads and MLP width");
      continue;
    }
    for (int pp = 1; pp <= N / t; ++pp) {
      if ((N / t) % pp != 0 || !wanted(request.pipeline, pp)) continue;
      const int d = N / t / pp;
      const std::string label =
          "pp " + std::to_string(pp) + " x dp " + std::to_string(d) + " x tp " + std::to_string(t);
      if (request.global_batch % d != 0) {
        note(label, "the global batch of " + std::to_string(request.global_batch) +
                        " sequences does not split over " + std::to_string(d) +
                        " data-parallel replicas");
        continue;
      }
      if (pp > model.layers) {
        note(label, "a pipeline of " + std::to_string(pp) +
                        " ranks needs at least as many layers (the model has " +
                        std::to_string(model.layers) + ")");
        continue;
      }
      for (LayerSplit split : request.splits) {
        if (pp == 1 && split != request.splits.front()) continue;  // one stage: one split
        Parallelism par;
        par.tensor = t;
        par.sequence_parallel = request.sequence_parallel && t > 1;
        par.data = d;
        par.zero = d > 1 ? request.zero : 0;
        par.split = split;
        par.whole_step = request.whole_step;
        detail::TuneScenario<TransformerCost> sc;
        sc.ranks = pp;
        sc.global_batch = request.global_batch / d;
        sc.data = d;
        sc.tensor = t;
        sc.zero = par.zero;
        sc.sequence_parallel = par.sequence_parallel;
        sc.cluster = true;
        sc.make_cost = [model, device, par](int b) {
          TransformerCost c{model, device, {}, par};
          c.model.microbatch_size = b;
          c.check();
          return c;
        };
        scenarios.push_back(std::move(sc));
      }
    }
  }
  if (scenarios.empty())
    throw invalid_problem("no way to run " + std::to_string(N) + " GPUs (" + std::to_string(G) +
                          " per node) as pipeline x data x tensor parallelism fits the request: " +
                          (notes.empty() ? std::string("check ClusterRequest.pipeline and .tensor")
                                         : notes.front().text()) +
                          ".");
  TuneRequest search = request.search;
  search.global_batch = request.global_batch;
  TuneResult r = detail::run_tune<TransformerCost>(search, scenarios, progress);
  r.notes.insert(r.notes.begin(), notes.begin(), notes.end());
  return r;
}

//! `tune` under UniformCost: microbatch size 1 only (its figures are per microbatch), the
//! budget in its memory unit (microbatches of one rank's activations).
inline TuneResult tune(const TuneRequest& request, const UniformCost& cost,
                       const ProgressFn& progress = {}) {
  cost.check();
  TuneRequest r = request;
  r.microbatch_sizes = {1};
  return tune(r, UniformCostFactory{cost}, progress);
}

//! `tune` under TransformerCost for `model` on `device`: each microbatch size sets
//! `model.microbatch_size`; without a budget each rank gets its device memory minus its
//! weights, gradients and optimizer state (bytes).
inline TuneResult tune(const TuneRequest& request, const ModelShape& model,
                       const DeviceSpec& device, const ProgressFn& progress = {}) {
  model.check();
  device.check();
  return tune(request, TransformerCostFactory{model, device}, progress);
}

}  // namespace pipesched
