// Deterministic synthetic training data for the toy models and the loss at the end of the
// pipeline: mean squared error for the MLP, next-token cross-entropy for the GPT; whole
// microbatches or sequence slices of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/gpt_vocabulary.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/slicing.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! Which loss a `StepData` computes.
enum class LossKind : std::uint8_t {
  SquaredError,  //!< mean over elements of (output − target)²
  CrossEntropy,  //!< mean over tokens of −log softmax(logits)[target]
};

//! One training step's data: inputs and targets per microbatch, and the loss. The step loss
//! is the mean over microbatches of each microbatch's mean loss (over its rows, or tokens).
//!
//! A microbatch can also be cut into slices (`slice_bounds`: equal lengths, the last slice
//! taking the remainder): the GPT's along the sequence (columns of the ids), the MLP's along
//! its rows. A slice's loss is its tokens' (rows') share of the same step loss, so the slices'
//! losses and gradients add up to the unsliced ones.
template <class T>
struct StepData {
  int microbatches = 0;                         //!< microbatches in the step
  LossKind loss_kind = LossKind::SquaredError;  //!< the loss the step computes
  std::vector<Tensor<T>> inputs;   //!< per microbatch: features [rows, hidden] or ids [b, s]
  std::vector<Tensor<T>> targets;  //!< per microbatch: values like the output, or ids [b, s]

  //! The first stage's input of microbatch `mb` (a copy).
  Tensor<T> input(int mb) const { return inputs[checked(mb, "input")]; }

  //! The first stage's input for slice `slice` of `slices` of microbatch `mb`: ids [b, tokens]
  //! (GPT) or features [rows, hidden] (MLP). One slice is the whole microbatch.
  Tensor<T> input(int mb, int slice, int slices) const {
    const Tensor<T>& x = inputs[checked(mb, "input")];
    return cut(x, slice, slices, "input");
  }

  //! The targets of slice `slice` of `slices` of microbatch `mb` (a copy; one slice is the whole
  //! microbatch's).
  Tensor<T> target(int mb, int slice, int slices) const {
    return cut(targets[checked(mb, "target")], slice, slices, "target");
  }

  //! The factor each term of the step loss carries: 1 / (the microbatch's terms × microbatches)
  //! (what `loss_gradient` scales by: for cross-entropy, a token's; the squared error's gradient
  //! carries it twice).
  T loss_scale(int mb) const {
    const std::size_t total = targets[checked(mb, "loss_scale")].size();
    return T(1) / (T(total) * T(microbatches));
  }

  //! Adds microbatch `mb`'s share of the step loss to `loss` and returns the gradient of the
  //! step loss with respect to `output` (the last stage's output for that microbatch).
  Tensor<T> loss_gradient(const Tensor<T>& output, int mb, double& loss) const {
    return loss_gradient(output, mb, 0, 1, loss);
  }

  //! The same for slice `slice` of `slices`: `output` is the last stage's output for that
  //! slice; the loss added is the slice's share of the step loss (its tokens' or rows' terms of
  //! the microbatch's mean), so the slices of a microbatch add up to its unsliced loss.
  Tensor<T> loss_gradient(const Tensor<T>& output, int mb, int slice, int slices,
                          double& loss) const {
    const Tensor<T>& whole = targets[checked(mb, "loss_gradient")];
    const bool sliced = slices != 1 || slice != 0;
    const Tensor<T> part = sliced ? cut(whole, slice, slices, "loss_gradient") : Tensor<T>{};
    const Tensor<T>& target = sliced ? part : whole;
    const std::size_t total = whole.size();  // the microbatch's terms: the mean's denominator
    return loss_kind == LossKind::SquaredError ? squared_error(output, target, total, loss)
                                               : cross_entropy(output, target, total, loss);
  }

 private:
  std::size_t checked(int mb, const char* op) const {
    if (mb < 0 || mb >= microbatches || static_cast<std::size_t>(mb) >= inputs.size() ||
        static_cast<std::size_t>(mb) >= targets.size())
      throw invalid_problem("StepData::" + std::string(op) + ": microbatch is " +
                            std::to_string(mb) + "; it must be between 0 and " +
                            std::to_string(microbatches - 1));
    return static_cast<std::size_t>(mb);
  }

  // The columns (GPT ids: along the sequence) or rows (MLP features) of slice `slice`.
  Tensor<T> cut(const Tensor<T>& x, int slice, int slices, const char* op) const {
    if (x.rank() != 2)
      throw invalid_problem("StepData::" + std::string(op) + ": the data tensor has shape " +
                            shape_string(x.shape) +
                            "; slicing needs [batch, sequence] ids or "
                            "[rows, hidden] features");
    if (slices == 1 && slice == 0) return x;
    const bool along_sequence = loss_kind == LossKind::CrossEntropy;
    const int extent = along_sequence ? x.dim(1) : x.dim(0);
    const SliceBounds at = slice_bounds(extent, slice, slices);
    if (!along_sequence) {
      Tensor<T> out({at.length, x.dim(1)});
      const auto width = static_cast<std::ptrdiff_t>(x.dim(1));
      std::copy(x.begin_data() + at.start * width, x.begin_data() + (at.start + at.length) * width,
                out.begin_data());
      return out;
    }
    Tensor<T> out({x.dim(0), at.length});
    for (int i = 0; i < x.dim(0); ++i)
      for (int t = 0; t < at.length; ++t)
        out(i, t) = x(i, at.start + t);
    return out;
  }

  Tensor<T> squared_error(const Tensor<T>& output, const Tensor<T>& target, std::size_t total,
                          double& loss) const {
    if (output.shape != target.shape)
      throw invalid_problem("StepData::loss_gradient: output shape is " +
                            shape_string(output.shape) + "; the targets have shape " +
                            shape_string(target.shape));
    const T scale = T(2) / (T(total) * T(microbatches));
    Tensor<T> grad(output.shape);
    double sum = 0;
    for (std::size_t i = 0; i < output.size(); ++i) {
      const T diff = output[i] - target[i];
      sum += double(diff) * double(diff);
      grad[i] = scale * diff;
    }
    loss += sum / (double(total) * microbatches);
    return grad;
  }

  Tensor<T> cross_entropy(const Tensor<T>& logits, const Tensor<T>& target, std::size_t total,
                          double& loss) const {
    if (logits.rank() != 3 || target.rank() != 2 || logits.dim(0) != target.dim(0) ||
        logits.dim(1) != target.dim(1))
      throw invalid_problem("StepData::loss_gradient: logits shape is " +
                            shape_string(logits.shape) + "; expected [" +
                            std::to_string(target.dim(0)) + ", " + std::to_string(target.dim(1)) +
                            ", vocabulary] to match the targets");
    const int tokens = target.dim(0) * target.dim(1);
    const int classes = logits.dim(2);
    const T scale = T(1) / (T(total) * T(microbatches));
    Tensor<T> grad(logits.shape);
    double sum = 0;
    for (int r = 0; r < tokens; ++r) {
      const T* z = logits.begin_data() + static_cast<std::ptrdiff_t>(r) * classes;
      T* g = grad.begin_data() + static_cast<std::ptrdiff_t>(r) * classes;
      const int label = static_cast<int>(target[static_cast<std::size_t>(r)]);
      if (label < 0 || label >= classes)
        throw invalid_problem("StepData::loss_gradient: target token " + std::to_string(label) +
                              " is outside the logits' " + std::to_string(classes) + " classes");
      const T max_z = *std::max_element(z, z + classes);
      T total_exp = 0;
      for (int c = 0; c < classes; ++c) {
        g[c] = std::exp(z[c] - max_z);
        total_exp += g[c];
      }
      sum += double(std::log(total_exp) + max_z - z[label]);
      for (int c = 0; c < classes; ++c)
        g[c] = g[c] / total_exp * scale;
      g[label] -= scale;
    }
    loss += sum / (double(total) * microbatches);
    return grad;
  }
};

namespace detail {
inline void require_microbatches(int microbatches, const char* who) {
  if (microbatches < 1)
    throw invalid_problem(std::string(who) + ": microbatches is " + std::to_string(microbatches) +
                          "; a step needs at least 1");
}
inline constexpr std::uint64_t data_stream = 0x4441544100000000ULL;
}  // namespace detail

//! MLP data: features uniform in [−1, 1) [microbatch_size, hidden]; targets a fixed smooth
//! function of them (sin of the neighbouring feature), so there is something to learn.
template <class T>
StepData<T> make_mlp_data(const MlpConfig& config, int microbatches, std::uint64_t seed) {
  detail::require_microbatches(microbatches, "make_mlp_data");
  detail::require_positive(config.hidden, "make_mlp_data", "hidden");
  detail::require_positive(config.microbatch_size, "make_mlp_data", "microbatch_size");
  StepData<T> data;
  data.microbatches = microbatches;
  data.loss_kind = LossKind::SquaredError;
  const int rows = config.microbatch_size;
  const int h = config.hidden;
  for (int mb = 0; mb < microbatches; ++mb) {
    Random random(seed, detail::data_stream + static_cast<std::uint64_t>(mb));
    Tensor<T> x = uniform_tensor<T>({rows, h}, random, 1.0);
    Tensor<T> t({rows, h});
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < h; ++j)
        t(r, j) = static_cast<T>(std::sin(2.0 * double(x(r, (j + 1) % h))));
    data.inputs.push_back(std::move(x));
    data.targets.push_back(std::move(t));
  }
  return data;
}

//! GPT data: [microbatch_size, sequence] token ids and their next tokens. Each row counts
//! through the vocabulary from a random start with a random stride, so the next token follows
//! from the context (learnable through attention) yet differs row to row.
template <class T>
StepData<T> make_gpt_data(const GptConfig& config, int microbatches, std::uint64_t seed) {
  detail::require_microbatches(microbatches, "make_gpt_data");
  detail::require_positive(config.vocabulary, "make_gpt_data", "vocabulary");
  detail::require_positive(config.sequence, "make_gpt_data", "sequence");
  detail::require_positive(config.microbatch_size, "make_gpt_data", "microbatch_size");
  StepData<T> data;
  data.microbatches = microbatches;
  data.loss_kind = LossKind::CrossEntropy;
  const int b = config.microbatch_size;
  const int s = config.sequence;
  const int v = config.vocabulary;
  for (int mb = 0; mb < microbatches; ++mb) {
    Random random(seed, detail::data_stream + static_cast<std::uint64_t>(mb));
    Tensor<T> ids({b, s});
    Tensor<T> next({b, s});
    for (int r = 0; r < b; ++r) {
      const int start = random.below(v);
      const int stride = 1 + random.below(std::max(1, v - 1));
      for (int t = 0; t < s; ++t) {
        ids(r, t) = static_cast<T>((start + t * stride) % v);
        next(r, t) = static_cast<T>((start + (t + 1) * stride) % v);
      }
    }
    data.inputs.push_back(std::move(ids));
    data.targets.push_back(std::move(next));
  }
  return data;
}

//! The executor's view of `data` (which must outlive the result): stage 0's input and the
//! last stage's loss for each (microbatch, slice) unit, the microbatches cut into `slices`
//! (the schedule's `problem.slices`; 1 = whole microbatches).
template <class T>
TrainingData<Tensor<T>> training_data(const StepData<T>& data, int slices = 1) {
  if (slices < 1)
    throw invalid_problem("training_data: slices is " + std::to_string(slices) +
                          "; use 1 for whole microbatches or the schedule's slice count");
  TrainingData<Tensor<T>> d;
  d.input = [&data, slices](int mb, int slice) { return data.input(mb, slice, slices); };
  d.loss = [&data, slices](const Tensor<T>& out, int mb, int slice, double& loss) {
    return data.loss_gradient(out, mb, slice, slices, loss);
  };
  return d;
}

//! The executor's vocabulary hooks (TrainingData::vocabulary) for the toy GPT with its head
//! split by vocabulary (`GptConfig::split_output`): `shards[j]` is shard j of `shards.size()`
//! (one per rank), `data` gives the targets (cut into `slices` as `training_data` cuts them).
//! A partial travels packed (`VocabularyPartial::packed`); each shard keeps its forwards'
//! stashes by unit until their VOCAB_B. `shards` and `data` must outlive the result. Throws
//! invalid_problem for no shards, slices < 1 or data without cross-entropy targets.
template <class T>
VocabularyPasses<Tensor<T>> vocabulary_passes(std::span<GptVocabularyShard<T>> shards,
                                              const StepData<T>& data, int slices = 1) {
  if (shards.empty())
    throw invalid_problem("vocabulary_passes: no shards were given; pass one per rank.");
  if (slices < 1)
    throw invalid_problem("vocabulary_passes: slices is " + std::to_string(slices) +
                          "; use 1 for whole microbatches or the schedule's slice count");
  if (data.loss_kind != LossKind::CrossEntropy)
    throw invalid_problem(
        "vocabulary_passes: the data's loss is not cross-entropy over token ids; vocabulary "
        "shards compute the GPT's next-token loss (make_gpt_data).");
  using Stash = typename GptVocabularyShard<T>::Stash;
  // One map of kept stashes per shard: each is touched only by its shard's rank.
  auto kept =
      std::make_shared<std::vector<std::unordered_map<std::uint64_t, Stash>>>(shards.size());
  auto unit = [](int mb, int slice) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(mb)) << 32) |
           static_cast<std::uint32_t>(slice);
  };
  auto shard_of = [shards](int j) -> GptVocabularyShard<T>& {
    if (j < 0 || static_cast<std::size_t>(j) >= shards.size())
      throw invalid_problem("vocabulary_passes: shard " + std::to_string(j) +
                            " was asked for, but " + std::to_string(shards.size()) +
                            " shards were given (one per rank).");
    return shards[static_cast<std::size_t>(j)];
  };
  const int hidden = shards.front().hidden();
  VocabularyPasses<Tensor<T>> v;
  v.forward = [shard_of, kept, unit, &data, slices](int j, const Tensor<T>& x, int mb, int slice) {
    GptVocabularyShard<T>& s = shard_of(j);
    Stash& stash = (*kept)[static_cast<std::size_t>(j)][unit(mb, slice)];
    return s.forward(x, data.target(mb, slice, slices), stash).packed();
  };
  v.merge = [hidden](Tensor<T>& into, const Tensor<T>& other) {
    VocabularyPartial<T> a = VocabularyPartial<T>::unpacked(into, hidden);
    a.merge(VocabularyPartial<T>::unpacked(other, hidden));
    into = a.packed();
  };
  v.loss = [hidden, &data, slices](const Tensor<T>& merged, int mb, int slice, double& loss) {
    const Tensor<T> target = data.target(mb, slice, slices);
    return VocabularyPartial<T>::unpacked(merged, hidden)
        .input_gradient({target.dim(0), target.dim(1), hidden}, data.loss_scale(mb), loss);
  };
  v.backward = [shard_of, kept, unit, hidden, &data](int j, const Tensor<T>& merged, int mb,
                                                     int slice) {
    GptVocabularyShard<T>& s = shard_of(j);
    auto& mine = (*kept)[static_cast<std::size_t>(j)];
    auto it = mine.find(unit(mb, slice));
    if (it == mine.end())
      throw invalid_problem("vocabulary_passes: shard " + std::to_string(j) +
                            " has no forward of microbatch " + std::to_string(mb) + " slice " +
                            std::to_string(slice) + " to take the weight gradient of.");
    s.backward_weight(VocabularyPartial<T>::unpacked(merged, hidden), data.loss_scale(mb),
                      it->second);
    mine.erase(it);
  };
  v.zero_gradients = [shard_of](int j) { shard_of(j).zero_gradients(); };
  v.held_bytes = [shard_of, kept, unit](int j, int mb, int slice) -> std::size_t {
    const auto& mine = (*kept)[static_cast<std::size_t>(j)];
    auto it = mine.find(unit(mb, slice));
    return it == mine.end() ? 0 : shard_of(j).stash_bytes(it->second);
  };
  return v;
}

//! vocabulary_passes with the input embedding split too (`GptConfig::split_input`):
//! `inputs[j]` is shard j of the token table (one per rank, as many as `shards`); EMBED_F looks
//! up the unit's tokens (cut into `slices` as `training_data` cuts them), the lookups merge by
//! summing, and EMBED_B adds the rows' gradient. `inputs` must outlive the result too.
template <class T>
VocabularyPasses<Tensor<T>> vocabulary_passes(std::span<GptVocabularyShard<T>> shards,
                                              std::span<GptInputShard<T>> inputs,
                                              const StepData<T>& data, int slices = 1) {
  VocabularyPasses<Tensor<T>> v = vocabulary_passes(shards, data, slices);
  if (inputs.size() != shards.size())
    throw invalid_problem("vocabulary_passes: " + std::to_string(inputs.size()) +
                          " input shards for " + std::to_string(shards.size()) +
                          " head shards; give one of each per rank.");
  auto input_of = [inputs](int j) -> GptInputShard<T>& {
    if (j < 0 || static_cast<std::size_t>(j) >= inputs.size())
      throw invalid_problem("vocabulary_passes: input shard " + std::to_string(j) +
                            " was asked for, but " + std::to_string(inputs.size()) +
                            " were given (one per rank).");
    return inputs[static_cast<std::size_t>(j)];
  };
  v.input_forward = [input_of, &data, slices](int j, int mb, int slice) {
    return input_of(j).forward(data.input(mb, slice, slices));
  };
  v.input_merge = [](Tensor<T>& into, const Tensor<T>& other) {
    if (into.shape != other.shape)
      throw invalid_problem("vocabulary_passes: two shards' lookups of one unit differ in shape.");
    for (std::size_t i = 0; i < into.data.size(); ++i)
      into.data[i] += other.data[i];
  };
  v.input_backward = [input_of, &data, slices](int j, const Tensor<T>& dx, int mb, int slice) {
    input_of(j).backward(data.input(mb, slice, slices), dx);
  };
  v.zero_gradients = [head = v.zero_gradients, input_of](int j) {
    head(j);
    input_of(j).zero_gradients();
  };
  return v;
}

}  // namespace pipesched::toy
