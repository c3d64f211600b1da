// What a cost model can answer beyond the three questions every one answers (cost_model:
// durations, memory, transfers): the capabilities the planner asks for by name. A cost model
// opts in to a capability by answering its questions; TransformerCost answers them all,
// UniformCost none. A planner step that needs a capability a cost model lacks refuses with a
// sentence that names it (or, where the step is only a refinement, does without it: a cost
// model that counts no layers gets no layers-per-stage figures).
#pragma once

#include <concepts>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/parallelism.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! A cost model of a model made of layers, cut into stages:
//! - `layer_count()`: the layers of the whole model (a pipeline has at most that many stages
//!   per replica);
//! - `layers_of(ctx, stage)`: the layers `stage` holds;
//! - `evenly_layered()`: the same cost model with its layers split evenly over whatever stages
//!   a problem has (any per-stage list or balanced split dropped): what lower bounds and slice
//!   cuts, which must not depend on one schedule's split, price.
//! The tuner refuses a pipeline deeper than the model, tries the chunk counts that cut it into
//! equal stages and reports each plan's layers per stage.
template <class C>
concept layered_cost = cost_model<C> && requires(const C& c, const CostContext& ctx, int stage) {
  { c.layer_count() } -> std::convertible_to<int>;
  { c.layers_of(ctx, stage) } -> std::convertible_to<int>;
  { c.evenly_layered() } -> std::convertible_to<C>;
};

//! A cost model of sequences that can be cut into slices of any lengths (MEPipe's and
//! TeraPipe's slicing): `sequence_tokens()` is the sequence length, and `slice_lengths` (a
//! std::vector<int>, empty for the uniform cut) the tokens of each slice, which it prices
//! (a later slice of a causal model attends to a longer prefix). Balanced and TeraPipe
//! slicing (analysis/slicing.hpp) choose the lengths by timing spans of such a model.
template <class C>
concept sliceable_cost = cost_model<C> && std::copyable<C> && requires(const C& c, C& m) {
  { c.sequence_tokens() } -> std::convertible_to<int>;
  requires std::same_as<std::remove_cvref_t<decltype(m.slice_lengths)>, std::vector<int>>;
};

//! A cost model that can cut a weight gradient per weight GEMM (MEPipe's cut): it counts the
//! weight GEMMs of a stage (`weight_gemms(ctx, stage)`) and shares a W's work between its
//! parts as `wgrad_split` says (WGradSplit::PerGemm: one run of GEMMs per part).
template <class C>
concept per_gemm_wgrad_cost = cost_model<C> &&
    requires(const C& c, C& m, const CostContext& ctx, int stage) {
  { c.weight_gemms(ctx, stage) } -> std::convertible_to<int>;
  m.wgrad_split = WGradSplit::PerGemm;
};

//! A cost model of a device with a known memory: `static_bytes(ctx, rank)` is what a rank holds
//! whatever the schedule (weights, gradients, optimizer state), and `memory_budget(problem,
//! placement)` each rank's room for activations (its device's usable memory less its static
//! bytes; throws invalid_problem where nothing is left). The tuner plans within that budget
//! when none is given and reports each plan's largest GPU memory, static bytes included.
template <class C>
concept device_memory_cost = cost_model<C> &&
    requires(const C& c, const CostContext& ctx, int rank, const Problem& problem,
             const Placement& placement) {
  { c.static_bytes(ctx, rank) } -> std::convertible_to<double>;
  { c.memory_budget(problem, placement) } -> std::convertible_to<MemoryBudget>;
};

//! A cost model that counts FLOPs: `training_flops_per_sequence()` (every FLOP a training step
//! spends on one sequence, attention included), `usual_training_flops_per_sequence()` (the
//! usual 6 x parameters x tokens count) and `peak_flops()` (one GPU's peak FLOP/s). The tuner
//! reports each plan's model FLOP utilization (MFU) from them.
template <class C>
concept flop_counting_cost = cost_model<C> && requires(const C& c) {
  { c.training_flops_per_sequence() } -> std::convertible_to<double>;
  { c.usual_training_flops_per_sequence() } -> std::convertible_to<double>;
  { c.peak_flops() } -> std::convertible_to<double>;
};

//! A cost model of a pipeline whose ranks are themselves data- and tensor-parallel groups:
//! `parallelism()` is its Parallelism (degrees, ZeRO stage, layer split). Its step then
//! includes the data-parallel gradient reduction and optimizer step (has_step_tail), and the
//! cluster search (tune_cluster) searches its degrees.
template <class C>
concept parallel_cost = cost_model<C> && requires(const C& c) {
  { c.parallelism() } -> std::convertible_to<Parallelism>;
};

}  // namespace pipesched
