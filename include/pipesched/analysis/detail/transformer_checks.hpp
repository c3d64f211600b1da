// TransformerCost's checks beyond each description's own: that the tensor-parallel degree
// divides what a tensor group splits, and that the model, its layer split and its slices fit
// a problem's stages and slices. The messages name the fields (ModelShape.layers, ...).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/analysis/parallelism.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/message.hpp"

namespace pipesched::detail::transformer {

// Throws invalid_argument when Parallelism::tensor does not divide the heads, the key/value
// heads, the MLP width or the node size.
inline void check_tensor_degree(const ModelShape& model, const DeviceSpec& device,
                                const Parallelism& parallel) {
  const int t = parallel.tensor;
  if (t == 1) return;
  // `what` names the divided figure; built only when it does not divide (every cost query
  // checks, and a Message allocates).
  auto divides = [&](long long value, auto what) {
    if (value % t != 0)
      throw invalid_argument(field("Parallelism.tensor", t) + " does not divide " + what() + " = " +
                                 std::to_string(value) +
                                 "; a tensor group splits them evenly (use a divisor of it).",
                             "Parallelism.tensor", std::to_string(t));
  };
  divides(model.heads, [] { return field("ModelShape.heads"); });
  divides(model.key_value_heads(),
          [] { return "the key/value heads (" + field("ModelShape.kv_heads") + ")"; });
  divides(model.ffn(), [] { return "the MLP width (" + field("ModelShape.ffn_hidden") + ")"; });
  divides(device.ranks_per_node, [] { return field("DeviceSpec.ranks_per_node"); });
}

// Throws invalid_problem (invalid_argument for Problem.slices) when the model does not fit
// `S` stages per replica (Parallelism::layers one count per stage, covering the model; else
// at least one layer per stage) or `K` slices (slice_lengths one positive length per slice,
// covering the sequence; else at least one token per slice).
inline void check_problem_fit(const ModelShape& model, const Parallelism& parallel,
                              const std::vector<int>& slice_lengths, int S, int K) {
  if (S < 1)
    throw invalid_problem("TransformerCost: the problem has " + std::to_string(S) +
                          " stages; it needs at least 1.");
  if (!parallel.layers.empty()) {
    if (static_cast<int>(parallel.layers.size()) != S)
      throw invalid_problem("TransformerCost: " + field("Parallelism.layers") + " has " +
                            std::to_string(parallel.layers.size()) +
                            " entries but the model is split over " + std::to_string(S) +
                            " stages; give one layer count per stage.");
    long long sum = 0;
    for (int n : parallel.layers)
      sum += n;
    if (sum != model.layers)
      throw invalid_problem("TransformerCost: " + field("Parallelism.layers") + " sum to " +
                            std::to_string(sum) + " layers but " +
                            field("ModelShape.layers", model.layers) +
                            "; they must cover the model exactly.");
  } else if (model.layers < S)
    throw invalid_problem("TransformerCost: " + field("ModelShape.layers", model.layers) +
                          " cannot be split over " + std::to_string(S) +
                          " stages; every stage needs at least one layer "
                          "(use at most " +
                          std::to_string(model.layers) + " stages).");
  if (K < 1)
    throw invalid_argument(
        "TransformerCost: " + field("Problem.slices", K) + " is out of range; use 1 or more.",
        "Problem.slices", std::to_string(K));
  if (slice_lengths.empty()) {
    if (K > model.sequence)
      throw invalid_argument("TransformerCost: " + field("Problem.slices", K) + " exceeds " +
                                 field("ModelShape.sequence", model.sequence) +
                                 "; every slice needs at least one token.",
                             "Problem.slices", std::to_string(K));
    return;
  }
  if (static_cast<int>(slice_lengths.size()) != K)
    throw invalid_problem("TransformerCost: slice_lengths has " +
                          std::to_string(slice_lengths.size()) +
                          " entries but the problem "
                          "has slices = " +
                          std::to_string(K) + "; give one length per slice.");
  long long sum = 0;
  for (std::size_t k = 0; k < slice_lengths.size(); ++k) {
    if (slice_lengths[k] < 1)
      throw invalid_problem("TransformerCost: slice_lengths[" + std::to_string(k) +
                            "] = " + std::to_string(slice_lengths[k]) +
                            " is out of range; every slice needs at least one token.");
    sum += slice_lengths[k];
  }
  if (sum != model.sequence)
    throw invalid_problem("TransformerCost: slice_lengths sum to " + std::to_string(sum) +
                          " tokens but " + field("ModelShape.sequence", model.sequence) +
                          "; they must cover the sequence "
                          "exactly.");
}

}  // namespace pipesched::detail::transformer
