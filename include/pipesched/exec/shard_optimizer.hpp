// The optimizer of a ZeRO-sharded data-parallel job (Rajbhandari et al. 2020): each replica
// updates only its shard of every gradient bucket, with the optimizer state of that shard
// alone, and the replicas then all-gather the updated weights. A ShardOptimizer is the update
// rule on one shard's flat values.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"

namespace pipesched {

//! An optimizer's update rule on one shard of flat values: `step(weights, gradients, state)`
//! updates `weights` in place from the reduced `gradients` (the same length) and the shard's
//! own `state` (`state_per_value` values per weight, laid out value-major: state[k·n + i] is
//! the k-th state value of weight i; zero before the first step). It runs in double on every
//! stage value type. What it throws fails the step at its optimizer, which then rolls back.
struct ShardOptimizer {
  //! Optimizer state values per weight (0: SGD; 1: SGD with momentum; 2: Adam's moments).
  int state_per_value = 0;
  //! The update of one shard.
  std::function<void(std::span<double> weights, std::span<const double> gradients,
                     std::span<double> state)>
      step{};
  //! True when a rule is set.
  explicit operator bool() const noexcept { return static_cast<bool>(step); }
};

//! SGD on a shard: with `momentum` 0, w ← w − lr·g (no state); else PyTorch's heavy-ball form
//! v ← momentum·v + g, w ← w − lr·v (one state value per weight, the velocity v).
inline ShardOptimizer sgd_shards(double learning_rate, double momentum = 0) {
  if (!std::isfinite(learning_rate))
    throw invalid_argument("sgd_shards: " + field("learning_rate", learning_rate) +
                               " is not a number; give a finite learning rate.",
                           "learning_rate", detail::format_general(learning_rate));
  if (!std::isfinite(momentum) || momentum < 0)
    throw invalid_argument("sgd_shards: " + field("momentum", momentum) +
                               " is out of range; give a finite momentum of 0 or more.",
                           "momentum", detail::format_general(momentum));
  ShardOptimizer o;
  o.state_per_value = momentum == 0 ? 0 : 1;
  o.step = [learning_rate, momentum](std::span<double> w, std::span<const double> g,
                                     std::span<double> state) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      double step = g[i];
      if (momentum != 0) {
        state[i] = momentum * state[i] + g[i];
        step = state[i];
      }
      w[i] -= learning_rate * step;
    }
  };
  return o;
}

}  // namespace pipesched
