// The search engine behind every `tune`, in its phases: the search space (what the request
// asks), enumeration (every configuration and its cost model), pruning (the work bounds and
// the order they set), evaluation (phase one, then selective and Mario in phase two, each on
// a pool of threads) and the report (the scoreboard's result).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/core/detail/parallel_for.hpp"
#include "pipesched/core/stop_token.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/tune/detail/bounds.hpp"
#include "pipesched/tune/detail/evaluate.hpp"
#include "pipesched/tune/detail/grid.hpp"
#include "pipesched/tune/detail/scoreboard.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/layout_search.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::detail {

//! Phase two's candidates: each configuration's passes in turn (Mario, selective, selective
//! early, those the request names), configurations in the order given. One pool takes them
//! all (Mario's candidates take far longer than selective's, so separate pools would leave
//! threads idle at each pass's end), and each pair's candidates stay in bound order for pruning.
inline std::vector<std::pair<std::size_t, CheckpointMode>> recompute_tasks(
    const std::vector<std::size_t>& order, const SearchSpace& space) {
  std::vector<std::pair<std::size_t, CheckpointMode>> tasks;
  for (std::size_t i : order)
    for (CheckpointMode m :
         {CheckpointMode::Mario, CheckpointMode::Selective, CheckpointMode::SelectiveEarly})
      if (space.named(m)) tasks.emplace_back(i, m);
  return tasks;
}

//! Refuses a request that asks `Cost` for a capability it lacks (analysis/cost_capabilities.hpp),
//! naming the capability: slicing other than uniform needs a sliceable_cost, fine W per weight
//! GEMM a per_gemm_wgrad_cost.
template <class Cost>
void check_capabilities(const tuning::Request& request) {
  bool sliced = false;
  for (int k : request.slices)
    sliced = sliced || k > 1;
  if constexpr (!sliceable_cost<Cost>) {
    if (sliced && request.slicing != SlicingMode::Uniform)
      throw invalid_problem(
          field("tuning::Request.slicing") + " = " + to_string(request.slicing) +
          " chooses slice lengths by timing spans of the sequence, and this cost model cannot "
          "price slices of other lengths (it is no sliceable_cost: sequence_tokens and "
          "slice_lengths); use SlicingMode::Uniform, or a cost model with that capability such "
          "as TransformerCost.");
  }
  if constexpr (!per_gemm_wgrad_cost<Cost>) {
    if (request.fine_wgrad && request.wgrad_parts == 0)
      throw invalid_problem(
          field("tuning::Request.wgrad_parts", 0) +
          " cuts each weight gradient per weight GEMM, and this cost model does not count "
          "weight GEMMs (it is no per_gemm_wgrad_cost: weight_gemms and wgrad_split); give a "
          "number of parts.");
  }
  if constexpr (!layout_cost<Cost>) {
    if (request.layout_search > 0)
      throw invalid_problem(
          field("tuning::Request.layout_search", request.layout_search) +
          " searches the layers per stage, and this cost model cannot set them (it is no "
          "layout_cost: layered, with Parallelism::layers); use 0, or a cost model with that "
          "capability such as TransformerCost.");
  }
  if constexpr (!has_vocabulary_cost<Cost>) {
    if (request.vocabulary)
      throw invalid_problem(
          field("tuning::Request.vocabulary", true) +
          " splits the output layer by vocabulary over the ranks, and this cost model does not "
          "price the vocabulary passes (it is no has_vocabulary_cost: vocabulary_seconds, "
          "vocabulary_bytes and vocabulary_transfer_seconds); use false, or a cost model that "
          "prices them such as TransformerCost or UniformCost.");
  }
  (void)request;
  (void)sliced;
}

//! The layout phase (tuning::Request::layout_search): the configurations of the best plans
//! kept, each searched again for the layers per stage its plan (in its checkpoint mode, within
//! its budget) runs fastest on; each layout that beats its plan becomes a configuration of its
//! own ("layout searched"), evaluated by phases one and two as every other.
template <class Cost, class Stop>
void layout_phase(const tuning::Request& request, const SearchSpace& space, TuneGrid<Cost>& grid,
                  Scoreboard& board, Evaluator<Cost>& evaluator, int threads, Stop&& stop) {
  const std::vector<Scoreboard::Kept> picks = board.best_configurations(request.layout_search);
  std::vector<std::optional<std::vector<int>>> found(picks.size());
  parallel_for(
      picks.size(), threads,
      [&](std::size_t n) {
        const Scoreboard::Kept& pick = picks[n];
        const TuneConfig<Cost>& cfg = grid.configs[pick.order];
        try {
          const Cost cost = grid.cost_of(cfg, request.slicing);
          if (!cost.parallel.layers.empty()) return;  // the request gives the layers
          const Problem p{.ranks = cfg.ranks,
                          .stages = cfg.ranks * cfg.chunks,
                          .microbatches = cfg.microbatches,
                          .slices = cfg.slices};
          const Schedule shape = cfg.generator->generate(
              p, cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad);
          const LayoutSearchResult r =
              search_layout(cost, shape.problem, shape.placement,
                            [&](const std::vector<int>& layers) {
                              return evaluator.layout_step(pick.order, pick.mode, layers);
                            },
                            {.max_evaluations = request.layout_evaluations});
          if (r.step < pick.makespan * (1 - 1e-9)) found[n] = r.layers;
        } catch (const invalid_problem&) {
          // a configuration whose layers cannot be searched keeps its plan
        }
      },
      stop);
  std::vector<std::size_t> added;
  for (std::size_t n = 0; n < picks.size(); ++n) {
    if (!found[n]) continue;
    TuneConfig<Cost> cfg = grid.configs[picks[n].order];
    Cost cost = *grid.costs[cfg.cost];
    cost.parallel.layers = *found[n];
    grid.costs.emplace_back(std::move(cost));
    grid.cost_refusal.emplace_back();
    cfg.cost = grid.costs.size() - 1;
    cfg.layout_searched = true;
    cfg.refused = cfg.base_fits = cfg.full_fits = false;
    cfg.work_bound = cfg.lower_bound = 0;
    grid.configs.push_back(std::move(cfg));
    added.push_back(grid.configs.size() - 1);
  }
  if (added.empty()) return;
  board.add_candidates(static_cast<int>(added.size()) * space.modes);
  parallel_for(
      added.size(), threads, [&](std::size_t n) { evaluator.phase_one(added[n]); }, stop);
  std::vector<std::size_t> again;
  for (std::size_t i : added)
    if (!grid.configs[i].refused && !grid.configs[i].base_fits && grid.configs[i].full_fits)
      again.push_back(i);
  const auto tasks = recompute_tasks(again, space);
  parallel_for(
      tasks.size(), threads,
      [&](std::size_t n) { evaluator.phase_two(tasks[n].first, tasks[n].second); }, stop);
}

//! The configurations of `request` over each scenario, phase one (base, none, full) and then
//! selective and Mario, in parallel.
template <class Cost>
tuning::Result run_tune(const tuning::Request& request,
                        const std::vector<TuneScenario<Cost>>& scenarios,
                        const tuning::ProgressFn& progress) {
  check_capabilities<Cost>(request);
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const bool limited = request.time_limit > 0;
  const auto deadline =
      started + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(limited ? request.time_limit : 0.0));
  const int threads = thread_count(request.threads);
  // The deadline and the caller's flag, polled between candidates (stop) and inside them
  // (the evaluator hands the token to the selective and Mario passes).
  const StopToken token =
      limited ? StopToken(deadline, request.stop_flag) : StopToken(request.stop_flag);

  const SearchSpace space = SearchSpace::of(request);
  TuneGrid<Cost> grid = enumerate(request, space, scenarios);
  Scoreboard board(space, threads, static_cast<int>(grid.configs.size()) * space.modes, progress,
                   request.evaluated_limit);
  Evaluator<Cost> evaluator(request, space, scenarios, grid, board, token);

  std::atomic<bool> cut{false};
  auto stop = [&] {
    if (token.stop_requested()) cut = true;
    return cut.load();
  };
  // Slice lengths once per (cost model, slices, ranks); work bounds (cheap, no schedule);
  // then phase one in increasing bound order, so that the best plans come early and prune
  // the rest. Each step stops at the deadline.
  const int total = static_cast<int>(grid.configs.size()) * space.modes;
  cut_slices(grid, request.slicing, threads, stop, [&] {
    if (progress) progress(0, total, nullptr);  // the line shows the search has started
  });
  set_work_bounds(grid, request, stop);
  const std::vector<std::size_t> by_bound = by_work_bound(grid.configs);
  // Phase one, every configuration: base schedule, budget, base and full checkpointing
  // simulated (both cheap); plans without recompute and with full recompute.
  parallel_for(
      by_bound.size(), threads, [&](std::size_t n) { evaluator.phase_one(by_bound[n]); }, stop);
  // Phase two: selective and Mario on the configurations that need them, most promising
  // (lowest bound) first so that the bound prunes the rest.
  const auto tasks = recompute_tasks(needing_recompute_by_bound(grid.configs), space);
  parallel_for(
      tasks.size(), threads,
      [&](std::size_t n) { evaluator.phase_two(tasks[n].first, tasks[n].second); }, stop);
  // The program's own policies, on every configuration phase one built, lowest bound first.
  std::vector<std::pair<std::size_t, std::size_t>> own;
  if (!space.policies.empty())
    for (std::size_t i : built_by_bound(grid.configs))
      for (std::size_t j = 0; j < space.policies.size(); ++j)
        own.emplace_back(i, j);
  parallel_for(
      own.size(), threads,
      [&](std::size_t n) { evaluator.phase_policy(own[n].first, own[n].second); }, stop);

  if constexpr (layout_cost<Cost>) {
    if (request.layout_search > 0 && !stop())
      layout_phase(request, space, grid, board, evaluator, threads, stop);
  }
  tuning::Result r =
      board.finish(cut.load(), std::chrono::duration<double>(Clock::now() - started).count());
  r.interrupted = r.cut && request.stop_flag && request.stop_flag->load();
  return r;
}

}  // namespace pipesched::detail
