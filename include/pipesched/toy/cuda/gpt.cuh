// The toy causal GPT on the GPU: the twin of toy::GptStage (include/pipesched/toy/gpt.hpp), a
// slice-aware stage model whose weight gradient runs whole or in parts, with the host stage's
// parameters (copied to the device), stashes and slice contexts of the same shapes (so the
// same byte figures), GEMMs through cuBLAS and every kernel on the device's compute stream.
// Built for a tensor-parallel shard, its blocks are that shard (column- then row-parallel
// linears, the host stage's split) and sum their partial results over the group a pipeline
// gives it (nccl::Pipeline: an nccl::TensorGroup, on the GPU).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/toy/cuda/detail/engine.cuh"
#include "pipesched/toy/cuda/detail/gpt_layers.cuh"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/gpt.hpp"

namespace pipesched::toy::gpu {

//! One pipeline stage of the toy GPT on a GPU: the twin of toy::GptStage<T> with
//! `tensor_type = DeviceTensor<T>` — the embedding on stage 0 (whose input is token ids held
//! as T values, as the host model takes them), blocks [first_block(), last_block()), the LM
//! head on the last stage. Built from the host stage of the same config, whose parameters are
//! copied to the device. Whole-sequence calls and slice calls with a `Context` (the keys/values
//! of a microbatch's slices and the double sums of their gradients), weight gradient whole or
//! in parts — all as the host stage, with the same checks and the same `stash_bytes` /
//! `context_bytes` for the same calls, so `toy::gpt_profiled_cost` built from host stages
//! predicts this stage's bytes exactly. Work is enqueued on the device's compute stream; a call
//! returns at once. Token ids outside [0, vocabulary) give NaN activations (checked on the host
//! by gpu::training_data). Inputs are expected on the compute stream.
template <class T>
class GptStage {
 public:
  using tensor_type = DeviceTensor<T>;  //!< token ids, activations or logits on the GPU
  using value_type = T;                 //!< the element type
  //! What one microbatch (or slice) leaves behind between calls, layer by layer.
  struct Stash {
    typename detail::GptEmbedding<T>::Stash embedding;        //!< stage 0 only
    std::vector<typename detail::GptBlock<T>::Stash> blocks;  //!< each block's, in block order
    typename detail::GptHead<T>::Stash head;                  //!< last stage only
    //! Which calls have run on the stash: none, the forward, backward_input.
    toy::detail::StashPhase phase = toy::detail::StashPhase::Empty;
    int first_block = -1;  //!< the filling stage's first block, to catch a stash of another stage
    int slice = -1;        //!< the slice a sliced forward ran; -1 for a whole sequence
    std::vector<char> parts_done;  //!< weight parts run so far, when the weight pass is cut
    //! Between offload and reload: the pinned host memory its device tensors went to, in
    //! for_each_tensor's order.
    std::vector<PinnedBuffer> host;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! What the slices of one microbatch share on this stage (see toy::GptStage::Context).
  struct Context {
    toy::SliceLedger slices;  //!< each slice's length and where it is in its life
    std::vector<typename detail::GptBlock<T>::Context> blocks;  //!< each block's keys/values
    int first_block = -1;  //!< the filling stage's first block, to catch a context of another
  };
  using context_type = Context;  //!< what the slices of a microbatch share

  //! Stage `stage` of `stages` on `device`; throws `invalid_problem` where the host stage would
  //! and `cuda_error` when the device cannot take it. With `shard`, the stage's blocks are that
  //! tensor-parallel shard of themselves (as toy::GptStage's; the embedding and the head stay
  //! whole); a pipeline of a job with tp > 1 gives it its group (`set_tensor_group`).
  GptStage(const GptConfig& config, int stage, int stages, CudaDevice device,
           TensorShard shard = {})
      : host_(config, stage, stages, shard),
        engine_(std::make_shared<detail::Engine>(std::move(device))) {
    if (config.split_output || config.split_input)
      throw invalid_problem(
          std::string("gpu::GptStage: the config splits the ") +
          (config.split_output ? "LM head (split_output)" : "input embedding (split_input)") +
          " by vocabulary, which the GPU model does not run; use the host model "
          "(toy::GptStage) for vocabulary parallelism, or keep the layer whole.");
    if (host_.has_embedding()) embedding_.emplace(engine_, config);
    for (const toy::GptBlock<T>& b : host_.blocks())
      blocks_.emplace_back(engine_, b, config);
    if (host_.has_head()) head_.emplace(engine_, config);
  }

  //! Whole sequences; replaces whatever `stash` held (deterministic, so a recompute from the
  //! stage input reproduces the stash).
  tensor_type forward(const tensor_type& x, Stash& stash) const {
    return run_forward(x, stash, nullptr, -1, 0);
  }

  //! Slice `slice` of a microbatch, as toy::GptStage::forward with a context.
  tensor_type forward(const tensor_type& x, Stash& stash, Context& context, int slice) const {
    toy::detail::check_slice_number(slice, "gpu::GptStage", "forward");
    toy::detail::check_stage_input_rank(x.shape(), "gpu::GptStage", "forward");
    bind(context, "forward");
    const int offset = context.slices.begin_forward("gpu::GptStage::forward", slice, x.dim(1));
    tensor_type y = run_forward(x, stash, &context, slice, offset);
    context.slices.end_forward(slice, x.dim(1));
    return y;
  }

  //! Whole sequences: the output gradient → the input gradient (zeros [batch, sequence] on
  //! stage 0, whose input is token ids).
  tensor_type backward_input(const tensor_type& dy, Stash& stash) const {
    check_stash(stash, toy::detail::StashPhase::Forwarded, "backward_input", -1);
    return run_backward_input(dy, stash, nullptr, -1, 0);
  }

  //! The backward of slice `slice`; the later slices' backwards must have run.
  tensor_type backward_input(const tensor_type& dy, Stash& stash, Context& context,
                             int slice) const {
    check_stash(stash, toy::detail::StashPhase::Forwarded, "backward_input", slice);
    bind(context, "backward_input");
    const int offset = context.slices.begin_backward("gpu::GptStage::backward_input", slice);
    tensor_type dx = run_backward_input(dy, stash, &context, slice, offset);
    context.slices.end_backward(slice);
    return dx;
  }

  //! Adds every layer's weight gradients and empties the stash.
  void backward_weight(Stash& stash) {
    check_stash(stash, toy::detail::StashPhase::InputDone, "backward_weight", stash.slice);
    toy::detail::require_no_weight_parts(stash.parts_done, "gpu::GptStage");
    if (head_) head_->backward_weight(stash.head);
    for (std::size_t i = blocks_.size(); i-- > 0;)
      blocks_[i].backward_weight(stash.blocks[i]);
    if (embedding_) embedding_->backward_weight(stash.embedding);
    stash = Stash{};
  }

  //! OFFLOAD (the executor's offloads_stash): queues the copies of the forward's stash to pinned
  //! host memory on the stage's copy stream, after the work queued on the compute stream, and
  //! frees its device memory in the copy stream's order (the memory pool hands it out again
  //! once the copies have run). The compute stream goes on at once.
  void offload(Stash& stash) {
    check_stash(stash, toy::detail::StashPhase::Forwarded, "offload", stash.slice);
    if (!stash.host.empty())
      throw invalid_problem(
          "gpu::GptStage::offload: the stash is offloaded already; reload it before offloading "
          "it again.");
    engine_->copy_after_compute();
    for_each_tensor(stash, [&](DeviceTensor<T>& t) {
      if (t.empty()) return;
      stash.host.push_back(engine_->pinned(t.bytes()));
      t.offload(stash.host.back().data(), engine_->copy_stream());
    });
  }
  //! RELOAD: takes device memory for the stash again and queues the copies back on the copy
  //! stream; the compute stream's later work (the backward) waits for them.
  void reload(Stash& stash) {
    std::size_t i = 0;
    for_each_tensor(stash, [&](DeviceTensor<T>& t) {
      if (!t.offloaded()) return;
      if (i >= stash.host.size())
        throw invalid_problem("gpu::GptStage::reload: the stash was not offloaded by this stage.");
      t.reload(stash.host[i++].data(), engine_->copy_stream(), engine_->stream());
    });
    engine_->compute_after_copy();
    engine_->retire(std::move(stash.host));
    stash.host.clear();
  }

  //! Pieces the weight gradient falls into (as the host stage's: head, four per block from the
  //! last block, embedding).
  int weight_parts() const noexcept { return host_.weight_parts(); }

  //! Part `part` of `parts` of the weight gradient (as the host stage cuts it).
  void backward_weight(Stash& stash, int part, int parts) {
    check_stash(stash, toy::detail::StashPhase::InputDone, "backward_weight", stash.slice);
    toy::detail::run_weight_part(stash, part, parts, weight_parts(), "gpu::GptStage",
                                 [&](int piece) { run_piece(stash, piece); });
  }

  //! Bytes of the device tensors `stash` holds (what the host stage reports for its stash).
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    std::size_t bytes = 0;
    if (embedding_) bytes += embedding_->stash_bytes(stash.embedding);
    for (std::size_t i = 0; i < stash.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].stash_bytes(stash.blocks[i]);
    if (head_) bytes += head_->stash_bytes(stash.head);
    return bytes;
  }

  //! Bytes a slice context holds: every block's keys/values and their gradient sums.
  std::size_t context_bytes(const Context& context) const noexcept {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < context.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].context_bytes(context.blocks[i]);
    return bytes;
  }

  //! Analytic bytes a stash holds right after forward of one microbatch, as the host stage's.
  std::size_t activation_bytes() const noexcept { return host_.activation_bytes(); }
  //! Analytic bytes a stash holds right after backward_input, as the host stage's.
  std::size_t wgrad_bytes() const noexcept { return host_.wgrad_bytes(); }
  //! Analytic bytes of slice `slice` of `slices`, as the host stage's.
  SliceStashBytes slice_bytes(int slice, int slices) const {
    return host_.slice_bytes(slice, slices);
  }
  //! Analytic bytes each of `parts` weight-gradient parts frees, as the host stage's.
  std::vector<std::size_t> weight_part_bytes(int parts, int slice = 0, int slices = 1) const {
    return host_.weight_part_bytes(parts, slice, slices);
  }

  //! Sets every accumulated gradient (and the sums behind them) to zero, on the compute stream.
  void zero_gradients() {
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.zero(engine_->stream()); });
  }

  //! Plain SGD on the compute stream: parameter −= lr · gradient (an optimizer hook).
  void sgd_step(double lr) {
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.sgd(lr, engine_->stream()); });
  }
  //! Keeps a device copy of the parameters, on the compute stream (an optimizer's snapshot
  //! hook); `restore_parameters` puts it back (its rollback hook).
  void snapshot_parameters() {
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.snapshot(engine_->stream()); });
  }
  //! Puts the parameters of the last `snapshot_parameters` back, on the compute stream.
  void restore_parameters() {
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.restore(engine_->stream()); });
  }

  //! Copies of the parameters, in the host stage's parameters() order (embedding, blocks, head;
  //! waits for the compute stream).
  std::vector<Tensor<T>> host_parameters() const {
    std::vector<Tensor<T>> out;
    for_each_parameters([&](const detail::DeviceParameters<T>& p) { p.append_parameters(out); });
    return out;
  }
  //! Copies of the accumulated gradients, in the same order.
  std::vector<Tensor<T>> host_gradients() const {
    std::vector<Tensor<T>> out;
    for_each_parameters([&](const detail::DeviceParameters<T>& p) { p.append_gradients(out); });
    return out;
  }
  //! The accumulated gradients in device memory, in host_gradients() order: what a
  //! data-parallel reduction (nccl::GradientReducer) reads and overwrites on the GPU, ordered
  //! after the compute stream.
  std::vector<std::span<T>> device_gradients() {
    std::vector<std::span<T>> out;
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.append_gradient_spans(out); });
    return out;
  }
  //! The parameters in device memory, in host_parameters() order (the sizes of
  //! device_gradients()): what a ZeRO-sharded reduction (nccl::GradientReducer with
  //! nccl::ReducerOptions::zero) reads and overwrites on the GPU.
  std::vector<std::span<T>> device_parameters() {
    std::vector<std::span<T>> out;
    for_each_parameters([&](detail::DeviceParameters<T>& p) { p.append_parameter_spans(out); });
    return out;
  }

  //! The tensor-parallel shard of every block the stage holds ({0, 1}: whole blocks).
  TensorShard tensor_shard() const noexcept { return host_.tensor_shard(); }
  //! Gives every block the group its partial sums go over: a TensorGroup whose all_reduce
  //! takes device memory written on the compute stream (nccl::TensorGroup); kept, not owned;
  //! nullptr detaches. Throws invalid_problem when the group is not the shard's.
  void set_tensor_group(TensorGroup* group) {
    for (detail::GptBlock<T>& b : blocks_)
      b.set_tensor_group(group);
  }

  //! Global index of the stage's first block.
  int first_block() const noexcept { return host_.first_block(); }
  //! One past the global index of the stage's last block.
  int last_block() const noexcept { return host_.last_block(); }
  //! True on stage 0, which holds the embedding.
  bool has_embedding() const noexcept { return embedding_.has_value(); }
  //! True on the last stage, which holds the LM head.
  bool has_head() const noexcept { return head_.has_value(); }
  //! The configuration the stage was built from.
  const GptConfig& config() const noexcept { return host_.config(); }
  //! The device the stage runs on.
  const CudaDevice& device() const noexcept { return engine_->device(); }

 private:
  // Every device tensor `stash` holds (the embedding's, each block's, the head's), in one order.
  template <class Fn>
  static void for_each_tensor(Stash& stash, Fn&& fn) {
    fn(stash.embedding.ids);
    fn(stash.embedding.dy);
    for (auto& b : stash.blocks)
      for (DeviceTensor<T>* t :
           {&b.xhat1, &b.rstd1, &b.q, &b.kv, &b.probs, &b.attn, &b.xhat2, &b.rstd2, &b.pre, &b.act,
            &b.dy, &b.dpre, &b.dy1, &b.dqkv, &b.dn2, &b.dn1})
        fn(*t);
    fn(stash.head.xhat);
    fn(stash.head.rstd);
    fn(stash.head.dlogits);
  }

  template <class Fn>
  void for_each_parameters(Fn&& fn) {
    if (embedding_) fn(embedding_->parameters());
    for (detail::GptBlock<T>& b : blocks_)
      fn(b.parameters());
    if (head_) fn(head_->parameters());
  }
  template <class Fn>
  void for_each_parameters(Fn&& fn) const {
    if (embedding_) fn(embedding_->parameters());
    for (const detail::GptBlock<T>& b : blocks_)
      fn(b.parameters());
    if (head_) fn(head_->parameters());
  }

  tensor_type run_forward(const tensor_type& x, Stash& stash, Context* context, int slice,
                          int offset) const {
    stash = Stash{};
    stash.blocks.resize(blocks_.size());
    auto block = [&](std::size_t i, const tensor_type& in) {
      return blocks_[i].forward(in, stash.blocks[i],
                                context != nullptr ? &context->blocks[i] : nullptr, slice, offset);
    };
    tensor_type y = embedding_ ? embedding_->forward(x, stash.embedding, offset) : block(0, x);
    for (std::size_t i = embedding_ ? 0 : 1; i < blocks_.size(); ++i)
      y = block(i, y);
    if (head_) y = head_->forward(y, stash.head);
    stash.phase = toy::detail::StashPhase::Forwarded;
    stash.first_block = host_.first_block();
    stash.slice = slice;
    return y;
  }

  tensor_type run_backward_input(const tensor_type& dy, Stash& stash, Context* context, int slice,
                                 int offset) const {
    auto block = [&](std::size_t i, const tensor_type& g) {
      return blocks_[i].backward_input(
          g, stash.blocks[i], context != nullptr ? &context->blocks[i] : nullptr, slice, offset);
    };
    tensor_type dx = head_ ? head_->backward_input(dy, stash.head) : block(blocks_.size() - 1, dy);
    for (std::size_t i = blocks_.size() - (head_ ? 0 : 1); i-- > 0;)
      dx = block(i, dx);
    if (embedding_) dx = embedding_->backward_input(dx, stash.embedding);
    stash.phase = toy::detail::StashPhase::InputDone;
    return dx;
  }

  // Piece `piece` of weight_parts(), in the host stage's order.
  void run_piece(Stash& stash, int piece) {
    using Layer = toy::detail::StagePiece::Layer;
    const toy::detail::StagePiece at =
        toy::detail::stage_weight_piece(piece, head_.has_value(), blocks_.size(),
                                        detail::GptBlock<T>::weight_pieces, embedding_.has_value());
    if (at.layer == Layer::Head) head_->backward_weight(stash.head);
    if (at.layer == Layer::Block)
      blocks_[at.block].backward_weight_piece(stash.blocks[at.block], at.piece);
    if (at.layer == Layer::Embedding) embedding_->backward_weight(stash.embedding);
  }

  void bind(Context& context, const char* op) const {
    toy::detail::bind_context(context, host_.first_block(), blocks_.size(), "gpu::GptStage", op);
  }

  void check_stash(const Stash& stash, toy::detail::StashPhase wanted, const char* op,
                   int slice) const {
    toy::detail::require_phase(stash.phase, wanted, "gpu::GptStage", op);
    toy::detail::check_stash_stage(stash.first_block, stash.blocks.size(), host_.first_block(),
                                   blocks_.size(), "gpu::GptStage", op);
    toy::detail::check_stash_unit(stash.slice, slice, "gpu::GptStage", op);
  }

  toy::GptStage<T> host_;  // shapes, partition and analytic figures
  detail::EnginePtr engine_;
  std::optional<detail::GptEmbedding<T>> embedding_;
  std::vector<detail::GptBlock<T>> blocks_;
  std::optional<detail::GptHead<T>> head_;
};

}  // namespace pipesched::toy::gpu
