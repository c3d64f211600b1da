// The toy causal GPT on the host, float or double: token + position embedding, pre-LayerNorm
// transformer blocks (causal multi-head attention, GELU MLP), final LayerNorm + LM head — each
// a `layer` with a hand-written backward — and a pipeline stage made of them (a `stage_model`).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/memory.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! Shape of the toy GPT. `blocks` counts the whole model; a stage holds a share of them, the
//! first stage also the embedding and the last the LM head.
struct GptConfig {
  int vocabulary = 16;      //!< token ids are 0 … vocabulary − 1
  int hidden = 8;           //!< model width; a multiple of `heads`
  int heads = 2;            //!< attention heads
  int ffn = 32;             //!< inner width of each block's MLP
  int sequence = 8;         //!< longest sequence (rows of the position embedding)
  int blocks = 4;           //!< transformer blocks over all stages
  int microbatch_size = 2;  //!< sequences per microbatch
  std::uint64_t seed = 1;   //!< block i draws from stream (seed, i); embedding and head own ones
};

namespace detail {
// Random streams of the embedding and the head; block i uses stream i, far below these.
inline constexpr std::uint64_t gpt_embedding_stream = 0x454d424544000000ULL;
inline constexpr std::uint64_t gpt_head_stream = 0x4845414400000000ULL;

inline void check_gpt_config(const GptConfig& c, const char* who) {
  require_positive(c.vocabulary, who, "vocabulary");
  require_positive(c.hidden, who, "hidden");
  require_positive(c.heads, who, "heads");
  require_positive(c.ffn, who, "ffn");
  require_positive(c.sequence, who, "sequence");
  require_positive(c.microbatch_size, who, "microbatch_size");
  if (c.hidden % c.heads != 0)
    throw invalid_problem(std::string(who) + ": hidden is " + std::to_string(c.hidden) +
                          " and heads is " + std::to_string(c.heads) +
                          "; hidden must be a multiple of heads");
}

template <class T>
void check_activation_shape(const Tensor<T>& x, int hidden, const char* who, const char* op) {
  if (x.rank() != 3 || x.dim(0) < 1 || x.dim(1) < 1 || x.dim(2) != hidden)
    throw invalid_problem(std::string(who) + "::" + op + ": tensor shape is " +
                          shape_string(x.shape) + "; expected [batch, sequence, " +
                          std::to_string(hidden) + "] with batch, sequence >= 1");
}

template <class T>
void add_into(Tensor<T>& y, const Tensor<T>& x) {
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] += x[i];
}
}  // namespace detail

//! Token embedding plus learned position embedding: token ids [batch, sequence] (held as T
//! values) → [batch, sequence, hidden]. Parameters, in order: token table [vocabulary, hidden],
//! position table [sequence, hidden].
template <class T>
class GptEmbedding {
 public:
  using tensor_type = Tensor<T>;
  struct Stash {
    Tensor<T> ids;  // forward: the token ids
    Tensor<T> dy;   // backward_input: the output gradient
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;
  enum : std::size_t { tokens, positions, tensor_count };

  explicit GptEmbedding(const GptConfig& config)
      : vocabulary_(config.vocabulary), hidden_(config.hidden), sequence_(config.sequence) {
    detail::check_gpt_config(config, "GptEmbedding");
    Random random(config.seed, detail::gpt_embedding_stream);
    params_.push_back(uniform_tensor<T>({vocabulary_, hidden_}, random, 1.0));
    params_.push_back(uniform_tensor<T>({sequence_, hidden_}, random, 0.5));
    for (const Tensor<T>& p : params_)
      grads_.emplace_back(p.shape);
  }

  //! ids [batch, sequence] → [batch, sequence, hidden]. Every id must be a whole number in
  //! [0, vocabulary) and the sequence no longer than the config's.
  Tensor<T> forward(const Tensor<T>& ids, Stash& stash) const {
    if (ids.rank() != 2 || ids.dim(0) < 1 || ids.dim(1) < 1 || ids.dim(1) > sequence_)
      throw invalid_problem("GptEmbedding::forward: token tensor shape is " +
                            shape_string(ids.shape) +
                            "; expected [batch, sequence] with batch "
                            ">= 1 and 1 <= sequence <= " +
                            std::to_string(sequence_));
    const int b = ids.dim(0);
    const int s = ids.dim(1);
    Tensor<T> y({b, s, hidden_});
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const int id = token_id(ids(i, t), i, t);
        for (int d = 0; d < hidden_; ++d)
          y(i, t, d) = params_[tokens](id, d) + params_[positions](t, d);
      }
    stash = Stash{};
    stash.ids = ids;
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  //! Keeps dy for the weight pass. Token ids have no gradient: returns zeros [batch, sequence].
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptEmbedding",
                          "backward_input");
    const std::vector<int> expected{stash.ids.dim(0), stash.ids.dim(1), hidden_};
    if (dy.shape != expected)
      throw invalid_problem("GptEmbedding::backward_input: gradient shape is " +
                            shape_string(dy.shape) + "; expected " + shape_string(expected));
    stash.dy = dy;
    stash.phase = detail::StashPhase::InputDone;
    return Tensor<T>(stash.ids.shape);
  }

  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptEmbedding",
                          "backward_weight");
    const int b = stash.ids.dim(0);
    const int s = stash.ids.dim(1);
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < s; ++t) {
        const int id = static_cast<int>(stash.ids(i, t));
        for (int d = 0; d < hidden_; ++d) {
          grads_[tokens](id, d) += stash.dy(i, t, d);
          grads_[positions](t, d) += stash.dy(i, t, d);
        }
      }
    stash = Stash{};
  }

  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return stash.ids.bytes() + stash.dy.bytes();
  }

  //! Token table, position table.
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  std::span<Tensor<T>> gradients() noexcept { return grads_; }
  std::span<const Tensor<T>> gradients() const noexcept { return grads_; }
  void zero_gradients() {
    for (Tensor<T>& g : grads_)
      g.fill(T(0));
  }

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
  std::vector<Tensor<T>> grads_;
};

//! A pre-LayerNorm transformer block on [batch, sequence, hidden]:
//! y1 = x + Wo·attention(LN1(x)) + bo, y = y1 + W2·gelu(W1·LN2(y1) + b1) + b2, attention causal
//! over the sequence with `heads` heads. Parameters, in order: LN1 γ, β; Wqkv [3·hidden, hidden],
//! bqkv; Wo [hidden, hidden], bo; LN2 γ, β; W1 [ffn, hidden], b1; W2 [hidden, ffn], b2.
template <class T>
class GptBlock {
 public:
  using tensor_type = Tensor<T>;
  //! What one microbatch leaves behind between calls (see `gpt_block_stash_bytes`).
  struct Stash {
    // forward
    Tensor<T> xhat1, rstd1;  // LN1's normalized input and inverse deviation
    Tensor<T> qkv;           // q, k, v side by side per row [.., 3·hidden]
    Tensor<T> probs;         // attention probabilities [batch, heads, sequence, sequence]
    Tensor<T> attn;          // attention output, the input of Wo
    Tensor<T> xhat2, rstd2;  // LN2's
    Tensor<T> pre, act;      // W1·LN2(y1) + b1 and its GELU
    // backward_input, for the weight pass
    Tensor<T> dy;    // output gradient (into W2, b2)
    Tensor<T> dpre;  // into W1, b1
    Tensor<T> dy1;   // residual gradient after attention (into Wo, bo)
    Tensor<T> dqkv;  // into Wqkv, bqkv
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;
  enum : std::size_t {
    ln1_gamma,
    ln1_beta,
    qkv_weight,
    qkv_bias,
    out_weight,
    out_bias,
    ln2_gamma,
    ln2_beta,
    fc1_weight,
    fc1_bias,
    fc2_weight,
    fc2_bias,
    tensor_count
  };

  //! The block with global index `index`, initialized from stream (config.seed, index).
  GptBlock(const GptConfig& config, int index)
      : hidden_(config.hidden), heads_(config.heads), ffn_(config.ffn) {
    detail::check_gpt_config(config, "GptBlock");
    Random random(config.seed, static_cast<std::uint64_t>(index));
    const double in_scale = 1.0 / std::sqrt(double(hidden_));
    const int h = hidden_;
    auto add = [&](std::vector<int> extents, double spread, double center) {
      params_.push_back(uniform_tensor<T>(std::move(extents), random, spread, center));
    };
    add({h}, 0.1, 1.0);              // LN1 γ
    add({h}, 0.1, 0.0);              // LN1 β
    add({3 * h, h}, in_scale, 0.0);  // Wqkv
    add({3 * h}, 0.1, 0.0);
    add({h, h}, 0.5 * in_scale, 0.0);  // Wo
    add({h}, 0.05, 0.0);
    add({h}, 0.1, 1.0);  // LN2 γ
    add({h}, 0.1, 0.0);
    add({ffn_, h}, in_scale, 0.0);  // W1
    add({ffn_}, 0.1, 0.0);
    add({h, ffn_}, 0.5 / std::sqrt(double(ffn_)), 0.0);  // W2
    add({h}, 0.05, 0.0);
    for (const Tensor<T>& p : params_)
      grads_.emplace_back(p.shape);
  }

  //! x [batch, sequence, hidden] → same shape; replaces whatever `stash` held. Deterministic,
  //! so a recompute from the same input reproduces the stash bit for bit.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    detail::check_activation_shape(x, hidden_, "GptBlock", "forward");
    const int b = x.dim(0);
    const int s = x.dim(1);
    const int n = b * s;
    const int h = hidden_;
    const auto& p = params_;
    stash = Stash{};
    stash.xhat1 = Tensor<T>({b, s, h});
    stash.rstd1 = Tensor<T>({b, s});
    Tensor<T> n1({b, s, h});
    detail::layer_norm_forward(x.begin_data(), p[ln1_gamma].begin_data(), p[ln1_beta].begin_data(),
                               stash.xhat1.begin_data(), stash.rstd1.begin_data(), n1.begin_data(),
                               n, h);
    stash.qkv = Tensor<T>({b, s, 3 * h});
    detail::linear_forward(n1.begin_data(), p[qkv_weight].begin_data(), p[qkv_bias].begin_data(),
                           stash.qkv.begin_data(), n, h, 3 * h);
    stash.probs = Tensor<T>({b, heads_, s, s});
    stash.attn = Tensor<T>({b, s, h});
    attention_forward(stash.qkv, stash.probs, stash.attn);
    Tensor<T> y1({b, s, h});
    detail::linear_forward(stash.attn.begin_data(), p[out_weight].begin_data(),
                           p[out_bias].begin_data(), y1.begin_data(), n, h, h);
    detail::add_into(y1, x);
    stash.xhat2 = Tensor<T>({b, s, h});
    stash.rstd2 = Tensor<T>({b, s});
    Tensor<T> n2({b, s, h});
    detail::layer_norm_forward(y1.begin_data(), p[ln2_gamma].begin_data(), p[ln2_beta].begin_data(),
                               stash.xhat2.begin_data(), stash.rstd2.begin_data(), n2.begin_data(),
                               n, h);
    stash.pre = Tensor<T>({b, s, ffn_});
    detail::linear_forward(n2.begin_data(), p[fc1_weight].begin_data(), p[fc1_bias].begin_data(),
                           stash.pre.begin_data(), n, h, ffn_);
    stash.act = Tensor<T>({b, s, ffn_});
    for (std::size_t i = 0; i < stash.pre.size(); ++i)
      stash.act[i] = detail::gelu(stash.pre[i]);
    Tensor<T> y({b, s, h});
    detail::linear_forward(stash.act.begin_data(), p[fc2_weight].begin_data(),
                           p[fc2_bias].begin_data(), y.begin_data(), n, ffn_, h);
    detail::add_into(y, y1);
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  //! dy [batch, sequence, hidden] → dx; keeps what `backward_weight` needs, frees the rest.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptBlock", "backward_input");
    if (dy.shape != stash.xhat1.shape)
      throw invalid_problem("GptBlock::backward_input: gradient shape is " +
                            shape_string(dy.shape) + "; expected the forward output's shape " +
                            shape_string(stash.xhat1.shape));
    const int b = dy.dim(0);
    const int s = dy.dim(1);
    const int n = b * s;
    const int h = hidden_;
    const auto& p = params_;
    // MLP half.
    stash.dpre = Tensor<T>({b, s, ffn_});
    detail::linear_backward_input(dy.begin_data(), p[fc2_weight].begin_data(),
                                  stash.dpre.begin_data(), n, ffn_, h);
    for (std::size_t i = 0; i < stash.dpre.size(); ++i)
      stash.dpre[i] *= detail::gelu_derivative(stash.pre[i]);
    Tensor<T> dn2({b, s, h});
    detail::linear_backward_input(stash.dpre.begin_data(), p[fc1_weight].begin_data(),
                                  dn2.begin_data(), n, h, ffn_);
    Tensor<T> dy1({b, s, h});
    detail::layer_norm_backward_input(dn2.begin_data(), stash.xhat2.begin_data(),
                                      stash.rstd2.begin_data(), p[ln2_gamma].begin_data(),
                                      dy1.begin_data(), n, h);
    detail::add_into(dy1, dy);
    // Attention half.
    Tensor<T> dattn({b, s, h});
    detail::linear_backward_input(dy1.begin_data(), p[out_weight].begin_data(), dattn.begin_data(),
                                  n, h, h);
    stash.dqkv = Tensor<T>({b, s, 3 * h});
    attention_backward(dattn, stash.qkv, stash.probs, stash.dqkv);
    Tensor<T> dn1({b, s, h});
    detail::linear_backward_input(stash.dqkv.begin_data(), p[qkv_weight].begin_data(),
                                  dn1.begin_data(), n, h, 3 * h);
    Tensor<T> dx({b, s, h});
    detail::layer_norm_backward_input(dn1.begin_data(), stash.xhat1.begin_data(),
                                      stash.rstd1.begin_data(), p[ln1_gamma].begin_data(),
                                      dx.begin_data(), n, h);
    detail::add_into(dx, dy1);
    stash.dy = dy;
    stash.dy1 = std::move(dy1);
    stash.rstd1 = Tensor<T>{};
    stash.qkv = Tensor<T>{};
    stash.probs = Tensor<T>{};
    stash.rstd2 = Tensor<T>{};
    stash.pre = Tensor<T>{};
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds this microbatch's weight gradients and empties the stash. The LayerNorm outputs and
  //! the gradients into them are rebuilt here from what is kept (the weights cannot have
  //! changed since backward_input) so the stash between the two passes stays small.
  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptBlock",
                          "backward_weight");
    const int b = stash.dy.dim(0);
    const int s = stash.dy.dim(1);
    const int n = b * s;
    const int h = hidden_;
    const auto& p = params_;
    auto& g = grads_;
    detail::linear_backward_weight(stash.dy.begin_data(), stash.act.begin_data(),
                                   g[fc2_weight].begin_data(), g[fc2_bias].begin_data(), n, ffn_,
                                   h);
    Tensor<T> normed({b, s, h});
    detail::layer_norm_apply(stash.xhat2.begin_data(), p[ln2_gamma].begin_data(),
                             p[ln2_beta].begin_data(), normed.begin_data(), n, h);
    detail::linear_backward_weight(stash.dpre.begin_data(), normed.begin_data(),
                                   g[fc1_weight].begin_data(), g[fc1_bias].begin_data(), n, h,
                                   ffn_);
    Tensor<T> dnormed({b, s, h});
    detail::linear_backward_input(stash.dpre.begin_data(), p[fc1_weight].begin_data(),
                                  dnormed.begin_data(), n, h, ffn_);
    detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat2.begin_data(),
                                       g[ln2_gamma].begin_data(), g[ln2_beta].begin_data(), n, h);
    detail::linear_backward_weight(stash.dy1.begin_data(), stash.attn.begin_data(),
                                   g[out_weight].begin_data(), g[out_bias].begin_data(), n, h, h);
    detail::layer_norm_apply(stash.xhat1.begin_data(), p[ln1_gamma].begin_data(),
                             p[ln1_beta].begin_data(), normed.begin_data(), n, h);
    detail::linear_backward_weight(stash.dqkv.begin_data(), normed.begin_data(),
                                   g[qkv_weight].begin_data(), g[qkv_bias].begin_data(), n, h,
                                   3 * h);
    detail::linear_backward_input(stash.dqkv.begin_data(), p[qkv_weight].begin_data(),
                                  dnormed.begin_data(), n, h, 3 * h);
    detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat1.begin_data(),
                                       g[ln1_gamma].begin_data(), g[ln1_beta].begin_data(), n, h);
    stash = Stash{};
  }

  std::size_t stash_bytes(const Stash& st) const noexcept {
    return st.xhat1.bytes() + st.rstd1.bytes() + st.qkv.bytes() + st.probs.bytes() +
           st.attn.bytes() + st.xhat2.bytes() + st.rstd2.bytes() + st.pre.bytes() + st.act.bytes() +
           st.dy.bytes() + st.dpre.bytes() + st.dy1.bytes() + st.dqkv.bytes();
  }

  //! Analytic stash sizes for `batch` sequences of `sequence` tokens.
  StashBytes predicted_stash_bytes(int batch, int sequence) const noexcept {
    return gpt_block_stash_bytes<T>(
        static_cast<std::size_t>(batch), static_cast<std::size_t>(sequence),
        static_cast<std::size_t>(hidden_), static_cast<std::size_t>(heads_),
        static_cast<std::size_t>(ffn_));
  }

  std::span<Tensor<T>> parameters() noexcept { return params_; }
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  std::span<Tensor<T>> gradients() noexcept { return grads_; }
  std::span<const Tensor<T>> gradients() const noexcept { return grads_; }
  void zero_gradients() {
    for (Tensor<T>& gr : grads_)
      gr.fill(T(0));
  }

 private:
  detail::AttentionShape attention_shape(int s) const noexcept {
    return {
        .queries = s, .keys = s, .query_offset = 0, .heads = heads_, .head_dim = hidden_ / heads_};
  }

  // One sequence at a time. Queries, keys and values all come from this call's rows; a
  // sliced sequence would pass the keys/values of earlier slices ahead of these (the kernel
  // already takes them as separate operands with a query offset).
  void attention_forward(const Tensor<T>& qkv, Tensor<T>& probs, Tensor<T>& attn) const {
    const int b = qkv.dim(0);
    const int s = qkv.dim(1);
    const int h = hidden_;
    const detail::AttentionShape shape = attention_shape(s);
    for (int i = 0; i < b; ++i) {
      const T* q = qkv.begin_data() + static_cast<std::ptrdiff_t>(i) * s * 3 * h;
      detail::causal_attention_forward(
          q, 3 * h, q + h, q + 2 * h, 3 * h,
          probs.begin_data() + static_cast<std::ptrdiff_t>(i) * heads_ * s * s,
          attn.begin_data() + static_cast<std::ptrdiff_t>(i) * s * h, h, shape);
    }
  }

  void attention_backward(const Tensor<T>& dattn, const Tensor<T>& qkv, const Tensor<T>& probs,
                          Tensor<T>& dqkv) const {
    const int b = qkv.dim(0);
    const int s = qkv.dim(1);
    const int h = hidden_;
    const detail::AttentionShape shape = attention_shape(s);
    for (int i = 0; i < b; ++i) {
      const std::ptrdiff_t row0 = static_cast<std::ptrdiff_t>(i) * s * 3 * h;
      const T* q = qkv.begin_data() + row0;
      T* dq = dqkv.begin_data() + row0;
      detail::causal_attention_backward(
          dattn.begin_data() + static_cast<std::ptrdiff_t>(i) * s * h, h, q, 3 * h, q + h,
          q + 2 * h, 3 * h, probs.begin_data() + static_cast<std::ptrdiff_t>(i) * heads_ * s * s,
          dq, dq + h, dq + 2 * h, shape);
    }
  }

  int hidden_;
  int heads_;
  int ffn_;
  std::vector<Tensor<T>> params_;
  std::vector<Tensor<T>> grads_;
};

//! Final LayerNorm and LM head: [batch, sequence, hidden] → logits [batch, sequence,
//! vocabulary]. Parameters, in order: LN γ, β; W [vocabulary, hidden] (no bias).
template <class T>
class GptHead {
 public:
  using tensor_type = Tensor<T>;
  struct Stash {
    Tensor<T> xhat, rstd;  // forward: LayerNorm's normalized input and inverse deviation
    Tensor<T> dlogits;     // backward_input: the logits' gradient
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;
  enum : std::size_t { ln_gamma, ln_beta, weight, tensor_count };

  explicit GptHead(const GptConfig& config)
      : hidden_(config.hidden), vocabulary_(config.vocabulary) {
    detail::check_gpt_config(config, "GptHead");
    Random random(config.seed, detail::gpt_head_stream);
    params_.push_back(uniform_tensor<T>({hidden_}, random, 0.1, 1.0));
    params_.push_back(uniform_tensor<T>({hidden_}, random, 0.1));
    params_.push_back(
        uniform_tensor<T>({vocabulary_, hidden_}, random, 1.0 / std::sqrt(double(hidden_))));
    for (const Tensor<T>& p : params_)
      grads_.emplace_back(p.shape);
  }

  //! x [batch, sequence, hidden] → logits [batch, sequence, vocabulary].
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    detail::check_activation_shape(x, hidden_, "GptHead", "forward");
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
    Tensor<T> logits({b, s, vocabulary_});
    detail::linear_forward(normed.begin_data(), params_[weight].begin_data(),
                           static_cast<const T*>(nullptr), logits.begin_data(), n, hidden_,
                           vocabulary_);
    stash.phase = detail::StashPhase::Forwarded;
    return logits;
  }

  //! dlogits [batch, sequence, vocabulary] → dx [batch, sequence, hidden].
  Tensor<T> backward_input(const Tensor<T>& dlogits, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptHead", "backward_input");
    const std::vector<int> expected{stash.xhat.dim(0), stash.xhat.dim(1), vocabulary_};
    if (dlogits.shape != expected)
      throw invalid_problem("GptHead::backward_input: gradient shape is " +
                            shape_string(dlogits.shape) + "; expected " + shape_string(expected));
    const int n = expected[0] * expected[1];
    Tensor<T> dnormed(stash.xhat.shape);
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

  void backward_weight(Stash& stash) {
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "GptHead", "backward_weight");
    const int n = stash.xhat.dim(0) * stash.xhat.dim(1);
    Tensor<T> normed(stash.xhat.shape);
    detail::layer_norm_apply(stash.xhat.begin_data(), params_[ln_gamma].begin_data(),
                             params_[ln_beta].begin_data(), normed.begin_data(), n, hidden_);
    detail::linear_backward_weight(stash.dlogits.begin_data(), normed.begin_data(),
                                   grads_[weight].begin_data(), static_cast<T*>(nullptr), n,
                                   hidden_, vocabulary_);
    Tensor<T> dnormed(stash.xhat.shape);
    detail::linear_backward_input(stash.dlogits.begin_data(), params_[weight].begin_data(),
                                  dnormed.begin_data(), n, hidden_, vocabulary_);
    detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat.begin_data(),
                                       grads_[ln_gamma].begin_data(), grads_[ln_beta].begin_data(),
                                       n, hidden_);
    stash = Stash{};
  }

  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return stash.xhat.bytes() + stash.rstd.bytes() + stash.dlogits.bytes();
  }

  std::span<Tensor<T>> parameters() noexcept { return params_; }
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  std::span<Tensor<T>> gradients() noexcept { return grads_; }
  std::span<const Tensor<T>> gradients() const noexcept { return grads_; }
  void zero_gradients() {
    for (Tensor<T>& g : grads_)
      g.fill(T(0));
  }

 private:
  int hidden_;
  int vocabulary_;
  std::vector<Tensor<T>> params_;
  std::vector<Tensor<T>> grads_;
};

//! One pipeline stage of the toy GPT: the embedding on stage 0, blocks [first_block(),
//! last_block()) of the global list (split as evenly as possible, earlier stages taking the
//! remainder), the LM head on the last stage. Stage 0 takes token ids [batch, sequence]; the
//! others take activations [batch, sequence, hidden]; the last returns logits [batch, sequence,
//! vocabulary], the others activations. Every layer draws its parameters from its own seeded
//! stream, so any partition of one config computes the same function.
template <class T>
class GptStage {
 public:
  using tensor_type = Tensor<T>;
  using value_type = T;
  struct Stash {
    typename GptEmbedding<T>::stash_type embedding;  // used on stage 0 only
    std::vector<typename GptBlock<T>::stash_type> blocks;
    typename GptHead<T>::stash_type head;  // used on the last stage only
    detail::StashPhase phase = detail::StashPhase::Empty;
    int first_block = -1;  // the filling stage's first block, to catch a stash of another stage
  };
  using stash_type = Stash;

  //! Stage `stage` of `stages`; throws `invalid_problem` when the config or the split does not
  //! fit (a non-positive size, hidden not a multiple of heads, more stages than blocks, a stage
  //! out of range).
  GptStage(const GptConfig& config, int stage, int stages) : config_(config) {
    detail::check_gpt_config(config, "GptStage");
    const auto [first, last] = detail::block_range(config.blocks, stage, stages, "GptStage");
    first_ = first;
    if (stage == 0) embedding_.emplace(config);
    for (int i = first; i < last; ++i)
      blocks_.emplace_back(config, i);
    if (stage == stages - 1) head_.emplace(config);
  }

  //! Runs the stage's layers in order; replaces whatever `stash` held. Deterministic (no
  //! dropout), so a recompute from the stage input reproduces output and stash.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    stash = Stash{};
    stash.blocks.resize(blocks_.size());
    Tensor<T> y = embedding_ ? embedding_->forward(x, stash.embedding)
                             : blocks_.front().forward(x, stash.blocks.front());
    for (std::size_t i = embedding_ ? 0 : 1; i < blocks_.size(); ++i)
      y = blocks_[i].forward(y, stash.blocks[i]);
    if (head_) y = head_->forward(y, stash.head);
    stash.phase = detail::StashPhase::Forwarded;
    stash.first_block = first_;
    return y;
  }

  //! The gradient of the stage output → the gradient of its input (zeros [batch, sequence]
  //! on stage 0, whose input is token ids).
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    check_stash(stash, detail::StashPhase::Forwarded, "backward_input");
    Tensor<T> dx = head_ ? head_->backward_input(dy, stash.head)
                         : blocks_.back().backward_input(dy, stash.blocks.back());
    for (std::size_t i = blocks_.size() - (head_ ? 0 : 1); i-- > 0;)
      dx = blocks_[i].backward_input(dx, stash.blocks[i]);
    if (embedding_) dx = embedding_->backward_input(dx, stash.embedding);
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds every layer's weight gradients and empties the stash.
  void backward_weight(Stash& stash) {
    check_stash(stash, detail::StashPhase::InputDone, "backward_weight");
    if (head_) head_->backward_weight(stash.head);
    for (std::size_t i = blocks_.size(); i-- > 0;)
      blocks_[i].backward_weight(stash.blocks[i]);
    if (embedding_) embedding_->backward_weight(stash.embedding);
    stash = Stash{};
  }

  //! Bytes of the tensors `stash` holds, over every layer.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    std::size_t bytes = 0;
    if (embedding_) bytes += embedding_->stash_bytes(stash.embedding);
    for (std::size_t i = 0; i < stash.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].stash_bytes(stash.blocks[i]);
    if (head_) bytes += head_->stash_bytes(stash.head);
    return bytes;
  }

  //! Analytic bytes a stash holds right after forward of one microbatch (microbatch_size
  //! sequences of `sequence` tokens).
  std::size_t activation_bytes() const noexcept { return predicted().activation; }
  //! Analytic bytes a stash holds right after backward_input (what backward_weight needs).
  std::size_t wgrad_bytes() const noexcept { return predicted().wgrad; }

  //! Sets every layer's accumulated gradients to zero.
  void zero_gradients() {
    if (embedding_) embedding_->zero_gradients();
    for (GptBlock<T>& b : blocks_)
      b.zero_gradients();
    if (head_) head_->zero_gradients();
  }

  //! Every parameter tensor of the stage: embedding, blocks, head, each layer's in its order.
  TensorRange<Tensor<T>> parameters() {
    return joined<Tensor<T>>(*this, [](auto& l) { return l.parameters(); });
  }
  TensorRange<const Tensor<T>> parameters() const {
    return joined<const Tensor<T>>(*this, [](auto& l) { return l.parameters(); });
  }
  //! Gradients, in the order of `parameters()`.
  TensorRange<Tensor<T>> gradients() {
    return joined<Tensor<T>>(*this, [](auto& l) { return l.gradients(); });
  }
  TensorRange<const Tensor<T>> gradients() const {
    return joined<const Tensor<T>>(*this, [](auto& l) { return l.gradients(); });
  }

  int first_block() const noexcept { return first_; }
  int last_block() const noexcept { return first_ + static_cast<int>(blocks_.size()); }
  bool has_embedding() const noexcept { return embedding_.has_value(); }
  bool has_head() const noexcept { return head_.has_value(); }
  std::span<const GptBlock<T>> blocks() const noexcept { return blocks_; }
  const GptConfig& config() const noexcept { return config_; }

 private:
  template <class Elem, class Self, class Get>
  static TensorRange<Elem> joined(Self& self, Get get) {
    TensorRange<Elem> range;
    if (self.embedding_) range.append(get(*self.embedding_));
    for (auto& b : self.blocks_)
      range.append(get(b));
    if (self.head_) range.append(get(*self.head_));
    return range;
  }

  // A stash filled by another stage would be read against the wrong weights (or out of
  // bounds): refuse it.
  void check_stash(const Stash& stash, detail::StashPhase wanted, const char* op) const {
    detail::require_phase(stash.phase, wanted, "GptStage", op);
    if (stash.first_block != first_ || stash.blocks.size() != blocks_.size())
      throw invalid_schedule(std::string("GptStage::") + op +
                             ": the stash was filled by the stage starting at block " +
                             std::to_string(stash.first_block) + ", not by this one (block " +
                             std::to_string(first_) + "); pass each stage its own stashes");
  }

  StashBytes predicted() const noexcept {
    const auto b = static_cast<std::size_t>(config_.microbatch_size);
    const auto s = static_cast<std::size_t>(config_.sequence);
    const auto h = static_cast<std::size_t>(config_.hidden);
    StashBytes total;
    if (embedding_) total = total + gpt_embedding_stash_bytes<T>(b, s, h);
    for (const GptBlock<T>& blk : blocks_)
      total = total + blk.predicted_stash_bytes(config_.microbatch_size, config_.sequence);
    if (head_)
      total =
          total + gpt_head_stash_bytes<T>(b, s, h, static_cast<std::size_t>(config_.vocabulary));
    return total;
  }

  GptConfig config_;
  int first_ = 0;
  std::optional<GptEmbedding<T>> embedding_;
  std::vector<GptBlock<T>> blocks_;
  std::optional<GptHead<T>> head_;
};

}  // namespace pipesched::toy
