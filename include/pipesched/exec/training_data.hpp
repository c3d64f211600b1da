// TrainingData: where a step's inputs come from and how its loss is computed.
#pragma once

#include <functional>

namespace pipesched {

//! Where a step's data comes from. `input(microbatch, slice)` gives stage 0's input;
//! `loss(output, microbatch, slice, loss)` takes the last stage's output, adds that unit's
//! contribution to the step loss into `loss` and returns the gradient of the step loss with
//! respect to `output`. Both are called from the threads of the ranks that hold the first
//! and the last stage, so they must be safe to call concurrently.
template <class Tensor>
struct TrainingData {
  //! Stage 0's input for (microbatch, slice).
  std::function<Tensor(int microbatch, int slice)> input;
  //! Adds the unit's loss into `loss` and returns the gradient with respect to `output`.
  std::function<Tensor(const Tensor& output, int microbatch, int slice, double& loss)> loss;
};

}  // namespace pipesched
