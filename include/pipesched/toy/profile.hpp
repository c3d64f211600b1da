// The simulator's view of the toy models: a ProfiledCost filled from their analytic byte
// counts (per stage, per sequence slice, per weight-gradient part), so a simulated peak can be
// compared with the peak the executor measures on the same models.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/gpt_vocabulary.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/slicing.hpp"

namespace pipesched::toy {

namespace detail {
inline std::vector<double> as_doubles(const std::vector<std::size_t>& v) {
  return {v.begin(), v.end()};
}
inline void check_profile_counts(std::size_t stages, int slices, int parts, const char* who) {
  if (stages == 0)
    throw invalid_problem(std::string(who) + ": no stages were given; pass every stage");
  if (slices < 1)
    throw invalid_problem(std::string(who) + ": slices is " + std::to_string(slices) +
                          "; use 1 for whole microbatches or the schedule's slice count");
  if (parts < 1)
    throw invalid_problem(std::string(who) + ": parts is " + std::to_string(parts) +
                          "; use 1 for whole weight gradients or the schedule's part count");
}
}  // namespace detail

//! ProfiledCost for the toy GPT's stages run with microbatches cut into `slices` (as
//! `slice_bounds` cuts them) and weight gradients cut into `parts`. Byte figures follow the
//! executor's accounting: with one slice, per stage (the whole-sequence calls, no context:
//! a checkpointed forward keeps only its input); with more, per slice in
//! `ProfiledCost::slices` — activation = the stash after forward plus the keys/values the
//! slice puts in the context, boundary = the slice's input plus those keys/values (a
//! checkpointed slice keeps the context), context_gradient_bytes = the key/value gradient
//! buffers. Times are nominal: 1 per microbatch for F, I and W, split by slice length.
template <class T>
ProfiledCost gpt_profiled_cost(const std::vector<GptStage<T>>& stages, int slices = 1,
                               int parts = 1) {
  detail::check_profile_counts(stages.size(), slices, parts, "gpt_profiled_cost");
  ProfiledCost cost;
  for (const GptStage<T>& stage : stages) {
    const GptConfig& c = stage.config();
    auto input_bytes = [&](int tokens) {
      const std::size_t values =
          static_cast<std::size_t>(c.microbatch_size) * static_cast<std::size_t>(tokens) *
          (stage.has_embedding() && !c.split_input ? 1u : static_cast<std::size_t>(c.hidden));
      return double(values * sizeof(T));
    };
    StageProfile whole{.forward = 1,
                       .backward_input = 1,
                       .backward_weight = 1,
                       .activation_bytes = double(stage.activation_bytes()),
                       .wgrad_bytes = double(stage.wgrad_bytes()),
                       .boundary_bytes = input_bytes(c.sequence)};
    if (parts > 1) whole.wgrad_part_bytes = detail::as_doubles(stage.weight_part_bytes(parts));
    cost.stages.push_back(whole);
    if (slices == 1) continue;
    std::vector<StageProfile> per_slice;
    for (int k = 0; k < slices; ++k) {
      const SliceBounds at = slice_bounds(c.sequence, k, slices);
      const SliceStashBytes b = stage.slice_bytes(k, slices);
      const double share = double(at.length) / c.sequence;
      StageProfile p{.forward = share,
                     .backward_input = share,
                     .backward_weight = share,
                     .activation_bytes = double(b.activation + b.key_values),
                     .wgrad_bytes = double(b.wgrad),
                     .boundary_bytes = input_bytes(at.length) + double(b.key_values),
                     .context_gradient_bytes = double(b.key_value_gradients)};
      if (parts > 1)
        p.wgrad_part_bytes = detail::as_doubles(stage.weight_part_bytes(parts, k, slices));
      per_slice.push_back(std::move(p));
    }
    cost.slices.push_back(std::move(per_slice));
  }
  return cost;
}

//! `cost` (gpt_profiled_cost of the stages of a config with `split_output`) with the figures of
//! the head's vocabulary `shards` (one per rank, GptVocabularyShards of `config`), so that it
//! prices vocabulary passes: nominal times (1 for a shard's VOCAB_F and VOCAB_B), the bytes a
//! shard's forward over a whole microbatch keeps (the simulator divides them evenly among
//! slices, as slice_bounds cuts the toy's sequence when it divides evenly), no transfer time.
template <class T>
ProfiledCost with_vocabulary_shards(ProfiledCost cost,
                                    const std::vector<GptVocabularyShard<T>>& shards,
                                    const GptConfig& config) {
  const auto tokens =
      static_cast<std::size_t>(config.microbatch_size) * static_cast<std::size_t>(config.sequence);
  for (const GptVocabularyShard<T>& shard : shards)
    cost.vocabulary.push_back(
        {.forward = 1, .backward = 1, .bytes = double(shard.predicted_stash_bytes(tokens))});
  return cost;
}

//! with_vocabulary_shards with the input embedding split too (`GptConfig::split_input`, one
//! GptInputShard per rank): nominal times for the shards' EMBED_F and EMBED_B (1 each), which
//! hold nothing, and no transfer time.
template <class T>
ProfiledCost with_vocabulary_shards(ProfiledCost cost,
                                    const std::vector<GptVocabularyShard<T>>& shards,
                                    const std::vector<GptInputShard<T>>& inputs,
                                    const GptConfig& config) {
  if (inputs.size() != shards.size())
    throw invalid_problem("with_vocabulary_shards: " + std::to_string(inputs.size()) +
                          " input shards for " + std::to_string(shards.size()) +
                          " head shards; give one of each per rank.");
  cost = with_vocabulary_shards(std::move(cost), shards, config);
  for (VocabularyProfile& v : cost.vocabulary)
    v.input_forward = v.input_backward = 1;
  cost.input_vocabulary = true;
  return cost;
}

//! ProfiledCost for the toy MLP's stages on whole microbatches, weight gradients cut into
//! `parts`: the analytic stash sizes, the input's bytes as the boundary. Times are nominal (1).
template <class T>
ProfiledCost mlp_profiled_cost(const std::vector<MlpStage<T>>& stages, int parts = 1) {
  detail::check_profile_counts(stages.size(), 1, parts, "mlp_profiled_cost");
  ProfiledCost cost;
  for (const MlpStage<T>& stage : stages) {
    const MlpConfig& c = stage.config();
    StageProfile p{.forward = 1,
                   .backward_input = 1,
                   .backward_weight = 1,
                   .activation_bytes = double(stage.activation_bytes()),
                   .wgrad_bytes = double(stage.wgrad_bytes()),
                   .boundary_bytes = double(static_cast<std::size_t>(c.microbatch_size) *
                                            static_cast<std::size_t>(c.hidden) * sizeof(T))};
    if (parts > 1) p.wgrad_part_bytes = detail::as_doubles(stage.weight_part_bytes(parts));
    cost.stages.push_back(std::move(p));
  }
  return cost;
}

}  // namespace pipesched::toy
