// Cost factories for the tuner: a microbatch size in, the cost model of microbatches of that
// size out, and the memory budget a cost model implies when the caller gives none.
#pragma once

#include <concepts>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"

namespace pipesched {

//! A callable that, given a microbatch size (sequences per microbatch), returns the cost model
//! of microbatches of that size. It may throw invalid_problem for a size it cannot model; the
//! tuner then skips that size.
template <class F>
concept cost_factory = requires(const F& f, int microbatch_size) {
  { f(microbatch_size) } -> cost_model;
};

namespace tuning {

//! UniformCost as a factory. Its durations and memory are per microbatch whatever the
//! microbatch holds, so only microbatch size 1 has a meaning; other sizes are refused.
struct UniformCostFactory {
  UniformCost cost;  //!< the cost model every microbatch size gets

  //! `cost` for microbatch size 1; throws invalid_problem for any other size.
  UniformCost operator()(int microbatch_size) const {
    if (microbatch_size != 1)
      throw invalid_problem(
          "UniformCost has no microbatch size (its figures are per microbatch): "
          "microbatch size " +
          std::to_string(microbatch_size) +
          " cannot be modelled; search microbatch size 1 only, or use "
          "TransformerCost.");
    return cost;
  }
};

//! TransformerCost as a factory: the model with `model.microbatch_size` set to the size asked
//! for, on `device`, with `parallel`.
struct TransformerCostFactory {
  ModelShape model;        //!< the model (its microbatch_size is replaced)
  DeviceSpec device;       //!< the device every rank runs on
  Parallelism parallel{};  //!< tensor, data and ZeRO degrees, layer split
  //! The model's own layers as measured (TransformerCost::measured); null: the formulas.
  std::shared_ptr<const LayerProfile> measured = nullptr;

  //! The cost model of microbatches of `microbatch_size` sequences (checked).
  TransformerCost operator()(int microbatch_size) const {
    TransformerCost c{model, device, {}, parallel};
    c.model.microbatch_size = microbatch_size;
    c.measured = measured;
    c.check();
    return c;
  }
};
}  // namespace tuning

static_assert(cost_factory<tuning::UniformCostFactory>);
static_assert(cost_factory<tuning::TransformerCostFactory>);

//! The per-rank memory budget `cost` implies for a schedule of `problem` on `placement` when
//! the caller gives none: for a cost model of a device's memory (device_memory_cost, as
//! TransformerCost) its memory_budget, each rank's device memory minus what its stages'
//! weights, gradients and optimizer state take (throws invalid_problem when that alone fills a
//! device); for other cost models no limit.
template <cost_model Cost>
MemoryBudget default_memory_budget(const Cost& cost, const Problem& problem,
                                   const Placement& placement) {
  if constexpr (device_memory_cost<Cost>) {
    return cost.memory_budget(problem, placement);
  } else {
    (void)cost;
    (void)problem;
    (void)placement;
    return MemoryBudget{};
  }
}

}  // namespace pipesched
