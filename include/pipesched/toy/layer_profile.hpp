// The toy GPT as a model the planner knows: its shape as a ModelShape, and its layers measured
// over a grid (profile_layers) — what `pipesched profile` runs and writes.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/layer_profile.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/exec/layer_profiler.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"

namespace pipesched::toy {

//! The toy GPT of `config` with values of `bytes_per_value` bytes (sizeof its T) as the
//! planner's ModelShape: `blocks` layers of pre-norm multi-head attention (no key/value
//! grouping) and a two-matrix GELU MLP of width `ffn`, attention probabilities kept for the
//! backward (not fused: flash_attention false), no dropout, an LM head of its own.
inline ModelShape gpt_model_shape(const GptConfig& config, int bytes_per_value) {
  ModelShape m;
  m.layers = config.blocks;
  m.hidden = config.hidden;
  m.heads = config.heads;
  m.ffn_hidden = config.ffn;
  m.sequence = config.sequence;
  m.vocabulary = config.vocabulary;
  m.microbatch_size = config.microbatch_size;
  m.bytes_per_value = bytes_per_value;
  m.flash_attention = false;
  m.dropout = false;
  m.tied_embeddings = false;
  return m;
}

//! The toy GPT that is `model` (gpt_model_shape's inverse), with `seed`: its layers, width,
//! heads, MLP width, sequence, vocabulary and microbatch size. Throws invalid_problem, saying
//! what the toy cannot build, for a gated (SwiGLU) MLP, grouped-query attention and tied
//! embeddings. What the toy runs otherwise but the model says differently — fused attention
//! (the toy keeps its attention probabilities), dropout (the toy has none), values of another
//! width than `bytes_per_value` (the toy's T) — is added to `notes` when given.
inline GptConfig gpt_config_of(const ModelShape& model, int bytes_per_value, std::uint64_t seed,
                               std::vector<std::string>* notes = nullptr) {
  model.check();
  auto refuse = [](const std::string& what) {
    throw invalid_problem("the toy GPT cannot build this model: " + what +
                          "; plan a model of plain multi-head attention and a two-matrix MLP "
                          "(pipesched profile writes one), or run the plan on your own layers.");
  };
  if (model.gated_mlp) refuse("its MLP is gated (SwiGLU: three matrices), the toy's has two");
  if (model.key_value_heads() != model.heads)
    refuse("it has " + std::to_string(model.key_value_heads()) + " key/value heads for " +
           std::to_string(model.heads) + " query heads, the toy one of each per head");
  if (model.tied_embeddings) refuse("its LM head shares the embedding, the toy's has its own");
  if (model.ffn() > (1 << 30)) refuse("its MLP width is beyond the toy's");
  if (notes) {
    if (model.flash_attention)
      notes->push_back(
          "the model fuses its attention; the toy keeps its attention "
          "probabilities (the same math, more activation memory)");
    if (model.dropout) notes->push_back("the model has dropout; the toy has none");
    if (model.bytes_per_value != bytes_per_value)
      notes->push_back("the model keeps " + std::to_string(model.bytes_per_value) +
                       "-byte values; the toy " + std::to_string(bytes_per_value) + "-byte ones");
  }
  GptConfig c;
  c.vocabulary = model.vocabulary;
  c.hidden = model.hidden;
  c.heads = model.heads;
  c.ffn = static_cast<int>(model.ffn());
  c.sequence = model.sequence;
  c.blocks = model.layers;
  c.microbatch_size = model.microbatch_size;
  c.seed = seed;
  return c;
}

namespace detail {

// A tensor group of which only this shard runs: its all-reduce leaves the values as they are,
// so that one shard's kernels are timed (the cost model prices the all-reduce from its links).
class OneShardGroup final : public TensorGroup {
 public:
  explicit OneShardGroup(int size) : size_(size) {}
  int size() const noexcept override { return size_; }
  int rank() const noexcept override { return 0; }
  void all_reduce(std::span<double>) override {}
  void all_reduce(std::span<float>) override {}

 private:
  int size_;
};

// The columns [start, start + length) of ids [b, s].
template <class T>
Tensor<T> columns(const Tensor<T>& x, int start, int length) {
  Tensor<T> out({x.dim(0), length});
  for (int i = 0; i < x.dim(0); ++i)
    for (int t = 0; t < length; ++t)
      out(i, t) = x(i, start + t);
  return out;
}

// The model a grid point's three stages are built from: three blocks, the point's microbatch
// size, positions for `longest` tokens (the longest prefix plus slice of the grid).
inline GptConfig layer_point_config(const GptConfig& config, const LayerPoint& at, int longest) {
  GptConfig c = config;
  c.blocks = 3;
  c.stage_blocks.clear();
  c.microbatch_size = at.microbatch_size;
  c.sequence = longest;
  return c;
}

// A grid point's step data: make_gpt_data's token streams of `microbatches` microbatches cut
// into the prefix (entry 2m; one token when there is none) and the measured slice (2m + 1).
template <class T>
StepData<T> layer_point_data(const GptConfig& config, const LayerPoint& at, int longest,
                             int microbatches) {
  GptConfig c = layer_point_config(config, at, longest);
  c.sequence = at.prefix + at.tokens;
  const StepData<T> whole = make_gpt_data<T>(c, microbatches, config.seed);
  StepData<T> data;
  data.microbatches = 2 * microbatches;
  data.loss_kind = LossKind::CrossEntropy;
  for (int m = 0; m < microbatches; ++m)
    for (int k = 0; k < 2; ++k) {
      const int start = k == 0 ? 0 : at.prefix;
      const int length = k == 0 ? std::max(at.prefix, 1) : at.tokens;
      data.inputs.push_back(columns(whole.inputs[static_cast<std::size_t>(m)], start,
                                    std::min(length, c.sequence - start)));
      data.targets.push_back(columns(whole.targets[static_cast<std::size_t>(m)], start,
                                     std::min(length, c.sequence - start)));
    }
  return data;
}

// The entry of layer_point_data that slice `slice` of microbatch `mb` reads: with a prefix
// (`sliced`), slice 0 is the prefix and slice 1 the measured tokens; without, the one slice is
// the measured tokens.
inline int layer_point_entry(int mb, int slice, bool sliced) {
  return 2 * mb + (sliced ? slice : 1);
}

}  // namespace detail

//! Measures the toy GPT's layers (GptStage<T> of `config`'s widths and vocabulary) over `grid`
//! with profile_layers: at each point three stages of a three-block model built with the
//! point's microbatch size and tensor shard 0 of its degree (a OneShard group: one shard's
//! kernels timed), position rows for the longest prefix plus slice, and make_gpt_data's token
//! streams cut into the prefix and the slice. The profile's model is gpt_model_shape(config).
template <class T>
LayerProfile gpt_layer_profile(const GptConfig& config, const LayerGrid& grid,
                               const LayerProfileOptions& options = {}) {
  grid.check();
  const int longest = *std::max_element(grid.tokens.begin(), grid.tokens.end()) +
                      *std::max_element(grid.prefixes.begin(), grid.prefixes.end());
  for (int t : grid.tensor)
    if (config.heads % t != 0 || config.ffn % t != 0)
      throw invalid_problem("gpt_layer_profile: tensor degree " + std::to_string(t) +
                            " does not divide the model's " + std::to_string(config.heads) +
                            " heads and MLP width " + std::to_string(config.ffn) +
                            "; profile degrees that divide both");
  auto groups = std::make_shared<std::vector<std::unique_ptr<detail::OneShardGroup>>>();
  auto make_stages = [&](const LayerPoint& at) {
    const GptConfig c = detail::layer_point_config(config, at, longest);
    std::vector<GptStage<T>> stages;
    for (int s = 0; s < 3; ++s)
      stages.emplace_back(c, s, 3, TensorShard{0, at.tensor});
    if (at.tensor > 1) {
      groups->push_back(std::make_unique<detail::OneShardGroup>(at.tensor));
      for (GptStage<T>& s : stages)
        s.set_tensor_group(groups->back().get());
    }
    return stages;
  };
  // The data outlives each point's TrainingData: kept here, one per point, replaced as the
  // points go.
  auto data = std::make_shared<StepData<T>>();
  auto make_data = [&, data](const LayerPoint& at) {
    *data = detail::layer_point_data<T>(config, at, longest, options.microbatches);
    const bool sliced = at.prefix > 0;
    TrainingData<Tensor<T>> d;
    d.input = [data, sliced](int mb, int slice) {
      return data->input(detail::layer_point_entry(mb, slice, sliced));
    };
    d.loss = [data, sliced](const Tensor<T>& out, int mb, int slice, double& loss) {
      return data->loss_gradient(out, detail::layer_point_entry(mb, slice, sliced), loss);
    };
    return d;
  };
  return profile_layers(gpt_model_shape(config, static_cast<int>(sizeof(T))), grid, make_stages,
                        make_data, options);
}

}  // namespace pipesched::toy
