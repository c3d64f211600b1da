// The tuner: searches pipeline configuration (schedule, chunks, microbatch size) and
// activation checkpointing together, with the simulator, under a per-rank memory budget.
//
// What is searched, for a pipeline of `ranks` ranks and a global batch of `global_batch`
// sequences:
//   base schedule      each name in tuning::Request::bases (a generator of policy/registry.hpp)
//                      with its default backward (fused B, or I + W for Zero Bubble);
//   chunks per rank    tuning::Request::chunks for generators that take a chunk count
//                      (interleaved-1f1b, looped-bfs), the generator's own count otherwise;
//   microbatch size    each of tuning::Request::microbatch_sizes that divides global_batch;
//                      microbatches = global_batch / microbatch size;
//   memory fitting     for orders with a memory knob (GeneratorInfo::generate_within: the
//                      Zero Bubble orders, slice-pipe), the order's own schedule and the one
//                      fitted to the budget (tuning::Plan::fitted);
//   checkpointing      each of tuning::Request::checkpoints (none, selective, mario by default),
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
// The search runs on tuning::Request::threads threads (default: one per core). Plans compete for
// the slot of their (base, checkpoint mode) pair (tuning::Result::baselines); the overall bests are
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
// threads. tuning::Request::time_limit and tuning::Request::stop_flag stop the search with what it
// has (tuning::Result::cut): the deadline reaches inside each candidate (the selective and Mario
// passes poll it, core/stop_token.hpp), and a candidate it cuts is dropped, never reported. Cost: a
// cluster search of Llama 2 13B over 64 A100 40GB (pipeline x data parallelism, 1F1B, interleaved
// and Chimera, Mario included) takes 1.6 s on one core, 0.9 s on two (bench/tune_threads); MEPipe's
// scenarios (bench/mepipe_cluster) up to half a minute.
//
// The parts: request.hpp (tuning::Request, tuning::ClusterRequest), result.hpp (tuning::Plan,
// tuning::Result and what they hold), cluster.hpp (tune_cluster), and the engine in detail/:
// search_space.hpp, grid.hpp (enumeration), bounds.hpp (pruning), evaluate.hpp, scoreboard.hpp (the
// report), plans.hpp (how plans are ranked) and run_tune.hpp, which runs the phases in that order
// (docs/design.md, "The tuner's phases").
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
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/cluster.hpp"
#include "pipesched/tune/cost_factory.hpp"
#include "pipesched/tune/detail/run_tune.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

//! Searches the configurations and checkpoint modes of `request` (see the file comment for
//! what is searched and pruned) with cost models from `make_cost` (microbatch size → cost
//! model), and returns the fastest plans that fit the budget: overall, without
//! checkpointing, with conventional (selective or full) checkpointing, with Mario, and for
//! each (base, mode) pair. Plans that do not fit, and configurations a generator or the cost
//! model refuses, are skipped and counted; a result with no plan is not an error. Throws
//! invalid_problem when the request itself is out of range (tuning::Request::check).
template <class Factory>
requires cost_factory<Factory> tuning::Result tune(const tuning::Request& request,
                                                   const Factory& make_cost,
                                                   const tuning::ProgressFn& progress = {}) {
  using Cost = std::remove_cvref_t<decltype(make_cost(1))>;
  request.check();
  detail::TuneScenario<Cost> one;
  one.ranks = request.ranks;
  one.global_batch = request.global_batch;
  one.make_cost = [&make_cost](int b) { return make_cost(b); };
  one.budget = request.budget;
  return detail::run_tune<Cost>(request, {one}, progress);
}

//! `tune` under UniformCost: microbatch size 1 only (its figures are per microbatch), the
//! budget in its memory unit (microbatches of one rank's activations).
inline tuning::Result tune(const tuning::Request& request, const UniformCost& cost,
                           const tuning::ProgressFn& progress = {}) {
  cost.check();
  tuning::Request r = request;
  r.microbatch_sizes = {1};
  return tune(r, tuning::UniformCostFactory{cost}, progress);
}

//! `tune` under TransformerCost for `model` on `device`: each microbatch size sets
//! `model.microbatch_size`; without a budget each rank gets its device memory minus its
//! weights, gradients and optimizer state (bytes).
inline tuning::Result tune(const tuning::Request& request, const ModelShape& model,
                           const DeviceSpec& device, const tuning::ProgressFn& progress = {}) {
  model.check();
  device.check();
  return tune(request, tuning::TransformerCostFactory{model, device}, progress);
}

}  // namespace pipesched
