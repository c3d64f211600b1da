// The toy residual MLP: a block y = x + W2·gelu(W1·x + b1) + b2 (a `layer`) and a stage made of
// a contiguous run of blocks (a `stage_model` whose weight gradient can run in parts), host
// code in float or double.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/detail/ops.hpp"
#include "pipesched/toy/memory.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! Shape of the toy MLP. `blocks` counts the whole model; a stage holds a share of them.
struct MlpConfig {
  int hidden = 8;           //!< row width (input, output and residual stream)
  int ffn = 16;             //!< inner width of each block
  int blocks = 4;           //!< blocks over all stages
  int microbatch_size = 2;  //!< rows per microbatch
  std::uint64_t seed = 1;   //!< parameters of block i come from stream (seed, i)
};

//! One residual MLP block on rows of width `hidden`: y = x + W2·gelu(W1·x + b1) + b2, with
//! W1 [ffn, hidden], W2 [hidden, ffn]. Parameters, in order: W1, b1, W2, b2.
//!
//! Weight-gradient contributions add into a double sum per parameter tensor (for float blocks),
//! and `gradients()` shows those sums rounded to T, so a float gradient does not depend on the
//! order microbatches and weight pieces arrive in (as mixed-precision training accumulates in a
//! wider type). For double blocks the gradients are the sums.
template <class T>
class MlpBlock {
 public:
  using tensor_type = Tensor<T>;  //!< rows [rows, hidden] in and out
  //! What one microbatch leaves behind between calls (see `mlp_block_stash_bytes`).
  struct Stash {
    //! @{
    //! forward: the input x, pre = W1·x + b1 and act = gelu(pre).
    Tensor<T> x, pre, act;
    //! @}
    //! @{
    //! backward_input: the output gradient dy and dpre, the gradient of pre.
    Tensor<T> dy, dpre;
    //! @}
    int pieces_done = 0;  //!< bit i: weight piece i has run
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! The pieces of the weight gradient, in the order `backward_weight` runs them: W2 and b2,
  //! then W1 and b1 (see `mlp_block_weight_piece_bytes`).
  static constexpr int weight_pieces = 2;

  //! Tensor indices in `parameters()` / `gradients()`.
  enum : std::size_t { w1, b1, w2, b2, tensor_count };

  //! The block with global index `index`, initialized from stream (config.seed, index).
  MlpBlock(const MlpConfig& config, int index) : hidden_(config.hidden), ffn_(config.ffn) {
    detail::require_positive(config.hidden, "MlpBlock", "hidden");
    detail::require_positive(config.ffn, "MlpBlock", "ffn");
    Random random(config.seed, static_cast<std::uint64_t>(index));
    params_.push_back(uniform_tensor<T>({ffn_, hidden_}, random, 1.0 / std::sqrt(double(hidden_))));
    params_.push_back(uniform_tensor<T>({ffn_}, random, 0.1));
    params_.push_back(uniform_tensor<T>({hidden_, ffn_}, random, 0.5 / std::sqrt(double(ffn_))));
    params_.push_back(uniform_tensor<T>({hidden_}, random, 0.1));
    grads_ = detail::GradientSums<T>(params_);
  }

  //! x [rows, hidden] → y [rows, hidden]; replaces whatever `stash` held.
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    detail::check_row_shape(x.shape, hidden_, "MlpBlock", "forward");
    const int n = x.dim(0);
    stash = Stash{};
    stash.x = x;
    stash.pre = Tensor<T>({n, ffn_});
    detail::linear_forward(x.begin_data(), params_[w1].begin_data(), params_[b1].begin_data(),
                           stash.pre.begin_data(), n, hidden_, ffn_);
    stash.act = Tensor<T>({n, ffn_});
    for (std::size_t i = 0; i < stash.pre.size(); ++i)
      stash.act[i] = detail::gelu(stash.pre[i]);
    Tensor<T> y({n, hidden_});
    detail::linear_forward(stash.act.begin_data(), params_[w2].begin_data(),
                           params_[b2].begin_data(), y.begin_data(), n, ffn_, hidden_);
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] += x[i];
    stash.phase = detail::StashPhase::Forwarded;
    return y;
  }

  //! dy [rows, hidden] → dx [rows, hidden]; keeps what `backward_weight` needs.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "MlpBlock", "backward_input");
    detail::check_output_gradient_shape(dy.shape, stash.x.shape, "MlpBlock", "backward_input");
    const int n = dy.dim(0);
    Tensor<T> dact({n, ffn_});
    detail::linear_backward_input(dy.begin_data(), params_[w2].begin_data(), dact.begin_data(), n,
                                  ffn_, hidden_);
    stash.dpre = std::move(dact);
    for (std::size_t i = 0; i < stash.dpre.size(); ++i)
      stash.dpre[i] *= detail::gelu_derivative(stash.pre[i]);
    Tensor<T> dx({n, hidden_});
    detail::linear_backward_input(stash.dpre.begin_data(), params_[w1].begin_data(),
                                  dx.begin_data(), n, hidden_, ffn_);
    for (std::size_t i = 0; i < dx.size(); ++i)
      dx[i] += dy[i];  // the residual path
    stash.dy = dy;
    stash.pre = Tensor<T>{};
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds this microbatch's weight gradients and empties the stash.
  void backward_weight(Stash& stash) {
    detail::run_remaining_weight_pieces(stash, weight_pieces, "MlpBlock",
                                        [&](int piece) { run_piece(stash, piece); });
  }

  //! Runs one piece (0: W2 and b2, 1: W1 and b1) of the weight gradient and frees what only it
  //! needed; after the last the stash is empty.
  void backward_weight_piece(Stash& stash, int piece) {
    detail::run_weight_piece(stash, piece, weight_pieces, "MlpBlock",
                             [&](int p) { run_piece(stash, p); });
  }

  //! Bytes of the tensors `stash` holds.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return detail::mlp_block_held_bytes(stash);
  }

  //! Analytic stash sizes for `rows` rows.
  StashBytes predicted_stash_bytes(int rows) const noexcept {
    return mlp_block_stash_bytes<T>(static_cast<std::size_t>(rows),
                                    static_cast<std::size_t>(hidden_),
                                    static_cast<std::size_t>(ffn_));
  }

  //! Analytic bytes each weight piece frees, for `rows` rows.
  std::array<std::size_t, weight_pieces> predicted_piece_bytes(int rows) const noexcept {
    return mlp_block_weight_piece_bytes<T>(static_cast<std::size_t>(rows),
                                           static_cast<std::size_t>(hidden_),
                                           static_cast<std::size_t>(ffn_));
  }

  //! W1, b1, W2, b2.
  std::span<Tensor<T>> parameters() noexcept { return params_; }
  //! W1, b1, W2, b2.
  std::span<const Tensor<T>> parameters() const noexcept { return params_; }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T (a
  //! write into them lasts until the next contribution to that tensor rounds the sum again).
  std::span<Tensor<T>> gradients() noexcept { return grads_.tensors(); }
  //! Accumulated gradients, in the order of `parameters()`: the double sums rounded to T.
  std::span<const Tensor<T>> gradients() const noexcept { return grads_.tensors(); }
  //! Sets the accumulated gradients (and the sums behind them) to zero.
  void zero_gradients() { grads_.zero(); }

 private:
  // Each piece reads only its own tensors (their rows give n), so pieces run in any order.
  void run_piece(Stash& stash, int piece) {
    if (piece == 0) {
      const int n = stash.dy.dim(0);
      detail::linear_backward_weight(stash.dy.begin_data(), stash.act.begin_data(), grads_.sum(w2),
                                     grads_.sum(b2), n, ffn_, hidden_);
      grads_.publish({w2, b2});
      stash.dy = Tensor<T>{};
      stash.act = Tensor<T>{};
    } else {
      const int n = stash.dpre.dim(0);
      detail::linear_backward_weight(stash.dpre.begin_data(), stash.x.begin_data(), grads_.sum(w1),
                                     grads_.sum(b1), n, hidden_, ffn_);
      grads_.publish({w1, b1});
      stash.dpre = Tensor<T>{};
      stash.x = Tensor<T>{};
    }
  }

  int hidden_;
  int ffn_;
  std::vector<Tensor<T>> params_;
  detail::GradientSums<T> grads_;
};

//! One pipeline stage of the toy MLP: blocks [first_block(), last_block()) of the global list,
//! split over `stages` as evenly as possible with earlier stages taking the remainder. Block i is
//! initialized from (seed, i) wherever it lands, so every partition of one config computes the
//! same function. Input and output are [rows, hidden]. A float stage's weight gradients
//! accumulate in double (see `MlpBlock`), so they match across schedules to float rounding.
template <class T>
class MlpStage {
 public:
  using tensor_type = Tensor<T>;  //!< rows [rows, hidden] in and out
  using value_type = T;           //!< the element type
  //! One stash per block, in block order.
  struct Stash {
    std::vector<typename MlpBlock<T>::stash_type> blocks;  //!< each block's stash, in order
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
    int first_block = -1;  //!< the filling stage's first block, to catch a stash of another stage
    std::vector<char> parts_done;  //!< weight parts run so far, when the weight pass is cut
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! Stage `stage` of `stages`; throws `invalid_problem` when the config or the split does not
  //! fit (a non-positive size, more stages than blocks, a stage out of range).
  MlpStage(const MlpConfig& config, int stage, int stages) : config_(config) {
    detail::require_positive(config.hidden, "MlpStage", "hidden");
    detail::require_positive(config.ffn, "MlpStage", "ffn");
    detail::require_positive(config.microbatch_size, "MlpStage", "microbatch_size");
    const auto [first, last] = detail::block_range(config.blocks, stage, stages, "MlpStage");
    first_ = first;
    for (int i = first; i < last; ++i)
      blocks_.emplace_back(config, i);
  }

  //! x [rows, hidden] → [rows, hidden]; replaces whatever `stash` held (a recompute calls it
  //! again on the same input and gets the same bits).
  Tensor<T> forward(const Tensor<T>& x, Stash& stash) const {
    stash = Stash{};
    stash.blocks.resize(blocks_.size());
    Tensor<T> y = blocks_.front().forward(x, stash.blocks.front());
    for (std::size_t i = 1; i < blocks_.size(); ++i)
      y = blocks_[i].forward(y, stash.blocks[i]);
    stash.phase = detail::StashPhase::Forwarded;
    stash.first_block = first_;
    return y;
  }

  //! dy [rows, hidden] → dx [rows, hidden], blocks in reverse.
  Tensor<T> backward_input(const Tensor<T>& dy, Stash& stash) const {
    check_stash(stash, detail::StashPhase::Forwarded, "backward_input");
    Tensor<T> dx = blocks_.back().backward_input(dy, stash.blocks.back());
    for (std::size_t i = blocks_.size() - 1; i-- > 0;)
      dx = blocks_[i].backward_input(dx, stash.blocks[i]);
    stash.phase = detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds the weight gradients of every block and empties the stash.
  void backward_weight(Stash& stash) {
    check_stash(stash, detail::StashPhase::InputDone, "backward_weight");
    detail::require_no_weight_parts(stash.parts_done, "MlpStage");
    for (std::size_t i = blocks_.size(); i-- > 0;)
      blocks_[i].backward_weight(stash.blocks[i]);
    stash = Stash{};
  }

  //! Pieces the weight gradient falls into: two per block (W2 and b2, then W1 and b1), blocks
  //! last to first.
  int weight_parts() const noexcept {
    return detail::stage_weight_pieces(false, blocks_.size(), MlpBlock<T>::weight_pieces, false);
  }

  //! Part `part` of `parts` of the weight gradient: the pieces [part·n/parts, (part+1)·n/parts)
  //! of the n = weight_parts() pieces (more parts than pieces leave some empty). Each piece
  //! frees what only it needed; once every part has run the stash is empty.
  void backward_weight(Stash& stash, int part, int parts) {
    check_stash(stash, detail::StashPhase::InputDone, "backward_weight");
    detail::run_weight_part(stash, part, parts, weight_parts(), "MlpStage",
                            [&](int piece) { run_piece(stash, piece); });
  }

  //! Analytic bytes each of `parts` weight-gradient parts frees for one microbatch; they sum to
  //! wgrad_bytes().
  std::vector<std::size_t> weight_part_bytes(int parts) const {
    std::vector<std::size_t> pieces;
    for (std::size_t i = blocks_.size(); i-- > 0;)
      for (std::size_t bytes : blocks_[i].predicted_piece_bytes(config_.microbatch_size))
        pieces.push_back(bytes);
    return detail::part_bytes(pieces, parts, "MlpStage");
  }

  //! Bytes of the tensors `stash` holds, over every layer.
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < stash.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].stash_bytes(stash.blocks[i]);
    return bytes;
  }

  //! Analytic bytes a stash holds right after forward of one microbatch (microbatch_size rows).
  std::size_t activation_bytes() const noexcept { return predicted().activation; }
  //! Analytic bytes a stash holds right after backward_input (what backward_weight needs).
  std::size_t wgrad_bytes() const noexcept { return predicted().wgrad; }

  //! Sets every block's accumulated gradients to zero.
  void zero_gradients() {
    for (MlpBlock<T>& b : blocks_)
      b.zero_gradients();
  }

  //! Every parameter tensor of the stage: block by block, each block's in its own order.
  TensorRange<Tensor<T>> parameters() {
    return joined<Tensor<T>>(*this, [](auto& b) { return b.parameters(); });
  }
  //! Every parameter tensor of the stage: block by block, each block's in its own order.
  TensorRange<const Tensor<T>> parameters() const {
    return joined<const Tensor<T>>(*this, [](auto& b) { return b.parameters(); });
  }
  //! Gradients, in the order of `parameters()` (each block's double sums rounded to T).
  TensorRange<Tensor<T>> gradients() {
    return joined<Tensor<T>>(*this, [](auto& b) { return b.gradients(); });
  }
  //! Gradients, in the order of `parameters()` (each block's double sums rounded to T).
  TensorRange<const Tensor<T>> gradients() const {
    return joined<const Tensor<T>>(*this, [](auto& b) { return b.gradients(); });
  }

  //! Global index of the stage's first block.
  int first_block() const noexcept { return first_; }
  //! One past the global index of the stage's last block.
  int last_block() const noexcept { return first_ + static_cast<int>(blocks_.size()); }
  //! The stage's blocks.
  std::span<const MlpBlock<T>> blocks() const noexcept { return blocks_; }
  //! The configuration the stage was built from.
  const MlpConfig& config() const noexcept { return config_; }

 private:
  template <class Elem, class Self, class Get>
  static TensorRange<Elem> joined(Self& self, Get get) {
    TensorRange<Elem> range;
    for (auto& b : self.blocks_)
      range.append(get(b));
    return range;
  }

  // Piece `piece` of weight_parts(): two per block, from the last block.
  void run_piece(Stash& stash, int piece) {
    const detail::StagePiece at =
        detail::stage_weight_piece(piece, false, blocks_.size(), MlpBlock<T>::weight_pieces, false);
    blocks_[at.block].backward_weight_piece(stash.blocks[at.block], at.piece);
  }

  // A stash filled by another stage would be read against the wrong weights (or out of
  // bounds): refuse it.
  void check_stash(const Stash& stash, detail::StashPhase wanted, const char* op) const {
    detail::require_phase(stash.phase, wanted, "MlpStage", op);
    detail::check_stash_stage(stash.first_block, stash.blocks.size(), first_, blocks_.size(),
                              "MlpStage", op);
  }

  StashBytes predicted() const noexcept {
    StashBytes total;
    for (const MlpBlock<T>& b : blocks_)
      total = total + b.predicted_stash_bytes(config_.microbatch_size);
    return total;
  }

  MlpConfig config_;
  int first_ = 0;
  std::vector<MlpBlock<T>> blocks_;
};

}  // namespace pipesched::toy
