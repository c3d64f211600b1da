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
// Pruning, all of it safe (it never drops a plan that would have been kept):
//   - a configuration whose schedule fits without checkpointing gets that schedule as its
//     selective and Mario plan too (both passes would return it unchanged);
//   - selective and Mario are not run where even full checkpointing does not fit (they
//     cannot hold less than full checkpointing of the same order);
//   - selective and Mario are run in increasing order of a lower bound on their step time,
//     max over ranks of (earliest a rank can start + its compute time), and not run where
//     that bound cannot beat the best plan of their kind already found: recomputes only add
//     compute time.
// Cost: on GPT-3 13B and Llama 2 13B over 16 or 32 GPUs with 128 sequences (64 candidates of
// up to 8,000 actions each, bench/mario_tuner.cpp) a search takes 0.1 to 3.5 s on one core,
// nearly all of it in the Mario pass.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/schedule/registry.hpp"
#include "pipesched/tune/cost_factory.hpp"

namespace pipesched {

//! What to search. Numbers are run-time values (designated initializers:
//! `TuneRequest{.ranks = 8, .global_batch = 64}`).
struct TuneRequest {
  int ranks = 1;         //!< pipeline size p (ranks = devices)
  int global_batch = 1;  //!< sequences per training step, split into microbatches
  //! Base schedules, by generator name (schedule/registry.hpp).
  std::vector<std::string> bases{"1f1b", "interleaved-1f1b", "zb-h1"};
  //! Chunks per rank tried for generators that take a chunk count (interleaved-1f1b).
  std::vector<int> chunks{2, 4};
  //! Sequences per microbatch; those not dividing global_batch are left out.
  std::vector<int> microbatch_sizes{1, 2, 4, 8};
  //! Per-rank memory budget in the cost model's memory unit. Empty: what the cost model
  //! implies (default_memory_budget: for TransformerCost each rank's device memory minus its
  //! weights, gradients and optimizer state; no limit for other models).
  std::optional<MemoryBudget> budget{};
  //! Checkpoint modes searched.
  std::vector<CheckpointMode> checkpoints{CheckpointMode::None, CheckpointMode::Selective,
                                          CheckpointMode::Mario};
  //! Also try full checkpointing, used only when no plan of `checkpoints` fits.
  bool full_fallback = true;
  //! Options of the Mario pass.
  MarioOptions mario{};
  //! Slices per microbatch tried for the schedules that take slices (gpipe, seq-1f1b,
  //! slice-pipe); the others run whole microbatches.
  std::vector<int> slices{1};
  //! How a TransformerCost cuts sequences into slices (other cost models: uniform).
  SlicingMode slicing = SlicingMode::Uniform;
  //! Also try each split-capable base with its weight gradients cut into `wgrad_parts` parts
  //! placed in waits (MEPipe's fine-grained W).
  bool fine_wgrad = false;
  int wgrad_parts = 4;

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const std::string& field, const std::string& value, const std::string& want) {
      throw invalid_problem("TuneRequest." + field + " = " + value + " is out of range; " + want +
                            ".");
    };
    if (ranks < 1) bad("ranks", std::to_string(ranks), "a pipeline needs at least 1 rank");
    if (global_batch < 1)
      bad("global_batch", std::to_string(global_batch), "a step needs at least 1 sequence");
    if (bases.empty()) bad("bases", "{}", "name at least one schedule, e.g. \"1f1b\"");
    bool any_chunks = false;
    for (const std::string& name : bases)
      any_chunks = find_generator(name).chunks_vary || any_chunks;  // unknown names throw
    if (any_chunks && chunks.empty())
      bad("chunks", "{}", "give at least one chunk count for interleaved schedules, e.g. {2}");
    for (int c : chunks)
      if (c < 1) bad("chunks", std::to_string(c), "every chunk count must be at least 1");
    if (microbatch_sizes.empty())
      bad("microbatch_sizes", "{}", "give at least one microbatch size, e.g. {1}");
    bool any_size = false;
    for (int b : microbatch_sizes) {
      if (b < 1)
        bad("microbatch_sizes", std::to_string(b), "a microbatch holds at least 1 sequence");
      any_size = any_size || global_batch % b == 0;
    }
    if (!any_size)
      bad("microbatch_sizes", "{" + join(microbatch_sizes) + "}",
          "none divides global_batch = " + std::to_string(global_batch) +
              "; include a divisor such as 1");
    if (slices.empty()) bad("slices", "{}", "give at least one slice count, e.g. {1}");
    for (int k : slices)
      if (k < 1) bad("slices", std::to_string(k), "every slice count must be at least 1");
    if (fine_wgrad && wgrad_parts < 1)
      bad("wgrad_parts", std::to_string(wgrad_parts), "cut each W into at least 1 part");
    if (checkpoints.empty() && !full_fallback)
      bad("checkpoints", "{}", "name at least one checkpoint mode, or keep full_fallback");
    if (budget) {
      detail::check_budget_values(*budget);
      if (budget->per_rank.size() > static_cast<std::size_t>(ranks))
        bad("budget.per_rank", std::to_string(budget->per_rank.size()) + " entries",
            "give one entry per rank (" + std::to_string(ranks) + ") or fewer");
    }
  }

 private:
  static std::string join(const std::vector<int>& v) {
    std::string s;
    for (int x : v)
      s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
  }
};

//! One configuration the tuner found, with its simulated figures.
struct TunePlan {
  std::string base;         //!< generator name, e.g. "interleaved-1f1b"
  int chunks = 1;           //!< stages per rank
  int microbatch_size = 1;  //!< sequences per microbatch
  int microbatches = 1;     //!< microbatches per step (global batch / microbatch size)
  CheckpointMode checkpoint = CheckpointMode::None;
  Schedule schedule;                    //!< the schedule, recomputes included
  double makespan = 0;                  //!< simulated step time (cost model's time unit)
  double throughput = 0;                //!< sequences per time unit: global batch / makespan
  double bubble_ratio = 0;              //!< simulated idle share of the step
  std::vector<double> peak_per_rank;    //!< simulated peak activation memory of each rank
  std::vector<double> budget_per_rank;  //!< the budget each rank was held to (inf: none)
  int recomputes = 0;                   //!< R actions in the schedule
  int slices = 1;                       //!< slices per microbatch
  bool fine_wgrad = false;              //!< weight gradients cut into parts, placed in waits
  //! The base schedule was fitted to the budget by its order's memory knob
  //! (GeneratorInfo::generate_within: Zero Bubble's capped weight-gradient deferral, slice-pipe's
  //! warm-up) before checkpointing; false: the order's own schedule.
  bool fitted = false;
};

//! Why configurations were refused: one note per distinct reason, naming the first
//! configuration refused for it and counting all of them (a model too shallow for 64 stages
//! refuses every microbatch size of that chunk count for the same reason).
struct TuneNote {
  //! The first configuration refused for this reason ("interleaved-1f1b with 4 chunks,
  //! microbatch size 2 (32 microbatches)").
  std::string configuration;
  std::string reason;  //!< the generator's, pass's or cost model's message
  int count = 1;       //!< configurations refused for this reason, the first included

  //! "configuration: reason".
  std::string text() const { return configuration + ": " + reason; }
};

//! What `tune` found. Plans are compared by step time (makespan) for the same global batch;
//! on equal step time the one with fewer recomputes, then the simpler checkpoint mode wins.
struct TuneResult {
  std::optional<TunePlan> best;                     //!< fastest plan that fits
  std::optional<TunePlan> best_without_checkpoint;  //!< fastest with no recompute (mode none)
  std::optional<TunePlan> best_conventional;        //!< fastest selective or full plan
  std::optional<TunePlan> best_mario;               //!< fastest Mario plan
  int candidates_tried = 0;        //!< (configuration, checkpoint mode) pairs settled, all kinds
  int candidates_refused = 0;      //!< of those, refused by a generator or the cost model
  int candidates_over_budget = 0;  //!< of those, over the budget on some rank
  int candidates_pruned = 0;       //!< of those, skipped: they could not beat a plan found
  double seconds = 0;              //!< wall-clock time of the search
  //! Why configurations were refused, one note per distinct reason, in the order first met.
  std::vector<TuneNote> notes;
};

//! Called as the search goes: candidates settled so far, candidates in all, and the best plan
//! so far (nullptr while none fits).
using ProgressFn = std::function<void(int done, int total, const TunePlan* best)>;

//! "interleaved-1f1b x2, 64 mb of 2, mario (12 R)": the configuration in a few words.
inline std::string describe(const TunePlan& p) {
  std::string s = p.base;
  if (p.chunks > 1) s += " x" + std::to_string(p.chunks);
  s += ", " + std::to_string(p.microbatches) + " mb of " + std::to_string(p.microbatch_size);
  if (p.slices > 1) s += " in " + std::to_string(p.slices) + " slices";
  if (p.fine_wgrad) s += ", fine W";
  if (p.fitted) s += ", fitted";
  s += ", ";
  s += to_string(p.checkpoint);
  if (p.recomputes > 0) s += " (" + std::to_string(p.recomputes) + " R)";
  return s;
}

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
//! mode (None, Full, Selective, Mario in enum order).
inline bool better_plan(const TunePlan& a, const TunePlan& b) {
  const double tol = 1e-12 * std::max(1.0, std::abs(b.makespan));
  if (a.makespan < b.makespan - tol) return true;
  if (a.makespan > b.makespan + tol) return false;
  if (a.recomputes != b.recomputes) return a.recomputes < b.recomputes;
  return static_cast<int>(a.checkpoint) < static_cast<int>(b.checkpoint);
}

inline void keep_better(std::optional<TunePlan>& slot, const TunePlan& p) {
  if (!slot || better_plan(p, *slot)) slot = p;
}

//! A lower bound on the step time of any schedule over the same units, placement and cost as
//! `s` (with or without recomputes): a rank cannot start before the forwards of the stages
//! ahead of its first stage have run and reached it, and then has its own compute to do.
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
    bound = std::max(bound, first + sim.ranks[static_cast<std::size_t>(r)].busy);
  }
  return bound;
}

//! One configuration of the search (base, chunks, microbatch size) and what phase one
//! learned about it.
template <class Cost>
struct TuneConfig {
  const GeneratorInfo* generator = nullptr;
  int chunks = 1;
  int microbatch_size = 1;
  int microbatches = 1;
  int slices = 1;
  bool fine = false;
  bool fitted = false;  //!< base from the order's memory-bounded generator
  std::optional<Cost> cost;
  Schedule base;
  MemoryBudget budget;
  SimulationResult base_sim;
  bool refused = false;
  bool base_fits = false;
  bool full_fits = false;
  double lower_bound = 0;

  std::string label() const {
    std::string s = std::string(generator->name);
    if (generator->chunks_vary) s += " with " + std::to_string(chunks) + " chunks";
    s += ", microbatch size " + std::to_string(microbatch_size) + " (" +
         std::to_string(microbatches) + " microbatches)";
    if (slices > 1) s += ", " + std::to_string(slices) + " slices";
    if (fine) s += ", fine W";
    if (fitted) s += ", fitted to the budget";
    return s;
  }
};

}  // namespace detail

//! Searches the configurations and checkpoint modes of `request` (see the file comment for
//! what is searched and pruned) with cost models from `make_cost` (microbatch size → cost
//! model), and returns the fastest plans that fit the budget: overall, without
//! checkpointing, with conventional (selective or full) checkpointing and with Mario.
//! Plans that do not fit, and configurations a generator or the cost model refuses, are
//! skipped and counted; a result with no plan is not an error. Throws invalid_problem when
//! the request itself is out of range (TuneRequest::check).
template <class Factory>
requires cost_factory<Factory> TuneResult tune(const TuneRequest& request, const Factory& make_cost,
                                               const ProgressFn& progress = {}) {
  using Cost = std::remove_cvref_t<decltype(make_cost(1))>;
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  request.check();

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

  // Configurations, without duplicates.
  std::vector<detail::TuneConfig<Cost>> configs;
  std::vector<int> sizes, chunk_counts;
  for (int b : request.microbatch_sizes)
    if (request.global_batch % b == 0 && std::find(sizes.begin(), sizes.end(), b) == sizes.end())
      sizes.push_back(b);
  for (int c : request.chunks)
    if (std::find(chunk_counts.begin(), chunk_counts.end(), c) == chunk_counts.end())
      chunk_counts.push_back(c);
  std::vector<std::string_view> seen_bases;
  for (const std::string& name : request.bases) {
    const GeneratorInfo& g = find_generator(name);
    if (std::find(seen_bases.begin(), seen_bases.end(), g.name) != seen_bases.end()) continue;
    seen_bases.push_back(g.name);
    const std::vector<int> own{g.default_chunks}, whole{1};
    std::vector<bool> fines{false};
    if (request.fine_wgrad && g.split) fines.push_back(true);
    std::vector<bool> fitting{false};
    if (g.generate_within) fitting.push_back(true);
    for (int c : g.chunks_vary ? chunk_counts : own)
      for (int b : sizes)
        for (int k : g.slices ? request.slices : whole)
          for (bool fine : fines)
            for (bool fitted : fitting) {
              if (std::find_if(configs.begin(), configs.end(), [&](const auto& x) {
                    return x.generator == &g && x.chunks == c && x.microbatch_size == b &&
                           x.slices == k && x.fine == fine && x.fitted == fitted;
                  }) != configs.end())
                continue;
              detail::TuneConfig<Cost> cfg;
              cfg.generator = &g;
              cfg.chunks = c;
              cfg.microbatch_size = b;
              cfg.microbatches = request.global_batch / b;
              cfg.slices = k;
              cfg.fine = fine;
              cfg.fitted = fitted;
              configs.push_back(std::move(cfg));
            }
  }

  TuneResult result;
  std::optional<TunePlan> best_full;  // full checkpointing kept aside while it is a fallback
  const int total = static_cast<int>(configs.size()) * modes;
  auto settle = [&](int n, int* counter) {
    for (int i = 0; i < n; ++i) {
      ++result.candidates_tried;
      if (counter) ++*counter;
      if (progress) progress(result.candidates_tried, total, result.best ? &*result.best : nullptr);
    }
  };
  // Repeats are counted, not stored: a grid can refuse thousands of configurations for a
  // handful of reasons.
  auto note = [&](const std::string& configuration, const std::string& reason) {
    auto same = std::find_if(result.notes.begin(), result.notes.end(),
                             [&](const TuneNote& n) { return n.reason == reason; });
    if (same != result.notes.end())
      ++same->count;
    else
      result.notes.push_back(TuneNote{configuration, reason, 1});
  };
  // Mario where the base's order says it applies (GeneratorInfo::mario); elsewhere the
  // candidate is counted as refused, with one note per base.
  auto mario_applies = [&](const detail::TuneConfig<Cost>& cfg) {
    if (cfg.generator->mario) return true;
    note(std::string(cfg.generator->name),
         "checkpoint mario does not apply to " + std::string(cfg.generator->name) +
             " (it plans on a one-forward-one-backward rhythm: 1f1b, interleaved-1f1b, zb-h1)");
    settle(1, &result.candidates_refused);
    return false;
  };
  auto make_plan = [&](const detail::TuneConfig<Cost>& cfg, CheckpointMode mode, const Schedule& s,
                       const SimulationResult& sim) {
    TunePlan p;
    p.base = std::string(cfg.generator->name);
    p.chunks = cfg.chunks;
    p.microbatch_size = cfg.microbatch_size;
    p.microbatches = cfg.microbatches;
    p.checkpoint = mode;
    p.schedule = s;
    p.makespan = sim.makespan;
    p.throughput = sim.makespan > 0 ? request.global_batch / sim.makespan : 0.0;
    p.bubble_ratio = sim.bubble_ratio;
    p.peak_per_rank = detail::peaks_of(sim);
    for (int r = 0; r < request.ranks; ++r)
      p.budget_per_rank.push_back(cfg.budget.of(r));
    p.recomputes = detail::count_recomputes(s);
    p.slices = cfg.slices;
    p.fine_wgrad = cfg.fine;
    p.fitted = cfg.fitted;
    return p;
  };
  auto keep = [&](const TunePlan& p) {
    if (p.checkpoint == CheckpointMode::Full && fallback_full) {
      detail::keep_better(best_full, p);
      return;
    }
    detail::keep_better(result.best, p);
    if (p.checkpoint == CheckpointMode::None)
      detail::keep_better(result.best_without_checkpoint, p);
    if (is_selective(p.checkpoint) || is_full(p.checkpoint))
      detail::keep_better(result.best_conventional, p);
    if (p.checkpoint == CheckpointMode::Mario) detail::keep_better(result.best_mario, p);
  };

  // Phase one, every configuration: cost model, base schedule, budget, base and full
  // checkpointing simulated (both cheap); plans without recompute and with full recompute.
  std::vector<std::optional<Cost>> costs(sizes.size());
  std::vector<std::string> cost_refusal(sizes.size());
  for (auto& cfg : configs) {
    const std::size_t si = static_cast<std::size_t>(
        std::find(sizes.begin(), sizes.end(), cfg.microbatch_size) - sizes.begin());
    try {
      if (!costs[si] && cost_refusal[si].empty()) {
        try {
          costs[si].emplace(make_cost(cfg.microbatch_size));
        } catch (const invalid_problem& e) {
          cost_refusal[si] = e.what();
        }
      }
      if (!costs[si]) throw invalid_problem(cost_refusal[si]);
      cfg.cost = costs[si];
      if constexpr (std::is_base_of_v<TransformerCost, Cost>) {
        if (cfg.slices > 1)
          static_cast<TransformerCost&>(*cfg.cost) =
              with_slicing(*cfg.cost, request.slicing, cfg.slices, request.ranks);
      }
      const Problem problem{.ranks = request.ranks,
                            .stages = request.ranks * cfg.chunks,
                            .microbatches = cfg.microbatches,
                            .slices = cfg.slices};
      const WGradMode wgrad = cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad;
      cfg.base = cfg.generator->generate(problem, wgrad);
      cfg.budget = request.budget
                       ? *request.budget
                       : default_memory_budget(*cfg.cost, cfg.base.problem, cfg.base.placement);
      // An order with a memory knob (Zero Bubble's capped W deferral, slice-pipe's warm-up)
      // is searched twice: as it is, and fitted to the budget before checkpointing (what it
      // cannot fit, checkpointing brings down below). Neither dominates: a fitted base may
      // need no recompute, the order's own may leave Mario more bubble to hide recomputes in.
      if (cfg.fitted) {
        if (!cfg.budget.limited()) {  // nothing to fit: the same as the order's own
          cfg.refused = true;
          settle(modes, &result.candidates_pruned);
          continue;
        }
        cfg.base = cfg.generator->generate_within(problem, wgrad, *cfg.cost, cfg.budget);
      }
      if (cfg.fine) {
        try {
          cfg.base = fill_weight_gradients(cfg.base, *cfg.cost, cfg.budget, request.wgrad_parts);
        } catch (const invalid_problem&) {
          // The base is over the budget whatever the W placement: place W's for speed and
          // let checkpointing below bring the memory down.
          cfg.base =
              fill_weight_gradients(cfg.base, *cfg.cost, MemoryBudget{}, request.wgrad_parts);
        }
      }
      cfg.base_sim = simulate(cfg.base, *cfg.cost);
      if (cfg.base_sim.deadlock)
        throw invalid_problem("the base schedule deadlocks: " + cfg.base_sim.deadlock_report);
    } catch (const invalid_problem& e) {
      cfg.refused = true;
      note(cfg.label(), e.what());
      settle(modes, &result.candidates_refused);
      continue;
    } catch (const invalid_schedule& e) {
      cfg.refused = true;
      note(cfg.label(), e.what());
      settle(modes, &result.candidates_refused);
      continue;
    }
    const Cost& cost = *cfg.cost;
    cfg.base_fits = detail::fits_budget(detail::peaks_of(cfg.base_sim), cfg.budget);
    cfg.lower_bound = detail::makespan_lower_bound(cfg.base, cost, cfg.base_sim);
    if (want_none) {
      if (cfg.base_fits) {
        keep(make_plan(cfg, CheckpointMode::None, cfg.base, cfg.base_sim));
        settle(1, nullptr);
      } else {
        settle(1, &result.candidates_over_budget);
      }
    }
    // Full checkpointing holds the least any checkpointing of this order can: where it does
    // not fit, neither does selective nor Mario.
    const bool need_full = want_full || fallback_full || !cfg.base_fits;
    if (need_full) {
      const Schedule full = checkpoint_full(cfg.base);
      const SimulationResult full_sim = simulate(full, cost);
      cfg.full_fits =
          !full_sim.deadlock && detail::fits_budget(detail::peaks_of(full_sim), cfg.budget);
      if (want_full || fallback_full) {
        if (cfg.full_fits) {
          keep(make_plan(cfg, CheckpointMode::Full, full, full_sim));
          settle(1, nullptr);
        } else {
          settle(1, &result.candidates_over_budget);
        }
      }
    }
    // The early recompute holds what the late one holds (the same list, the same units).
    if (want_full_early) {
      if (cfg.full_fits) {
        const Schedule early = checkpoint_full(cfg.base, RecomputeTiming::Early);
        keep(make_plan(cfg, CheckpointMode::FullEarly, early, simulate(early, cost)));
        settle(1, nullptr);
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
        TunePlan p = make_plan(cfg, m, cfg.base, cfg.base_sim);
        p.schedule.name += std::string("+") + to_string(m);
        keep(p);
        settle(1, nullptr);
      }
    } else if (!cfg.full_fits) {
      settle(want_selective + want_selective_early + want_mario, &result.candidates_over_budget);
    }
  }

  // Phases two and three: selective, then Mario, on the configurations that need them, most
  // promising (lowest bound) first so that the bound prunes the rest.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!configs[i].refused && !configs[i].base_fits && configs[i].full_fits) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return configs[a].lower_bound < configs[b].lower_bound;
  });
  auto cannot_beat = [](const detail::TuneConfig<Cost>& cfg, const std::optional<TunePlan>& b) {
    return b && cfg.lower_bound >= b->makespan - 1e-12 * std::max(1.0, std::abs(b->makespan));
  };
  auto run_pass = [&](CheckpointMode mode, std::optional<TunePlan>& rival) {
    for (std::size_t i : order) {
      const auto& cfg = configs[i];
      if (mode == CheckpointMode::Mario && !mario_applies(cfg)) continue;
      if (cannot_beat(cfg, rival)) {
        settle(1, &result.candidates_pruned);
        continue;
      }
      try {
        const Schedule s =
            is_selective(mode)
                ? checkpoint_selective(cfg.base, *cfg.cost, cfg.budget, nullptr, timing_of(mode))
                : checkpoint_mario(cfg.base, *cfg.cost, cfg.budget, request.mario);
        const SimulationResult sim = simulate(s, *cfg.cost);
        if (sim.deadlock || !detail::fits_budget(detail::peaks_of(sim), cfg.budget)) {
          settle(1, &result.candidates_over_budget);
          continue;
        }
        keep(make_plan(cfg, mode, s, sim));
        settle(1, nullptr);
      } catch (const invalid_problem&) {
        // The pass found nothing within the budget.
        settle(1, &result.candidates_over_budget);
      } catch (const invalid_schedule& e) {
        note(cfg.label() + ", " + to_string(mode), e.what());
        settle(1, &result.candidates_refused);
      }
    }
  };
  if (want_selective) run_pass(CheckpointMode::Selective, result.best_conventional);
  if (want_selective_early) run_pass(CheckpointMode::SelectiveEarly, result.best_conventional);
  if (want_mario) run_pass(CheckpointMode::Mario, result.best_mario);

  // Full checkpointing as the fallback: only when nothing else fits.
  if (fallback_full && !result.best && best_full) {
    result.best = best_full;
    detail::keep_better(result.best_conventional, *best_full);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
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
