// The toy causal GPT's transformer block on the host, float or double: pre-LayerNorm causal
// multi-head attention and a GELU MLP, each with a residual, a `layer` with a hand-written
// backward that runs whole sequences or sequence slices (through a context of keys and values)
// and whose weight gradient runs whole or in pieces; split over a tensor-parallel group
// (Megatron-LM's column- then row-parallel linears in attention and MLP) when built for a shard.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/toy/detail/attention.hpp"
#include "pipesched/toy/detail/block_split.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/gpt_config.hpp"
#include "pipesched/toy/memory.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

using pipesched::TensorGroup;  // the toy's layers take part in tensor parallelism as any stage
using pipesched::TensorShard;

//! A pre-LayerNorm transformer block on [batch, sequence, hidden]:
//! y1 = x + Wo·attention(LN1(x)) + bo, y = y1 + W2·gelu(W1·LN2(y1) + b1) + b2, attention causal
//! over the sequence with `heads` heads. Parameters, in order: LN1 γ, β; Wqkv [3·hidden, hidden],
//! bqkv; Wo [hidden, hidden], bo; LN2 γ, β; W1 [ffn, hidden], b1; W2 [hidden, ffn], b2.
//!
//! Besides whole sequences the block runs sequence slices: the forward of slice k reads the
//! keys/values of slices 0 … k − 1 from a `Context` the slices of one microbatch share and
//! puts its own there; the backward of slice k adds the gradients of those earlier keys/values
//! into the context, where their own backwards take them (so slices run their backwards from
//! last to first). The weight gradient runs whole or in four pieces (`backward_weight_piece`).
//!
//! Tensor parallelism (Shoeybi et al. 2019, Megatron-LM): built for shard r of t, the block
//! holds heads [r·heads/t, (r+1)·heads/t) — their rows of Wqkv and bqkv (column-parallel) and
//! their columns of Wo (row-parallel) — and MLP units [r·ffn/t, (r+1)·ffn/t) — rows of W1, b1,
//! columns of W2; LayerNorms and the biases bo, b2 are whole on every shard. Each half's
//! row-parallel output is summed over the group (the forward's two all-reduces; shard 0 adds
//! the bias), and so is the gradient into each half's LayerNorm output (the backward's two
//! all-reduces), the four all-reduces of [batch, tokens, hidden] per block and microbatch the
//! cost model counts. The whole-on-every-shard parameters get the same gradient on every shard.
//! The weight pass then needs no communication: with t > 1 the stash keeps the two summed
//! LayerNorm-output gradients for it (2·[batch, tokens, hidden] more until their pieces run).
template <class T>
class GptBlock {
 public:
  using tensor_type = Tensor<T>;  //!< activations and gradients [batch, tokens, hidden]
  //! What one microbatch (or slice) leaves behind between calls (see `gpt_block_stash_bytes`
  //! and `gpt_block_slice_bytes`).
  struct Stash {
    // forward
    //! @{
    //! LN1's normalized input and inverse deviation.
    Tensor<T> xhat1, rstd1;
    //! @}
    Tensor<T> q;      //!< queries [batch, tokens, hidden]
    Tensor<T> kv;     //!< keys, values side by side per row [.., 2·hidden]: whole sequences
                      //!< only (a slice's live in the context, where later slices read them)
    Tensor<T> probs;  //!< attention probabilities [batch, heads, tokens, keys]
    Tensor<T> attn;   //!< attention output, the input of Wo
    //! @{
    //! LN2's normalized input and inverse deviation.
    Tensor<T> xhat2, rstd2;
    //! @}
    //! @{
    //! W1·LN2(y1) + b1 and its GELU.
    Tensor<T> pre, act;
    //! @}
    // backward_input, for the weight pass
    Tensor<T> dy;    //!< output gradient (into W2, b2)
    Tensor<T> dpre;  //!< into W1, b1
    Tensor<T> dy1;   //!< residual gradient after attention (into Wo, bo)
    Tensor<T> dqkv;  //!< into Wqkv, bqkv
    //! @{
    //! Tensor parallel only: the group-summed gradients into LN2's and LN1's outputs (into
    //! their γ, β), which a shard cannot rebuild from its own part of W1 or Wqkv.
    Tensor<T> dn2, dn1;
    //! @}
    int slice = -1;       //!< the slice a sliced forward ran; -1 for a whole sequence
    int pieces_done = 0;  //!< bit i: weight piece i has run
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! Element type of the key/value gradients a `Context` gathers: double for float blocks.
  using key_value_gradient_type = detail::accumulator_t<T>;

  //! What the slices of one microbatch share in this block: per slice, its keys and values
  //! [batch, tokens, 2·hidden] (from its forward until its backward_input) and the gradients the
  //! backwards of later slices have sent to them (same shape; from the first such backward until
  //! this slice's). The gradients are sums over later slices' queries kept in
  //! `key_value_gradient_type` and rounded to T once, in this slice's backward: a float sum would
  //! round differently from the whole-sequence pass, which visits the queries in another order,
  //! while the double sum keeps sliced float gradients within double rounding of unsliced ones.
  //! They count at that width in `context_bytes` and `gpt_block_slice_bytes`.
  struct Context {
    std::vector<Tensor<T>> kv;                         //!< per slice, its keys and values
    std::vector<Tensor<key_value_gradient_type>> dkv;  //!< per slice, their gradients so far
  };

  //! The pieces of the weight gradient, in the order `backward_weight` runs them: the second
  //! MLP linear, the first MLP linear with LN2, the attention output projection, the q/k/v
  //! projection with LN1 (see `gpt_block_weight_piece_bytes`).
  static constexpr int weight_pieces = 4;

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

  //! The block with global index `index`, initialized from stream (config.seed, index); with
  //! `shard` its tensor-parallel part of that block (`shard_of`), whose partial sums go over
  //! the group given by `set_tensor_group`. Throws invalid_problem when heads or ffn is not a
  //! multiple of the shard count.
  GptBlock(const GptConfig& config, int index, TensorShard shard = {})
      : hidden_(config.hidden),
        heads_(config.heads),
        ffn_(config.ffn),
        head_dim_(config.hidden / std::max(1, config.heads)),
        shard_(shard) {
    detail::check_gpt_config(config, "GptBlock");
    check_shard(config, shard);
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
    if (shard.split()) {
      params_ = shard_of(params_, config, shard);
      heads_ /= shard.size;
      ffn_ /= shard.size;
    }
    grads_ = detail::GradientSums<T>(params_);
  }

  //! Shard `shard`'s part of a whole block's tensors `whole` (its parameters, or tensors of
  //! their shapes such as its gradients), in the order of `parameters()`: what a block built
  //! for that shard holds. Tests compare a tensor-parallel run with a whole model through it.
  static std::vector<Tensor<T>> shard_of(std::span<const Tensor<T>> whole, const GptConfig& config,
                                         TensorShard shard) {
    check_shard(config, shard);
    if (whole.size() != tensor_count)
      throw invalid_problem("GptBlock::shard_of: " + std::to_string(whole.size()) +
                            " tensors given; a block has " + std::to_string(tensor_count));
    std::vector<Tensor<T>> out(whole.begin(), whole.end());
    detail::BlockSplit split{.hidden = config.hidden, .ffn = config.ffn, .shard = shard};
    out[qkv_weight] = split.rows(whole[qkv_weight], 3, config.hidden, split.attention());
    out[qkv_bias] = split.rows(whole[qkv_bias], 3, config.hidden, split.attention());
    out[out_weight] = split.columns(whole[out_weight], split.attention());
    out[fc1_weight] = split.rows(whole[fc1_weight], 1, config.ffn, split.mlp());
    out[fc1_bias] = split.rows(whole[fc1_bias], 1, config.ffn, split.mlp());
    out[fc2_weight] = split.columns(whole[fc2_weight], split.mlp());
    return out;
  }

  //! The tensor-parallel shard the block holds ({0, 1}: all of it).
  TensorShard tensor_shard() const noexcept { return shard_; }

  //! Sets the group the shards' partial sums go over (kept, not owned; nullptr detaches). A
  //! split block refuses to run without one; its size and this member's rank must be the
  //! shard's.
  void set_tensor_group(TensorGroup* group) {
    if (group != nullptr && (group->size() != shard_.size || group->rank() != shard_.rank))
      throw invalid_problem("GptBlock: built for tensor shard " + std::to_string(shard_.rank) +
                            " of " + std::to_string(shard_.size) + " but given member " +
                            std::to_string(group->rank()) + " of a group of " +
                            std::to_string(group->size()) +
                            "; build each process's stages for its place in the tensor group");
    group_ = group;
  }

  //! x [batch, sequence, hidden] → same shape; replaces whatever `stash` held. Deterministic,
  //! so a recompute from the same input reproduces the stash bit for bit.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    return run_forward(x, stash, nullptr, -1, 0);
  }

  //! Slice `slice` of a microbatch, x [batch, tokens, hidden], whose first token is at position
  //! `offset` (the tokens of slices 0 … slice − 1): attends to the keys/values of those slices,
  //! held in `context`, and to its own, which it puts there. Running it again (a recompute)
  //! rewrites the same keys/values.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash, Context& context, int slice,
                    int offset) const {
    detail::check_slice_number(slice, "GptBlock", "forward");
    return run_forward(x, stash, &context, slice, offset);
  }

  //! dy [batch, sequence, hidden] → dx; keeps what `backward_weight` needs, frees the rest.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    return run_backward_input(dy, stash, nullptr, -1, 0);
  }

  //! The backward of slice `slice` (at position `offset`): adds the gradients of earlier
  //! slices' keys/values into `context`, takes this slice's from there (the later slices have
  //! put theirs already), and frees this slice's keys/values and gradients from the context.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash, Context& context, int slice,
                           int offset) const {
    return run_backward_input(dy, stash, &context, slice, offset);
  }

  //! Adds this microbatch's weight gradients and empties the stash. The LayerNorm outputs and
  //! the gradients into them are rebuilt here from what is kept (the weights cannot have
  //! changed since backward_input) so the stash between the two passes stays small.
  void backward_weight(Stash& stash) {
    detail::run_remaining_weight_pieces(stash, weight_pieces, "GptBlock",
                                        [&](int piece) { run_piece(stash, piece); });
  }

  //! Runs one piece (0 … weight_pieces − 1) of the weight gradient, adding into the gradients
  //! it owns, and frees what only that piece needed; after the last the stash is empty.
  void backward_weight_piece(Stash& stash, int piece) {
    detail::run_weight_piece(stash, piece, weight_pieces, "GptBlock",
                             [&](int p) { run_piece(stash, p); });
  }

  //! Bytes `st` holds now.
  std::size_t stash_bytes(const Stash& st) const noexcept {
    return detail::gpt_block_held_bytes(st);
  }

  //! Bytes `context` holds (keys/values and their gradients, every slice).
  std::size_t context_bytes(const Context& context) const noexcept {
    return detail::key_value_bytes(context);
  }

  //! Analytic stash sizes for `batch` sequences of `sequence` tokens (of a whole block; a
  //! tensor-parallel shard's are measured, `stash_bytes`).
  StashBytes predicted_stash_bytes(int batch, int sequence) const noexcept {
    return gpt_block_stash_bytes<T>(
        static_cast<std::size_t>(batch), static_cast<std::size_t>(sequence),
        static_cast<std::size_t>(hidden_), static_cast<std::size_t>(heads_),
        static_cast<std::size_t>(ffn_));
  }

  //! Analytic sizes for a slice of `tokens` tokens attending to `keys` keys.
  SliceStashBytes predicted_slice_bytes(int batch, int tokens, int keys, bool last) const noexcept {
    return gpt_block_slice_bytes<T>(
        static_cast<std::size_t>(batch), static_cast<std::size_t>(tokens),
        static_cast<std::size_t>(keys), static_cast<std::size_t>(hidden_),
        static_cast<std::size_t>(heads_), static_cast<std::size_t>(ffn_), last);
  }

  //! Analytic bytes each weight piece frees, for `rows` rows.
  std::array<std::size_t, weight_pieces> predicted_piece_bytes(int rows) const noexcept {
    return gpt_block_weight_piece_bytes<T>(static_cast<std::size_t>(rows),
                                           static_cast<std::size_t>(hidden_),
                                           static_cast<std::size_t>(ffn_));
  }

  //! The parameters, in the order of the class comment (indexed by the enumeration above).
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! The parameters, in the order of the class comment (indexed by the enumeration above).
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<Tensor<T>> gradients() noexcept { return grads_.tensors(); }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradients (and the sums behind them) to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  Tensor<T> run_forward(const Tensor<T>& x, Stash& stash, Context* context, int slice,
                        int offset) const {
    detail::check_activation_shape(x.shape, hidden_, "GptBlock", "forward");
    const int b = x.dim(0);
    const int s = x.dim(1);
    const int n = b * s;
    const int h = hidden_;
    const int hl = local_width();  // this shard's attention width (its heads)
    const auto& p = params_;
    stash = Stash{};
    stash.slice = slice;
    stash.xhat1 = Tensor<T>({b, s, h});
    stash.rstd1 = Tensor<T>({b, s});
    Tensor<T> n1({b, s, h});
    detail::layer_norm_forward(x.begin_data(), p[ln1_gamma].begin_data(), p[ln1_beta].begin_data(),
                               stash.xhat1.begin_data(), stash.rstd1.begin_data(), n1.begin_data(),
                               n, h);
    Tensor<T> qkv({b, s, 3 * hl});
    detail::linear_forward(n1.begin_data(), p[qkv_weight].begin_data(), p[qkv_bias].begin_data(),
                           qkv.begin_data(), n, h, 3 * hl);
    // Queries stay with the unit; keys/values go where every later slice can read them.
    stash.q = Tensor<T>({b, s, hl});
    Tensor<T> kv({b, s, 2 * hl});
    for (int r = 0; r < n; ++r) {
      const T* row = qkv.begin_data() + static_cast<std::ptrdiff_t>(r) * 3 * hl;
      std::copy(row, row + hl, stash.q.begin_data() + static_cast<std::ptrdiff_t>(r) * hl);
      std::copy(row + hl, row + 3 * hl, kv.begin_data() + static_cast<std::ptrdiff_t>(r) * 2 * hl);
    }
    Tensor<T> gathered;
    const Tensor<T>* keys = nullptr;
    if (context != nullptr) {
      detail::key_value_slot(*context, slice) = std::move(kv);
      keys = &prefix(*context, slice, offset, b, s, gathered, "forward");
    } else {
      stash.kv = std::move(kv);
      keys = &stash.kv;
    }
    const int key_count = offset + s;
    stash.probs = Tensor<T>({b, heads_, s, key_count});
    stash.attn = Tensor<T>({b, s, hl});
    detail::attention_forward(stash.q.begin_data(), keys->begin_data(), stash.probs.begin_data(),
                              stash.attn.begin_data(), b, attention_shape(s, key_count, offset));
    Tensor<T> y1({b, s, h});
    const std::vector<T> no_bias(shard_.split() ? static_cast<std::size_t>(h) : 0, T(0));
    detail::linear_forward(stash.attn.begin_data(), p[out_weight].begin_data(),
                           bias_of(out_bias, no_bias), y1.begin_data(), n, hl, h);
    sum_over_group(y1);  // row-parallel Wo: the shards' partial sums
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
                           bias_of(fc2_bias, no_bias), y.begin_data(), n, ffn_, h);
    sum_over_group(y);  // row-parallel W2
    detail::add_into(y, y1);
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  Tensor<T> run_backward_input(const Tensor<T>& dy, Stash& stash, Context* context, int slice,
                               int offset) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "GptBlock", "backward_input");
    detail::check_output_gradient_shape(dy.shape, stash.xhat1.shape, "GptBlock", "backward_input");
    detail::check_backward_unit(stash.slice, slice, "GptBlock");
    const int b = dy.dim(0);
    const int s = dy.dim(1);
    const int n = b * s;
    const int h = hidden_;
    const int hl = local_width();
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
    sum_over_group(dn2);  // column-parallel W1: the gradient into its input sums over shards
    Tensor<T> dy1({b, s, h});
    detail::layer_norm_backward_input(dn2.begin_data(), stash.xhat2.begin_data(),
                                      stash.rstd2.begin_data(), p[ln2_gamma].begin_data(),
                                      dy1.begin_data(), n, h);
    detail::add_into(dy1, dy);
    // Attention half: gradients of the queries, and of the keys/values of this slice and
    // every earlier one.
    Tensor<T> dattn({b, s, hl});
    detail::linear_backward_input(dy1.begin_data(), p[out_weight].begin_data(), dattn.begin_data(),
                                  n, hl, h);
    Tensor<T> gathered;
    const Tensor<T>& keys = context != nullptr
                                ? prefix(*context, slice, offset, b, s, gathered, "backward_input")
                                : stash.kv;
    const int key_count = offset + s;
    using S = key_value_gradient_type;  // key/value gradients sum here (see Context)
    Tensor<T> dq({b, s, hl});
    Tensor<S> dkeys({b, key_count, 2 * hl});
    detail::attention_backward(dattn.begin_data(), stash.q.begin_data(), keys.begin_data(),
                               stash.probs.begin_data(), dq.begin_data(), dkeys.begin_data(), b,
                               attention_shape(s, key_count, offset));
    // This slice's q/k/v gradient: its queries', and its keys/values' from its own queries plus
    // what later slices left in the context.
    const Tensor<S>* later = detail::later_key_value_gradients(context, slice);
    stash.dqkv = Tensor<T>({b, s, 3 * hl});
    detail::assemble_dqkv(dq.begin_data(), dkeys.begin_data(),
                          later != nullptr ? later->begin_data() : nullptr, stash.dqkv.begin_data(),
                          b, s, key_count, offset, hl);
    if (context != nullptr) {
      // Earlier slices' keys/values: their backwards run later and take these.
      detail::for_each_earlier_slice(*context, slice,
                                     [&](const Tensor<T>& kj, Tensor<S>& gj, int start) {
                                       if (gj.empty()) gj = Tensor<S>(kj.shape);
                                       detail::add_key_rows(gj.begin_data(), dkeys.begin_data(), b,
                                                            kj.dim(1), key_count, start, 2 * hl);
                                     });
      detail::release_slice(*context, slice);
    }
    Tensor<T> dn1({b, s, h});
    detail::linear_backward_input(stash.dqkv.begin_data(), p[qkv_weight].begin_data(),
                                  dn1.begin_data(), n, h, 3 * hl);
    sum_over_group(dn1);  // column-parallel Wqkv
    Tensor<T> dx({b, s, h});
    detail::layer_norm_backward_input(dn1.begin_data(), stash.xhat1.begin_data(),
                                      stash.rstd1.begin_data(), p[ln1_gamma].begin_data(),
                                      dx.begin_data(), n, h);
    detail::add_into(dx, dy1);
    if (shard_.split()) {
      stash.dn2 = std::move(dn2);
      stash.dn1 = std::move(dn1);
    }
    stash.dy = dy;
    stash.dy1 = std::move(dy1);
    stash.rstd1 = Tensor<T>{};
    stash.q = Tensor<T>{};
    stash.kv = Tensor<T>{};
    stash.probs = Tensor<T>{};
    stash.rstd2 = Tensor<T>{};
    stash.pre = Tensor<T>{};
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  // The keys/values of slices 0 … slice as one [batch, keys, 2·hidden] tensor: the context's
  // own when the slice is the first, else gathered into `gathered`. Throws when an earlier
  // slice's are missing (its forward has not run, or its backward already ran) or the slice's
  // offset does not match them.
  const Tensor<T>& prefix(const Context& context, int slice, int offset, int batch, int tokens,
                          Tensor<T>& gathered, const char* op) const {
    const int count =
        detail::check_key_value_prefix(context, slice, offset, batch, tokens, "GptBlock", op);
    if (slice == 0) return context.kv.front();
    const int h2 = 2 * local_width();
    gathered = Tensor<T>({batch, count, h2});
    for (int i = 0; i < batch; ++i) {
      T* to = gathered.begin_data() + static_cast<std::ptrdiff_t>(i) * count * h2;
      for (int j = 0; j <= slice; ++j) {
        const Tensor<T>& kj = context.kv[static_cast<std::size_t>(j)];
        const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(kj.dim(1)) * h2;
        const T* from = kj.begin_data() + static_cast<std::ptrdiff_t>(i) * rows;
        to = std::copy(from, from + rows, to);
      }
    }
    return gathered;
  }

  // Piece `piece` of the weight gradient (see `weight_pieces`); each reads only its own tensors.
  void run_piece(Stash& stash, int piece) {
    const int h = hidden_;
    const int hl = local_width();
    const auto& p = params_;
    auto& g = grads_;
    switch (piece) {
      case 0: {  // W2, b2
        const int n = stash.dy.dim(0) * stash.dy.dim(1);
        detail::linear_backward_weight(stash.dy.begin_data(), stash.act.begin_data(),
                                       g.sum(fc2_weight), g.sum(fc2_bias), n, ffn_, h);
        g.publish({fc2_weight, fc2_bias});
        stash.dy = Tensor<T>{};
        stash.act = Tensor<T>{};
        break;
      }
      case 1: {  // W1, b1 and LN2
        const int n = stash.dpre.dim(0) * stash.dpre.dim(1);
        Tensor<T> normed(stash.xhat2.shape);
        detail::layer_norm_apply(stash.xhat2.begin_data(), p[ln2_gamma].begin_data(),
                                 p[ln2_beta].begin_data(), normed.begin_data(), n, h);
        detail::linear_backward_weight(stash.dpre.begin_data(), normed.begin_data(),
                                       g.sum(fc1_weight), g.sum(fc1_bias), n, h, ffn_);
        Tensor<T> dnormed = std::move(stash.dn2);  // kept summed when split
        if (!shard_.split()) {
          dnormed = Tensor<T>(stash.xhat2.shape);
          detail::linear_backward_input(stash.dpre.begin_data(), p[fc1_weight].begin_data(),
                                        dnormed.begin_data(), n, h, ffn_);
        }
        detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat2.begin_data(),
                                           g.sum(ln2_gamma), g.sum(ln2_beta), n, h);
        g.publish({fc1_weight, fc1_bias, ln2_gamma, ln2_beta});
        stash.dn2 = Tensor<T>{};
        stash.dpre = Tensor<T>{};
        stash.xhat2 = Tensor<T>{};
        break;
      }
      case 2: {  // Wo, bo
        const int n = stash.dy1.dim(0) * stash.dy1.dim(1);
        detail::linear_backward_weight(stash.dy1.begin_data(), stash.attn.begin_data(),
                                       g.sum(out_weight), g.sum(out_bias), n, hl, h);
        g.publish({out_weight, out_bias});
        stash.dy1 = Tensor<T>{};
        stash.attn = Tensor<T>{};
        break;
      }
      default: {  // Wqkv, bqkv and LN1
        const int n = stash.dqkv.dim(0) * stash.dqkv.dim(1);
        Tensor<T> normed(stash.xhat1.shape);
        detail::layer_norm_apply(stash.xhat1.begin_data(), p[ln1_gamma].begin_data(),
                                 p[ln1_beta].begin_data(), normed.begin_data(), n, h);
        detail::linear_backward_weight(stash.dqkv.begin_data(), normed.begin_data(),
                                       g.sum(qkv_weight), g.sum(qkv_bias), n, h, 3 * hl);
        Tensor<T> dnormed = std::move(stash.dn1);  // kept summed when split
        if (!shard_.split()) {
          dnormed = Tensor<T>(stash.xhat1.shape);
          detail::linear_backward_input(stash.dqkv.begin_data(), p[qkv_weight].begin_data(),
                                        dnormed.begin_data(), n, h, 3 * hl);
        }
        detail::layer_norm_backward_weight(dnormed.begin_data(), stash.xhat1.begin_data(),
                                           g.sum(ln1_gamma), g.sum(ln1_beta), n, h);
        g.publish({qkv_weight, qkv_bias, ln1_gamma, ln1_beta});
        stash.dn1 = Tensor<T>{};
        stash.dqkv = Tensor<T>{};
        stash.xhat1 = Tensor<T>{};
        break;
      }
    }
  }

  detail::AttentionShape attention_shape(int queries, int keys, int offset) const noexcept {
    return {.queries = queries,
            .keys = keys,
            .query_offset = offset,
            .heads = heads_,
            .head_dim = head_dim_};
  }

  // This shard's attention width: its heads × the head width (hidden when whole).
  int local_width() const noexcept { return heads_ * head_dim_; }

  static void check_shard(const GptConfig& config, TensorShard shard) {
    shard.check("GptBlock");
    if (config.heads % shard.size != 0 || config.ffn % shard.size != 0)
      throw invalid_problem("GptBlock: " + std::to_string(shard.size) +
                            " tensor-parallel shards need heads (" + std::to_string(config.heads) +
                            ") and ffn (" + std::to_string(config.ffn) + ") to be multiples of " +
                            std::to_string(shard.size));
  }

  // The bias a row-parallel linear adds: its own on shard 0 (once, into the sum), zeros on
  // the others.
  const T* bias_of(std::size_t tensor, const std::vector<T>& zeros) const {
    return shard_.rank == 0 ? params_[tensor].begin_data() : zeros.data();
  }

  // Sums a partial result over the tensor-parallel group (nothing when whole).
  void sum_over_group(Tensor<T>& x) const {
    if (!shard_.split()) return;
    if (group_ == nullptr)
      throw invalid_problem("GptBlock: built for tensor shard " + std::to_string(shard_.rank) +
                            " of " + std::to_string(shard_.size) +
                            " but given no tensor group; run it in a pipeline of a job with "
                            "tp = " +
                            std::to_string(shard_.size) + " (or call set_tensor_group)");
    group_->all_reduce(std::span<T>(x.begin_data(), x.size()));
  }

  int hidden_;
  int heads_;  // this shard's heads
  int ffn_;    // this shard's MLP width
  int head_dim_;
  TensorShard shard_;
  TensorGroup* group_ = nullptr;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

}  // namespace pipesched::toy
