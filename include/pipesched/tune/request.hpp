// What the tuner searches: tuning::Request (one pipeline) and tuning::ClusterRequest (every way to
// run a cluster's GPUs as pipeline x data x tensor parallelism), with the checks of their fields.
// Included by pipesched/tune/tune.hpp, the tuner's entry header.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/core/detail/parallel_for.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched {

//! What to search. Numbers are run-time values (designated initializers:
//! `tuning::Request{.ranks = 8, .global_batch = 64}`).
//! The chunk counts per rank c >= 2 that cut a model of `layers` layers into ranks x c stages
//! of equal layers (c divides layers / ranks), up to 64, in increasing order; empty when none
//! does (or layers < 1).
inline std::vector<int> equal_split_chunks(int layers, int ranks) {
  std::vector<int> out;
  if (layers < 1 || ranks < 1 || layers % ranks != 0) return out;
  for (int c = 2; c <= std::min(64, layers / ranks); ++c)
    if ((layers / ranks) % c == 0) out.push_back(c);
  return out;
}

namespace tuning {

//! What to search: the cost model, the ranks, the global batch, the memory budget and the
//! schedules, chunk counts, microbatch sizes, slices and checkpoint modes to try.
struct Request {
  int ranks = 1;         //!< pipeline size p (ranks = devices)
  int global_batch = 1;  //!< sequences per training step, split into microbatches
  //! Base schedules, by generator name (policy/registry.hpp).
  std::vector<std::string> bases{"1f1b", "interleaved-1f1b", "zb-h1"};
  //! Chunks per rank tried for generators that take a chunk count (interleaved-1f1b).
  std::vector<int> chunks{2, 4};
  //! Also every chunk count that cuts the model into equal stages (equal_split_chunks), where
  //! the cost model counts layers (TransformerCost), beside `chunks`.
  bool every_equal_chunks = false;
  //! Sequences per microbatch; those not dividing global_batch are left out.
  std::vector<int> microbatch_sizes{1, 2, 4, 8};
  //! Per-rank memory budget in the cost model's memory unit. Empty: what the cost model
  //! implies (default_memory_budget: for TransformerCost each rank's device memory minus its
  //! weights, gradients and optimizer state; no limit for other models).
  std::optional<MemoryBudget> budget{};
  //! Checkpoint modes searched.
  std::vector<CheckpointMode> checkpoints{CheckpointMode::None, CheckpointMode::Selective,
                                          CheckpointMode::Mario};
  //! Checkpoint policies of the program's own, by name (register_checkpoint), searched beside
  //! `checkpoints`: each is applied to every configuration's schedule under its budget and
  //! competes as a (base, policy) pair of its own.
  std::vector<std::string> checkpoint_policies{};
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
  //! placed in waits (MEPipe's fine-grained W); 0 = one part per weight GEMM
  //! (TransformerCost, WGradSplit::PerGemm: as many parts as the stage with the most GEMMs
  //! has), as MEPipe cuts them.
  bool fine_wgrad = false;
  int wgrad_parts = 4;  //!< parts of each weight gradient with fine_wgrad (0: one per GEMM)
  //! Also try each configuration of whole microbatches with its activations offloaded to host
  //! memory where its budget asks (apply_offload, pass/offload.hpp), before each checkpoint
  //! mode but Mario recomputes what is still over: offload and recompute planned together.
  //! The cost model times the copies (has_host_copy: TransformerCost from its device's
  //! host_link_bandwidth).
  bool offload = false;
  //! Also try each configuration of one model replica with its output layer split by
  //! vocabulary over the ranks (vocabulary parallelism): every candidate built as assemble_plan
  //! builds it with PlanRecipe::vocabulary (the passes placed last, within the budget), under
  //! the cost model with its head split (TransformerCost: Parallelism::vocabulary). The cost
  //! model prices the passes (has_vocabulary_cost).
  bool vocabulary = false;
  //! Threads searching at once; 0 = one per core (std::thread::hardware_concurrency).
  int threads = 0;
  //! The threads the search runs on: `threads`, or one per core (at least 1) for 0.
  int thread_count() const { return detail::thread_count(threads); }
  //! Wall-clock seconds after which the search stops and returns the best plans found so far
  //! (tuning::Result::cut); 0 = no limit. The deadline reaches inside each candidate (the
  //! selective and Mario passes poll it), so the search ends soon after it whatever one
  //! candidate costs; a candidate cut short is dropped, never reported.
  double time_limit = 0;
  //! A flag that, once true, stops the search as the time limit does (tuning::Result::cut and
  //! tuning::Result::interrupted); null = none. Set it from another thread or a signal handler
  //! (std::atomic<bool> is lock-free); it must outlive the search.
  const std::atomic<bool>* stop_flag = nullptr;
  //! Evaluated candidates tuning::Result::evaluated keeps, the first in grid order (the Pareto
  //! frontier of those that fit is kept whatever the limit); 0 keeps only the frontier.
  int evaluated_limit = 20000;
  //! After the search, the configurations of this many of the best plans (distinct
  //! configurations, best first) are searched again for the layers per stage their plan runs
  //! fastest on (search_layout, tune/layout_search.hpp), each layout tried built and simulated
  //! in the plan's checkpoint mode within its budget; each layout found becomes a
  //! configuration of its own, evaluated as every other. 0 = none. Needs a cost model whose
  //! layers per stage can be set (layout_cost: TransformerCost) and whose layers the request
  //! does not fix.
  int layout_search = 0;
  //! Layouts each layout search builds and simulates at most (LayoutSearchOptions).
  int layout_evaluations = 150;

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const std::string& name, const std::string& value, const std::string& want) {
      throw invalid_argument(
          field("tuning::Request." + name, value) + " is out of range; " + want + ".",
          "tuning::Request." + name, value);
    };
    if (ranks < 1) bad("ranks", std::to_string(ranks), "a pipeline needs at least 1 rank");
    if (global_batch < 1)
      bad("global_batch", std::to_string(global_batch), "a step needs at least 1 sequence");
    if (evaluated_limit < 0)
      bad("evaluated_limit", std::to_string(evaluated_limit),
          "keep 0 or more evaluated candidates (0: the Pareto frontier only)");
    check_lists(false);
    if (budget) {
      detail::check_budget_values(*budget);
      if (budget->per_rank.size() > static_cast<std::size_t>(ranks))
        bad("budget.per_rank", std::to_string(budget->per_rank.size()) + " entries",
            "give one entry per rank (" + std::to_string(ranks) + ") or fewer");
    }
  }

  //! The checks of everything but ranks, global batch and budget (a cluster search sets
  //! those per pipeline); with `any_divisor`, microbatch sizes need not divide global_batch.
  void check_lists(bool any_divisor) const {
    auto bad = [](const std::string& name, const std::string& value, const std::string& want) {
      throw invalid_argument(
          field("tuning::Request." + name, value) + " is out of range; " + want + ".",
          "tuning::Request." + name, value);
    };
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
      any_size = any_size || any_divisor || global_batch % b == 0;
    }
    if (!any_size)
      bad("microbatch_sizes", "{" + join(microbatch_sizes) + "}",
          "none divides global_batch = " + std::to_string(global_batch) +
              "; include a divisor such as 1");
    if (slices.empty()) bad("slices", "{}", "give at least one slice count, e.g. {1}");
    for (int k : slices)
      if (k < 1) bad("slices", std::to_string(k), "every slice count must be at least 1");
    if (fine_wgrad && wgrad_parts < 0)
      bad("wgrad_parts", std::to_string(wgrad_parts),
          "cut each W into at least 1 part, or 0: one per weight GEMM (TransformerCost)");
    if (checkpoints.empty() && !full_fallback && checkpoint_policies.empty())
      bad("checkpoints", "{}", "name at least one checkpoint mode, or keep full_fallback");
    for (const std::string& name : checkpoint_policies) {
      const CheckpointInfo* c = nullptr;
      try {
        c = &find_checkpoint(name);
      } catch (const parse_error&) {
        bad("checkpoint_policies", "\"" + name + "\"",
            "name a policy registered with register_checkpoint");
      }
      if (c->mode)
        bad("checkpoint_policies", "\"" + name + "\"",
            "a built-in mode goes in tuning::Request.checkpoints, not here");
    }
    if (threads < 0)
      bad("threads", std::to_string(threads), "use 0 (one per core) or a positive count");
    if (layout_search < 0 || layout_search > 64)
      bad("layout_search", std::to_string(layout_search),
          "search the layouts of 0 (none) to 64 of the best plans");
    if (layout_evaluations < 1 || layout_evaluations > 100000)
      bad("layout_evaluations", std::to_string(layout_evaluations),
          "give 1 to 100,000 layouts to try per search");
    if (!(time_limit >= 0) || !std::isfinite(time_limit))
      bad("time_limit", std::to_string(time_limit),
          "use 0 (no limit) or a positive number of seconds");
  }

 private:
  static std::string join(const std::vector<int>& v) {
    std::string s;
    for (int x : v)
      s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
  }
};

//! A search over a whole cluster: every way to run `gpus` GPUs as pipeline × data ×
//! tensor parallelism (Megatron-LM's placement, tensor innermost), each with the layer
//! splits, and inside each pipeline everything tuning::Request searches.
struct ClusterRequest {
  //! Most GPUs a cluster search takes (the command's --gpus and a cluster file's "gpus" too).
  static constexpr int max_gpus = 1 << 16;
  int gpus = 1;           //!< GPUs in all, N
  int gpus_per_node = 0;  //!< GPUs of a node; 0 = the device's ranks_per_node
  int global_batch = 1;   //!< sequences per step over all data-parallel replicas
  //! What to search inside each pipeline: bases, chunks, microbatch sizes, checkpoints,
  //! slices, fine W, Mario options, threads, time limit (its ranks, global_batch and budget
  //! are set per pipeline; the budget is each GPU's device memory less its static bytes).
  Request search{};
  //! Pipeline sizes tried; empty = every divisor of N the rest allows.
  std::vector<int> pipeline{};
  //! Tensor-parallel degrees tried; empty = every divisor of the node size that divides N,
  //! the heads, the key/value heads and the MLP width.
  std::vector<int> tensor{};
  //! ZeRO stage used wherever there are data-parallel replicas (1: Megatron-LM's distributed
  //! optimizer). The cost model gives a higher stage the same time and less memory, so the
  //! search runs the highest stage allowed rather than each.
  int zero = 1;
  //! Sequence parallelism with tensor parallelism (the same collective bytes, less memory:
  //! it dominates, so it is on unless turned off).
  bool sequence_parallel = true;
  //! Layer splits tried; the balanced split is skipped where it equals the even one.
  std::vector<LayerSplit> splits{LayerSplit::Even, LayerSplit::Balanced};
  //! Count the optimizer step and each rank's workspace (Parallelism::whole_step).
  bool whole_step = true;

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const std::string& name, const std::string& value, const std::string& want) {
      throw invalid_argument(
          field("tuning::ClusterRequest." + name, value) + " is out of range; " + want + ".",
          "tuning::ClusterRequest." + name, value);
    };
    // Bounded so that the search's loops over pipeline sizes and node sizes end soon.
    if (gpus < 1 || gpus > max_gpus)
      bad("gpus", std::to_string(gpus),
          "a cluster has from 1 to " + std::to_string(max_gpus) + " GPUs");
    if (gpus_per_node < 0 || gpus_per_node > DeviceSpec::max_ranks_per_node)
      bad("gpus_per_node", std::to_string(gpus_per_node),
          "use 0 (the device's) or a count from 1 to " +
              std::to_string(DeviceSpec::max_ranks_per_node));
    if (global_batch < 1)
      bad("global_batch", std::to_string(global_batch), "a step needs at least 1 sequence");
    for (int p : pipeline)
      if (p < 1) bad("pipeline", std::to_string(p), "every pipeline size must be at least 1");
    for (int t : tensor)
      if (t < 1) bad("tensor", std::to_string(t), "every tensor degree must be at least 1");
    if (zero < 0 || zero > 2) bad("zero", std::to_string(zero), "use 0, 1 or 2");
    if (splits.empty()) bad("splits", "{}", "give at least one layer split, e.g. {Even}");
    search.check_lists(true);
  }
};
}  // namespace tuning

}  // namespace pipesched
