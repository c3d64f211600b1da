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
//! take positions offset, offset + 1, ... With GptConfig::split_input the token table is held
//! by GptInputShards instead: the layer takes the tokens' embeddings [batch, sequence, hidden],
//! adds the positions' and returns their gradient; its only parameter is the position table
//! (the same draws as the whole layer's).
template <class T>
class GptEmbedding {
 public:
  using tensor_type = Tensor<T>;  //!< token ids in, activations out
  //! What one microbatch (or slice) leaves behind between calls.
  struct Stash {
    Tensor<T> ids;      //!< forward: the token ids
    Tensor<T> dy;       //!< backward_input: the output gradient
    int offset = 0;     //!< position of the first token
    int sequences = 0;  //!< sequences of the microbatch
    int length = 0;     //!< tokens of each (the slice's)
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward
  enum : std::size_t { tokens, positions, tensor_count };

  //! The embedding of `config`'s vocabulary, hidden size and sequence, initialized from
  //! `config.seed`.
  explicit GptEmbedding(const GptConfig& config)
      : vocabulary_(config.vocabulary),
        hidden_(config.hidden),
        sequence_(config.sequence),
        split_(config.split_input) {
    detail::check_gpt_config(config, "GptEmbedding");
    Random random(config.seed, detail::gpt_embedding_stream);
    // Drawn either way: the position table follows it in the stream.
    Tensor<T> table = uniform_tensor<T>({vocabulary_, hidden_}, random, 1.0);
    if (!split_) params_.push_back(std::move(table));
    params_.push_back(uniform_tensor<T>({sequence_, hidden_}, random, 0.5));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! True when the token table is split off (GptConfig::split_input).
  bool split_input() const noexcept { return split_; }

  //! ids [batch, sequence] → [batch, sequence, hidden]. Every id must be a whole number in
  //! [0, vocabulary) and the sequence no longer than the config's.
  Tensor<T> forward(const Tensor<T>& ids, Stash& stash) const { return forward(ids, stash, 0); }

  //! ids [batch, tokens] of a slice starting at position `offset` → [batch, tokens, hidden];
  //! offset + tokens may not pass the config's sequence.
  Tensor<T> forward(const Tensor<T>& ids, Stash& stash, int offset) const {
    if (split_) return forward_split(ids, stash, offset);
    detail::check_token_shape(ids.shape, offset, sequence_, "GptEmbedding");
    const int b = ids.dim(0);
    const int s = ids.dim(1);
    Tensor<T> y({b, s, hidden_});
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const int id = token_id(ids(i, t), i, t);
        for (int d = 0; d < hidden_; ++d)
          y(i, t, d) = params_[tokens](id, d) + params_[position_index()](offset + t, d);
      }
    stash = Stash{};
    stash.ids = ids;
    stash.offset = offset;
    stash.sequences = b;
    stash.length = s;
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  //! Keeps dy for the weight pass. Token ids have no gradient: returns zeros [batch, sequence];
  //! with the token table split off, returns dy, the gradient of the tokens' embeddings.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptEmbedding",
                          "backward_input");
    const std::vector<int> shape{stash.sequences, stash.length, hidden_};
    detail::check_gradient_shape(dy.shape, shape, "GptEmbedding", "backward_input");
    stash.dy = dy;
    stash.phase = detail::StashPhase::InputDone;
    if (split_) return dy;
    return Tensor<T>(std::vector<int>{stash.sequences, stash.length});
  }

  //! Adds this microbatch's gradients of both tables and empties the stash.
  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptEmbedding",
                          "backward_weight");
    const int b = stash.sequences;
    const int s = stash.length;
    using S = typename detail::GradientSums<T>::sum_type;
    S* dtok = split_ ? nullptr : grads_.sum(tokens);
    S* dpos = grads_.sum(position_index());
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const auto pos_row = static_cast<std::ptrdiff_t>(stash.offset + t) * hidden_;
        for (int d = 0; d < hidden_; ++d)
          dpos[pos_row + d] += static_cast<S>(stash.dy(i, t, d));
        if (split_) continue;
        const auto tok_row = static_cast<std::ptrdiff_t>(stash.ids(i, t)) * hidden_;
        for (int d = 0; d < hidden_; ++d)
          dtok[tok_row + d] += static_cast<S>(stash.dy(i, t, d));
      }
    if (split_)
      grads_.publish({position_index()});
    else
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
  // The position table's place among the parameters.
  std::size_t position_index() const noexcept {
    return split_ ? std::size_t{0} : std::size_t{positions};
  }

  // With the token table split off: x [batch, tokens, hidden], the tokens' embeddings, plus
  // the positions' rows.
  Tensor<T> forward_split(const Tensor<T>& x, Stash& stash, int offset) const {
    if (x.shape.size() != 3 || x.dim(2) != hidden_ || x.dim(0) < 1 || x.dim(1) < 1)
      throw invalid_problem(
          "GptEmbedding::forward: with the token table split off (split_input) the input is the "
          "tokens' embeddings [batch, tokens, " +
          std::to_string(hidden_) + "], but it has " + std::to_string(x.shape.size()) +
          " dimensions" + (x.shape.size() == 3 ? " of width " + std::to_string(x.dim(2)) : "") +
          ".");
    if (offset < 0 || offset + x.dim(1) > sequence_)
      throw invalid_problem("GptEmbedding::forward: tokens " + std::to_string(offset) + ".." +
                            std::to_string(offset + x.dim(1) - 1) + " pass the position table's " +
                            std::to_string(sequence_) + " rows.");
    Tensor<T> y = x;
    const Tensor<T>& pos = params_[position_index()];
    for (int i = 0; i < x.dim(0); ++i)
      for (int t = 0; t < x.dim(1); ++t)
        for (int d = 0; d < hidden_; ++d)
          y(i, t, d) += pos(offset + t, d);
    stash = Stash{};
    stash.sequences = x.dim(0);
    stash.length = x.dim(1);
    stash.offset = offset;
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

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
  bool split_ = false;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

}  // namespace pipesched::toy
