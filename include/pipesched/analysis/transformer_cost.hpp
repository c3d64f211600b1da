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

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, long long value, const std::string& want) {
      throw invalid_problem(std::string("ModelShape.") + field + " = " + std::to_string(value) +
                            " is out of range; " + want + ".");
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
  double max_efficiency = 0.75;    //!< fraction of peak_flops large GEMMs reach
  double half_flops = 2e9;         //!< GEMM size (FLOPs) reaching half of max_efficiency

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
      throw invalid_problem("DeviceSpec." + std::string(field) + " = " + std::to_string(value) +
                            (name.empty() ? std::string() : " (device '" + name + "')") +
                            " is out of range; " + want + ".");
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
    if (!(max_efficiency > 0 && max_efficiency <= 1))
      bad("max_efficiency", max_efficiency, "use a fraction in (0, 1]");
    if (!(half_flops >= 0)) bad("half_flops", half_flops, "use 0 (no small-GEMM penalty) or more");
  }
};

//! Where a slice sits in its sequence: tokens [offset, offset + length).
struct SliceSpan {
  int offset = 0;
  int length = 0;
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
struct TransformerCost {
  ModelShape model;
  DeviceSpec device;
  //! Token count of each slice, overriding the uniform cut (s / K each, the last slice
  //! taking the remainder). Empty = uniform. Needs one entry per slice of the problem,
  //! each positive, summing to model.sequence.
  std::vector<int> slice_lengths;

  //! Checks the model and the device; throws invalid_problem naming the field.
  void check() const {
    model.check();
    device.check();
  }

  //! Checks the model, the device and that they fit the problem in `ctx` (enough layers
  //! for its stages, enough tokens for its slices, slice_lengths matching).
  void check(const CostContext& ctx) const {
    check();
    const int S = model_stage_count(ctx);
    if (S < 1)
      throw invalid_problem("TransformerCost: the problem has " + std::to_string(S) +
                            " stages; it needs at least 1.");
    if (model.layers < S)
      throw invalid_problem("TransformerCost: ModelShape.layers = " + std::to_string(model.layers) +
                            " cannot be split over " + std::to_string(S) +
                            " stages; every stage needs at least one layer "
                            "(use at most " +
                            std::to_string(model.layers) + " stages).");
    const int K = ctx.problem.slices;
    if (K < 1)
      throw invalid_problem("TransformerCost: Problem.slices = " + std::to_string(K) +
                            " is out of range; use 1 or more.");
    if (slice_lengths.empty()) {
      if (K > model.sequence)
        throw invalid_problem("TransformerCost: Problem.slices = " + std::to_string(K) +
                              " exceeds ModelShape.sequence = " + std::to_string(model.sequence) +
                              "; every slice needs at least one token.");
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
                            " tokens but ModelShape.sequence = " + std::to_string(model.sequence) +
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
    return model.layers / S + (ms < model.layers % S ? 1 : 0);
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
      case OpKind::W:
        return gemm / parts(ctx);
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

  //! Weights of `stage`: its layers, plus the embedding on stage 0 and the LM head on the
  //! last stage (of its replica).
  double stage_parameters(const CostContext& ctx, int stage) const {
    check(ctx);
    const int S = model_stage_count(ctx);
    const int ms = model_stage(ctx, stage);
    double p = layers_of(ctx, stage) * model.layer_parameters();
    if (ms == 0) p += model.embedding_parameters();
    if (ms == S - 1) p += model.embedding_parameters();
    return p;
  }

  //! Bytes `rank` holds whatever the schedule: weights, gradients and Adam states of its
  //! stages, 16 bytes per parameter. Mixed precision (Rajbhandari et al. 2020, "ZeRO",
  //! Sec. 3.1): 16-bit weights (2) and gradients (2), 32-bit master weights, momentum and
  //! variance (12); pure 32-bit training also comes to 4 + 4 + 8 = 16. Add the simulated
  //! peak activation bytes and compare with DeviceSpec::memory_bytes.
  double static_bytes(const CostContext& ctx, int rank) const {
    check(ctx);
    if (rank < 0 || rank >= ctx.problem.ranks)
      throw invalid_problem("TransformerCost: rank " + std::to_string(rank) +
                            " is out of range; ranks run from 0 to " +
                            std::to_string(ctx.problem.ranks - 1) + ".");
    double p = 0;
    const int S = stage_count(ctx);
    for (int s = 0; s < S; ++s)
      if (rank_of(ctx, s) == rank) p += stage_parameters(ctx, s);
    return 16.0 * p;
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
    const double fwd = gemm + u.n * d.gemm_time(u.attention) + u.activation / bw;
    const double input = gemm + u.n * d.gemm_time(2 * u.attention) + (u.activation - u.wgrad) / bw;
    const double weight = gemm + u.wgrad / bw;
    switch (a.kind) {
      case OpKind::F:
      case OpKind::R:
        return fwd;
      case OpKind::I:
        return input;
      case OpKind::W:
        return weight / parts(ctx);
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
      case OpKind::W:
        return -u.wgrad / parts(ctx);
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
    const double bytes = message_bytes(ctx, a.slice);
    const int rpn = device.ranks_per_node;
    if (from_rank / rpn == to_rank / rpn)
      return device.link_latency + bytes / device.link_bandwidth;
    return device.node_link_latency + bytes / device.node_link_bandwidth;
  }

 private:
  // Everything about one (stage, slice) unit of a microbatch.
  struct Unit {
    double n = 0;           // layers on the stage
    double gemms[4] = {};   // per layer, forward FLOPs of QKV, projection, MLP in, MLP out
    double attention = 0;   // per layer, forward FLOPs of scores and values
    double head = 0;        // LM head forward FLOPs (last stage only)
    double activation = 0;  // bytes a full forward stores
    double boundary = 0;    // bytes a checkpointed forward keeps
    double wgrad = 0;       // bytes kept from I until W
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

    Unit u;
    u.n = layers_of(ctx, stage);
    u.gemms[0] = 2 * bt * h * q;
    u.gemms[1] = 2 * bt * h * h;
    u.gemms[2] = 2 * bt * h * f * g;
    u.gemms[3] = 2 * bt * f * h;
    // Σ_{i=o}^{o+t−1} (i + 1) = t·o + t·(t + 1)/2
    u.attention = 2 * 2 * b * h * (t * o + t * (t + 1) / 2);
    u.head = last ? 2 * bt * h * V : 0.0;

    double layer = v * h * (3 + 2 * kv) + h   // attention block
                   + v * (h + g * f + f) + h  // MLP block
                   + 2 * v * h;               // norms
    layer *= bt;
    if (!model.flash_attention) layer += (2 * v + 1) * a * b * t * (o + t);
    u.activation = u.n * layer + (last ? bt * (2 * v * h + 4 * V) : 0.0);

    const bool context = slice < ctx.problem.slices - 1;
    u.boundary = bt * h * v + (context ? u.n * bt * 2 * h * kv * v : 0.0);
    u.boundary = std::min(u.boundary, u.activation);

    const double layer_w = bt * v * ((3 * h + f) + (q + 2 * h + g * f));
    u.wgrad = u.n * layer_w + (last ? bt * v * (h + V) : 0.0);
    u.wgrad = std::min(u.wgrad, u.activation);
    return u;
  }
};

static_assert(cost_model<TransformerCost>);

}  // namespace pipesched
