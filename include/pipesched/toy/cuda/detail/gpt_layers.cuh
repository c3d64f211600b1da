// The toy GPT's layers on the device — embedding, transformer block (with sequence slices and
// their shared keys/values), final LayerNorm + LM head — the twins of toy::GptEmbedding,
// toy::GptBlock and toy::GptHead: the same stashes (tensor for tensor, so the same bytes), the
// same slice context, the same weight pieces, and the same checks
// (toy/detail/layer_bookkeeping.hpp) with the same sentences. A block built from a host block
// of a tensor-parallel shard is that shard (Megatron-LM's column- then row-parallel linears,
// as toy::GptBlock): its partial sums go over the TensorGroup it is given, whose all_reduce
// takes device memory written on the compute stream (nccl::TensorGroup).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/toy/cuda/detail/attention_kernels.cuh"
#include "pipesched/toy/cuda/detail/embedding_kernels.cuh"
#include "pipesched/toy/cuda/detail/engine.cuh"
#include "pipesched/toy/cuda/detail/layer_kernels.cuh"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/gpt_layers.hpp"

namespace pipesched::toy::gpu::detail {

using toy::detail::StashPhase;

// ---- embedding -------------------------------------------------------------------------------

template <class T>
class GptEmbedding {
 public:
  using Host = toy::GptEmbedding<T>;
  struct Stash {
    DeviceTensor<T> ids;  // forward: the token ids
    DeviceTensor<T> dy;   // backward_input: the output gradient
    int offset = 0;
    StashPhase phase = StashPhase::Empty;
  };

  GptEmbedding(EnginePtr engine, const GptConfig& config)
      : engine_(std::move(engine)),
        vocabulary_(config.vocabulary),
        hidden_(config.hidden),
        sequence_(config.sequence),
        params_(Host(config).parameters(), engine_->stream()) {}

  DeviceTensor<T> forward(const DeviceTensor<T>& ids, Stash& stash, int offset) const {
    toy::detail::check_token_shape(ids.shape(), offset, sequence_, "gpu::GptEmbedding");
    const cudaStream_t s = engine_->stream();
    const int b = ids.dim(0), t = ids.dim(1);
    DeviceTensor<T> y({b, t, hidden_}, s);
    const std::size_t n = y.size();
    embedding_forward_kernel<<<grid_for(n), block_threads, 0, s>>>(
        ids.data(), params_[Host::tokens], params_[Host::positions], y.data(), t, offset, hidden_,
        vocabulary_, n);
    check_launch("embedding_forward_kernel");
    stash = Stash{};
    stash.ids = ids.clone(s);
    stash.offset = offset;
    stash.phase = StashPhase::Forwarded;
    return y;
  }

  DeviceTensor<T> backward_input(const DeviceTensor<T>& dy, Stash& stash) const {
    toy::detail::require_phase(stash.phase, StashPhase::Forwarded, "gpu::GptEmbedding",
                               "backward_input");
    toy::detail::check_gradient_shape(dy.shape(), {stash.ids.dim(0), stash.ids.dim(1), hidden_},
                                      "gpu::GptEmbedding", "backward_input");
    const cudaStream_t s = engine_->stream();
    stash.dy = dy.clone(s);
    stash.phase = StashPhase::InputDone;
    return DeviceTensor<T>::zeros(stash.ids.shape(), s);
  }

  void backward_weight(Stash& stash) {
    toy::detail::require_phase(stash.phase, StashPhase::InputDone, "gpu::GptEmbedding",
                               "backward_weight");
    const cudaStream_t s = engine_->stream();
    const int b = stash.ids.dim(0), t = stash.ids.dim(1);
    const std::size_t tokens = static_cast<std::size_t>(vocabulary_) * hidden_;
    embedding_token_gradient_kernel<<<grid_for(tokens), block_threads, 0, s>>>(
        stash.ids.data(), stash.dy.data(), params_.sum(Host::tokens), b * t, hidden_, vocabulary_);
    check_launch("embedding_token_gradient_kernel");
    const std::size_t positions = static_cast<std::size_t>(t) * hidden_;
    embedding_position_gradient_kernel<<<grid_for(positions), block_threads, 0, s>>>(
        stash.dy.data(), params_.sum(Host::positions), b, t, stash.offset, hidden_);
    check_launch("embedding_position_gradient_kernel");
    params_.publish({Host::tokens, Host::positions}, s);
    stash = Stash{};
  }

  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return toy::detail::gpt_embedding_held_bytes(stash);
  }
  DeviceParameters<T>& parameters() noexcept { return params_; }
  const DeviceParameters<T>& parameters() const noexcept { return params_; }

 private:
  EnginePtr engine_;
  int vocabulary_, hidden_, sequence_;
  DeviceParameters<T> params_;
};

// ---- transformer block -----------------------------------------------------------------------

template <class T>
class GptBlock {
 public:
  using Host = toy::GptBlock<T>;
  using A = acc_t<T>;
  struct Stash {
    DeviceTensor<T> xhat1, rstd1, q, kv, probs, attn, xhat2, rstd2, pre, act;  // forward
    DeviceTensor<T> dy, dpre, dy1, dqkv;  // backward_input, for the weight pass
    DeviceTensor<T> dn2, dn1;  // tensor-parallel only: the LayerNorms' summed output gradients
    int slice = -1;
    int pieces_done = 0;
    StashPhase phase = StashPhase::Empty;
  };
  // Per slice: keys/values [batch, tokens, 2·hidden] and the double sums of their gradients.
  struct Context {
    std::vector<DeviceTensor<T>> kv;
    std::vector<DeviceTensor<A>> dkv;
  };
  static constexpr int weight_pieces = Host::weight_pieces;

  // The twin of `host` (a whole block, or one tensor-parallel shard of it).
  GptBlock(EnginePtr engine, const Host& host, const GptConfig& config)
      : engine_(std::move(engine)),
        shard_(host.tensor_shard()),
        hidden_(config.hidden),
        heads_(config.heads / host.tensor_shard().size),
        head_dim_(config.hidden / config.heads),
        ffn_(config.ffn / host.tensor_shard().size),
        params_(host.parameters(), engine_->stream()) {}

  // The tensor-parallel shard the block holds ({0, 1}: all of it).
  TensorShard tensor_shard() const noexcept { return shard_; }
  // Sets the group the shards' partial sums go over (kept, not owned; nullptr detaches),
  // checked as the host block checks it.
  void set_tensor_group(TensorGroup* group) {
    if (group != nullptr && (group->size() != shard_.size || group->rank() != shard_.rank))
      throw invalid_problem("gpu::GptBlock: built for tensor shard " + std::to_string(shard_.rank) +
                            " of " + std::to_string(shard_.size) + " but given member " +
                            std::to_string(group->rank()) + " of a " +
                            std::to_string(group->size()) +
                            "-way group; build each process's stages for its place in the "
                            "tensor group");
    group_ = group;
  }

  DeviceTensor<T> forward(const DeviceTensor<T>& x, Stash& stash, Context* context, int slice,
                          int offset) const {
    toy::detail::check_activation_shape(x.shape(), hidden_, "gpu::GptBlock", "forward");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int b = x.dim(0), t = x.dim(1), n = b * t, h = hidden_;
    const int hl = local_width();  // this shard's attention width (its heads)
    const DeviceParameters<T>& p = params_;
    stash = Stash{};
    stash.slice = slice;
    stash.xhat1 = DeviceTensor<T>({b, t, h}, s);
    stash.rstd1 = DeviceTensor<T>({b, t}, s);
    {
      DeviceTensor<T> n1({b, t, h}, s);
      layer_norm_forward(x.data(), p[Host::ln1_gamma], p[Host::ln1_beta], stash.xhat1.data(),
                         stash.rstd1.data(), n1.data(), n, h, s);
      DeviceTensor<T> qkv({b, t, 3 * hl}, s);
      linear_forward(g, n1.data(), p[Host::qkv_weight], p[Host::qkv_bias],
                     static_cast<const T*>(nullptr), qkv.data(), n, h, 3 * hl);
      // Queries stay with the unit; keys/values go where every later slice can read them.
      stash.q = DeviceTensor<T>({b, t, hl}, s);
      DeviceTensor<T> kv({b, t, 2 * hl}, s);
      copy_columns(qkv.data(), 3 * hl, 0, stash.q.data(), hl, hl, n, s);
      copy_columns(qkv.data(), 3 * hl, hl, kv.data(), 2 * hl, 2 * hl, n, s);
      if (context != nullptr) {
        toy::detail::key_value_slot(*context, slice) = std::move(kv);
      } else {
        stash.kv = std::move(kv);
      }
    }
    DeviceTensor<T> gathered;
    const DeviceTensor<T>& keys =
        context != nullptr ? prefix(*context, slice, offset, b, t, gathered, "forward") : stash.kv;
    const int key_count = offset + t;
    stash.probs = DeviceTensor<T>({b, heads_, t, key_count}, s);
    stash.attn = DeviceTensor<T>({b, t, hl}, s);
    attention_forward(stash.q.data(), keys.data(), stash.probs.data(), stash.attn.data(), b,
                      dims(t, key_count, offset), s);
    // Row-parallel Wo: each shard's partial product; shard 0 adds the bias and the residual
    // (once, into the sum).
    const bool first = shard_.rank == 0;
    DeviceTensor<T> y1({b, t, h}, s);
    linear_forward(g, stash.attn.data(), p[Host::out_weight], first ? p[Host::out_bias] : nullptr,
                   first ? x.data() : nullptr, y1.data(), n, hl, h);
    sum_over_group(y1);
    stash.xhat2 = DeviceTensor<T>({b, t, h}, s);
    stash.rstd2 = DeviceTensor<T>({b, t}, s);
    DeviceTensor<T> n2({b, t, h}, s);
    layer_norm_forward(y1.data(), p[Host::ln2_gamma], p[Host::ln2_beta], stash.xhat2.data(),
                       stash.rstd2.data(), n2.data(), n, h, s);
    stash.pre = DeviceTensor<T>({b, t, ffn_}, s);
    linear_forward(g, n2.data(), p[Host::fc1_weight], p[Host::fc1_bias],
                   static_cast<const T*>(nullptr), stash.pre.data(), n, h, ffn_);
    stash.act = DeviceTensor<T>({b, t, ffn_}, s);
    gelu(stash.pre.data(), stash.act.data(), stash.act.size(), s);
    DeviceTensor<T> y({b, t, h}, s);
    linear_forward(g, stash.act.data(), p[Host::fc2_weight], first ? p[Host::fc2_bias] : nullptr,
                   first ? y1.data() : nullptr, y.data(), n, ffn_, h);
    sum_over_group(y);  // row-parallel W2
    stash.phase = StashPhase::Forwarded;
    return y;
  }

  DeviceTensor<T> backward_input(const DeviceTensor<T>& dy, Stash& stash, Context* context,
                                 int slice, int offset) const {
    toy::detail::require_phase(stash.phase, StashPhase::Forwarded, "gpu::GptBlock",
                               "backward_input");
    toy::detail::check_output_gradient_shape(dy.shape(), stash.xhat1.shape(), "gpu::GptBlock",
                                             "backward_input");
    toy::detail::check_backward_unit(stash.slice, slice, "gpu::GptBlock");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int b = dy.dim(0), t = dy.dim(1), n = b * t, h = hidden_;
    const int hl = local_width();
    const DeviceParameters<T>& p = params_;
    // MLP half.
    stash.dpre = DeviceTensor<T>({b, t, ffn_}, s);
    linear_backward_input(g, dy.data(), p[Host::fc2_weight], static_cast<const T*>(nullptr),
                          stash.dpre.data(), n, ffn_, h);
    times_gelu_gradient(stash.dpre.data(), stash.pre.data(), stash.dpre.size(), s);
    DeviceTensor<T> dy1({b, t, h}, s);
    {
      DeviceTensor<T> dn2({b, t, h}, s);
      linear_backward_input(g, stash.dpre.data(), p[Host::fc1_weight],
                            static_cast<const T*>(nullptr), dn2.data(), n, h, ffn_);
      sum_over_group(dn2);  // column-parallel W1: the gradient into its input sums over shards
      layer_norm_backward_input(dn2.data(), stash.xhat2.data(), stash.rstd2.data(),
                                p[Host::ln2_gamma], dy.data(), dy1.data(), n, h, s);
      if (shard_.split()) stash.dn2 = std::move(dn2);
    }
    // Attention half: gradients of the queries, and of the keys/values of this slice and every
    // earlier one.
    DeviceTensor<T> dattn({b, t, hl}, s);
    linear_backward_input(g, dy1.data(), p[Host::out_weight], static_cast<const T*>(nullptr),
                          dattn.data(), n, hl, h);
    DeviceTensor<T> gathered;
    const DeviceTensor<T>& keys =
        context != nullptr ? prefix(*context, slice, offset, b, t, gathered, "backward_input")
                           : stash.kv;
    const int key_count = offset + t;
    DeviceTensor<T> dq({b, t, hl}, s);
    DeviceTensor<A> dkeys({b, key_count, 2 * hl}, s);
    {
      DeviceTensor<A> ds({b, heads_, t, key_count}, s);
      attention_backward(dattn.data(), stash.q.data(), keys.data(), stash.probs.data(), ds.data(),
                         dq.data(), dkeys.data(), b, dims(t, key_count, offset), s);
    }
    const DeviceTensor<A>* later = toy::detail::later_key_value_gradients(context, slice);
    stash.dqkv = DeviceTensor<T>({b, t, 3 * hl}, s);
    assemble_dqkv(dq.data(), dkeys.data(), later != nullptr ? later->data() : nullptr,
                  stash.dqkv.data(), b, t, key_count, offset, hl, s);
    if (context != nullptr) {
      // Earlier slices' keys/values: their backwards run later and take these.
      toy::detail::for_each_earlier_slice(
          *context, slice, [&](const DeviceTensor<T>& kj, DeviceTensor<A>& gj, int start) {
            if (gj.empty()) gj = DeviceTensor<A>::zeros(kj.shape(), s);
            add_key_rows(gj.data(), dkeys.data(), b, kj.dim(1), key_count, start, 2 * hl, s);
          });
      toy::detail::release_slice(*context, slice);
    }
    DeviceTensor<T> dx({b, t, h}, s);
    {
      DeviceTensor<T> dn1({b, t, h}, s);
      linear_backward_input(g, stash.dqkv.data(), p[Host::qkv_weight],
                            static_cast<const T*>(nullptr), dn1.data(), n, h, 3 * hl);
      sum_over_group(dn1);  // column-parallel Wqkv
      layer_norm_backward_input(dn1.data(), stash.xhat1.data(), stash.rstd1.data(),
                                p[Host::ln1_gamma], dy1.data(), dx.data(), n, h, s);
      if (shard_.split()) stash.dn1 = std::move(dn1);
    }
    stash.dy = dy.clone(s);
    stash.dy1 = std::move(dy1);
    stash.rstd1 = DeviceTensor<T>{};
    stash.q = DeviceTensor<T>{};
    stash.kv = DeviceTensor<T>{};
    stash.probs = DeviceTensor<T>{};
    stash.rstd2 = DeviceTensor<T>{};
    stash.pre = DeviceTensor<T>{};
    stash.phase = StashPhase::InputDone;
    return dx;
  }

  void backward_weight(Stash& stash) {
    toy::detail::run_remaining_weight_pieces(stash, weight_pieces, "gpu::GptBlock",
                                             [&](int piece) { run_piece(stash, piece); });
  }

  // Piece 0 … weight_pieces − 1, checked as the host block checks it.
  void backward_weight_piece(Stash& stash, int piece) {
    toy::detail::run_weight_piece(stash, piece, weight_pieces, "gpu::GptBlock",
                                  [&](int p) { run_piece(stash, p); });
  }

  std::size_t stash_bytes(const Stash& st) const noexcept {
    return toy::detail::gpt_block_held_bytes(st);
  }

  std::size_t context_bytes(const Context& context) const noexcept {
    return toy::detail::key_value_bytes(context);
  }

  DeviceParameters<T>& parameters() noexcept { return params_; }
  const DeviceParameters<T>& parameters() const noexcept { return params_; }

 private:
  AttentionDims dims(int tokens, int keys, int offset) const noexcept {
    return {
        .tokens = tokens, .keys = keys, .offset = offset, .heads = heads_, .head_dim = head_dim_};
  }

  // This shard's attention width: its heads × the head width (hidden when whole).
  int local_width() const noexcept { return heads_ * head_dim_; }

  // Sums a partial result over the tensor-parallel group (nothing when whole).
  void sum_over_group(DeviceTensor<T>& x) const {
    if (!shard_.split()) return;
    if (group_ == nullptr)
      throw invalid_problem("gpu::GptBlock: built for tensor shard " + std::to_string(shard_.rank) +
                            " of " + std::to_string(shard_.size) +
                            " but given no tensor group; run it in a pipeline of a job with "
                            "tp = " +
                            std::to_string(shard_.size) + " (or call set_tensor_group)");
    group_->all_reduce(std::span<T>(x.data(), x.size()));
  }

  // Columns [first, first + width) of the `rows` rows of `from` (row stride from_stride) into
  // `to` (row stride to_stride).
  static void copy_columns(const T* from, int from_stride, int first, T* to, int to_stride,
                           int width, int rows, cudaStream_t s) {
    if (rows < 1 || width < 1) return;
    PIPESCHED_CUDA_CHECK(
        cudaMemcpy2DAsync(to, static_cast<std::size_t>(to_stride) * sizeof(T), from + first,
                          static_cast<std::size_t>(from_stride) * sizeof(T),
                          static_cast<std::size_t>(width) * sizeof(T),
                          static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, s));
  }

  // The keys/values of slices 0 … slice as one [batch, keys, 2·hidden] tensor: the context's
  // own when the slice is the first, else gathered into `gathered`. Throws as the host block.
  const DeviceTensor<T>& prefix(const Context& context, int slice, int offset, int batch,
                                int tokens, DeviceTensor<T>& gathered, const char* op) const {
    const int count = toy::detail::check_key_value_prefix(context, slice, offset, batch, tokens,
                                                          "gpu::GptBlock", op);
    if (slice == 0) return context.kv.front();
    const cudaStream_t s = engine_->stream();
    const int h2 = 2 * local_width();
    gathered = DeviceTensor<T>({batch, count, h2}, s);
    int start = 0;
    for (int j = 0; j <= slice; ++j) {
      const DeviceTensor<T>& kj = context.kv[static_cast<std::size_t>(j)];
      const std::size_t row_bytes = static_cast<std::size_t>(kj.dim(1)) * h2 * sizeof(T);
      PIPESCHED_CUDA_CHECK(cudaMemcpy2DAsync(
          gathered.data() + static_cast<std::size_t>(start) * h2,
          static_cast<std::size_t>(count) * h2 * sizeof(T), kj.data(), row_bytes, row_bytes,
          static_cast<std::size_t>(batch), cudaMemcpyDeviceToDevice, s));
      start += kj.dim(1);
    }
    return gathered;
  }

  void run_piece(Stash& stash, int piece) {
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int h = hidden_;
    const int hl = local_width();
    DeviceParameters<T>& p = params_;
    switch (piece) {
      case 0: {  // W2, b2
        const int n = stash.dy.dim(0) * stash.dy.dim(1);
        linear_backward_weight(g, stash.dy.data(), stash.act.data(), p.sum(Host::fc2_weight),
                               p.sum(Host::fc2_bias), n, ffn_, h);
        p.publish({Host::fc2_weight, Host::fc2_bias}, s);
        stash.dy = DeviceTensor<T>{};
        stash.act = DeviceTensor<T>{};
        break;
      }
      case 1: {  // W1, b1 and LN2
        const int n = stash.dpre.dim(0) * stash.dpre.dim(1);
        layer_norm_weight_piece(stash.dpre, stash.xhat2, stash.dn2, Host::ln2_gamma, Host::ln2_beta,
                                Host::fc1_weight, Host::fc1_bias, n, ffn_);
        p.publish({Host::fc1_weight, Host::fc1_bias, Host::ln2_gamma, Host::ln2_beta}, s);
        stash.dn2 = DeviceTensor<T>{};
        stash.dpre = DeviceTensor<T>{};
        stash.xhat2 = DeviceTensor<T>{};
        break;
      }
      case 2: {  // Wo, bo
        const int n = stash.dy1.dim(0) * stash.dy1.dim(1);
        linear_backward_weight(g, stash.dy1.data(), stash.attn.data(), p.sum(Host::out_weight),
                               p.sum(Host::out_bias), n, hl, h);
        p.publish({Host::out_weight, Host::out_bias}, s);
        stash.dy1 = DeviceTensor<T>{};
        stash.attn = DeviceTensor<T>{};
        break;
      }
      default: {  // Wqkv, bqkv and LN1
        const int n = stash.dqkv.dim(0) * stash.dqkv.dim(1);
        layer_norm_weight_piece(stash.dqkv, stash.xhat1, stash.dn1, Host::ln1_gamma, Host::ln1_beta,
                                Host::qkv_weight, Host::qkv_bias, n, 3 * hl);
        p.publish({Host::qkv_weight, Host::qkv_bias, Host::ln1_gamma, Host::ln1_beta}, s);
        stash.dn1 = DeviceTensor<T>{};
        stash.dqkv = DeviceTensor<T>{};
        stash.xhat1 = DeviceTensor<T>{};
        break;
      }
    }
  }

  // A linear fed by a LayerNorm: its weight gradient from the rebuilt LayerNorm output, then
  // the LayerNorm's γ/β gradients from the gradient into that output (`summed`, kept by
  // backward_input, when the block is a tensor-parallel shard: its own product is partial).
  void layer_norm_weight_piece(const DeviceTensor<T>& dout, const DeviceTensor<T>& xhat,
                               const DeviceTensor<T>& summed, std::size_t gamma, std::size_t beta,
                               std::size_t weight, std::size_t bias, int n, int out) {
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int h = hidden_;
    DeviceParameters<T>& p = params_;
    DeviceTensor<T> normed(xhat.shape(), s);
    layer_norm_apply(xhat.data(), p[gamma], p[beta], normed.data(), n, h, s);
    linear_backward_weight(g, dout.data(), normed.data(), p.sum(weight), p.sum(bias), n, h, out);
    DeviceTensor<T> own;
    const T* dnormed = summed.data();
    if (!shard_.split()) {
      own = DeviceTensor<T>(xhat.shape(), s);
      linear_backward_input(g, dout.data(), p[weight], static_cast<const T*>(nullptr), own.data(),
                            n, h, out);
      dnormed = own.data();
    }
    column_sums(dnormed, xhat.data(), p.sum(gamma), n, h, s);
    column_sums(dnormed, static_cast<const T*>(nullptr), p.sum(beta), n, h, s);
  }

  EnginePtr engine_;
  TensorShard shard_;
  int hidden_;
  int heads_;     // this shard's heads
  int head_dim_;  // the width of one head
  int ffn_;       // this shard's MLP width
  DeviceParameters<T> params_;
  TensorGroup* group_ = nullptr;  // the shards' group (kept, not owned)
};

// ---- final LayerNorm + LM head ---------------------------------------------------------------

template <class T>
class GptHead {
 public:
  using Host = toy::GptHead<T>;
  struct Stash {
    DeviceTensor<T> xhat, rstd;  // forward
    DeviceTensor<T> dlogits;     // backward_input
    StashPhase phase = StashPhase::Empty;
  };

  GptHead(EnginePtr engine, const GptConfig& config)
      : engine_(std::move(engine)),
        hidden_(config.hidden),
        vocabulary_(config.vocabulary),
        params_(Host(config).parameters(), engine_->stream()) {}

  DeviceTensor<T> forward(const DeviceTensor<T>& x, Stash& stash) const {
    toy::detail::check_activation_shape(x.shape(), hidden_, "gpu::GptHead", "forward");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int b = x.dim(0), t = x.dim(1), n = b * t;
    stash = Stash{};
    stash.xhat = DeviceTensor<T>({b, t, hidden_}, s);
    stash.rstd = DeviceTensor<T>({b, t}, s);
    DeviceTensor<T> normed({b, t, hidden_}, s);
    layer_norm_forward(x.data(), params_[Host::ln_gamma], params_[Host::ln_beta], stash.xhat.data(),
                       stash.rstd.data(), normed.data(), n, hidden_, s);
    DeviceTensor<T> logits({b, t, vocabulary_}, s);
    linear_forward(g, normed.data(), params_[Host::weight], static_cast<const T*>(nullptr),
                   static_cast<const T*>(nullptr), logits.data(), n, hidden_, vocabulary_);
    stash.phase = StashPhase::Forwarded;
    return logits;
  }

  DeviceTensor<T> backward_input(const DeviceTensor<T>& dlogits, Stash& stash) const {
    toy::detail::require_phase(stash.phase, StashPhase::Forwarded, "gpu::GptHead",
                               "backward_input");
    const std::vector<int> expected{stash.xhat.dim(0), stash.xhat.dim(1), vocabulary_};
    toy::detail::check_gradient_shape(dlogits.shape(), expected, "gpu::GptHead", "backward_input");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int n = expected[0] * expected[1];
    DeviceTensor<T> dnormed(stash.xhat.shape(), s);
    linear_backward_input(g, dlogits.data(), params_[Host::weight], static_cast<const T*>(nullptr),
                          dnormed.data(), n, hidden_, vocabulary_);
    DeviceTensor<T> dx(stash.xhat.shape(), s);
    layer_norm_backward_input(dnormed.data(), stash.xhat.data(), stash.rstd.data(),
                              params_[Host::ln_gamma], static_cast<const T*>(nullptr), dx.data(), n,
                              hidden_, s);
    stash.dlogits = dlogits.clone(s);
    stash.rstd = DeviceTensor<T>{};
    stash.phase = StashPhase::InputDone;
    return dx;
  }

  void backward_weight(Stash& stash) {
    toy::detail::require_phase(stash.phase, StashPhase::InputDone, "gpu::GptHead",
                               "backward_weight");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int n = stash.xhat.dim(0) * stash.xhat.dim(1);
    DeviceTensor<T> normed(stash.xhat.shape(), s);
    layer_norm_apply(stash.xhat.data(), params_[Host::ln_gamma], params_[Host::ln_beta],
                     normed.data(), n, hidden_, s);
    linear_backward_weight(g, stash.dlogits.data(), normed.data(), params_.sum(Host::weight),
                           static_cast<acc_t<T>*>(nullptr), n, hidden_, vocabulary_);
    DeviceTensor<T> dnormed(stash.xhat.shape(), s);
    linear_backward_input(g, stash.dlogits.data(), params_[Host::weight],
                          static_cast<const T*>(nullptr), dnormed.data(), n, hidden_, vocabulary_);
    column_sums(dnormed.data(), stash.xhat.data(), params_.sum(Host::ln_gamma), n, hidden_, s);
    column_sums(dnormed.data(), static_cast<const T*>(nullptr), params_.sum(Host::ln_beta), n,
                hidden_, s);
    params_.publish({Host::weight, Host::ln_gamma, Host::ln_beta}, s);
    stash = Stash{};
  }

  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return toy::detail::gpt_head_held_bytes(stash);
  }
  DeviceParameters<T>& parameters() noexcept { return params_; }
  const DeviceParameters<T>& parameters() const noexcept { return params_; }

 private:
  EnginePtr engine_;
  int hidden_, vocabulary_;
  DeviceParameters<T> params_;
};

}  // namespace pipesched::toy::gpu::detail
