// TransformerCost: a cost model for decoder-only transformers (GPT and Llama shapes) on a
// given device. Durations come from FLOP counts per action and a GEMM efficiency curve,
// memory from activation sizes per layer (Korthikanti et al. 2022), transfer times from the
// message size and the link between the two ranks.
//
// Notation used in the formulas below (all per microbatch):
//   b  microbatch_size        s  sequence          h  hidden         a  heads
//   f  ffn hidden size        V  vocabulary        v  bytes_per_value
//   g  GEMM count of the MLP's first layer: 2 for a gated (SwiGLU) MLP, 1 otherwise
//   kv key/value heads / a    (1 for multi-head attention, < 1 with grouped-query attention)
//   q  output width of the QKV GEMM = h · (1 + 2·kv)   (3h for multi-head attention)
//   n  layers of the stage    a slice covers tokens [o, o + t) of the sequence
// Time in seconds, memory in bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/action.hpp"
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

  //! The MLP inner width actually used (ffn_hidden, or 4 · hidden when it is 0).
  int ffn() const noexcept { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
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
  //! 2021, "Efficient Large-Scale Language Model Training on GPU Clusters").
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

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, long long value, const std::string& want) {
      const std::string name = std::string("ModelShape.") + field;
      throw invalid_argument(pipesched::field(name, value) + " is out of range; " + want + ".",
                             name, std::to_string(value));
    };
    if (layers < 1) bad("layers", layers, "a model needs at least 1 layer");
    if (hidden < 1) bad("hidden", hidden, "the model width must be positive");
    if (heads < 1) bad("heads", heads, "a model needs at least 1 attention head");
    if (hidden % heads != 0)
      bad("hidden", hidden,
          "it must be a multiple of heads = " + std::to_string(heads) +
              " (hidden = heads × head size)");
    if (kv_heads < 0 || kv_heads > heads || (kv_heads > 0 && heads % kv_heads != 0))
      bad("kv_heads", kv_heads, "use 0 (= heads) or a divisor of heads = " + std::to_string(heads));
    if (ffn_hidden < 0) bad("ffn_hidden", ffn_hidden, "use 0 (= 4 × hidden) or a positive width");
    if (sequence < 1) bad("sequence", sequence, "a sequence needs at least 1 token");
    if (vocabulary < 1) bad("vocabulary", vocabulary, "the vocabulary must be positive");
    if (microbatch_size < 1)
      bad("microbatch_size", microbatch_size, "a microbatch needs at least 1 sequence");
    if (bytes_per_value != 1 && bytes_per_value != 2 && bytes_per_value != 4 &&
        bytes_per_value != 8)
      bad("bytes_per_value", bytes_per_value, "use 1, 2, 4 or 8 (2 for 16-bit training)");
  }
};

//! One accelerator and the links between accelerators, as a cost model sees them.
//!
//! GEMM efficiency: a GEMM of F FLOPs runs at peak_flops · efficiency(F), with
//!   efficiency(F) = max_efficiency · F / (F + half_flops),
//! so large GEMMs approach max_efficiency of the datasheet peak and a GEMM of half_flops
//! FLOPs reaches half of that. Its time, F / (peak · efficiency(F)) =
//! (F + half_flops) / (peak · max_efficiency), is the ideal time plus a fixed per-kernel
//! overhead: short sequence slices (small GEMMs) run further below peak.
struct DeviceSpec {
  std::string name;                //!< e.g. "h100"
  double peak_flops = 0;           //!< dense 16-bit tensor-core FLOP/s (datasheet, no sparsity)
  double memory_bandwidth = 0;     //!< device memory bandwidth, B/s
  double memory_bytes = 0;         //!< device memory capacity, bytes
  double link_bandwidth = 0;       //!< between two ranks of one node, B/s per direction
  double link_latency = 0;         //!< between two ranks of one node, s
  int ranks_per_node = 1;          //!< ranks sharing a node; node of a rank = rank / this
  double node_link_bandwidth = 0;  //!< between ranks on different nodes, B/s per direction
  double node_link_latency = 0;    //!< between ranks on different nodes, s
  //! Network ports of a node, shared by the ranks of the node that send to other nodes at
  //! once (a node's inter-node traffic splits its ports' bandwidth among its senders);
  //! 0 = one port per rank, as on DGX / HGX machines.
  int node_ports = 0;
  double max_efficiency = 0.75;  //!< fraction of peak_flops large GEMMs reach
  double half_flops = 2e9;       //!< GEMM size (FLOPs) reaching half of max_efficiency

  //! Fraction of peak_flops a GEMM of `flops` FLOPs achieves (see above).
  double efficiency(double flops) const noexcept {
    return flops > 0 ? max_efficiency * flops / (flops + half_flops) : 0.0;
  }
  //! Time of a GEMM (or fused attention kernel) of `flops` FLOPs; 0 for no work.
  double gemm_time(double flops) const noexcept {
    return flops > 0 ? (flops + half_flops) / (peak_flops * max_efficiency) : 0.0;
  }

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [this](const char* field, double value, const char* want) {
      const std::string key = "DeviceSpec." + std::string(field);
      throw invalid_argument(pipesched::field(key, std::to_string(value)) +
                                 (name.empty() ? std::string() : " (device '" + name + "')") +
                                 " is out of range; " + want + ".",
                             key, std::to_string(value));
    };
    if (!(peak_flops > 0)) bad("peak_flops", peak_flops, "the peak FLOP/s must be positive");
    if (!(memory_bandwidth > 0))
      bad("memory_bandwidth", memory_bandwidth, "the memory bandwidth (B/s) must be positive");
    if (!(memory_bytes > 0)) bad("memory_bytes", memory_bytes, "the capacity must be positive");
    if (!(link_bandwidth > 0))
      bad("link_bandwidth", link_bandwidth, "the intra-node bandwidth (B/s) must be positive");
    if (!(link_latency >= 0)) bad("link_latency", link_latency, "a latency must be >= 0");
    if (ranks_per_node < 1) bad("ranks_per_node", ranks_per_node, "a node holds at least 1 rank");
    if (!(node_link_bandwidth > 0))
      bad("node_link_bandwidth", node_link_bandwidth,
          "the inter-node bandwidth (B/s) must be positive");
    if (!(node_link_latency >= 0))
      bad("node_link_latency", node_link_latency, "a latency must be >= 0");
    if (node_ports < 0) bad("node_ports", node_ports, "use 0 (one per rank) or a positive count");
    if (!(max_efficiency > 0 && max_efficiency <= 1))
      bad("max_efficiency", max_efficiency, "use a fraction in (0, 1]");
    if (!(half_flops >= 0)) bad("half_flops", half_flops, "use 0 (no small-GEMM penalty) or more");
  }
};

//! How a weight gradient W cut into parts (CostContext::wgrad_parts) shares its work.
enum class WGradSplit {
  Even,     //!< each part an even share of the unit's W (time and memory)
  PerGemm,  //!< parts are runs of the stage's weight GEMMs in backward order (the LM head,
            //!< then each layer from the last: MLP out, MLP in, projection, QKV), GEMM g of
            //!< G in part ⌊g·parts/G⌋; with parts = G one GEMM each, as MEPipe cuts W
};

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
//! pipeline rank's t·d GPUs are consecutive).
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
  //! Megatron-LM's --decoder-first/last-pipeline-num-layers give the same freedom.
  std::vector<int> layers;
  //! How layers go to stages when `layers` is empty.
  LayerSplit split = LayerSplit::Even;
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
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (layers[i] < 1)
        throw invalid_argument(pipesched::field("Parallelism.layers[" + std::to_string(i) + "]",
                                                layers[i]) +
                                   " is out of range; every stage needs at least one layer.",
                               "Parallelism.layers", std::to_string(layers[i]));
  }
};

//! Where a slice sits in its sequence: tokens [offset, offset + length).
struct SliceSpan {
  int offset = 0;  //!< the slice's first token
  int length = 0;  //!< its token count
};

//! Cost model of a transformer on a device; satisfies `cost_model`.
//!
//! Layers go to stages as evenly as possible, earlier stages taking the remainder (10 layers
//! over 4 stages: 3, 3, 2, 2). Stage 0 also holds the token embedding (weights only: a
//! lookup has no FLOPs and its output is the first layer's input, counted there); the last
//! stage holds the final norm, the LM head and the loss.
//!
//! FLOPs of one slice (t tokens from offset o) through one layer, forward (a multiply-add
//! is 2 FLOPs; Narayanan et al. 2021, Sec. 5.1, for the GEMMs):
//!   GEMMs      2·b·t·h·(q + h) + 2·b·t·h·f·(g + 1)     (QKV, output projection, MLP)
//!   attention  2 · 2·b·h·Σ_{i=o}^{o+t−1} (i + 1)        (scores QKᵀ and scores × V; causal:
//!              token i attends to i + 1 keys, so a slice attends to its whole prefix and
//!              later slices cost more)
//! LM head (last stage): 2·b·t·h·V forward. Backward: I = the GEMMs' input gradients (the
//! GEMM FLOPs again) + attention backward (2 × its forward: four products, dQ, dK, dV and
//! the score gradient, against the forward's two); W = the GEMMs' weight gradients (the GEMM
//! FLOPs again); B = I + W; R = F. A W cut into parts (CostContext::wgrad_parts) takes an
//! even share per part.
//!
//! Duration: every GEMM (and the attention kernel) takes DeviceSpec::gemm_time of its FLOPs,
//! plus one pass of memory traffic, bytes / memory_bandwidth, standing in for the
//! elementwise kernels (norms, activation functions, dropout, residual adds) that touch each
//! stored tensor about once: F and R over the bytes a full F stores, I over the bytes it
//! frees, W over the bytes it frees, B over all of them (so B = I + W in time too).
//!
//! Activation bytes of one slice through one layer, after Korthikanti et al. 2022
//! ("Reducing Activation Recomputation in Large Transformer Models", Sec. 4.1), with each
//! stored tensor written out so other widths follow (dropout masks are 1 byte per value):
//!   attention  v·t·h·(3 + 2·kv) + t·h     QKV input, Q, K, V, projection input; dropout mask
//!   MLP        v·t·(h + g·f + f) + t·h    first GEMM input, activation-function input(s),
//!                                         second GEMM input; dropout mask
//!   norms      2·v·t·h                    the two norm inputs
//!   scores     (2·v + 1)·a·t·(o + t)      softmax output, dropout mask and output; only
//!                                         without flash_attention (the slice's queries
//!                                         against its o + t keys)
//! times b. For 16-bit, multi-head attention and f = 4h this is Korthikanti's
//! b·t·h·34 + 5·a·b·t·(o + t) (with t = s, o = 0: s·b·h·(34 + 5·a·s/h)). The last stage adds
//! b·t·(2·v·h + 4·V): the final norm's and LM head's inputs and the 32-bit logits the loss
//! keeps.
//!
//! Memory deltas of a unit (stage, microbatch, slice): F adds its activation bytes, or, when
//! checkpointed, only the boundary: the stage input b·t·h·v (on stage 0 the embedding
//! output, so R skips the lookup) plus, for every slice but the last, the keys and values of
//! its layers (n·b·t·2·h·kv·v): later slices of the same microbatch attend to them in their
//! recompute and backward, which run before this slice's recompute (backwards go in reverse
//! slice order); R adds the rest;
//! B frees all. I frees all but what W needs: a weight gradient dW = Xᵀ·dY needs the input X
//! and the output gradient dY of each weight GEMM, per token
//!   X: h (QKV) + h (projection) + h (MLP first GEMMs, shared input) + f (second GEMM)
//!   dY: q (QKV) + h (projection) + g·f (MLP first GEMMs) + h (second GEMM)
//! i.e. b·t·v·(3h + f + q + 2h + g·f) per layer (32·b·t·h bytes for the GPT shape in 16-bit,
//! the W memory of Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Table 1), plus
//! b·t·v·(h + V) for the LM head; W frees that (an even share per part).
//!
//! Transfers: F sends b·t·h·v bytes to the next stage's rank, B / I the same to the previous
//! stage's rank (SendF / SendB like their producers), taking latency + bytes / bandwidth on
//! the intra-node link, or on the inter-node link when the two ranks sit on different nodes.
//!
//! Parallelism (the `parallel` member; defaults: none of it). With tensor parallelism of
//! degree t every GEMM and the attention run 1/t of their FLOPs on each GPU (Shoeybi et al.
//! 2019: column- then row-parallel pairs, heads split), and the activations split as
//! Korthikanti et al. 2022, Sec. 4.2, count them: the Q, K, V, projection input, MLP
//! activation-function inputs and second GEMM input (and the attention scores) are split by
//! t; the norm inputs, the QKV and MLP GEMM inputs and the dropout masks are replicated
//! unless sequence parallelism splits them too (for the GPT shape in 16-bit:
//! s·b·h·(10 + 24/t) bytes per layer, s·b·h·34/t with sequence parallelism, as their Eq. 2
//! and Eq. 4). Weights, gradients and optimizer state split by t (the embedding and LM head
//! vocabulary-parallel). Each layer's forward (and recompute) runs two all-reduces of
//! b·t·h·v bytes over the tensor group, its input-gradient backward two more (with sequence
//! parallelism a reduce-scatter and an all-gather each, the same bytes); the embedding's
//! forward and the LM head's input-gradient backward one each. An all-reduce over n GPUs
//! takes NCCL's ring time 2(n − 1)/n · bytes / bandwidth + 2(n − 1) · latency on the
//! intra-node link, and blocks the GPU (it is in the action's duration: Megatron-LM runs
//! these collectives on the compute stream's critical path unless told to overlap them).
//! Messages between stages carry b·t·h·v / t bytes per GPU, each tensor rank sending its
//! share in parallel (Narayanan et al. 2021, Sec. 4.1's scatter/gather). The ranks of a
//! node that send to other nodes at once share its DeviceSpec::node_ports.
//!
//! Data parallelism of degree d: each pipeline rank's gradients (2 bytes per parameter of
//! its GPU) are all-reduced over the d replicas once its last action has ended (not
//! overlapped with its backwards: Megatron-LM without --overlap-grad-reduce; the replicas'
//! same ranks finish together, and ranks finishing early start early), with the ring time
//! on the link the replicas share: intra-node when the pipeline rank's t·d GPUs sit on one
//! node, else the inter-node link, the node's ports shared by its t rings. ZeRO-1 and -2
//! replace the all-reduce by a reduce-scatter of the gradients and an all-gather of the
//! weights, the same bytes (Rajbhandari et al. 2020, Sec. 7). Static bytes per parameter:
//! 16 (2 weights + 2 gradients + 12 Adam) without ZeRO, 4 + 12/d with ZeRO-1, 2 + 14/d with
//! ZeRO-2 (their Sec. 5). With whole_step the optimizer step follows: Adam reads and writes
//! 28 bytes per parameter it owns (32-bit master weight, momentum and variance read and
//! written, the 16-bit gradient read and weight written), memory-bound at
//! memory_bandwidth; ZeRO shards what each GPU owns by d. These end-of-step times are
//! step_tail: the simulator adds them after each rank's last action, so the makespan is the
//! step time.
//!
//! Workspace (with whole_step): the largest temporary an action holds beyond what the
//! schedule stores, counted once per rank on top of its static bytes: the gradients of one
//! layer's stored tensors while that layer's backward runs (one layer's activation bytes of
//! the unit), plus on the last stage the 32-bit gradient of the logits, b·t·4·V / t.
struct TransformerCost {
  //! Memory is in bytes (messages print amounts as 24GB, 3.19GiB).
  static constexpr MemoryUnit memory_unit = MemoryUnit::Bytes;
  ModelShape model;   //!< the transformer's shape
  DeviceSpec device;  //!< the device each rank runs on
  //! Token count of each slice, overriding the uniform cut (s / K each, the last slice
  //! taking the remainder). Empty = uniform. Needs one entry per slice of the problem,
  //! each positive, summing to model.sequence.
  std::vector<int> slice_lengths;
  //! Tensor, data and ZeRO parallelism, the layer split and whole-step costs (default: a
  //! plain pipeline, one GPU per rank).
  Parallelism parallel{};
  //! How the parts of a W share its work (default: evenly).
  WGradSplit wgrad_split = WGradSplit::Even;

  //! Weight GEMMs of `stage`: four per layer (QKV, projection, MLP in, MLP out; a gated
  //! MLP's gate and up projections count as one, they share their input), plus the LM head
  //! on the last stage. The parts that cut each of its W's into one GEMM each under
  //! WGradSplit::PerGemm.
  int weight_gemms(const CostContext& ctx, int stage) const {
    check(ctx);
    const bool last = model_stage(ctx, stage) == model_stage_count(ctx) - 1;
    return 4 * layers_of(ctx, stage) + (last ? 1 : 0);
  }

  //! Checks the model, the device and the parallelism; throws invalid_problem naming the
  //! field.
  void check() const {
    model.check();
    device.check();
    parallel.check();
    const int t = parallel.tensor;
    if (t == 1) return;
    auto divides = [&](const Message& what, int value) {
      if (value % t != 0)
        throw invalid_argument(field("Parallelism.tensor", t) + " does not divide " + what +
                                   " = " + std::to_string(value) +
                                   "; a tensor group splits them evenly (use a divisor of it).",
                               "Parallelism.tensor", std::to_string(t));
    };
    divides(field("ModelShape.heads"), model.heads);
    divides("the key/value heads (" + field("ModelShape.kv_heads") + ")", model.key_value_heads());
    divides("the MLP width (" + field("ModelShape.ffn_hidden") + ")", model.ffn());
    divides(field("DeviceSpec.ranks_per_node"), device.ranks_per_node);
  }

  //! Checks the model, the device and that they fit the problem in `ctx` (enough layers
  //! for its stages, enough tokens for its slices, slice_lengths matching).
  void check(const CostContext& ctx) const {
    check();
    const int S = model_stage_count(ctx);
    if (S < 1)
      throw invalid_problem("TransformerCost: the problem has " + std::to_string(S) +
                            " stages; it needs at least 1.");
    if (!parallel.layers.empty()) {
      if (static_cast<int>(parallel.layers.size()) != S)
        throw invalid_problem("TransformerCost: " + field("Parallelism.layers") + " has " +
                              std::to_string(parallel.layers.size()) +
                              " entries but the model is split over " + std::to_string(S) +
                              " stages; give one layer count per stage.");
      long long sum = 0;
      for (int n : parallel.layers)
        sum += n;
      if (sum != model.layers)
        throw invalid_problem("TransformerCost: " + field("Parallelism.layers") + " sum to " +
                              std::to_string(sum) + " layers but " +
                              field("ModelShape.layers", model.layers) +
                              "; they must cover the model exactly.");
    } else if (model.layers < S)
      throw invalid_problem("TransformerCost: " + field("ModelShape.layers", model.layers) +
                            " cannot be split over " + std::to_string(S) +
                            " stages; every stage needs at least one layer "
                            "(use at most " +
                            std::to_string(model.layers) + " stages).");
    const int K = ctx.problem.slices;
    if (K < 1)
      throw invalid_argument("TransformerCost: " + field("Problem.slices", K) +
                                 " is out of range; use 1 or more.",
                             "Problem.slices", std::to_string(K));
    if (slice_lengths.empty()) {
      if (K > model.sequence)
        throw invalid_argument("TransformerCost: " + field("Problem.slices", K) + " exceeds " +
                                   field("ModelShape.sequence", model.sequence) +
                                   "; every slice needs at least one token.",
                               "Problem.slices", std::to_string(K));
      return;
    }
    if (static_cast<int>(slice_lengths.size()) != K)
      throw invalid_problem("TransformerCost: slice_lengths has " +
                            std::to_string(slice_lengths.size()) +
                            " entries but the problem "
                            "has slices = " +
                            std::to_string(K) + "; give one length per slice.");
    long long sum = 0;
    for (std::size_t k = 0; k < slice_lengths.size(); ++k) {
      if (slice_lengths[k] < 1)
        throw invalid_problem("TransformerCost: slice_lengths[" + std::to_string(k) +
                              "] = " + std::to_string(slice_lengths[k]) +
                              " is out of range; every slice needs at least one token.");
      sum += slice_lengths[k];
    }
    if (sum != model.sequence)
      throw invalid_problem("TransformerCost: slice_lengths sum to " + std::to_string(sum) +
                            " tokens but " + field("ModelShape.sequence", model.sequence) +
                            "; they must cover the sequence "
                            "exactly.");
  }

  //! Stages of the problem (the placement's, else the problem's, else one per rank).
  static int stage_count(const CostContext& ctx) noexcept {
    if (ctx.placement.stages() > 0) return ctx.placement.stages();
    return ctx.problem.stages > 0 ? ctx.problem.stages : ctx.problem.ranks;
  }

  //! Stages of one model replica: stage_count, divided by Problem::replicas (Chimera's two
  //! replicas each split the whole model over half the stages).
  static int model_stage_count(const CostContext& ctx) noexcept {
    const int replicas = ctx.problem.replicas > 1 ? ctx.problem.replicas : 1;
    return stage_count(ctx) / replicas;
  }

  //! The model stage `stage` computes: its index within its replica.
  static int model_stage(const CostContext& ctx, int stage) noexcept {
    const int S = model_stage_count(ctx);
    return S > 0 ? stage % S : stage;
  }

  //! Layers held by `stage`: layers / stages, plus one for the first layers % stages stages
  //! (stages of one replica: a stage of replica 1 holds what the same model stage of replica 0
  //! holds).
  int layers_of(const CostContext& ctx, int stage) const {
    check_stage(stage_count(ctx), stage);
    const int S = model_stage_count(ctx);
    const int ms = model_stage(ctx, stage);
    if (!parallel.layers.empty()) return parallel.layers[static_cast<std::size_t>(ms)];
    const int L = model.layers;
    if (parallel.split == LayerSplit::Balanced && S > 1) {
      const double e = head_layers();
      const long ideal = std::lround((L + e) / S - e);
      const int last = static_cast<int>(std::clamp<long>(ideal, 1, L - (S - 1)));
      if (ms == S - 1) return last;
      const int rest = L - last, R = S - 1;
      return rest / R + (ms < rest % R ? 1 : 0);
    }
    return L / S + (ms < L % S ? 1 : 0);
  }

  //! The LM head's forward FLOPs in layers (over the whole sequence): 2·s·h·V over one
  //! layer's GEMM and attention FLOPs.
  double head_layers() const noexcept {
    const double s = model.sequence, h = model.hidden, f = model.ffn(), V = model.vocabulary;
    const double layer = 2 * s * h * model.qkv_width() + 2 * s * h * h +
                         2 * s * h * f * (model.gated_mlp ? 3 : 2) + 2 * h * s * (s + 1);
    return 2 * s * h * V / layer;
  }

  //! Tokens slice `slice` covers.
  SliceSpan slice_span(const CostContext& ctx, int slice) const {
    const int K = ctx.problem.slices;
    if (slice < 0 || slice >= K)
      throw invalid_schedule("TransformerCost: slice " + std::to_string(slice) +
                             " is out of range; the problem has slices 0 to " +
                             std::to_string(K - 1) + ".");
    if (!slice_lengths.empty()) {
      int offset = 0;
      for (int k = 0; k < slice; ++k)
        offset += slice_lengths[k];
      return {offset, slice_lengths[slice]};
    }
    const int base = model.sequence / K;
    return {slice * base, slice == K - 1 ? model.sequence - (K - 1) * base : base};
  }

  //! FLOPs of a compute action (one W part's share for W; F + B for an Overlap; 0 else).
  double flops(const CostContext& ctx, const Action& a) const {
    check(ctx);
    if (a.kind == OpKind::Overlap)
      return flops(ctx, a.forward_half()) + flops(ctx, a.backward_half());
    if (!is_compute(a.kind)) return 0.0;
    const Unit u = unit(ctx, a.stage, a.slice);
    const double gemm = u.n * u.layer_gemm_flops() + u.head;
    const double fwd = gemm + u.n * u.attention;
    const double input = gemm + u.n * 2 * u.attention;
    switch (a.kind) {
      case OpKind::F:
      case OpKind::R:
        return fwd;
      case OpKind::I:
        return input;
      case OpKind::W: {
        if (wgrad_split == WGradSplit::Even) return gemm / parts(ctx);
        double sum = 0;
        for_each_gemm_of_part(ctx, u, a.part, [&](int k) { sum += k < 0 ? u.head : u.gemms[k]; });
        return sum;
      }
      case OpKind::B:
        return input + gemm;
      default:
        return 0.0;
    }
  }

  //! Bytes a forward of (stage, slice) stores when not checkpointed.
  double activation_bytes(const CostContext& ctx, int stage, int slice) const {
    check(ctx);
    return unit(ctx, stage, slice).activation;
  }
  //! Bytes a checkpointed forward of (stage, slice) keeps (stage input + key/value context).
  double boundary_bytes(const CostContext& ctx, int stage, int slice) const {
    check(ctx);
    return unit(ctx, stage, slice).boundary;
  }
  //! Bytes kept from I until W of (stage, slice) (inputs and output gradients of the GEMMs).
  double wgrad_bytes(const CostContext& ctx, int stage, int slice) const {
    check(ctx);
    return unit(ctx, stage, slice).wgrad;
  }
  //! Bytes of one message between stages for `slice`: b·t·h·v.
  double message_bytes(const CostContext& ctx, int slice) const {
    check(ctx);
    return static_cast<double>(model.microbatch_size) * slice_span(ctx, slice).length *
           model.hidden * model.bytes_per_value;
  }

  //! Activation bytes of a whole microbatch (all its slices) through `stage`, not
  //! checkpointed: what one F of every slice adds. The memory unit for comparing schedules.
  double unit_activation_bytes(const CostContext& ctx, int stage) const {
    check(ctx);
    double sum = 0;
    for (int k = 0; k < ctx.problem.slices; ++k)
      sum += unit(ctx, stage, k).activation;
    return sum;
  }

  //! Weights of `stage` (the whole stage, all its tensor ranks together): its layers, plus
  //! the embedding on stage 0 and the LM head on the last stage (of its replica).
  double stage_parameters(const CostContext& ctx, int stage) const {
    check(ctx);
    const int S = model_stage_count(ctx);
    const int ms = model_stage(ctx, stage);
    double p = layers_of(ctx, stage) * model.layer_parameters();
    if (ms == 0) p += model.embedding_parameters();
    if (ms == S - 1) p += model.embedding_parameters();
    return p;
  }

  //! Parameters each GPU of `rank` holds: its stages' weights over the tensor group.
  double rank_parameters(const CostContext& ctx, int rank) const {
    check(ctx);
    if (rank < 0 || rank >= ctx.problem.ranks)
      throw invalid_problem("TransformerCost: rank " + std::to_string(rank) +
                            " is out of range; ranks run from 0 to " +
                            std::to_string(ctx.problem.ranks - 1) + ".");
    double p = 0;
    const int S = stage_count(ctx);
    for (int s = 0; s < S; ++s)
      if (rank_of(ctx, s) == rank) p += stage_parameters(ctx, s);
    return p / parallel.tensor;
  }

  //! Bytes a GPU of `rank` spends per parameter it holds on weights, gradients and Adam
  //! states. Mixed precision (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1): 16-bit weights (2)
  //! and gradients (2), 32-bit master weights, momentum and variance (12) — 16 bytes, also
  //! what pure 32-bit training comes to (4 + 4 + 8); ZeRO-1 shards the 12 over the d
  //! replicas, ZeRO-2 the gradients' 2 as well (their Sec. 5).
  double bytes_per_parameter() const noexcept {
    const double d = parallel.data;
    if (parallel.zero == 1) return 4 + 12 / d;
    if (parallel.zero == 2) return 2 + 14 / d;
    return 16;
  }

  //! Bytes each GPU of `rank` holds whatever the schedule: weights, gradients and optimizer
  //! state of its stages (rank_parameters × bytes_per_parameter), plus workspace_bytes with
  //! whole_step. Add the simulated peak activation bytes and compare with
  //! DeviceSpec::memory_bytes.
  double static_bytes(const CostContext& ctx, int rank) const {
    return rank_parameters(ctx, rank) * bytes_per_parameter() + workspace_bytes(ctx, rank);
  }

  //! The largest temporary an action of `rank` holds beyond what the schedule stores (see
  //! the class comment); 0 without whole_step.
  double workspace_bytes(const CostContext& ctx, int rank) const {
    check(ctx);
    if (!parallel.whole_step) return 0.0;
    double most = 0;
    const int S = stage_count(ctx);
    for (int s = 0; s < S; ++s) {
      if (rank_of(ctx, s) != rank) continue;
      for (int k = 0; k < ctx.problem.slices; ++k) {
        const Unit u = unit(ctx, s, k);
        most = std::max(most, u.layer_activation + u.logits_gradient);
      }
    }
    return most;
  }

  //! Seconds of the gradient all-reduce of `rank` over the data-parallel replicas (0 for
  //! one replica); see the class comment.
  double gradient_sync_seconds(const CostContext& ctx, int rank) const {
    const double bytes = 2 * rank_parameters(ctx, rank);
    const int d = parallel.data;
    if (d < 2) return 0.0;
    const int t = parallel.tensor, G = device.ranks_per_node;
    const long long first = static_cast<long long>(rank) * t * d;
    const long long last = first + static_cast<long long>(t) * d - 1;
    if (first / G == last / G)
      return ring_allreduce(bytes, d, device.link_bandwidth, device.link_latency);
    return ring_allreduce(bytes, d, device.node_link_bandwidth * port_share(std::min(t, G)),
                          device.node_link_latency);
  }

  //! Seconds of the optimizer step of `rank` (whole_step; else 0): 28 bytes of memory
  //! traffic per parameter the GPU owns (ZeRO: its 1/d share).
  double optimizer_seconds(const CostContext& ctx, int rank) const {
    if (!parallel.whole_step) return 0.0;
    const double owned = rank_parameters(ctx, rank) / (parallel.zero >= 1 ? parallel.data : 1);
    return 28 * owned / device.memory_bandwidth;
  }

  //! What the step spends on `rank` after its last action: gradient_sync_seconds +
  //! optimizer_seconds. The simulator adds it to the rank's end.
  double step_tail(const CostContext& ctx, int rank) const {
    return gradient_sync_seconds(ctx, rank) + optimizer_seconds(ctx, rank);
  }

  //! Seconds of an all-reduce of `bytes` over `n` GPUs on a link of `bandwidth` and
  //! `latency`, as NCCL's ring runs it: 2(n − 1)/n · bytes / bandwidth + 2(n − 1) · latency.
  static double ring_allreduce(double bytes, int n, double bandwidth, double latency) noexcept {
    if (n < 2 || bytes <= 0) return 0.0;
    return 2.0 * (n - 1) / n * bytes / bandwidth + 2.0 * (n - 1) * latency;
  }

  //! Seconds `a` occupies its rank (sends and receives: 0, their time is transfer_time).
  double duration(const CostContext& ctx, const Action& a) const {
    check(ctx);
    if (a.kind == OpKind::Overlap)
      return duration(ctx, a.forward_half()) + duration(ctx, a.backward_half());
    if (!is_compute(a.kind)) return 0.0;
    const Unit u = unit(ctx, a.stage, a.slice);
    const DeviceSpec& d = device;
    double gemm = 0;  // the weight GEMMs once (forward, input gradients or weight gradients)
    for (double g : u.gemms)
      gemm += d.gemm_time(g);
    gemm = u.n * gemm + d.gemm_time(u.head);
    const double bw = d.memory_bandwidth;
    const double fwd =
        gemm + u.n * d.gemm_time(u.attention) + u.activation / bw + u.forward_collectives;
    const double input = gemm + u.n * d.gemm_time(2 * u.attention) + (u.activation - u.wgrad) / bw +
                         u.backward_collectives;
    const double weight = gemm + u.wgrad / bw;
    switch (a.kind) {
      case OpKind::F:
      case OpKind::R:
        return fwd;
      case OpKind::I:
        return input;
      case OpKind::W: {
        if (wgrad_split == WGradSplit::Even) return weight / parts(ctx);
        double sum = 0;
        for_each_gemm_of_part(ctx, u, a.part, [&](int k) {
          sum += d.gemm_time(k < 0 ? u.head : u.gemms[k]) +
                 (k < 0 ? u.head_wgrad : u.gemm_wgrad[k]) / bw;
        });
        return sum;
      }
      case OpKind::B:
        return input + weight;
      default:
        return 0.0;
    }
  }

  //! Bytes `a` adds (> 0) or frees (< 0); see the class comment.
  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    check(ctx);
    if (!is_compute(a.kind) || a.kind == OpKind::Overlap) return 0.0;
    const Unit u = unit(ctx, a.stage, a.slice);
    switch (a.kind) {
      case OpKind::F:
        return checkpointed ? u.boundary : u.activation;
      case OpKind::R:
        return u.activation - u.boundary;
      case OpKind::B:
        return -u.activation;
      case OpKind::I:
        return -(u.activation - u.wgrad);
      case OpKind::W: {
        if (wgrad_split == WGradSplit::Even) return -u.wgrad / parts(ctx);
        double sum = 0;
        for_each_gemm_of_part(ctx, u, a.part,
                              [&](int k) { sum += k < 0 ? u.head_wgrad : u.gemm_wgrad[k]; });
        return -sum;
      }
      default:
        return 0.0;
    }
  }

  //! Seconds from the end of producer `a` (F / SendF forward, B / I / SendB backward) until
  //! its output is usable on the neighbouring stage's rank; 0 when that stage is on the same
  //! rank or does not exist, and for every other kind.
  double transfer_time(const CostContext& ctx, const Action& a) const {
    check(ctx);
    int to = 0;
    if (a.kind == OpKind::F || a.kind == OpKind::SendF)
      to = a.stage + 1;
    else if (is_input_backward(a.kind) || a.kind == OpKind::SendB)
      to = a.stage - 1;
    else
      return 0.0;
    const int S = stage_count(ctx);
    check_stage(S, a.stage);
    if (to < 0 || to >= S) return 0.0;
    if (model_stage(ctx, to) != model_stage(ctx, a.stage) + (to - a.stage))
      return 0.0;  // across a replica boundary: no neighbour there
    const int from_rank = rank_of(ctx, a.stage), to_rank = rank_of(ctx, to);
    if (from_rank == to_rank) return 0.0;
    // Each tensor rank sends its 1/t share over its own link.
    const double bytes = message_bytes(ctx, a.slice) / parallel.tensor;
    if (node_of(from_rank) == node_of(to_rank))
      return device.link_latency + bytes / device.link_bandwidth;
    const int senders = std::min(parallel.tensor * parallel.data, device.ranks_per_node);
    return device.node_link_latency + bytes / (device.node_link_bandwidth * port_share(senders));
  }

  //! The node of pipeline rank `rank`'s first GPU (GPU rank · t · d; see Parallelism).
  int node_of(int rank) const noexcept {
    const long long gpu = static_cast<long long>(rank) * parallel.tensor * parallel.data;
    return static_cast<int>(gpu / device.ranks_per_node);
  }

 private:
  // Everything about one (stage, slice) unit of a microbatch.
  struct Unit {
    double n = 0;                    // layers on the stage
    double gemms[4] = {};            // per layer, forward FLOPs of QKV, projection, MLP in, MLP out
    double attention = 0;            // per layer, forward FLOPs of scores and values
    double head = 0;                 // LM head forward FLOPs (last stage only)
    double activation = 0;           // bytes a full forward stores
    double boundary = 0;             // bytes a checkpointed forward keeps
    double wgrad = 0;                // bytes kept from I until W
    double layer_activation = 0;     // bytes one layer's forward stores (workspace)
    double logits_gradient = 0;      // 32-bit logits gradient of the last stage (workspace)
    double forward_collectives = 0;  // seconds of tensor-parallel all-reduces in F and R
    double backward_collectives = 0;  // seconds of them in I (and B)
    double gemm_wgrad[4] = {};        // per layer, bytes W of each GEMM frees (sum: wgrad / n)
    double head_wgrad = 0;            // bytes W of the LM head frees (last stage)
    double layer_gemm_flops() const { return gemms[0] + gemms[1] + gemms[2] + gemms[3]; }
  };

  static void check_stage(int stages, int stage) {
    if (stage < 0 || stage >= stages)
      throw invalid_schedule("TransformerCost: stage " + std::to_string(stage) +
                             " is out of range; the problem has stages 0 to " +
                             std::to_string(stages - 1) + ".");
  }

  static int rank_of(const CostContext& ctx, int stage) {
    return ctx.placement.stages() > 0 ? ctx.placement.rank_of(stage) : stage % ctx.problem.ranks;
  }

  static double parts(const CostContext& ctx) noexcept {
    return ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1;
  }

  // Calls `f(k)` for each weight GEMM in W part `part` under WGradSplit::PerGemm: k = 0..3
  // for a layer's QKV, projection, MLP in, MLP out, -1 for the LM head (see WGradSplit).
  template <class F>
  void for_each_gemm_of_part(const CostContext& ctx, const Unit& u, int part, F&& f) const {
    const long long P = static_cast<long long>(parts(ctx));
    const bool head = u.head > 0;
    const long long G = 4 * static_cast<long long>(u.n) + (head ? 1 : 0);
    if (G == 0 || part < 0 || part >= P) return;
    // GEMM g is in part floor(g·P/G): part j holds g in [ceil(j·G/P), ceil((j+1)·G/P)).
    const long long lo = (part * G + P - 1) / P, hi = ((part + 1) * G + P - 1) / P;
    for (long long g = lo; g < hi; ++g) {
      const long long i = head ? g - 1 : g;  // position among the layers' GEMMs
      f(i < 0 ? -1 : static_cast<int>(3 - i % 4));
    }
  }

  // The share of one port's bandwidth each of `senders` ranks of a node gets when they all
  // send to other nodes at once.
  double port_share(int senders) const noexcept {
    if (device.node_ports == 0 || senders <= device.node_ports) return 1.0;
    return static_cast<double>(device.node_ports) / senders;
  }

  // Formulas of the class comment; `check(ctx)` has run.
  Unit unit(const CostContext& ctx, int stage, int slice) const {
    const int S = model_stage_count(ctx);
    const SliceSpan span = slice_span(ctx, slice);
    const bool last = model_stage(ctx, stage) == S - 1;
    const double b = model.microbatch_size, t = span.length, o = span.offset;
    const double h = model.hidden, f = model.ffn(), a = model.heads, V = model.vocabulary;
    const double v = model.bytes_per_value, q = model.qkv_width();
    const double kv = static_cast<double>(model.key_value_heads()) / model.heads;
    const double g = model.gated_mlp ? 2 : 1;
    const double bt = b * t;

    // Tensor parallelism: split tensors by t, replicated ones by t only with sequence
    // parallelism (see the class comment).
    const double tp = parallel.tensor;
    const double rep = parallel.sequence_parallel ? 1 / tp : 1.0;

    Unit u;
    u.n = layers_of(ctx, stage);
    u.gemms[0] = 2 * bt * h * q / tp;
    u.gemms[1] = 2 * bt * h * h / tp;
    u.gemms[2] = 2 * bt * h * f * g / tp;
    u.gemms[3] = 2 * bt * f * h / tp;
    // Σ_{i=o}^{o+t−1} (i + 1) = t·o + t·(t + 1)/2
    u.attention = 2 * 2 * b * h * (t * o + t * (t + 1) / 2) / tp;
    u.head = last ? 2 * bt * h * V / tp : 0.0;

    // Replicated: the QKV and MLP GEMM inputs, the two dropout masks, the two norm inputs;
    // split: Q, K, V, the projection input, the activation-function input(s), the second
    // MLP GEMM input.
    const double replicated = v * h + h + v * h + h + 2 * v * h;
    const double split = v * h * (1 + 2 * kv) + v * h + v * (g * f + f);
    double layer = bt * (replicated * rep + split / tp);
    if (!model.flash_attention) layer += (2 * v + 1) * a * b * t * (o + t) / tp;
    u.layer_activation = layer;
    u.activation = u.n * layer + (last ? bt * (2 * v * h * rep + 4 * V / tp) : 0.0);
    u.logits_gradient = last ? bt * 4 * V / tp : 0.0;

    const bool context = slice < ctx.problem.slices - 1;
    u.boundary = bt * h * v * rep + (context ? u.n * bt * 2 * h * kv * v / tp : 0.0);
    u.boundary = std::min(u.boundary, u.activation);

    // W keeps each weight GEMM's input X and output gradient dY: X of QKV and MLP-in and dY
    // of the projection and MLP-out are full width (replicated), the rest split.
    const double layer_w = bt * v * ((h + h + h + h) * rep + (h + f + q + g * f) / tp);
    u.wgrad = u.n * layer_w + (last ? bt * v * (h * rep + V / tp) : 0.0);
    // Per GEMM, X + dY: QKV h (rep) + q, projection h + h (rep), MLP in h (rep) + g·f, MLP
    // out f + h (rep); scaled with the total where it is capped at the activations.
    const double scale = u.wgrad > 0 ? std::min(u.wgrad, u.activation) / u.wgrad : 0.0;
    u.gemm_wgrad[0] = scale * bt * v * (h * rep + q / tp);
    u.gemm_wgrad[1] = scale * bt * v * (h / tp + h * rep);
    u.gemm_wgrad[2] = scale * bt * v * (h * rep + g * f / tp);
    u.gemm_wgrad[3] = scale * bt * v * (f / tp + h * rep);
    u.head_wgrad = last ? scale * bt * v * (h * rep + V / tp) : 0.0;
    u.wgrad = std::min(u.wgrad, u.activation);

    if (parallel.tensor > 1) {
      const double bytes = bt * h * v;  // one all-reduce's message (the full activation)
      const double one =
          ring_allreduce(bytes, parallel.tensor, device.link_bandwidth, device.link_latency);
      const bool first = model_stage(ctx, stage) == 0;
      u.forward_collectives = (2 * u.n + (first ? 1 : 0)) * one;
      u.backward_collectives = (2 * u.n + (last ? 1 : 0)) * one;
    }
    return u;
  }
};

static_assert(cost_model<TransformerCost>);

}  // namespace pipesched
