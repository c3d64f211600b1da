// One vocabulary shard of the toy GPT's LM head and loss, for vocabulary parallelism (Yeung et
// al., MLSys '25; pass/vocabulary.hpp): rows [first, first + size) of the head's weight W
// [vocabulary, hidden], float or double, with a hand-written backward.
//
// The final LayerNorm stays on the last stage; its output X (the `normed` rows) reaches every
// shard. A shard's forward (VOCAB_F) computes its logits Y_j = X·W_jᵀ and, per token, its
// softmax statistics against its own maximum m_j, the sum s_j = Σ exp(Y_j − m_j), the target's
// logit where the target is in the shard, its share of the input gradient
// A_j = exp(Y_j − m_j)·W_j and the target's row of W_j. Partials merge as an online softmax does
// (`merge`): the larger maximum m, the sums and the shares scaled by exp(m_i − m) before
// adding, the target's logit and row added. Merged over every shard they give each token's loss
// m + log s − z and the input gradient of X, (A / s − W[target]) · scale, with the statistics
// (m, s) every shard's weight gradient needs (VOCAB_B): dY_j = (exp(Y_j − m) / s − onehot) ·
// scale, dW_j += dY_jᵀ·X. One reduction per microbatch, whatever the order the partials merge
// in (the operator is associative and commutative up to rounding).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/gpt_config.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! The vocabulary rows shard `shard` of `shards` holds: an even split, the first
//! vocabulary % shards shards taking one more.
struct VocabularyRows {
  int first = 0;  //!< the first row (token id) of the shard
  int size = 0;   //!< how many rows
};

//! Rows of shard `shard` of `shards` over `vocabulary` token ids. Throws invalid_problem when
//! the shard is out of range or a shard would hold no row.
inline VocabularyRows vocabulary_rows(int vocabulary, int shard, int shards) {
  if (shards < 1 || shard < 0 || shard >= shards)
    throw invalid_problem("vocabulary_rows: shard " + std::to_string(shard) + " of " +
                          std::to_string(shards) + " is out of range; shards run 0.." +
                          std::to_string(shards - 1) + ".");
  if (vocabulary < shards)
    throw invalid_problem("vocabulary_rows: a vocabulary of " + std::to_string(vocabulary) +
                          " token ids cannot be split over " + std::to_string(shards) +
                          " shards; every shard needs at least one row.");
  const int base = vocabulary / shards, extra = vocabulary % shards;
  return {shard * base + std::min(shard, extra), base + (shard < extra ? 1 : 0)};
}

//! Rows `rows` of `table` [vocabulary, hidden]: what a vocabulary shard keeps of a whole
//! table drawn as the unsplit layer draws it.
template <class T>
Tensor<T> rows_of(const Tensor<T>& table, VocabularyRows rows) {
  const int hidden = table.dim(1);
  Tensor<T> mine({rows.size, hidden});
  std::copy(table.begin_data() + static_cast<std::ptrdiff_t>(rows.first) * hidden,
            table.begin_data() + static_cast<std::ptrdiff_t>(rows.first + rows.size) * hidden,
            mine.begin_data());
  return mine;
}

//! What a shard's forward leaves for the reduction, per token (n = batch × tokens): its
//! maximum logit, the sum of exponentials against it, the target's logit (0 where the target
//! is in another shard), the input-gradient share A [n, hidden] and the target's row of W
//! [n, hidden] (zeros where the target is in another shard). `merge` combines two.
template <class T>
struct VocabularyPartial {
  //! @{
  //! Per token [n]: the maximum logit, the sum of exponentials against it, the target's logit.
  Tensor<T> max, sum, target_logit;
  //! @}
  //! @{
  //! Per token [n, hidden]: the input-gradient share and the target's row of W.
  Tensor<T> share, target_row;
  //! @}

  //! The partial as one tensor [n, 3 + 2·hidden] (per token: max, sum, target logit, share,
  //! target row), the form a transport moves between ranks.
  Tensor<T> packed() const {
    const std::size_t n = max.size();
    const std::size_t h = n > 0 ? share.size() / n : 0;
    Tensor<T> t({static_cast<int>(n), static_cast<int>(3 + 2 * h)});
    for (std::size_t r = 0; r < n; ++r) {
      T* row = t.begin_data() + r * (3 + 2 * h);
      row[0] = max[r];
      row[1] = sum[r];
      row[2] = target_logit[r];
      std::copy(share.begin_data() + r * h, share.begin_data() + (r + 1) * h, row + 3);
      std::copy(target_row.begin_data() + r * h, target_row.begin_data() + (r + 1) * h,
                row + 3 + h);
    }
    return t;
  }

  //! The partial `packed()` made, of tokens of width `hidden`; throws invalid_problem when the
  //! tensor is not [n, 3 + 2·hidden].
  static VocabularyPartial unpacked(const Tensor<T>& t, int hidden) {
    if (t.rank() != 2 || hidden < 1 || t.dim(1) != 3 + 2 * hidden)
      throw invalid_problem("VocabularyPartial::unpacked: the tensor is " + shape_string(t.shape) +
                            "; a packed partial of hidden size " + std::to_string(hidden) +
                            " is [tokens, " + std::to_string(3 + 2 * hidden) + "].");
    const int n = t.dim(0);
    const auto h = static_cast<std::size_t>(hidden);
    VocabularyPartial p{Tensor<T>({n}), Tensor<T>({n}), Tensor<T>({n}), Tensor<T>({n, hidden}),
                        Tensor<T>({n, hidden})};
    for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r) {
      const T* row = t.begin_data() + r * (3 + 2 * h);
      p.max[r] = row[0];
      p.sum[r] = row[1];
      p.target_logit[r] = row[2];
      std::copy(row + 3, row + 3 + h, p.share.begin_data() + r * h);
      std::copy(row + 3 + h, row + 3 + 2 * h, p.target_row.begin_data() + r * h);
    }
    return p;
  }

  //! Merges `other` into this one, as an online softmax merges two blocks of logits.
  void merge(const VocabularyPartial& other) {
    if (other.max.shape != max.shape || other.share.shape != share.shape)
      throw invalid_problem("VocabularyPartial::merge: the partials are of " +
                            shape_string(share.shape) + " and " + shape_string(other.share.shape) +
                            " values; merge partials of the same tokens.");
    const std::size_t n = max.size();
    const std::size_t h = n > 0 ? share.size() / n : 0;
    for (std::size_t r = 0; r < n; ++r) {
      const T m = std::max(max[r], other.max[r]);
      const T a = std::exp(max[r] - m), b = std::exp(other.max[r] - m);
      sum[r] = sum[r] * a + other.sum[r] * b;
      target_logit[r] += other.target_logit[r];
      T* s = share.begin_data() + r * h;
      const T* o = other.share.begin_data() + r * h;
      T* t = target_row.begin_data() + r * h;
      const T* u = other.target_row.begin_data() + r * h;
      for (std::size_t i = 0; i < h; ++i) {
        s[i] = s[i] * a + o[i] * b;
        t[i] += u[i];
      }
      max[r] = m;
    }
  }

  //! Adds the tokens' share of the step loss, Σ (max + log sum − target logit) · scale, to
  //! `loss`, and returns the input gradient of X [b, tokens, hidden] (`shape`): (share / sum −
  //! target row) · scale. Call on the partial merged over every shard.
  Tensor<T> input_gradient(const std::vector<int>& shape, T scale, double& loss) const {
    Tensor<T> dx(shape);
    const std::size_t n = max.size();
    if (dx.size() != share.size())
      throw invalid_problem("VocabularyPartial::input_gradient: the partial holds " +
                            shape_string(share.shape) + " values, not " + shape_string(shape) +
                            ".");
    const std::size_t h = n > 0 ? share.size() / n : 0;
    double sum_loss = 0;
    for (std::size_t r = 0; r < n; ++r) {
      sum_loss += double(max[r] + std::log(sum[r]) - target_logit[r]);
      const T* s = share.begin_data() + r * h;
      const T* t = target_row.begin_data() + r * h;
      T* d = dx.begin_data() + r * h;
      for (std::size_t i = 0; i < h; ++i)
        d[i] = (s[i] / sum[r] - t[i]) * scale;
    }
    loss += sum_loss * double(scale);
    return dx;
  }
};

//! Rows [first, first + size) of the toy GPT's LM head, with the loss: see the file comment.
//! Its weights are the rows of GptHead's W for the same config (the same draws), so the shards
//! of a vocabulary split together hold exactly the unsplit head's W.
template <class T>
class GptVocabularyShard {
 public:
  //! What a forward keeps for the weight gradient.
  struct Stash {
    Tensor<T> normed;          //!< X [n, hidden]
    Tensor<T> logits;          //!< Y_j [n, size]
    std::vector<int> targets;  //!< each token's target, as a row of this shard or -1
    bool forwarded = false;    //!< a forward has filled it
  };
  using tensor_type = Tensor<T>;  //!< what it takes and gives
  using stash_type = Stash;       //!< what a forward keeps for the weight gradient

  //! Shard `shard` of `shards` of `config`'s head.
  GptVocabularyShard(const GptConfig& config, int shard, int shards)
      : hidden_(config.hidden), rows_(vocabulary_rows(config.vocabulary, shard, shards)) {
    detail::check_gpt_config(config, "GptVocabularyShard");
    // The draws of GptHead: LayerNorm γ and β, then W; this shard keeps its rows of W.
    Random random(config.seed, detail::gpt_head_stream);
    (void)uniform_tensor<T>({hidden_}, random, 0.1, 1.0);
    (void)uniform_tensor<T>({hidden_}, random, 0.1);
    const Tensor<T> w =
        uniform_tensor<T>({config.vocabulary, hidden_}, random, 1.0 / std::sqrt(double(hidden_)));
    params_.push_back(rows_of(w, rows_));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! The rows the shard holds.
  VocabularyRows rows() const noexcept { return rows_; }

  //! VOCAB_F: X [b, t, hidden] (the final LayerNorm's output) and the tokens' targets [b, t]
  //! (token ids) → this shard's partial; X, the logits and the targets stay in `stash`.
  VocabularyPartial<T> forward(const Tensor<T>& normed, const Tensor<T>& targets,
                               Stash& stash) const {
    if (normed.rank() != 3 || normed.dim(2) != hidden_ || targets.rank() != 2 ||
        targets.dim(0) != normed.dim(0) || targets.dim(1) != normed.dim(1))
      throw invalid_problem("GptVocabularyShard::forward: X is " + shape_string(normed.shape) +
                            " and the targets " + shape_string(targets.shape) +
                            "; expected [b, t, " + std::to_string(hidden_) + "] and [b, t].");
    const int n = normed.dim(0) * normed.dim(1);
    const int v = rows_.size;
    const T* w = params_[0].begin_data();
    stash = Stash{};
    stash.normed = normed;
    stash.logits = Tensor<T>({n, v});
    detail::linear_forward(normed.begin_data(), w, static_cast<const T*>(nullptr),
                           stash.logits.begin_data(), n, hidden_, v);
    VocabularyPartial<T> p{Tensor<T>({n}), Tensor<T>({n}), Tensor<T>({n}), Tensor<T>({n, hidden_}),
                           Tensor<T>({n, hidden_})};
    stash.targets.assign(static_cast<std::size_t>(n), -1);
    std::vector<T> e(static_cast<std::size_t>(v));
    for (int r = 0; r < n; ++r) {
      const T* y = stash.logits.begin_data() + static_cast<std::ptrdiff_t>(r) * v;
      const T m = *std::max_element(y, y + v);
      T s = 0;
      for (int c = 0; c < v; ++c) {
        e[static_cast<std::size_t>(c)] = std::exp(y[c] - m);
        s += e[static_cast<std::size_t>(c)];
      }
      p.max[static_cast<std::size_t>(r)] = m;
      p.sum[static_cast<std::size_t>(r)] = s;
      T* a = p.share.begin_data() + static_cast<std::ptrdiff_t>(r) * hidden_;
      for (int c = 0; c < v; ++c) {
        const T* wc = w + static_cast<std::ptrdiff_t>(c) * hidden_;
        for (int i = 0; i < hidden_; ++i)
          a[i] += e[static_cast<std::size_t>(c)] * wc[i];
      }
      const int label = static_cast<int>(targets[static_cast<std::size_t>(r)]);
      const int row = label - rows_.first;
      if (row >= 0 && row < v) {
        stash.targets[static_cast<std::size_t>(r)] = row;
        p.target_logit[static_cast<std::size_t>(r)] = y[row];
        std::copy(w + static_cast<std::ptrdiff_t>(row) * hidden_,
                  w + static_cast<std::ptrdiff_t>(row + 1) * hidden_,
                  p.target_row.begin_data() + static_cast<std::ptrdiff_t>(r) * hidden_);
      }
    }
    stash.forwarded = true;
    return p;
  }

  //! VOCAB_B: adds this shard's weight gradient from the merged statistics of every shard
  //! (`reduced.max`, `reduced.sum`) and the loss scale, and empties the stash.
  void backward_weight(const VocabularyPartial<T>& reduced, T scale, Stash& stash) {
    if (!stash.forwarded)
      throw invalid_problem(
          "GptVocabularyShard::backward_weight: the stash holds no forward; run forward first.");
    const int v = rows_.size;
    const int n = static_cast<int>(stash.targets.size());
    if (static_cast<int>(reduced.max.size()) != n)
      throw invalid_problem("GptVocabularyShard::backward_weight: the statistics are of " +
                            std::to_string(reduced.max.size()) + " tokens, the forward of " +
                            std::to_string(n) + ".");
    Tensor<T> dy({n, v});
    for (int r = 0; r < n; ++r) {
      const T* y = stash.logits.begin_data() + static_cast<std::ptrdiff_t>(r) * v;
      T* d = dy.begin_data() + static_cast<std::ptrdiff_t>(r) * v;
      const T m = reduced.max[static_cast<std::size_t>(r)];
      const T s = reduced.sum[static_cast<std::size_t>(r)];
      for (int c = 0; c < v; ++c)
        d[c] = std::exp(y[c] - m) / s * scale;
      const int row = stash.targets[static_cast<std::size_t>(r)];
      if (row >= 0) d[row] -= scale;
    }
    using S = typename detail::GradientSums<T>::sum_type;
    detail::linear_backward_weight(dy.begin_data(), stash.normed.begin_data(), grads_.sum(0),
                                   static_cast<S*>(nullptr), n, hidden_, v);
    grads_.publish({0});
    stash = Stash{};
  }

  //! Bytes `stash` holds now.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return (stash.normed.size() + stash.logits.size()) * sizeof(T) +
           stash.targets.size() * sizeof(int);
  }
  //! Bytes a forward over `tokens` tokens leaves in its stash (X, the logits, the targets).
  std::size_t predicted_stash_bytes(std::size_t tokens) const noexcept {
    return tokens * (static_cast<std::size_t>(hidden_) + static_cast<std::size_t>(rows_.size)) *
               sizeof(T) +
           tokens * sizeof(int);
  }
  //! The hidden size of the tokens it takes.
  int hidden() const noexcept { return hidden_; }

  //! W's rows of the shard [size, hidden].
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! W's rows of the shard [size, hidden].
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! The accumulated gradient of the rows.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradient to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  int hidden_;
  VocabularyRows rows_;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

//! Rows [first, first + size) of the toy GPT's token table, for the input embedding split by
//! vocabulary (GptConfig::split_input): the rows of GptEmbedding's table for the same config
//! (the same draws), so the shards of a split together hold exactly the unsplit table. Its
//! forward (EMBED_F) looks up the tokens it holds and leaves zeros for the others, so the sum of
//! every shard's is the unsplit lookup, exactly (one term per token is not zero); its backward
//! (EMBED_B) adds the rows' gradient from the gradient of the lookups.
template <class T>
class GptInputShard {
 public:
  using tensor_type = Tensor<T>;  //!< token ids in, embeddings out

  //! Shard `shard` of `shards` of `config`'s token table.
  GptInputShard(const GptConfig& config, int shard, int shards)
      : hidden_(config.hidden),
        vocabulary_(config.vocabulary),
        rows_(vocabulary_rows(config.vocabulary, shard, shards)) {
    detail::check_gpt_config(config, "GptInputShard");
    // The draws of GptEmbedding: the token table first; this shard keeps its rows.
    Random random(config.seed, detail::gpt_embedding_stream);
    const Tensor<T> table = uniform_tensor<T>({config.vocabulary, hidden_}, random, 1.0);
    params_.push_back(rows_of(table, rows_));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! The rows the shard holds.
  VocabularyRows rows() const noexcept { return rows_; }
  //! The width of the embeddings it gives.
  int hidden() const noexcept { return hidden_; }

  //! EMBED_F: token ids [b, t] → [b, t, hidden], the rows of the tokens this shard holds and
  //! zeros for the others. Every id must be a whole number in [0, vocabulary).
  Tensor<T> forward(const Tensor<T>& ids) const {
    check_ids(ids, "forward");
    const int b = ids.dim(0), t = ids.dim(1);
    Tensor<T> y({b, t, hidden_});
    for (int i = 0; i < b; ++i)
      for (int k = 0; k < t; ++k) {
        const int row = static_cast<int>(ids(i, k)) - rows_.first;
        if (row < 0 || row >= rows_.size) continue;
        for (int d = 0; d < hidden_; ++d)
          y(i, k, d) = params_[0](row, d);
      }
    return y;
  }

  //! EMBED_B: adds the gradient of the rows of the tokens this shard holds from `dy`
  //! [b, t, hidden], the gradient of the lookups of `ids` [b, t].
  void backward(const Tensor<T>& ids, const Tensor<T>& dy) {
    check_ids(ids, "backward");
    const int b = ids.dim(0), t = ids.dim(1);
    detail::check_gradient_shape(dy.shape, {b, t, hidden_}, "GptInputShard", "backward");
    using S = typename detail::GradientSums<T>::sum_type;
    S* g = grads_.sum(0);
    for (int i = 0; i < b; ++i)
      for (int k = 0; k < t; ++k) {
        const int row = static_cast<int>(ids(i, k)) - rows_.first;
        if (row < 0 || row >= rows_.size) continue;
        for (int d = 0; d < hidden_; ++d)
          g[static_cast<std::ptrdiff_t>(row) * hidden_ + d] += static_cast<S>(dy(i, k, d));
      }
    grads_.publish({0});
  }

  //! The table's rows of the shard [size, hidden].
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! The table's rows of the shard [size, hidden].
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! The accumulated gradient of the rows.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradient to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  void check_ids(const Tensor<T>& ids, const char* call) const {
    if (ids.shape.size() != 2)
      throw invalid_problem(std::string("GptInputShard::") + call +
                            ": token ids are [batch, tokens], but they have " +
                            std::to_string(ids.shape.size()) + " dimensions.");
    for (std::size_t i = 0; i < ids.data.size(); ++i) {
      const T v = ids.data[i];
      if (!(v >= T(0) && v < T(vocabulary_)) || v != std::floor(v))
        throw invalid_problem(std::string("GptInputShard::") + call + ": token " +
                              std::to_string(i) + " is " + std::to_string(double(v)) +
                              "; token ids are whole numbers in [0, " +
                              std::to_string(vocabulary_) + ").");
    }
  }

  int hidden_;
  int vocabulary_;
  VocabularyRows rows_;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

}  // namespace pipesched::toy
