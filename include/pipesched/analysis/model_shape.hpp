// ModelShape: the shape of a decoder-only transformer (GPT and Llama shapes) and of the
// microbatches it trains on, its parameter and FLOP counts; SliceSpan: the tokens of one
// sequence slice. What TransformerCost and the tuner read as "the model".
#pragma once

#include <algorithm>
#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! The shape of a decoder-only transformer and of the microbatches it trains on.
struct ModelShape {
  int layers = 0;               //!< transformer layers (blocks)
  int hidden = 0;               //!< model width h
  int heads = 0;                //!< attention (query) heads a; must divide hidden
  int kv_heads = 0;             //!< key/value heads for grouped-query attention; 0 = heads
  int ffn_hidden = 0;           //!< MLP inner width f; 0 = 4 · hidden
  bool gated_mlp = false;       //!< SwiGLU: three MLP matrices (gate, up, down) instead of two
  int sequence = 0;             //!< tokens per sequence s
  int vocabulary = 0;           //!< vocabulary size V
  int microbatch_size = 1;      //!< sequences per microbatch b
  int bytes_per_value = 2;      //!< width of stored activations: 2 for 16-bit, 4 for 32-bit
  bool flash_attention = true;  //!< fused attention: no s² score / softmax activations kept
  //! Dropout in training (GPT-2/GPT-3 style): its masks are stored for the backward. false for
  //! models trained without dropout (Llama, Mistral, Qwen): no masks are kept.
  bool dropout = true;
  //! The LM head shares the token embedding's weights (GPT-2, some Qwen sizes). A pipeline
  //! still keeps a copy on the first and on the last stage; one stage keeps one.
  bool tied_embeddings = false;

  //! Largest layers, hidden, ffn_hidden, sequence, vocabulary and microbatch_size check()
  //! accepts: far beyond any model trained (126 layers, width 25,600, MLP 73,728, a
  //! vocabulary of 256,000), small enough that every size derived from them (an MLP of
  //! 4 · hidden, a layer's weights, a microbatch's activation bytes, a step's FLOPs) is
  //! exact in 64 bits or finite in a double, and that loops over layers or tokens end soon.
  static constexpr int max_layers = 1 << 14;
  static constexpr int max_hidden = 1 << 20;           //!< see max_layers
  static constexpr int max_ffn_hidden = 1 << 22;       //!< see max_layers
  static constexpr int max_sequence = 1 << 24;         //!< see max_layers
  static constexpr int max_vocabulary = 1 << 24;       //!< see max_layers
  static constexpr int max_microbatch_size = 1 << 16;  //!< see max_layers

  //! The MLP inner width actually used (ffn_hidden, or 4 · hidden when it is 0), computed in
  //! 64 bits (4 · hidden overflows an int from hidden = 536,870,912; check() bounds both).
  long long ffn() const noexcept {
    return ffn_hidden > 0 ? ffn_hidden : 4 * static_cast<long long>(hidden);
  }
  //! Key/value heads actually used (kv_heads, or heads when it is 0).
  int key_value_heads() const noexcept { return kv_heads > 0 ? kv_heads : heads; }
  //! Output width of the fused QKV projection: h queries plus 2 · h · kv/a keys and values.
  double qkv_width() const noexcept {
    return hidden + 2.0 * hidden * key_value_heads() / std::max(heads, 1);
  }

  //! Weights of one layer: the QKV (h × q), output (h × h) and MLP (h × f, g + 1 times)
  //! matrices. Biases and norm scales are left out (under 0.1 % of a layer at these widths).
  double layer_parameters() const noexcept {
    const double h = hidden, f = ffn();
    return h * qkv_width() + h * h + h * f * (gated_mlp ? 3 : 2);
  }
  //! Weights of the token embedding, and separately of the LM head: V × h each.
  double embedding_parameters() const noexcept { return static_cast<double>(vocabulary) * hidden; }
  //! All weights: layers plus embedding plus LM head. Tied embeddings are counted twice, as
  //! a pipeline keeps one copy on the first and one on the last stage (Narayanan et al.
  //! 2021, "Efficient Large-Scale Language Model Training on GPU Clusters");
  //! TransformerCost::stage_parameters counts them once where one stage holds the model.
  double parameters() const noexcept {
    return layers * layer_parameters() + 2 * embedding_parameters();
  }

  //! FLOPs of training on one sequence, forward and backward, no recompute: 3 × the forward
  //! FLOPs of every layer and the LM head over the whole sequence (the formulas of
  //! TransformerCost with b = 1, t = s, o = 0). The numerator of model FLOPs utilisation.
  double training_flops_per_sequence() const noexcept {
    const double s = sequence, h = hidden, f = ffn(), V = vocabulary;
    const double gemms =
        2 * s * h * qkv_width() + 2 * s * h * h + 2 * s * h * f * (gated_mlp ? 3 : 2);
    const double attention = 2 * 2 * h * (s * (s + 1) / 2);
    return 3 * (layers * (gemms + attention) + 2 * s * h * V);
  }

  //! FLOPs of training on one sequence in the usual MFU convention (Chowdhery et al. 2022,
  //! "PaLM", App. B; Narayanan et al. 2021, Sec. 5.1): attention counted in full, as if not
  //! causal, 6 · N · s + 12 · L · h · s² with N the weights of the layers and the LM head
  //! (the embedding lookup has no FLOPs), i.e. training_flops_per_sequence with each token
  //! attending to all s keys.
  double usual_training_flops_per_sequence() const noexcept {
    const double s = sequence, h = hidden, V = vocabulary;
    return 6 * (layers * layer_parameters() + V * h) * s + 12.0 * layers * h * s * s;
  }

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, long long value, const std::string& want) {
      const std::string name = std::string("ModelShape.") + field;
      throw invalid_argument(pipesched::field(name, value) + " is out of range; " + want + ".",
                             name, std::to_string(value));
    };
    auto within = [&](const char* field, int value, int lo, int hi, const char* what,
                      const char* largest) {
      if (value < lo || value > hi)
        bad(field, value,
            std::string(what) + " is from " + std::to_string(lo) + " to " + std::to_string(hi) +
                " (" + largest + ")");
    };
    within("layers", layers, 1, max_layers, "a model's layer count",
           "the deepest models trained have under 200 layers");
    within("hidden", hidden, 1, max_hidden, "the model width",
           "the widest models trained are under 32,768 wide");
    if (heads < 1) bad("heads", heads, "a model needs at least 1 attention head");
    if (hidden % heads != 0)
      bad("hidden", hidden,
          "it must be a multiple of heads = " + std::to_string(heads) +
              " (hidden = heads × head size)");
    if (kv_heads < 0 || kv_heads > heads || (kv_heads > 0 && heads % kv_heads != 0))
      bad("kv_heads", kv_heads, "use 0 (= heads) or a divisor of heads = " + std::to_string(heads));
    if (ffn_hidden < 0 || ffn_hidden > max_ffn_hidden)
      bad("ffn_hidden", ffn_hidden,
          "use 0 (= 4 × hidden) or a width from 1 to " + std::to_string(max_ffn_hidden));
    within("sequence", sequence, 1, max_sequence, "a sequence's token count",
           "the longest contexts trained are about a million tokens");
    within("vocabulary", vocabulary, 1, max_vocabulary, "the vocabulary size",
           "the largest vocabularies are about 256,000 tokens");
    within("microbatch_size", microbatch_size, 1, max_microbatch_size,
           "a microbatch's sequence count", "a microbatch holds at most a few hundred sequences");
    if (bytes_per_value != 1 && bytes_per_value != 2 && bytes_per_value != 4 &&
        bytes_per_value != 8)
      bad("bytes_per_value", bytes_per_value, "use 1, 2, 4 or 8 (2 for 16-bit training)");
  }
};

//! Where a slice sits in its sequence: tokens [offset, offset + length).
struct SliceSpan {
  int offset = 0;  //!< the slice's first token
  int length = 0;  //!< its token count
};

}  // namespace pipesched
