// Parallelism: how the GPUs of a cluster run one pipeline rank (tensor, sequence, data and
// ZeRO parallelism), how layers go to stages (LayerSplit), and what a training step adds to
// the pipeline's own actions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! How layers go to the stages of one model replica when Parallelism::layers does not list them.
enum class LayerSplit {
  Even,      //!< as even as possible, earlier stages taking the remainder (10 over 4: 3 3 2 2)
  Balanced,  //!< the last stage takes fewer layers for its LM head: as many as make its forward
             //!< closest to the others' ((layers + e) / stages − e, rounded, e = the head's
             //!< forward FLOPs in layers), the rest as Even
};

//! How the GPUs of a cluster run one pipeline rank, and what a training step adds to the
//! pipeline's own actions. The defaults are a plain pipeline: one GPU per pipeline rank, one
//! pipeline, even layer split, 16 bytes of static state per parameter, nothing after the
//! last backward.
//!
//! GPUs are numbered as Megatron-LM orders its groups, tensor innermost: pipeline rank r,
//! data-parallel replica j and tensor rank i run on GPU i + t·(j + d·r), and GPU g sits on
//! node g / DeviceSpec::ranks_per_node (so a tensor group never leaves its node, and a
//! pipeline rank's t·d GPUs are consecutive). ProcessGrid (exec/process_grid.hpp) gives each
//! process of such a job its coordinates and groups in this numbering.
struct Parallelism {
  //! Tensor-parallel degree t (Megatron-LM, Shoeybi et al. 2019): each layer's weights,
  //! FLOPs and most activations split over t GPUs of one node, two all-reduces per layer in
  //! the forward and two in the input-gradient backward. Must divide the heads, key/value
  //! heads, MLP width and the node size.
  int tensor = 1;
  //! Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2): the norms' and dropouts'
  //! activations split over the tensor group too; each all-reduce becomes a reduce-scatter
  //! and an all-gather (the same bytes on the link).
  bool sequence_parallel = false;
  //! Data-parallel degree d: replicas of the pipeline, each on its own share of the global
  //! batch, whose gradients are all-reduced at the end of the step.
  int data = 1;
  //! ZeRO stage (Rajbhandari et al. 2020): 0 none, 1 optimizer state sharded over the d
  //! replicas (Megatron-LM's distributed optimizer), 2 gradients sharded too.
  int zero = 0;
  //! Layers of each model stage (one replica's stages, in order); empty = as `split` says.
  //! Megatron-LM's --decoder-first/last-pipeline-num-layers and its layouts give the same
  //! freedom (io/layout.hpp reads and writes one). The first stage, which also holds the
  //! embedding, and the last, which also holds the LM head and the loss, may hold no layer;
  //! every other stage holds at least one.
  std::vector<int> layers;
  //! How layers go to stages when `layers` is empty.
  LayerSplit split = LayerSplit::Even;
  //! Vocabulary parallelism (Yeung et al., MLSys '25): the output layer (LM head, softmax and
  //! loss) split by vocabulary into one shard per pipeline rank, run in vocabulary passes
  //! (VOCAB_F, VOCAB_B; pass/vocabulary.hpp) instead of on the last stage. The input embedding
  //! stays on the first stage unless `input_vocabulary` is set too.
  bool vocabulary = false;
  //! With `vocabulary`: the input embedding's token table split the same way, one shard per
  //! pipeline rank, run in EMBED_F and EMBED_B passes (each shard's lookups reduced into the
  //! first stage's input, the first stage's input gradient broadcast to every shard) instead of
  //! on the first stage, as the paper splits both vocabulary layers.
  bool input_vocabulary = false;
  //! Model the whole training step: also the optimizer step after the gradient all-reduce
  //! (time) and the largest temporary buffer of an action (memory, see workspace_bytes).
  bool whole_step = false;

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, long long value, const std::string& want) {
      const std::string name = std::string("Parallelism.") + field;
      throw invalid_argument(pipesched::field(name, value) + " is out of range; " + want + ".",
                             name, std::to_string(value));
    };
    if (tensor < 1) bad("tensor", tensor, "use 1 (no tensor parallelism) or more");
    if (data < 1) bad("data", data, "use 1 (one pipeline) or more");
    if (zero < 0 || zero > 2)
      bad("zero", zero, "use 0 (none), 1 (optimizer state) or 2 (+ gradients)");
    if (input_vocabulary && !vocabulary)
      bad("input_vocabulary", 1,
          "the input embedding is split by vocabulary together with the output layer: set "
          "Parallelism.vocabulary too, or leave input_vocabulary 0");
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const bool end = layers.size() > 1 && (i == 0 || i + 1 == layers.size());
      if (layers[i] < (end ? 0 : 1))
        throw invalid_argument(
            pipesched::field("Parallelism.layers[" + std::to_string(i) + "]", layers[i]) +
                " is out of range; " +
                (end ? std::string("a stage holds 0 or more layers.")
                     : std::string("every stage but the first (which holds the embedding) and "
                                   "the last (the LM head and loss) needs at least one layer.")),
            "Parallelism.layers", std::to_string(layers[i]));
    }
  }
};

}  // namespace pipesched
