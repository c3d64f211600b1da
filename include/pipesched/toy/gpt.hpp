// The toy causal GPT's pipeline stages on the host, float or double, made of the layers in
// toy/gpt_layers.hpp (embedding, transformer blocks, final LayerNorm + LM head): slice-aware
// `stage_model`s whose weight gradient can run in parts — `GptStage` for any place, or one type
// per role — `GptEmbeddingStage`, `GptBlockStage`, `GptHeadStage` — in a `StageVariant`.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/stage_variant.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/gpt_layers.hpp"
#include "pipesched/toy/memory.hpp"
#include "pipesched/toy/slicing.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

namespace detail {
// Stands in for an end layer (the embedding or the head) a stage model never holds, and for its
// stash: nothing is stored. (Not [[no_unique_address]]: nvcc 13's device compiler runs out of
// memory on it, and a byte per stash is nothing.)
struct GptNoLayer {};

// A stage model placed where its type does not belong: the first stage of a pipeline is a
// GptEmbeddingStage, the last a GptHeadStage, the others GptBlockStages; one stage is a GptStage.
inline void check_gpt_role(const char* who, int stage, int stages, bool embedding, bool head) {
  const bool first = stage == 0;
  const bool last = stage == stages - 1;
  if (first == embedding && last == head) return;
  const std::string place =
      stages == 1 ? "the only stage, which holds the embedding and the head: use GptStage"
      : first     ? "the first stage, which holds the embedding: use GptEmbeddingStage"
      : last      ? "the last stage, which holds the LM head: use GptHeadStage"
                  : "a middle stage, which holds blocks only: use GptBlockStage";
  throw invalid_problem(std::string(who) + ": stage is " + std::to_string(stage) + " of " +
                        std::to_string(stages) + ", " + place +
                        " (make_gpt_pipeline_stages builds each stage with its type)");
}

//! What every stage model of the toy GPT is made of and how it runs: the embedding when the stage
//! can hold one (`Embedding`) and is the first, blocks [first_block(), last_block()) of the global
//! list (split as evenly as possible, earlier stages taking the remainder), the LM head when it
//! can hold one (`Head`) and is the last. `GptStage` can hold both and decides by its place; the
//! role stage models (`GptEmbeddingStage`, `GptBlockStage`, `GptHeadStage`) fix them in the type,
//! so a block stage's stash has no embedding or head part and its code no branch for them. The
//! slice logic (the context, the order checks, the weight pieces, the byte figures) is this one.
template <class T, bool Embedding, bool Head>
class GptStageModel {
  template <bool On, class L>
  using slot = std::conditional_t<On, std::optional<L>, GptNoLayer>;
  template <bool On, class L>
  using slot_stash = std::conditional_t<On, typename L::stash_type, GptNoLayer>;

 public:
  using tensor_type = Tensor<T>;
  using value_type = T;
  struct Stash {
    slot_stash<Embedding, GptEmbedding<T>> embedding;  // first stage only
    std::vector<typename GptBlock<T>::stash_type> blocks;
    slot_stash<Head, GptHead<T>> head;  // last stage only
    StashPhase phase = StashPhase::Empty;
    int first_block = -1;  // the filling stage's first block, to catch a stash of another stage
    int slice = -1;        // the slice a sliced forward ran; -1 for a whole sequence
    std::vector<char> parts_done;  // weight parts run so far, when the weight pass is cut
  };
  using stash_type = Stash;

  //! What the slices of one microbatch share on this stage: their lengths (so a slice knows
  //! its position), where each is in its life, and each block's keys/values and their
  //! gradients (see `GptBlock::Context`).
  struct Context {
    SliceLedger slices;  // each slice's length and where it is in its life
    std::vector<typename GptBlock<T>::Context> blocks;
    int first_block = -1;  // the stage that uses it, to catch a context of another stage
  };
  using context_type = Context;

  //! Runs the stage's layers in order on whole sequences; replaces whatever `stash` held.
  //! Deterministic (no dropout), so a recompute from the stage input reproduces output and
  //! stash.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    return run_forward(x, stash, nullptr, -1, 0);
  }

  //! Runs slice `slice` of a microbatch: the slices before it must have run their forwards
  //! (and not yet their backwards) with the same `context`. Running a slice again before its
  //! backward is a recompute: it reproduces the stash and rewrites the same keys/values.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash, Context& context, int slice) const {
    check_slice_number(slice, who_, "forward");
    check_stage_input_rank(x.shape, who_, "forward");
    bind(context, "forward");
    const int offset = context.slices.begin_forward(name("forward"), slice, x.dim(1));
    Tensor<T> y = run_forward(x, stash, &context, slice, offset);
    context.slices.end_forward(slice, x.dim(1));
    return y;
  }

  //! The gradient of the stage output → the gradient of its input (zeros [batch, sequence]
  //! on stage 0, whose input is token ids).
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    check_stash(stash, StashPhase::Forwarded, "backward_input", -1);
    return run_backward_input(dy, stash, nullptr, -1, 0);
  }

  //! The backward of slice `slice`; the backwards of the later slices that ran their forwards
  //! must have run already (they send gradients to this slice's keys/values).
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash, Context& context, int slice) const {
    check_stash(stash, StashPhase::Forwarded, "backward_input", slice);
    bind(context, "backward_input");
    const int offset = context.slices.begin_backward(name("backward_input"), slice);
    Tensor<T> dx = run_backward_input(dy, stash, &context, slice, offset);
    context.slices.end_backward(slice);
    return dx;
  }

  //! Adds every layer's weight gradients and empties the stash.
  void backward_weight(Stash& stash) {
    check_stash(stash, StashPhase::InputDone, "backward_weight", stash.slice);
    require_no_weight_parts(stash.parts_done, who_);
    if constexpr (Head)
      if (head_) head_->backward_weight(stash.head);
    for (std::size_t i = blocks_.size(); i-- > 0;)
      blocks_[i].backward_weight(stash.blocks[i]);
    if constexpr (Embedding)
      if (embedding_) embedding_->backward_weight(stash.embedding);
    stash = Stash{};
  }

  //! Pieces the weight gradient falls into: the head's, four per block (see
  //! `GptBlock::weight_pieces`), the embedding's, in the order they run (head first, blocks last
  //! to first, embedding last).
  int weight_parts() const noexcept {
    return stage_weight_pieces(has_head(), blocks_.size(), GptBlock<T>::weight_pieces,
                               has_embedding());
  }

  //! Part `part` of `parts` of the weight gradient: the pieces [part·n/parts, (part+1)·n/parts)
  //! of the n = weight_parts() pieces, so parts == n runs one piece each, fewer parts group
  //! neighbouring pieces evenly, more leave some parts empty. Each piece frees what only it
  //! needed; once every part has run the stash is empty. Parts run once each, in any order.
  void backward_weight(Stash& stash, int part, int parts) {
    check_stash(stash, StashPhase::InputDone, "backward_weight", stash.slice);
    run_weight_part(stash, part, parts, weight_parts(), who_,
                    [&](int piece) { run_piece(stash, piece); });
  }

  //! Bytes of the tensors `stash` holds, over every layer.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    std::size_t bytes = 0;
    if constexpr (Embedding)
      if (embedding_) bytes += embedding_->stash_bytes(stash.embedding);
    for (std::size_t i = 0; i < stash.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].stash_bytes(stash.blocks[i]);
    if constexpr (Head)
      if (head_) bytes += head_->stash_bytes(stash.head);
    return bytes;
  }

  //! Bytes a slice context holds: every block's keys/values and their gradients.
  std::size_t context_bytes(const Context& context) const noexcept {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < context.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].context_bytes(context.blocks[i]);
    return bytes;
  }

  //! Analytic bytes a stash holds right after forward of one microbatch (microbatch_size
  //! sequences of `sequence` tokens).
  std::size_t activation_bytes() const noexcept { return predicted().activation; }
  //! Analytic bytes a stash holds right after backward_input (what backward_weight needs).
  std::size_t wgrad_bytes() const noexcept { return predicted().wgrad; }

  //! Analytic bytes of slice `slice` when each microbatch's `sequence` tokens are cut into
  //! `slices` by `slice_bounds`. With one slice, activation + key_values == activation_bytes().
  SliceStashBytes slice_bytes(int slice, int slices) const {
    const SliceBounds at = slice_bounds(config_.sequence, slice, slices);
    const auto b = static_cast<std::size_t>(config_.microbatch_size);
    const auto t = static_cast<std::size_t>(at.length);
    const auto h = static_cast<std::size_t>(config_.hidden);
    SliceStashBytes total;
    if (has_embedding()) {
      const StashBytes e = embedding_stash_bytes(b, t, h);
      total = total + SliceStashBytes{e.activation, e.wgrad, 0, 0};
    }
    for (const GptBlock<T>& blk : blocks_)
      total = total + blk.predicted_slice_bytes(config_.microbatch_size, at.length,
                                                at.start + at.length, slice == slices - 1);
    if (has_head()) {
      const StashBytes e = gpt_head_stash_bytes<T>(b, t, h, head_width());
      total = total + SliceStashBytes{e.activation, e.wgrad, 0, 0};
    }
    return total;
  }

  //! Analytic bytes each of `parts` weight-gradient parts frees, for slice `slice` of
  //! `slices` (whole microbatches by default); they sum to the slice's wgrad bytes.
  std::vector<std::size_t> weight_part_bytes(int parts, int slice = 0, int slices = 1) const {
    const SliceBounds at = slice_bounds(config_.sequence, slice, slices);
    const int rows = config_.microbatch_size * at.length;
    const auto b = static_cast<std::size_t>(config_.microbatch_size);
    const auto t = static_cast<std::size_t>(at.length);
    const auto h = static_cast<std::size_t>(config_.hidden);
    std::vector<std::size_t> pieces;
    if (has_head()) pieces.push_back(gpt_head_stash_bytes<T>(b, t, h, head_width()).wgrad);
    for (std::size_t i = blocks_.size(); i-- > 0;)
      for (std::size_t bytes : blocks_[i].predicted_piece_bytes(rows))
        pieces.push_back(bytes);
    if (has_embedding()) pieces.push_back(embedding_stash_bytes(b, t, h).wgrad);
    return part_bytes(pieces, parts, who_);
  }

  //! Sets every layer's accumulated gradients to zero.
  void zero_gradients() {
    if constexpr (Embedding)
      if (embedding_) embedding_->zero_gradients();
    for (GptBlock<T>& b : blocks_)
      b.zero_gradients();
    if constexpr (Head)
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
  bool has_embedding() const noexcept {
    if constexpr (Embedding)
      return embedding_.has_value();
    else
      return false;
  }
  bool has_head() const noexcept {
    if constexpr (Head)
      return head_.has_value();
    else
      return false;
  }
  std::span<const GptBlock<T>> blocks() const noexcept { return blocks_; }
  const GptConfig& config() const noexcept { return config_; }

  //! This stage's parameters (`gradients` false) or gradients (true), flat, cut to tensor
  //! shard `shard` as a stage built for that shard holds them: the blocks' tensors by
  //! `GptBlock::shard_of`, the embedding's and the head's whole. Compares a tensor-parallel
  //! run with the whole model it splits (call it on the whole model's stage).
  std::vector<T> flat_shard(TensorShard shard, bool gradients) const {
    std::vector<T> out;
    auto add = [&](const auto& tensors) {
      for (const Tensor<T>& t : tensors)
        out.insert(out.end(), t.data.begin(), t.data.end());
    };
    auto of = [&](const auto& layer) { return gradients ? layer.gradients() : layer.parameters(); };
    if constexpr (Embedding)
      if (embedding_) add(of(*embedding_));
    for (const GptBlock<T>& blk : blocks_)
      add(GptBlock<T>::shard_of(of(blk), config_, shard));
    if constexpr (Head)
      if (head_) add(of(*head_));
    return out;
  }

  //! The tensor-parallel shard of every block the stage holds ({0, 1}: whole blocks).
  TensorShard tensor_shard() const noexcept { return shard_; }
  //! Gives every block the group its partial sums go over (see `GptBlock::set_tensor_group`).
  void set_tensor_group(TensorGroup* group) {
    for (GptBlock<T>& b : blocks_)
      b.set_tensor_group(group);
  }

 protected:
  // Stage `stage` of `stages`, named `who` in errors. A stage model whose type fixes its role
  // (`fixed_role`) must stand where that role is: the embedding's first, the head's last.
  // With `shard`, each block is that tensor-parallel shard of itself; the embedding and the
  // head stay whole (computed alike on every shard).
  GptStageModel(const GptConfig& config, int stage, int stages, const char* who, bool fixed_role,
                TensorShard shard = {})
      : config_(config), who_(who), shard_(shard) {
    check_gpt_config(config, who);
    const auto [first, last] = block_range(config.blocks, stage, stages, who, config.stage_blocks);
    if (fixed_role) check_gpt_role(who, stage, stages, Embedding, Head);
    first_ = first;
    if constexpr (Embedding)
      if (stage == 0) embedding_.emplace(config);
    for (int i = first; i < last; ++i)
      blocks_.emplace_back(config, i, shard);
    if constexpr (Head)
      if (stage == stages - 1) head_.emplace(config);
  }

 private:
  std::string name(const char* op) const { return std::string(who_) + "::" + op; }
  // The embedding's stash: the whole layer's, or the position table's alone (split_input).
  StashBytes embedding_stash_bytes(std::size_t b, std::size_t t, std::size_t h) const noexcept {
    return config_.split_input ? gpt_position_embedding_stash_bytes<T>(b, t, h)
                               : gpt_embedding_stash_bytes<T>(b, t, h);
  }
  // The width of the head's output: the vocabulary, or hidden when the head's W is split off.
  std::size_t head_width() const noexcept {
    return static_cast<std::size_t>(config_.split_output ? config_.hidden : config_.vocabulary);
  }

  template <class Elem, class Self, class Get>
  static TensorRange<Elem> joined(Self& self, Get get) {
    TensorRange<Elem> range;
    if constexpr (Embedding)
      if (self.embedding_) range.append(get(*self.embedding_));
    for (auto& b : self.blocks_)
      range.append(get(b));
    if constexpr (Head)
      if (self.head_) range.append(get(*self.head_));
    return range;
  }

  Tensor<T> run_forward(const Tensor<T>& x, Stash& stash, Context* context, int slice,
                        int offset) const {
    stash = Stash{};
    stash.blocks.resize(blocks_.size());
    auto block = [&](std::size_t i, const Tensor<T>& in) {
      return context != nullptr
                 ? blocks_[i].forward(in, stash.blocks[i], context->blocks[i], slice, offset)
                 : blocks_[i].forward(in, stash.blocks[i]);
    };
    // `y` holds the activation once a layer has run; before that the input is `x` (an end
    // stage of a layout may hold no block: the embedding alone, or the head alone).
    Tensor<T> y;
    bool ran = false;
    if constexpr (Embedding)
      if (embedding_) {
        y = embedding_->forward(x, stash.embedding, offset);
        ran = true;
      }
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      y = block(i, ran ? y : x);
      ran = true;
    }
    if constexpr (Head)
      if (head_) y = head_->forward(ran ? y : x, stash.head);
    stash.phase = StashPhase::Forwarded;
    stash.first_block = first_;
    stash.slice = slice;
    return y;
  }

  Tensor<T> run_backward_input(const Tensor<T>& dy, Stash& stash, Context* context, int slice,
                               int offset) const {
    auto block = [&](std::size_t i, const Tensor<T>& g) {
      return context != nullptr
                 ? blocks_[i].backward_input(g, stash.blocks[i], context->blocks[i], slice, offset)
                 : blocks_[i].backward_input(g, stash.blocks[i]);
    };
    // `dx` holds the gradient once a layer has run; before that it is `dy` (as forward).
    Tensor<T> dx;
    bool ran = false;
    if constexpr (Head)
      if (head_) {
        dx = head_->backward_input(dy, stash.head);
        ran = true;
      }
    for (std::size_t i = blocks_.size(); i-- > 0;) {
      dx = block(i, ran ? dx : dy);
      ran = true;
    }
    if constexpr (Embedding)
      if (embedding_) dx = embedding_->backward_input(ran ? dx : dy, stash.embedding);
    stash.phase = StashPhase::InputDone;
    return dx;
  }

  // Piece `piece` of weight_parts(): the head's, then four per block from the last block, then
  // the embedding's.
  void run_piece(Stash& stash, int piece) {
    const StagePiece at = stage_weight_piece(piece, has_head(), blocks_.size(),
                                             GptBlock<T>::weight_pieces, has_embedding());
    if constexpr (Head)
      if (at.layer == StagePiece::Layer::Head) head_->backward_weight(stash.head);
    if (at.layer == StagePiece::Layer::Block)
      blocks_[at.block].backward_weight_piece(stash.blocks[at.block], at.piece);
    if constexpr (Embedding)
      if (at.layer == StagePiece::Layer::Embedding) embedding_->backward_weight(stash.embedding);
  }

  // A fresh context is taken by this stage; one of another stage is refused.
  void bind(Context& context, const char* op) const {
    bind_context(context, first_, blocks_.size(), who_, op);
  }

  // A stash filled by another stage would be read against the wrong weights (or out of
  // bounds): refuse it; so is one filled by a forward of another slice.
  void check_stash(const Stash& stash, StashPhase wanted, const char* op, int slice) const {
    require_phase(stash.phase, wanted, who_, op);
    check_stash_stage(stash.first_block, stash.blocks.size(), first_, blocks_.size(), who_, op);
    check_stash_unit(stash.slice, slice, who_, op);
  }

  StashBytes predicted() const noexcept {
    const auto b = static_cast<std::size_t>(config_.microbatch_size);
    const auto s = static_cast<std::size_t>(config_.sequence);
    const auto h = static_cast<std::size_t>(config_.hidden);
    StashBytes total;
    if (has_embedding()) total = total + embedding_stash_bytes(b, s, h);
    for (const GptBlock<T>& blk : blocks_)
      total = total + blk.predicted_stash_bytes(config_.microbatch_size, config_.sequence);
    if (has_head()) total = total + gpt_head_stash_bytes<T>(b, s, h, head_width());
    return total;
  }

  GptConfig config_;
  const char* who_;
  TensorShard shard_;
  int first_ = 0;
  slot<Embedding, GptEmbedding<T>> embedding_;
  std::vector<GptBlock<T>> blocks_;
  slot<Head, GptHead<T>> head_;
};
}  // namespace detail

//! One pipeline stage of the toy GPT, any stage: the embedding on stage 0, its share of the
//! blocks, the LM head on the last stage (see `detail::GptStageModel` for the split). Stage 0 takes
//! token ids [batch, sequence]; the others take activations [batch, sequence, hidden]; the last
//! returns logits [batch, sequence, vocabulary], the others activations. Every layer draws its
//! parameters from its own seeded stream, so any partition of one config computes the same
//! function.
//!
//! It is a slice-aware stage model: `forward(x, stash, context, slice)` runs slice `slice` of
//! a microbatch (token ids [batch, tokens] or activations [batch, tokens, hidden]; any lengths,
//! its position is the sum of the earlier slices' lengths), reading the earlier slices'
//! keys/values from the microbatch's `Context`; the backwards run from the last slice to the
//! first. `forward(x, stash)` and `backward_input(dy, stash)` run whole sequences. Its weight
//! gradient runs whole or in parts (`weight_parts()`, `backward_weight(stash, part, parts)`).
//!
//! Every layer of a float stage adds its weight-gradient contributions into a double sum per
//! parameter tensor and shows those sums rounded to float in `gradients()`, as mixed-precision
//! training accumulates in a wider type: the gradients then do not depend on the order slices,
//! weight parts and microbatches arrive in beyond float rounding of the contributions. For double
//! stages the gradients are the sums.
//!
//! A pipeline can instead give each role its own type — `GptEmbeddingStage`, `GptBlockStage`,
//! `GptHeadStage`, held in a `StageVariant` (`make_gpt_pipeline_stages`) — which compute the same.
template <class T>
class GptStage : public detail::GptStageModel<T, true, true> {
 public:
  //! Stage `stage` of `stages`; throws `invalid_problem` when the config or the split does not
  //! fit (a non-positive size, hidden not a multiple of heads, more stages than blocks, a stage
  //! out of range). With `shard`, the stage's blocks are that tensor-parallel shard of
  //! themselves (`GptBlock`); a pipeline of a job with tp > 1 gives it its group.
  GptStage(const GptConfig& config, int stage, int stages, TensorShard shard = {})
      : detail::GptStageModel<T, true, true>(config, stage, stages, "GptStage", false, shard) {}
};

//! The first stage of a pipeline of at least two: the embedding and its share of the blocks
//! (the same split as `GptStage`). Takes token ids [batch, tokens], returns activations.
template <class T>
class GptEmbeddingStage : public detail::GptStageModel<T, true, false> {
 public:
  //! Stage `stage` (which must be 0) of `stages` (at least 2); throws `invalid_problem` otherwise,
  //! naming the type for that place.
  GptEmbeddingStage(const GptConfig& config, int stage, int stages)
      : detail::GptStageModel<T, true, false>(config, stage, stages, "GptEmbeddingStage", true) {}
};

//! A middle stage (neither the first nor the last): its share of the blocks, activations in and
//! out.
template <class T>
class GptBlockStage : public detail::GptStageModel<T, false, false> {
 public:
  //! Stage `stage` of `stages`, 0 < stage < stages − 1; throws `invalid_problem` otherwise.
  GptBlockStage(const GptConfig& config, int stage, int stages)
      : detail::GptStageModel<T, false, false>(config, stage, stages, "GptBlockStage", true) {}
};

//! The last stage of a pipeline of at least two: its share of the blocks, the final LayerNorm and
//! the LM head. Takes activations, returns logits [batch, tokens, vocabulary].
template <class T>
class GptHeadStage : public detail::GptStageModel<T, false, true> {
 public:
  //! Stage `stage` (which must be stages − 1) of `stages` (at least 2); throws `invalid_problem`
  //! otherwise.
  GptHeadStage(const GptConfig& config, int stage, int stages)
      : detail::GptStageModel<T, false, true>(config, stage, stages, "GptHeadStage", true) {}
};

//! A stage of the toy GPT whose type depends on its place: embedding, blocks or head.
template <class T>
using GptPipelineStage = StageVariant<GptEmbeddingStage<T>, GptBlockStage<T>, GptHeadStage<T>>;

//! The `stages` stages of the toy GPT, each of its role's type: a GptEmbeddingStage, then
//! GptBlockStages, then a GptHeadStage. They hold the parameters and compute the function of
//! `GptStage`s of the same split. Throws `invalid_problem` for fewer than 2 stages (one stage
//! holds the embedding and the head together: use `GptStage`) and whatever `GptStage` refuses.
template <class T>
std::vector<GptPipelineStage<T>> make_gpt_pipeline_stages(const GptConfig& config, int stages) {
  if (stages < 2)
    throw invalid_problem("make_gpt_pipeline_stages: stages is " + std::to_string(stages) +
                          "; a pipeline of embedding, block and head stages has at least 2 (one "
                          "stage holds the embedding and the head together: use GptStage)");
  std::vector<GptPipelineStage<T>> v;
  v.reserve(static_cast<std::size_t>(stages));
  v.emplace_back(std::in_place_type<GptEmbeddingStage<T>>, config, 0, stages);
  for (int s = 1; s + 1 < stages; ++s)
    v.emplace_back(std::in_place_type<GptBlockStage<T>>, config, s, stages);
  v.emplace_back(std::in_place_type<GptHeadStage<T>>, config, stages - 1, stages);
  return v;
}

}  // namespace pipesched::toy
