// The toy residual MLP on the GPU: the twin of toy::MlpStage (include/pipesched/toy/mlp.hpp),
// the same blocks y = x + W2·gelu(W1·x + b1) + b2 with the same parameters (copied from the
// host model), stashes of the same shapes (so the same byte figures), GEMMs through cuBLAS and
// everything enqueued on the device's compute stream; the checks are the host stage's
// (toy/detail/layer_bookkeeping.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/toy/cuda/detail/engine.cuh"
#include "pipesched/toy/cuda/detail/layer_kernels.cuh"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/mlp.hpp"

namespace pipesched::toy::gpu {

namespace detail {

// One residual MLP block on the device (see toy::MlpBlock; the same stash and pieces).
template <class T>
class MlpBlock {
 public:
  struct Stash {
    DeviceTensor<T> x, pre, act;  // forward: input, W1·x + b1, gelu(pre)
    DeviceTensor<T> dy, dpre;     // backward_input: output gradient, gradient of pre
    int pieces_done = 0;          // bit i: weight piece i has run
    toy::detail::StashPhase phase = toy::detail::StashPhase::Empty;
  };
  static constexpr int weight_pieces = toy::MlpBlock<T>::weight_pieces;
  using Host = toy::MlpBlock<T>;

  MlpBlock(EnginePtr engine, const Host& host, int hidden, int ffn)
      : engine_(std::move(engine)),
        hidden_(hidden),
        ffn_(ffn),
        params_(host.parameters(), engine_->stream()) {}

  DeviceTensor<T> forward(const DeviceTensor<T>& x, Stash& stash) const {
    toy::detail::check_row_shape(x.shape(), hidden_, "gpu::MlpStage", "forward");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int n = x.dim(0);
    stash = Stash{};
    stash.x = x.clone(s);
    stash.pre = DeviceTensor<T>({n, ffn_}, s);
    linear_forward(g, x.data(), params_[Host::w1], params_[Host::b1],
                   static_cast<const T*>(nullptr), stash.pre.data(), n, hidden_, ffn_);
    stash.act = DeviceTensor<T>({n, ffn_}, s);
    gelu(stash.pre.data(), stash.act.data(), stash.act.size(), s);
    DeviceTensor<T> y({n, hidden_}, s);
    linear_forward(g, stash.act.data(), params_[Host::w2], params_[Host::b2], x.data(), y.data(), n,
                   ffn_, hidden_);
    stash.phase = toy::detail::StashPhase::Forwarded;
    return y;
  }

  DeviceTensor<T> backward_input(const DeviceTensor<T>& dy, Stash& stash) const {
    toy::detail::require_phase(stash.phase, toy::detail::StashPhase::Forwarded, "gpu::MlpBlock",
                               "backward_input");
    toy::detail::check_output_gradient_shape(dy.shape(), stash.x.shape(), "gpu::MlpStage",
                                             "backward_input");
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    const int n = dy.dim(0);
    stash.dpre = DeviceTensor<T>({n, ffn_}, s);
    linear_backward_input(g, dy.data(), params_[Host::w2], static_cast<const T*>(nullptr),
                          stash.dpre.data(), n, ffn_, hidden_);
    times_gelu_gradient(stash.dpre.data(), stash.pre.data(), stash.dpre.size(), s);
    DeviceTensor<T> dx({n, hidden_}, s);
    linear_backward_input(g, stash.dpre.data(), params_[Host::w1], dy.data(), dx.data(), n, hidden_,
                          ffn_);  // plus the residual path
    stash.dy = dy.clone(s);
    stash.pre = DeviceTensor<T>{};
    stash.phase = toy::detail::StashPhase::InputDone;
    return dx;
  }

  void backward_weight(Stash& stash) {
    toy::detail::run_remaining_weight_pieces(stash, weight_pieces, "gpu::MlpBlock",
                                             [&](int piece) { run_piece(stash, piece); });
  }

  // Piece 0 or 1, checked as the host block checks it.
  void backward_weight_piece(Stash& stash, int piece) {
    toy::detail::run_weight_piece(stash, piece, weight_pieces, "gpu::MlpBlock",
                                  [&](int p) { run_piece(stash, p); });
  }

  std::size_t stash_bytes(const Stash& stash) const noexcept {
    return toy::detail::mlp_block_held_bytes(stash);
  }

  DeviceParameters<T>& parameters() noexcept { return params_; }
  const DeviceParameters<T>& parameters() const noexcept { return params_; }

 private:
  void run_piece(Stash& stash, int piece) {
    const Engine& g = *engine_;
    const cudaStream_t s = g.stream();
    if (piece == 0) {
      linear_backward_weight(g, stash.dy.data(), stash.act.data(), params_.sum(Host::w2),
                             params_.sum(Host::b2), stash.dy.dim(0), ffn_, hidden_);
      params_.publish({Host::w2, Host::b2}, s);
      stash.dy = DeviceTensor<T>{};
      stash.act = DeviceTensor<T>{};
    } else {
      linear_backward_weight(g, stash.dpre.data(), stash.x.data(), params_.sum(Host::w1),
                             params_.sum(Host::b1), stash.dpre.dim(0), hidden_, ffn_);
      params_.publish({Host::w1, Host::b1}, s);
      stash.dpre = DeviceTensor<T>{};
      stash.x = DeviceTensor<T>{};
    }
  }

  EnginePtr engine_;  // first: outlives the tensors below, whose memory it orders
  int hidden_;
  int ffn_;
  DeviceParameters<T> params_;
};

}  // namespace detail

//! One pipeline stage of the toy MLP on a GPU: the twin of toy::MlpStage<T> with
//! `tensor_type = DeviceTensor<T>`. Built from the host stage of the same config (its
//! parameters are copied to the device, so both start identical); forward, backward_input and
//! the weight gradient (whole or in parts) enqueue their work on the device's compute stream
//! and return at once. Stashes hold tensors of the host stage's shapes, so `stash_bytes` and
//! the analytic figures equal the host stage's and `toy::mlp_profiled_cost` built from host
//! stages predicts this stage's bytes. Weight gradients of a float stage add into double sums.
//! Inputs are expected on the device's compute stream (as the executor and the GPU transports
//! hand them over).
template <class T>
class MlpStage {
 public:
  using tensor_type = DeviceTensor<T>;  //!< rows [rows, hidden] on the GPU, in and out
  using value_type = T;                 //!< the element type
  //! One stash per block, in block order (the host stage's layout).
  struct Stash {
    std::vector<typename detail::MlpBlock<T>::Stash> blocks;  //!< each block's, in block order
    //! Which calls have run on the stash: none, the forward, backward_input.
    toy::detail::StashPhase phase = toy::detail::StashPhase::Empty;
    int first_block = -1;          //!< the filling stage's first block
    std::vector<char> parts_done;  //!< weight parts run so far, when the weight pass is cut
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! Stage `stage` of `stages` on `device`; throws `invalid_problem` where the host stage would
  //! and `cuda_error` when the device cannot take it.
  MlpStage(const MlpConfig& config, int stage, int stages, CudaDevice device)
      : host_(config, stage, stages), engine_(std::make_shared<detail::Engine>(std::move(device))) {
    for (const toy::MlpBlock<T>& b : host_.blocks())
      blocks_.emplace_back(engine_, b, config.hidden, config.ffn);
    // The device copies are now the parameters; the host blocks keep the shapes and figures.
  }

  //! x [rows, hidden] → [rows, hidden]; replaces whatever `stash` held.
  tensor_type forward(const tensor_type& x, Stash& stash) const {
    stash = Stash{};
    stash.blocks.resize(blocks_.size());
    tensor_type y = blocks_.front().forward(x, stash.blocks.front());
    for (std::size_t i = 1; i < blocks_.size(); ++i)
      y = blocks_[i].forward(y, stash.blocks[i]);
    stash.phase = toy::detail::StashPhase::Forwarded;
    stash.first_block = host_.first_block();
    return y;
  }

  //! dy [rows, hidden] → dx [rows, hidden], blocks in reverse.
  tensor_type backward_input(const tensor_type& dy, Stash& stash) const {
    check_stash(stash, toy::detail::StashPhase::Forwarded, "backward_input");
    tensor_type dx = blocks_.back().backward_input(dy, stash.blocks.back());
    for (std::size_t i = blocks_.size() - 1; i-- > 0;)
      dx = blocks_[i].backward_input(dx, stash.blocks[i]);
    stash.phase = toy::detail::StashPhase::InputDone;
    return dx;
  }

  //! Adds the weight gradients of every block and empties the stash.
  void backward_weight(Stash& stash) {
    check_stash(stash, toy::detail::StashPhase::InputDone, "backward_weight");
    toy::detail::require_no_weight_parts(stash.parts_done, "gpu::MlpStage");
    for (std::size_t i = blocks_.size(); i-- > 0;)
      blocks_[i].backward_weight(stash.blocks[i]);
    stash = Stash{};
  }

  //! Pieces the weight gradient falls into (as the host stage's).
  int weight_parts() const noexcept { return host_.weight_parts(); }

  //! Part `part` of `parts` of the weight gradient (as the host stage cuts it).
  void backward_weight(Stash& stash, int part, int parts) {
    check_stash(stash, toy::detail::StashPhase::InputDone, "backward_weight");
    toy::detail::run_weight_part(stash, part, parts, weight_parts(), "gpu::MlpStage",
                                 [&](int piece) { run_piece(stash, piece); });
  }

  //! Bytes of the device tensors `stash` holds (what the host stage reports for its stash).
  std::size_t stash_bytes(const Stash& stash) const noexcept {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < stash.blocks.size() && i < blocks_.size(); ++i)
      bytes += blocks_[i].stash_bytes(stash.blocks[i]);
    return bytes;
  }

  //! Analytic bytes a stash holds right after forward of one microbatch, as the host stage's.
  std::size_t activation_bytes() const noexcept { return host_.activation_bytes(); }
  //! Analytic bytes a stash holds right after backward_input, as the host stage's.
  std::size_t wgrad_bytes() const noexcept { return host_.wgrad_bytes(); }
  //! Analytic bytes each of `parts` weight-gradient parts frees, as the host stage's.
  std::vector<std::size_t> weight_part_bytes(int parts) const {
    return host_.weight_part_bytes(parts);
  }

  //! Sets every accumulated gradient (and the sums behind them) to zero, on the compute stream.
  void zero_gradients() {
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().zero(engine_->stream());
  }

  //! Plain SGD on the compute stream: parameter −= lr · gradient (an optimizer hook).
  void sgd_step(double lr) {
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().sgd(lr, engine_->stream());
  }
  //! Keeps a device copy of the parameters, on the compute stream (an optimizer's snapshot
  //! hook); `restore_parameters` puts it back (its rollback hook).
  void snapshot_parameters() {
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().snapshot(engine_->stream());
  }
  //! Puts the parameters of the last `snapshot_parameters` back, on the compute stream.
  void restore_parameters() {
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().restore(engine_->stream());
  }

  //! Copies of the parameters, in the host stage's parameters() order (waits for the stream).
  std::vector<Tensor<T>> host_parameters() const {
    std::vector<Tensor<T>> out;
    for (const detail::MlpBlock<T>& b : blocks_)
      b.parameters().append_parameters(out);
    return out;
  }
  //! Copies of the accumulated gradients, in the same order.
  std::vector<Tensor<T>> host_gradients() const {
    std::vector<Tensor<T>> out;
    for (const detail::MlpBlock<T>& b : blocks_)
      b.parameters().append_gradients(out);
    return out;
  }
  //! The accumulated gradients in device memory, in host_gradients() order: what a
  //! data-parallel reduction (nccl::GradientReducer) reads and overwrites on the GPU, ordered
  //! after the compute stream.
  std::vector<std::span<T>> device_gradients() {
    std::vector<std::span<T>> out;
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().append_gradient_spans(out);
    return out;
  }
  //! The parameters in device memory, in host_parameters() order (the sizes of
  //! device_gradients()): what a ZeRO-sharded reduction (nccl::GradientReducer with
  //! nccl::ReducerOptions::zero) reads and overwrites on the GPU.
  std::vector<std::span<T>> device_parameters() {
    std::vector<std::span<T>> out;
    for (detail::MlpBlock<T>& b : blocks_)
      b.parameters().append_parameter_spans(out);
    return out;
  }

  //! Global index of the stage's first block.
  int first_block() const noexcept { return host_.first_block(); }
  //! One past the global index of the stage's last block.
  int last_block() const noexcept { return host_.last_block(); }
  //! The configuration the stage was built from.
  const MlpConfig& config() const noexcept { return host_.config(); }
  //! The device the stage runs on.
  const CudaDevice& device() const noexcept { return engine_->device(); }

 private:
  // Piece `piece` of weight_parts() (as the host stage orders them).
  void run_piece(Stash& stash, int piece) {
    const toy::detail::StagePiece at = toy::detail::stage_weight_piece(
        piece, false, blocks_.size(), detail::MlpBlock<T>::weight_pieces, false);
    blocks_[at.block].backward_weight_piece(stash.blocks[at.block], at.piece);
  }

  void check_stash(const Stash& stash, toy::detail::StashPhase wanted, const char* op) const {
    toy::detail::require_phase(stash.phase, wanted, "gpu::MlpStage", op);
    toy::detail::check_stash_stage(stash.first_block, stash.blocks.size(), host_.first_block(),
                                   blocks_.size(), "gpu::MlpStage", op);
  }

  toy::MlpStage<T> host_;  // shapes, partition and analytic figures
  detail::EnginePtr engine_;
  std::vector<detail::MlpBlock<T>> blocks_;
};

}  // namespace pipesched::toy::gpu
