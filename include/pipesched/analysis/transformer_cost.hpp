// TransformerCost: a cost model for decoder-only transformers (GPT and Llama shapes) on a
// given device. Durations come from each action's GEMM shapes and attention FLOPs on the device,
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
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/detail/transformer_checks.hpp"
#include "pipesched/analysis/detail/transformer_formulas.hpp"
#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/layer_profile.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/analysis/parallelism.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"

namespace pipesched {

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
//! Duration: every weight GEMM takes DeviceSpec::gemm_time of its shape (tile and wave
//! quantisation; DeviceSpec's class comment): the forward GEMM of a weight of d input and w
//! output features (per GPU) is M × N × K = b·t × w × d, its input gradient b·t × d × w, its
//! weight gradient d × w × b·t; the attention kernel takes DeviceSpec::attention_time of its
//! FLOPs (twice them backward), whose queries attend to o + (t + 1)/2 keys on average, in
//! b · a/t_p · ⌈t/128⌉ query tiles (t_p the tensor degree). An action adds
//! one pass of memory traffic, bytes / memory_bandwidth, standing in for the
//! elementwise kernels (norms, activation functions, dropout, residual adds) that touch each
//! stored tensor about once: F and R over the bytes a full F stores, I over the bytes it
//! frees, W over the bytes it frees, B over all of them (so B = I + W in time too). Every
//! compute action adds DeviceSpec::action_overhead once (a W part, an Overlap each once).
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
//! times b. Without dropout (ModelShape::dropout false) no mask is kept: the two t·h mask
//! terms go, and the scores keep only the softmax output, v·a·t·(o + t). With dropout, for
//! 16-bit, multi-head attention and f = 4h this is Korthikanti's
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
//! stage's rank (SendF / SendB like their producers), on the path between the two ranks'
//! first GPUs (DeviceSpec::path, DeviceSpec::message_seconds): latency + bytes / bandwidth
//! on a direct link (NVLink, or PCIe peer-to-peer through one switch), or on the inter-node
//! link when the two ranks sit on different nodes. Without peer-to-peer between the two
//! GPUs (DeviceSpec::peer_to_peer, gpus_per_switch) a message goes through host memory as
//! NCCL's SHM transport sends it (the transport NCCL falls back to without P2P, or with
//! NCCL_P2P_DISABLE=1): a device-to-host and a host-to-device copy, pipelined in slots of
//! NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB, 2 · latency + (bytes + min(bytes, 512 KiB)) /
//! bandwidth, the bandwidth shared on a PCIe switch's uplink, a socket's host memory and,
//! between sockets, the CPU interconnect by the rank's t · d GPUs sending at once;
//! intra-node all-reduces (tensor, data parallel) run each ring step that way
//! (DeviceSpec::allreduce_seconds). docs/cost-model.md, "Links", gives the sources.
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
//! node, else the inter-node link, the node's ports shared by its t rings. A schedule with
//! the reduction as actions (`add_gradient_reduction`) times it per stage instead:
//! reduce_seconds gives each stage's share of those bytes (its parameters) the same ring time
//! on the same link, started at the stage's REDUCE_GRAD, so it overlaps the rest of the
//! rank's list (Megatron-LM's --overlap-grad-reduce, PyTorch DDP's bucketed all-reduce during
//! the backward), and step_tail then leaves the all-reduce out. ZeRO-1 and -2
//! replace the all-reduce by a reduce-scatter of the gradients and an all-gather of the
//! weights, the same bytes (Rajbhandari et al. 2020, Sec. 7). Static bytes per parameter:
//! 16 (2 weights + 2 gradients + 12 Adam) without ZeRO, 4 + 12/d with ZeRO-1, 2 + 14/d with
//! ZeRO-2 (their Sec. 5). With whole_step the optimizer step follows: Adam reads and writes
//! 28 bytes per parameter it owns (32-bit master weight, momentum and variance read and
//! written, the 16-bit gradient read and weight written), memory-bound at
//! memory_bandwidth; ZeRO shards what each GPU owns by d. These end-of-step times are
//! step_tail: the simulator adds them after each rank's last action (the all-reduce only
//! when the schedule holds no REDUCE_GRAD, CostContext::scheduled_reduction), so the makespan
//! is the step time.
//!
//! Vocabulary parallelism (Parallelism::vocabulary; Yeung et al., MLSys '25): the last stage
//! holds no LM head or loss (neither their FLOPs, nor the logits, nor their weights); each of
//! the p pipeline ranks holds a shard of V/p vocabulary entries of the LM head (1/t of it per
//! GPU) and runs it in vocabulary passes, for one slice of b·t tokens and V_s = V/(p·t) entries:
//!   VOCAB_F  the logits shard X·W_j (GEMM b·t × V_s × h), its softmax statistics, and its
//!            share of the input gradient, exp(Y − max)·W_jᵀ (GEMM b·t × h × V_s), plus one
//!            pass over the 32-bit logits (b·t·4·V_s bytes) at memory_bandwidth;
//!   VOCAB_B  the shard's weight gradient Xᵀ·dY (GEMM h × V_s × b·t) plus one pass over what
//!            it frees;
//! each with DeviceSpec::action_overhead. A VOCAB_F holds the 32-bit logits shard and the
//! broadcast input X (b·t·h·v) until its VOCAB_B. The last stage's output reaches a shard's
//! rank as a message between the two ranks does (the broadcast's time per receiver); the
//! reduction of the statistics (max, sum of exponentials, target logit: 3 32-bit values per
//! token) and of the input-gradient shares (b·t·h·v) over the p ranks takes NCCL's ring
//! all-reduce time over the ranks' first GPUs, the t · d tensor and data-parallel groups'
//! rings at once.
//! With Parallelism::input_vocabulary the first stage holds no token table either: each rank
//! holds V/p of its rows (1/t of them per GPU; one matrix serves both ends with
//! tied_embeddings) and runs, per slice,
//!   EMBED_F  its lookups: the b·t × h partial written (zeros for the tokens it does not
//!            hold, as Megatron's vocabulary-parallel embedding masks them) and the rows read,
//!            2·b·t·h·v bytes at memory_bandwidth;
//!   EMBED_B  its rows' gradient: the broadcast input gradient read (b·t·h·v) and the rows of
//!            its own tokens, about 1/p of them, read and written (2·b·t·h·v / p);
//! each with DeviceSpec::action_overhead and holding nothing. The partials are summed into the
//! first stage's input by the same ring all-reduce of b·t·h·v as the output layer's reduction
//! (Megatron reduces its vocabulary-parallel embedding's output with one; here only the first
//! stage's rank uses the sum), which then starts no earlier; the first stage's input gradient
//! reaches a shard's rank as a message between the two ranks does. The first stage's
//! tensor-parallel all-reduce of the embedding output is that reduction's.
//!
//! Workspace (with whole_step): the largest temporary an action holds beyond what the
//! schedule stores, counted once per rank on top of its static bytes: the gradients of one
//! layer's stored tensors while that layer's backward runs (one layer's activation bytes of
//! the unit), plus on the last stage the 32-bit gradient of the logits, b·t·4·V / t.
//!
//! Measured layers (the `measured` member, a LayerProfile of the model's own layers): the
//! kernels' times of F, I, W and R and the bytes a unit stores, keeps as a checkpoint and keeps
//! for W come from the profile instead of the formulas above. A unit of stage s is its n
//! layers' figures plus, on the first stage of its replica, the first-stage extras and, on the
//! last, the last-stage extras, each at the unit's (tensor degree, b, slice length t, prefix o)
//! (interpolated between the profile's grid points; a unit outside the grid is refused, see
//! LayerProfile::at). Everything else keeps its formula: the tensor-parallel all-reduces are
//! added to the measured F, R and I (a profile times one shard's kernels), the messages, the
//! data-parallel reduction, the optimizer step and the static bytes follow the model's shape.
//! A checkpointed stage keeps its input once: its boundary is one layer's plus, for each
//! further layer, what a layer keeps beyond the stage input b·t·h·v (a slice's keys and
//! values), plus its ends' extras. A measured W cut into parts is shared among them evenly, or
//! under WGradSplit::PerGemm in proportion to the formula time of each part's GEMMs; the bytes
//! each part frees likewise.
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
  //! The model's own layers as measured (see the class comment); null: the formulas.
  std::shared_ptr<const LayerProfile> measured = nullptr;

  // ---- The capabilities the planner asks for (analysis/cost_capabilities.hpp) ----

  //! Layers of the whole model (layered_cost).
  int layer_count() const noexcept { return model.layers; }
  //! This cost model with its layers split evenly over any stages (layered_cost): the
  //! per-stage list (Parallelism::layers) and the balanced split dropped.
  TransformerCost evenly_layered() const {
    TransformerCost even = *this;
    even.parallel.layers.clear();
    even.parallel.split = LayerSplit::Even;
    return even;
  }
  //! Tokens of one sequence (sliceable_cost).
  int sequence_tokens() const noexcept { return model.sequence; }
  //! The device's peak FLOP/s (flop_counting_cost).
  double peak_flops() const noexcept { return device.peak_flops; }
  //! Every FLOP a training step spends on one sequence (flop_counting_cost).
  double training_flops_per_sequence() const noexcept {
    return model.training_flops_per_sequence();
  }
  //! 6 x parameters x tokens of one sequence (flop_counting_cost).
  double usual_training_flops_per_sequence() const noexcept {
    return model.usual_training_flops_per_sequence();
  }
  //! Tensor, data and ZeRO parallelism and the layer split (parallel_cost).
  const Parallelism& parallelism() const noexcept { return parallel; }

  //! Each rank's room for activations (device_memory_cost): its device's usable memory
  //! (memory_bytes less memory_reserve, DeviceSpec::usable_memory) minus what the rank holds
  //! whatever the schedule (weights, gradients and optimizer state of its stages,
  //! static_bytes), as MemoryBudget::per_rank. Throws budget_error naming the rank when that
  //! alone fills the device.
  MemoryBudget memory_budget(const Problem& problem, const Placement& placement) const {
    const CostContext ctx{problem, placement, 1};
    check(ctx);
    MemoryBudget budget;
    budget.per_rank.resize(static_cast<std::size_t>(problem.ranks));
    for (int r = 0; r < problem.ranks; ++r) {
      const double fixed = static_bytes(ctx, r);
      const double usable = device.usable_memory();
      const double left = usable - fixed;
      if (!(left > 0)) {
        throw budget_error(
            "rank " + std::to_string(r) + "'s weights, gradients and optimizer state" +
                (parallel.whole_step ? std::string(" (and workspace)") : std::string()) + " take " +
                memory_amount(fixed, MemoryUnit::Bytes) + ", at least the " +
                memory_amount(usable, MemoryUnit::Bytes, false) + " usable of device '" +
                device.name + "' (" + memory_amount(device.memory_bytes, MemoryUnit::Bytes, false) +
                " less " + memory_amount(device.memory_reserve, MemoryUnit::Bytes, false) +
                " reserved), leaving nothing for activations; use more ranks (fewer layers per "
                "rank), "
                "tensor parallelism or ZeRO sharding, or a device with more memory.",
            r, fixed, usable, MemoryUnit::Bytes);
      }
      budget.per_rank[static_cast<std::size_t>(r)] = left;
    }
    return budget;
  }

  //! Weight GEMMs of `stage`: four per layer (QKV, projection, MLP in, MLP out; a gated
  //! MLP's gate and up projections count as one, they share their input), plus the LM head
  //! on the last stage. The parts that cut each of its W's into one GEMM each under
  //! WGradSplit::PerGemm.
  int weight_gemms(const CostContext& ctx, int stage) const {
    check(ctx);
    const bool last = model_stage(ctx, stage) == model_stage_count(ctx) - 1;
    return 4 * layers_of(ctx, stage) + (last && !parallel.vocabulary ? 1 : 0);
  }

  //! Checks the model, the device and the parallelism; throws invalid_problem naming the
  //! field.
  void check() const {
    model.check();
    device.check();
    parallel.check();
    detail::transformer::check_tensor_degree(model, device, parallel);
    if (measured) {
      measured->check_model(model);
      measured->check_tensor(parallel.tensor);
      if (parallel.sequence_parallel)
        throw invalid_problem(
            "a layer profile times the layers as they ran, without sequence parallelism; plan "
            "without it (ClusterRequest::sequence_parallel false, no --sp).");
    }
  }

  //! Checks the model, the device and that they fit the problem in `ctx` (enough layers
  //! for its stages, enough tokens for its slices, slice_lengths matching).
  void check(const CostContext& ctx) const {
    check();
    detail::transformer::check_problem_fit(model, parallel, slice_lengths, model_stage_count(ctx),
                                           ctx.problem.slices);
    if (parallel.vocabulary && ctx.problem.replicas > 1)
      throw invalid_problem(
          "vocabulary parallelism (Parallelism::vocabulary) splits the output layer of one "
          "pipeline over its ranks; a problem of " +
          std::to_string(ctx.problem.replicas) + " replicas cannot use it.");
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
      const double e = parallel.vocabulary ? 0.0 : head_layers();
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
  //! the embedding on stage 0 and the LM head on the last stage (of its replica). With
  //! ModelShape::tied_embeddings a replica of one stage holds the shared matrix once; a
  //! pipeline keeps a copy on its first and on its last stage.
  double stage_parameters(const CostContext& ctx, int stage) const {
    check(ctx);
    const int S = model_stage_count(ctx);
    const int ms = model_stage(ctx, stage);
    double p = layers_of(ctx, stage) * model.layer_parameters();
    if (ms == 0 && !parallel.input_vocabulary) p += model.embedding_parameters();
    if (ms == S - 1 && !parallel.vocabulary && !(model.tied_embeddings && S == 1))
      p += model.embedding_parameters();
    return p;
  }

  //! True when the output layer is split by vocabulary (Parallelism::vocabulary): a schedule
  //! simulated under this model must hold vocabulary passes, and one with them needs it.
  bool vocabulary_parallel() const noexcept { return parallel.vocabulary; }
  //! True when the input embedding is split by vocabulary too (Parallelism::input_vocabulary):
  //! a schedule simulated under this model must hold EMBED_F and EMBED_B passes.
  bool input_vocabulary_parallel() const noexcept {
    return parallel.vocabulary && parallel.input_vocabulary;
  }

  //! Parameters each GPU of `rank` holds: its stages' weights (and with vocabulary
  //! parallelism its shard of the LM head) over the tensor group.
  double rank_parameters(const CostContext& ctx, int rank) const {
    check(ctx);
    check_rank(ctx, rank);
    double p = parallel.vocabulary ? model.embedding_parameters() / ctx.problem.ranks : 0.0;
    if (input_vocabulary_parallel() && !model.tied_embeddings)
      p += model.embedding_parameters() / ctx.problem.ranks;  // the token table's shard
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
  //! DeviceSpec::usable_memory().
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
    return data_parallel_allreduce(rank, 2 * rank_parameters(ctx, rank));
  }

  //! Seconds of the all-reduce of `stage`'s gradients on `rank` over the data-parallel
  //! replicas, which its REDUCE_GRAD starts (0 for one replica): the stage's share of
  //! gradient_sync_seconds' bytes, 2 per parameter of each GPU, on the same link with the same
  //! ring time (so each stage pays the ring's latency once); see the class comment.
  double reduce_seconds(const CostContext& ctx, int rank, int stage) const {
    check(ctx);
    check_stage(stage_count(ctx), stage);
    check_rank(ctx, rank);
    return data_parallel_allreduce(rank, 2 * stage_parameters(ctx, stage) / parallel.tensor);
  }

  //! Seconds of an all-reduce of `bytes` from each GPU of pipeline rank `rank` over its d
  //! replicas (0 for one replica): the ring time on the intra-node link when the rank's t·d
  //! GPUs sit on one node, else on the inter-node link, the node's ports shared by its t rings.
  double data_parallel_allreduce(int rank, double bytes) const {
    const int d = parallel.data;
    if (d < 2) return 0.0;
    const int t = parallel.tensor;
    const long long first = first_gpu(rank);
    return device.allreduce_seconds(bytes, d, first, first + static_cast<long long>(t) * d - 1, t);
  }

  //! Seconds of the optimizer step of `rank` (whole_step; else 0): 28 bytes of memory
  //! traffic per parameter the GPU owns (ZeRO: its 1/d share).
  double optimizer_seconds(const CostContext& ctx, int rank) const {
    if (!parallel.whole_step) return 0.0;
    const double owned = rank_parameters(ctx, rank) / (parallel.zero >= 1 ? parallel.data : 1);
    return 28 * owned / device.memory_bandwidth;
  }

  //! What the step spends on `rank` after its last action: gradient_sync_seconds +
  //! optimizer_seconds, without gradient_sync_seconds when the schedule times the reduction
  //! with its REDUCE_GRAD actions (CostContext::scheduled_reduction; reduce_seconds). The
  //! simulator adds it to the rank's end.
  double step_tail(const CostContext& ctx, int rank) const {
    const double sync = ctx.scheduled_reduction ? 0.0 : gradient_sync_seconds(ctx, rank);
    return sync + optimizer_seconds(ctx, rank);
  }

  //! Seconds of an all-reduce of `bytes` over `n` GPUs on a link of `bandwidth` and
  //! `latency`, as NCCL's ring runs it: 2(n − 1)/n · bytes / bandwidth + 2(n − 1) · latency.
  static double ring_allreduce(double bytes, int n, double bandwidth, double latency) noexcept {
    return detail::ring_allreduce(bytes, n, bandwidth, latency);
  }

  //! Seconds `a` occupies its rank (sends and receives: 0, their time is transfer_time),
  //! DeviceSpec::action_overhead included once per compute action (an Overlap is one).
  double duration(const CostContext& ctx, const Action& a) const {
    check(ctx);
    if (a.kind == OpKind::Overlap)
      return compute_seconds(ctx, a.forward_half()) + compute_seconds(ctx, a.backward_half()) +
             device.action_overhead;
    if (!is_compute(a.kind)) return 0.0;
    return compute_seconds(ctx, a) + device.action_overhead;
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

  //! Seconds the copy of OFFLOAD or RELOAD `a` holds its GPU's link to host memory: the
  //! activations its unit's forward keeps (memory_delta of the F, not checkpointed) at
  //! DeviceSpec::host_copy_seconds, every GPU of the pipeline rank (t · d of them, at most a
  //! node's) copying at once; 0 for every other kind. Throws invalid_argument when the device
  //! gives no host_link_bandwidth.
  double host_copy_seconds(const CostContext& ctx, const Action& a) const {
    if (!is_offload_action(a.kind)) return 0.0;
    const double bytes =
        memory_delta(ctx, Action::make(OpKind::F, a.stage, a.microbatch, a.slice), false);
    return device.host_copy_seconds(
        bytes, std::min(parallel.tensor * parallel.data, device.ranks_per_node));
  }

  //! Seconds VOCAB_F or VOCAB_B `a` occupies its rank (see the class comment); 0 for every
  //! other kind.
  double vocabulary_seconds(const CostContext& ctx, const Action& a) const {
    if (!is_vocabulary(a.kind)) return 0.0;
    const VocabularyShard v = vocabulary_shard(ctx, a);
    const double bw = device.memory_bandwidth;
    if (a.kind == OpKind::EmbedF) return 2 * v.input / bw + device.action_overhead;
    if (a.kind == OpKind::EmbedB)
      return (1 + 2.0 / ctx.problem.ranks) * v.input / bw + device.action_overhead;
    if (a.kind == OpKind::VocabF)
      return device.gemm_time(v.tokens, v.entries, model.hidden) +
             device.gemm_time(v.tokens, model.hidden, v.entries) + v.logits / bw +
             device.action_overhead;
    return device.gemm_time(model.hidden, v.entries, v.tokens) + (v.logits + v.input) / bw +
           device.action_overhead;
  }

  //! Bytes a VOCAB_F holds until its VOCAB_B: the 32-bit logits shard and the broadcast input
  //! (none for the input embedding's passes).
  double vocabulary_bytes(const CostContext& ctx, const Action& a) const {
    const VocabularyShard v = vocabulary_shard(ctx, a);
    return is_input_vocabulary(a.kind) ? 0.0 : v.logits + v.input;
  }

  //! For a VOCAB_F, the broadcast of the last stage's output to the shard's rank (a message's
  //! time between the two ranks, 0 on the same rank); for a VOCAB_B, the reduction of the
  //! microbatch's statistics and input-gradient shares over the pipeline ranks (see the
  //! class comment).
  double vocabulary_transfer_seconds(const CostContext& ctx, const Action& a) const {
    const VocabularyShard v = vocabulary_shard(ctx, a);
    const int p = ctx.problem.ranks;
    const int t = parallel.tensor;
    if (a.kind == OpKind::VocabF || a.kind == OpKind::EmbedB) {
      const int from = rank_of(ctx, a.kind == OpKind::EmbedB ? 0 : stage_count(ctx) - 1);
      if (from == a.stage) return 0.0;
      const int senders = std::min(t * parallel.data, device.ranks_per_node);
      return device.message_seconds(v.input / t, device.path(first_gpu(from), first_gpu(a.stage)),
                                    senders);
    }
    if (p < 2) return 0.0;
    const double stats = a.kind == OpKind::EmbedF ? 0.0 : 3.0 * 4.0 * v.tokens;
    return device.allreduce_seconds((v.input + stats) / t, p, first_gpu(0), first_gpu(p - 1),
                                    t * parallel.data);
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
    const int senders = std::min(parallel.tensor * parallel.data, device.ranks_per_node);
    return device.message_seconds(bytes, device.path(first_gpu(from_rank), first_gpu(to_rank)),
                                  senders);
  }

  //! Tokens slice boundaries go in multiples of (balanced_slices, terapipe_slices): the
  //! fewest whose b·t rows fill whole GEMM tiles, gemm_tile_m / gcd(b, gemm_tile_m), when the
  //! device quantises GEMMs (sm_count > 0, no measured table, no measured layers); else 1.
  int slice_granule() const noexcept {
    if (device.sm_count <= 0 || !device.gemm_efficiency_table.empty() || measured) return 1;
    const int rows = std::max(1, device.gemm_tile_m);
    return rows / std::gcd(rows, std::max(1, model.microbatch_size));
  }

  //! Pipeline rank `rank`'s first GPU, rank · t · d (see Parallelism).
  long long first_gpu(int rank) const noexcept {
    return static_cast<long long>(rank) * parallel.tensor * parallel.data;
  }
  //! The node of pipeline rank `rank`'s first GPU.
  int node_of(int rank) const noexcept {
    return static_cast<int>(first_gpu(rank) / device.ranks_per_node);
  }

 private:
  // Everything about one (stage, slice) unit of a microbatch (detail/transformer_formulas.hpp).
  using Unit = detail::transformer::Unit;

  // One vocabulary shard's work for one slice: its tokens b·t, its entries per GPU V/(p·t),
  // the 32-bit logits of them and the 16-bit input X the pass keeps.
  struct VocabularyShard {
    double tokens = 0, entries = 0, logits = 0, input = 0;
  };
  VocabularyShard vocabulary_shard(const CostContext& ctx, const Action& a) const {
    check(ctx);
    if (!parallel.vocabulary)
      throw invalid_schedule(
          "TransformerCost: " + to_string(a) +
          " is a vocabulary pass, but this cost model keeps the output layer on the last "
          "stage; set Parallelism::vocabulary (--vocab-parallel) to split it by vocabulary.");
    if (is_input_vocabulary(a.kind) && !parallel.input_vocabulary)
      throw invalid_schedule(
          "TransformerCost: " + to_string(a) +
          " is a pass of the input embedding, but this cost model keeps the embedding on the "
          "first stage; set Parallelism::input_vocabulary to split it by vocabulary too.");
    if (a.stage < 0 || a.stage >= ctx.problem.ranks)
      throw invalid_schedule("TransformerCost: vocabulary shard " + std::to_string(a.stage) +
                             " is out of range; shards run 0 to " +
                             std::to_string(ctx.problem.ranks - 1) + ", one per rank.");
    VocabularyShard v;
    v.tokens = static_cast<double>(model.microbatch_size) * slice_span(ctx, a.slice).length;
    v.entries = static_cast<double>(model.vocabulary) / ctx.problem.ranks / parallel.tensor;
    v.logits = 4.0 * v.tokens * v.entries;
    v.input = v.tokens * model.hidden * model.bytes_per_value;
    return v;
  }

  // The three GEMMs of a weight: forward, input gradient, weight gradient.
  enum class Pass { Forward, Input, Weight };

  // Seconds of weight GEMM `k` of unit `u` (0..3 a layer's, -1 the LM head) in `pass`, once
  // (DeviceSpec::gemm_time of its shape; see Unit).
  double gemm_seconds(const Unit& u, int k, Pass pass) const {
    const int i = k < 0 ? 4 : k;
    const double m = u.tokens, n = u.width[i], d = u.depth[i];
    if (k < 0 && u.head <= 0) return 0.0;
    switch (pass) {
      case Pass::Forward:
        return device.gemm_time(m, n, d);
      case Pass::Input:
        return device.gemm_time(m, d, n);
      case Pass::Weight:
        return device.gemm_time(d, n, m);
    }
    return 0.0;
  }

  // Seconds of the unit's weight GEMMs in `pass`: its n layers' four and the LM head.
  double gemms_seconds(const Unit& u, Pass pass) const {
    double layer = 0;
    for (int k = 0; k < 4; ++k)
      layer += gemm_seconds(u, k, pass);
    return u.n * layer + gemm_seconds(u, -1, pass);
  }

  // Seconds of the unit's n layers' attention kernels, forward (`factor` 1) or input
  // gradient (2: twice the FLOPs).
  double attention_seconds(const Unit& u, double factor) const {
    return u.n * device.attention_time(factor * u.attention, u.attention_keys, u.attention_tiles);
  }

  // Seconds of the kernels of compute action `a` (not an Overlap): duration less
  // DeviceSpec::action_overhead.
  double compute_seconds(const CostContext& ctx, const Action& a) const {
    const Unit u = unit(ctx, a.stage, a.slice);
    if (u.measured) {
      const double weight = u.measured_weight;
      switch (a.kind) {
        case OpKind::F:
          return u.measured_forward + u.forward_collectives;
        case OpKind::R:
          return u.measured_recompute + u.forward_collectives;
        case OpKind::I:
          return u.measured_input + u.backward_collectives;
        case OpKind::W: {
          if (wgrad_split == WGradSplit::Even) return weight / parts(ctx);
          double all = 0, mine = 0;
          for (int p = 0; p < static_cast<int>(parts(ctx)); ++p)
            for_each_gemm_of_part(ctx, u, p, [&](int k) {
              const double t = gemm_seconds(u, k, Pass::Weight);
              all += t;
              if (p == a.part) mine += t;
            });
          return all > 0 ? weight * mine / all : 0.0;
        }
        case OpKind::B:
          return u.measured_input + u.backward_collectives + weight;
        default:
          return 0.0;
      }
    }
    const double bw = device.memory_bandwidth;
    const double fwd = gemms_seconds(u, Pass::Forward) + attention_seconds(u, 1) +
                       u.activation / bw + u.forward_collectives;
    const double input = gemms_seconds(u, Pass::Input) + attention_seconds(u, 2) +
                         (u.activation - u.wgrad) / bw + u.backward_collectives;
    const double weight = gemms_seconds(u, Pass::Weight) + u.wgrad / bw;
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
          sum += gemm_seconds(u, k, Pass::Weight) + (k < 0 ? u.head_wgrad : u.gemm_wgrad[k]) / bw;
        });
        return sum;
      }
      case OpKind::B:
        return input + weight;
      default:
        return 0.0;
    }
  }

  static void check_stage(int stages, int stage) {
    if (stage < 0 || stage >= stages)
      throw invalid_schedule("TransformerCost: stage " + std::to_string(stage) +
                             " is out of range; the problem has stages 0 to " +
                             std::to_string(stages - 1) + ".");
  }

  static void check_rank(const CostContext& ctx, int rank) {
    if (rank < 0 || rank >= ctx.problem.ranks)
      throw invalid_problem("TransformerCost: rank " + std::to_string(rank) +
                            " is out of range; ranks run from 0 to " +
                            std::to_string(ctx.problem.ranks - 1) + ".");
  }

  static int rank_of(const CostContext& ctx, int stage) {
    return ctx.placement.stages() > 0 ? ctx.placement.rank_of(stage) : stage % ctx.problem.ranks;
  }

  static double parts(const CostContext& ctx) noexcept {
    return ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1;
  }

  // Calls `f(k)` for each weight GEMM in W part `part` under WGradSplit::PerGemm (see
  // detail::transformer::for_each_gemm_of_part).
  template <class F>
  void for_each_gemm_of_part(const CostContext& ctx, const Unit& u, int part, F&& f) const {
    detail::transformer::for_each_gemm_of_part(parts(ctx), u, part, std::forward<F>(f));
  }

  // Formulas of the class comment (detail::transformer::unit); `check(ctx)` has run.
  Unit unit(const CostContext& ctx, int stage, int slice) const {
    const int S = model_stage_count(ctx);
    detail::transformer::UnitPlace at;
    at.span = slice_span(ctx, slice);
    at.last = model_stage(ctx, stage) == S - 1 && !parallel.vocabulary;
    at.layers = layers_of(ctx, stage);
    at.first = model_stage(ctx, stage) == 0 && !input_vocabulary_parallel();
    at.context = slice < ctx.problem.slices - 1;
    Unit u = detail::transformer::unit(model, device, parallel, at);
    if (measured) overlay_measured(u, at);
    return u;
  }

  // The measured figures of the unit at `at` in place of the formulas' (see the class
  // comment): times and bytes from the profile, the per-GEMM W bytes scaled to its total.
  void overlay_measured(Unit& u, const detail::transformer::UnitPlace& at) const {
    const int tp = parallel.tensor;
    const double b = model.microbatch_size, t = at.span.length, o = at.span.offset;
    const LayerFigures layer = measured->at(LayerPart::Layer, tp, b, t, o);
    LayerFigures m = layer.scaled(at.layers);
    if (at.first) m += measured->at(LayerPart::First, tp, b, t, o);
    if (at.last) m += measured->at(LayerPart::Last, tp, b, t, o);
    // A checkpointed stage keeps its input once: what a layer keeps beyond the stage's input
    // (b·t·h·v; a slice's keys and values) counts per layer, the input itself once.
    // A stage of no layers (an end holding only the embedding, or the head and loss) keeps
    // what its end's extras say.
    const double input = b * t * model.hidden * model.bytes_per_value;
    if (at.layers > 0)
      m.boundary_bytes += -(at.layers - 1) * layer.boundary_bytes +
                          (at.layers - 1) * std::max(0.0, layer.boundary_bytes - input);
    const double scale = u.wgrad > 0 ? m.wgrad_bytes / u.wgrad : 0.0;
    for (double& w : u.gemm_wgrad)
      w *= scale;
    u.head_wgrad *= scale;
    // As measured, not capped: an I may add bytes (the first stage's keeps the embedding's
    // output gradient for its W).
    u.activation = m.activation_bytes;
    u.boundary = m.boundary_bytes;
    u.wgrad = m.wgrad_bytes;
    u.layer_activation = layer.activation_bytes;
    u.measured = true;
    u.measured_forward = m.forward;
    u.measured_input = m.backward_input;
    u.measured_weight = m.backward_weight;
    u.measured_recompute = m.recompute > 0 ? m.recompute : m.forward;
  }
};

static_assert(cost_model<TransformerCost>);
static_assert(has_vocabulary_cost<TransformerCost>);

}  // namespace pipesched
