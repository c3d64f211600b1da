// TrainingData: where a step's inputs come from, how its loss is computed, and, with
// vocabulary parallelism, how the output layer's shards compute it between them.
#pragma once

#include <cstddef>
#include <functional>

namespace pipesched {

//! The output layer and loss of a model split over the ranks by vocabulary (vocabulary
//! parallelism; a schedule's VOCAB_F and VOCAB_B, pass/vocabulary.hpp): rank r holds shard r.
//! For each (microbatch, slice) the executor sends the last stage's output to every rank; a
//! VOCAB_F runs `forward` of the rank's shard on it and sends the partial it returns to every
//! other rank; each rank merges the partials of every shard (`merge`, in increasing shard order,
//! so every rank holds the same merged partial) before the first action that needs them — the
//! rank's VOCAB_B (`backward`: the shard's weight gradient) and, on the last stage's rank, the
//! last stage's backward, whose output gradient `loss` gives from the merged partial. A shard
//! keeps what its VOCAB_B needs between the two calls, and `held_bytes` says how many bytes
//! (counted in the rank's held bytes from the VOCAB_F to the VOCAB_B). The calls of one shard
//! come from one thread (its rank's); different shards' calls may run at once.
template <class Tensor>
struct VocabularyPasses {
  //! VOCAB_F of shard `shard`: the partial for the last stage's output `x` of the unit.
  std::function<Tensor(int shard, const Tensor& x, int microbatch, int slice)> forward{};
  //! Merges the partial `other` into `into`.
  std::function<void(Tensor& into, const Tensor& other)> merge{};
  //! On the last stage's rank: adds the unit's loss into `loss` and returns the gradient of the
  //! step loss with respect to the last stage's output, from the partial merged over every shard.
  std::function<Tensor(const Tensor& merged, int microbatch, int slice, double& loss)> loss{};
  //! VOCAB_B of shard `shard`: adds its weight gradient for the unit from the merged partial and
  //! drops what its forward kept.
  std::function<void(int shard, const Tensor& merged, int microbatch, int slice)> backward{};
  //! Sets shard `shard`'s accumulated weight gradient to zero; called on each rank before its
  //! list, with its stage models' zero_gradients (optional).
  std::function<void(int shard)> zero_gradients{};
  //! Bytes shard `shard` keeps for the unit after its forward (optional; none: 0).
  std::function<std::size_t(int shard, int microbatch, int slice)> held_bytes{};

  //! @{
  //! The input embedding split the same way (a schedule's EMBED_F and EMBED_B): EMBED_F runs
  //! `input_forward` of the rank's shard, its lookups of the unit's tokens it holds (zeros for
  //! the others), and sends them to the first stage's rank, which merges every shard's with
  //! `input_merge` (in increasing shard order) into the first stage's input before its forward.
  //! The first stage's input gradient goes to every rank, whose EMBED_B gives it to
  //! `input_backward` (the shard's rows' gradient). Called from the shards' ranks' threads.
  std::function<Tensor(int shard, int microbatch, int slice)> input_forward{};
  std::function<void(Tensor& into, const Tensor& other)> input_merge{};
  std::function<void(int shard, const Tensor& dx, int microbatch, int slice)> input_backward{};
  //! @}

  //! True when forward, merge, loss and backward are set.
  explicit operator bool() const noexcept { return forward && merge && loss && backward; }
  //! True when the input embedding's hooks are set too.
  bool splits_input() const noexcept {
    return static_cast<bool>(*this) && input_forward && input_merge && input_backward;
  }
};

//! Where a step's data comes from. `input(microbatch, slice)` gives stage 0's input;
//! `loss(output, microbatch, slice, loss)` takes the last stage's output, adds that unit's
//! contribution to the step loss into `loss` and returns the gradient of the step loss with
//! respect to `output`. Both are called from the threads of the ranks that hold the first
//! and the last stage, so they must be safe to call concurrently. A schedule with vocabulary
//! passes uses `vocabulary` instead of `loss`.
template <class Tensor>
struct TrainingData {
  //! Stage 0's input for (microbatch, slice).
  std::function<Tensor(int microbatch, int slice)> input;
  //! Adds the unit's loss into `loss` and returns the gradient with respect to `output`.
  std::function<Tensor(const Tensor& output, int microbatch, int slice, double& loss)> loss;
  //! The output layer's shards, for a schedule with vocabulary passes (empty: none).
  VocabularyPasses<Tensor> vocabulary{};
};

}  // namespace pipesched
