// The toy causal GPT's last layer on the host, float or double: final LayerNorm and LM head, a
// `layer` with a hand-written backward.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/gpt_config.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! Final LayerNorm and LM head: [batch, sequence, hidden] → logits [batch, sequence,
//! vocabulary]. Parameters, in order: LN γ, β; W [vocabulary, hidden] (no bias). With
//! `GptConfig::split_output` the head's W is held by `GptVocabularyShard`s instead: the layer
//! is the final LayerNorm alone ([batch, sequence, hidden] → the same), parameters γ, β.
template <class T>
class GptHead {
 public:
  using tensor_type = Tensor<T>;  //!< activations in, logits out
  //! What one microbatch (or slice) leaves behind between calls.
  struct Stash {
    //! @{
    //! forward: LayerNorm's normalized input and inverse deviation.
    Tensor<T> xhat, rstd;
    //! @}
    Tensor<T> dlogits;  //!< backward_input: the output's gradient (logits, or X when split)
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward
  enum : std::size_t { ln_gamma, ln_beta, weight, tensor_count };

  //! The head of `config`'s hidden size and vocabulary, initialized from `config.seed`.
  explicit GptHead(const GptConfig& config)
      : hidden_(config.hidden), vocabulary_(config.vocabulary), split_(config.split_output) {
    detail::check_gpt_config(config, "GptHead");
    Random random(config.seed, detail::gpt_head_stream);
    params_.push_back(uniform_tensor<T>({hidden_}, random, 0.1, 1.0));
    params_.push_back(uniform_tensor<T>({hidden_}, random, 0.1));
    if (!split_)
      params_.push_back(
          uniform_tensor<T>({vocabulary_, hidden_}, random, 1.0 / std::sqrt(double(hidden_))));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! True when the head's W is split off (`GptConfig::split_output`): the layer is the final
  //! LayerNorm alone.
  bool split_output() const noexcept { return split_; }
  //! The width of the output: the vocabulary, or hidden when split.
  int output_width() const noexcept { return split_ ? hidden_ : vocabulary_; }

  //! x [batch, sequence, hidden] → logits [batch, sequence, vocabulary] (split: the LayerNorm's
  //! output [batch, sequence, hidden]).
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    detail::check_activation_shape(x.shape, hidden_, "GptHead", "forward");
    const int b = x.dim(0);
    const int s = x.dim(1);
    const int n = b * s;
    stash = Stash{};
    stash.xhat = Tensor<T>({b, s, hidden_});
    stash.rstd = Tensor<T>({b, s});
    Tensor<T> normed({b, s, hidden_});
    detail::layer_norm_forward(x.begin_data(), params_[ln_gamma].begin_data(),
                               params_[ln_beta].begin_data(), stash.xhat.begin_data(),
                               stash.rstd.begin_data(), normed.begin_data(), n, hidden_);
    if (split_) {
      stash.phase = detail::StashPhase::Forwarded;
      return normed;
    }
    Tensor<T> logits({b, s, vocabulary_});
    detail::linear_forward(normed.begin_data(), params_[weight].begin_data(),
                           static_cast<const T*>(nullptr), logits.begin_data(), n, hidden_,
                           vocabulary_);
    stash.phase = detail::StashPhase::Forwarded;
    return logits;
  }

  //! dlogits [batch, sequence, vocabulary] (split: the gradient of the LayerNorm's output
  //! [batch, sequence, hidden]) → dx [batch, sequence, hidden].
  Tensor<T> backward_input(const Tensor<T>& dlogits, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptHead", "backward_input");
    const std::vector<int> expected{stash.xhat.dim(0), stash.xhat.dim(1), output_width()};
    detail::check_gradient_shape(dlogits.shape, expected, "GptHead", "backward_input");
    const int n = expected[0] * expected[1];
    Tensor<T> dnormed(stash.xhat.shape);
    if (split_)
      dnormed = dlogits;
    else
      detail::linear_backward_input(dlogits.begin_data(), params_[weight].begin_data(),
                                    dnormed.begin_data(), n, hidden_, vocabulary_);
    Tensor<T> dx(stash.xhat.shape);
    detail::layer_norm_backward_input(dnormed.begin_data(), stash.xhat.begin_data(),
                                      stash.rstd.begin_data(), params_[ln_gamma].begin_data(),
                                      dx.begin_data(), n, hidden_);
    stash.dlogits = dlogits;
    stash.rstd = Tensor<T>{};
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds this microbatch's gradients of W and the LayerNorm and empties the stash; the
  //! LayerNorm output is rebuilt from what is kept.
  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptHead", "backward_weight");
    const int n = stash.xhat.dim(0) * stash.xhat.dim(1);
    if (split_) {  // the LayerNorm's weights alone, from its output's gradient
      detail::layer_norm_backward_weight(stash.dlogits.begin_data(), stash.xhat.begin_data(),
                                         grads_.sum(ln_gamma), grads_.sum(ln_beta), n, hidden_);
      grads_.publish({ln_gamma, ln_beta});
      stash = Stash{};
      return;
    }
    Tensor<T> normed(stash.xhat.shape);
    detail::layer_norm_apply(stash.xhat.begin_data(), params_[ln_gamma].begin_data(),
                             params_[ln_beta].begin_data(), normed.begin_data(), n, hidden_);
    using S = typename detail::GradientSums<T>::sum_type;
    detail::linear_backward_weight(stash.dlogits.begin_data(), normed.begin_data(),
                                   grads_.sum(weight), static_cast<S*>(nullptr), n, hidden_,
                                   vocabulary_);
    Tensor<T> dnormed(stash.xhat.shape);
    detail::linear_backward_input(stash.dlogits.begin_data(), params_[weight].begin_data(),
                                  dnormed.begin_data(), n, hidden_, vocabulary_);
    detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat.begin_data(),
                                       grads_.sum(ln_gamma), grads_.sum(ln_beta), n, hidden_);
    grads_.publish({weight, ln_gamma, ln_beta});
    stash = Stash{};
  }

  //! Bytes `stash` holds now.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return detail::gpt_head_held_bytes(stash);
  }

  //! LN γ, LN β, W (split: LN γ, LN β).
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! LN γ, LN β, W (split: LN γ, LN β).
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<Tensor<T>> gradients() noexcept { return grads_.tensors(); }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradients (and the sums behind them) to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  int hidden_;
  int vocabulary_;
  bool split_;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

}  // namespace pipesched::toy
