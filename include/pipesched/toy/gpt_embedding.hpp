// The toy causal GPT's first layer on the host, float or double: token embedding plus learned
// position embedding, a `layer` with a hand-written backward that takes a slice's position.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/gpt_config.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! Token embedding plus learned position embedding: token ids [batch, sequence] (held as T
//! values) → [batch, sequence, hidden]. Parameters, in order: token table [vocabulary, hidden],
//! position table [sequence, hidden]. A sequence slice passes its start as `offset`: its tokens
//! take positions offset, offset + 1, ...
template <class T>
class GptEmbedding {
 public:
  using tensor_type = Tensor<T>;  //!< token ids in, activations out
  //! What one microbatch (or slice) leaves behind between calls.
  struct Stash {
    Tensor<T> ids;   //!< forward: the token ids
    Tensor<T> dy;    //!< backward_input: the output gradient
    int offset = 0;  //!< position of the first token
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward
  enum : std::size_t { tokens, positions, tensor_count };

  //! The embedding of `config`'s vocabulary, hidden size and sequence, initialized from
  //! `config.seed`.
  explicit GptEmbedding(const GptConfig& config)
      : vocabulary_(config.vocabulary), hidden_(config.hidden), sequence_(config.sequence) {
    detail::check_gpt_config(config, "GptEmbedding");
    Random random(config.seed, detail::gpt_embedding_stream);
    params_.push_back(uniform_tensor<T>({vocabulary_, hidden_}, random, 1.0));
    params_.push_back(uniform_tensor<T>({sequence_, hidden_}, random, 0.5));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! ids [batch, sequence] → [batch, sequence, hidden]. Every id must be a whole number in
  //! [0, vocabulary) and the sequence no longer than the config's.
  Tensor<T> forward(const Tensor<T>& ids, Stash& stash) const { return forward(ids, stash, 0); }

  //! ids [batch, tokens] of a slice starting at position `offset` → [batch, tokens, hidden];
  //! offset + tokens may not pass the config's sequence.
  Tensor<T> forward(const Tensor<T>& ids, Stash& stash, int offset) const {
    detail::check_token_shape(ids.shape, offset, sequence_, "GptEmbedding");
    const int b = ids.dim(0);
    const int s = ids.dim(1);
    Tensor<T> y({b, s, hidden_});
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const int id = token_id(ids(i, t), i, t);
        for (int d = 0; d < hidden_; ++d)
          y(i, t, d) = params_[tokens](id, d) + params_[positions](offset + t, d);
      }
    stash = Stash{};
    stash.ids = ids;
    stash.offset = offset;
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  //! Keeps dy for the weight pass. Token ids have no gradient: returns zeros [batch, sequence].
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptEmbedding",
                          "backward_input");
    detail::check_gradient_shape(dy.shape, {stash.ids.dim(0), stash.ids.dim(1), hidden_},
                                 "GptEmbedding", "backward_input");
    stash.dy = dy;
    stash.phase = detail::StashPhase::InputDone;
    return Tensor<T>(stash.ids.shape);
  }

  //! Adds this microbatch's gradients of both tables and empties the stash.
  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptEmbedding",
                          "backward_weight");
    const int b = stash.ids.dim(0);
    const int s = stash.ids.dim(1);
    using S = typename detail::GradientSums<T>::sum_type;
    S* dtok = grads_.sum(tokens);
    S* dpos = grads_.sum(positions);
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const auto tok_row = static_cast<std::ptrdiff_t>(stash.ids(i, t)) * hidden_;
        const auto pos_row = static_cast<std::ptrdiff_t>(stash.offset + t) * hidden_;
        for (int d = 0; d < hidden_; ++d) {
          const S g = stash.dy(i, t, d);
          dtok[tok_row + d] += g;
          dpos[pos_row + d] += g;
        }
      }
    grads_.publish({tokens, positions});
    stash = Stash{};
  }

  //! Bytes `stash` holds now.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return detail::gpt_embedding_held_bytes(stash);
  }

  //! Token table, position table.
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! Token table, position table.
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<Tensor<T>> gradients() noexcept { return grads_.tensors(); }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradients (and the sums behind them) to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  int token_id(T value, int i, int t) const {
    if (!(value >= T(0) && value < T(vocabulary_)) || value != std::floor(value))
      throw invalid_problem("GptEmbedding::forward: token at [" + std::to_string(i) + ", " +
                            std::to_string(t) + "] is " + std::to_string(double(value)) +
                            "; token ids must be whole numbers in [0, " +
                            std::to_string(vocabulary_) + ")");
    return static_cast<int>(value);
  }

  int vocabulary_;
  int hidden_;
  int sequence_;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

}  // namespace pipesched::toy
