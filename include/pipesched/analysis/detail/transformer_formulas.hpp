// TransformerCost's formulas for one (stage, slice) unit of a microbatch (FLOPs of its
// GEMMs and attention, the bytes it stores, keeps as a checkpoint and keeps for W, the
// tensor-parallel collectives), which weight GEMMs a W part covers, and the communication
// helpers (the ring all-reduce time, a node's port share). The formulas and their sources
// are in TransformerCost's class comment (analysis/transformer_cost.hpp).
#pragma once

#include <algorithm>
#include <cmath>

#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/analysis/parallelism.hpp"

namespace pipesched::detail::transformer {

// Everything about one (stage, slice) unit of a microbatch.
struct Unit {
  double n = 0;                     // layers on the stage
  double gemms[4] = {};             // per layer, forward FLOPs of QKV, projection, MLP in, MLP out
  double attention = 0;             // per layer, forward FLOPs of scores and values
  double head = 0;                  // LM head forward FLOPs (last stage only)
  double activation = 0;            // bytes a full forward stores
  double boundary = 0;              // bytes a checkpointed forward keeps
  double wgrad = 0;                 // bytes kept from I until W
  double layer_activation = 0;      // bytes one layer's forward stores (workspace)
  double logits_gradient = 0;       // 32-bit logits gradient of the last stage (workspace)
  double forward_collectives = 0;   // seconds of tensor-parallel all-reduces in F and R
  double backward_collectives = 0;  // seconds of them in I (and B)
  double gemm_wgrad[4] = {};        // per layer, bytes W of each GEMM frees (sum: wgrad / n)
  double head_wgrad = 0;            // bytes W of the LM head frees (last stage)
  // GEMM shapes on one GPU: each forward GEMM is tokens × width[k] × depth[k] (M × N × K;
  // k = 0..3 as gemms, 4 the LM head); its input gradient is tokens × depth × width, its
  // weight gradient depth × width × tokens.
  double tokens = 0;                    // b·t, the GEMMs' M
  double width[5] = {}, depth[5] = {};  // output and input features per GPU
  double attention_keys = 0;            // keys a query attends to, on average
  double attention_tiles = 0;           // query tiles of 128 rows: b · a/tp · ⌈t/128⌉
  // Measured times (TransformerCost::measured) of F, I, W and R of the whole unit, kernels
  // only; used instead of the FLOP-based times when `measured` is set.
  bool measured = false;
  double measured_forward = 0, measured_input = 0, measured_weight = 0, measured_recompute = 0;
  double layer_gemm_flops() const { return gemms[0] + gemms[1] + gemms[2] + gemms[3]; }
};

// Where a unit sits, as far as its formulas care.
struct UnitPlace {
  int layers = 0;        // layers on the stage
  SliceSpan span;        // the slice's tokens
  bool first = false;    // the first stage of its replica (the embedding)
  bool last = false;     // the last stage of its replica (the LM head)
  bool context = false;  // not the last slice: later slices attend to its keys and values
};

// Calls `f(k)` for each weight GEMM in W part `part` of a W cut into `parts` under
// WGradSplit::PerGemm: k = 0..3 for a layer's QKV, projection, MLP in, MLP out, -1 for the
// LM head (see WGradSplit).
template <class F>
void for_each_gemm_of_part(double parts, const Unit& u, int part, F&& f) {
  const long long P = static_cast<long long>(parts);
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

// The formulas of TransformerCost's class comment for the unit at `at`.
inline Unit unit(const ModelShape& model, const DeviceSpec& device, const Parallelism& parallel,
                 const UnitPlace& at) {
  const SliceSpan span = at.span;
  const bool last = at.last;
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
  u.n = at.layers;
  u.gemms[0] = 2 * bt * h * q / tp;
  u.gemms[1] = 2 * bt * h * h / tp;
  u.gemms[2] = 2 * bt * h * f * g / tp;
  u.gemms[3] = 2 * bt * f * h / tp;
  // Σ_{i=o}^{o+t−1} (i + 1) = t·o + t·(t + 1)/2
  u.attention = 2 * 2 * b * h * (t * o + t * (t + 1) / 2) / tp;
  u.head = last ? 2 * bt * h * V / tp : 0.0;
  u.tokens = bt;
  const double widths[5] = {q / tp, h, g * f / tp, h, V / tp};
  const double depths[5] = {h, h / tp, h, f / tp, h};
  for (int k = 0; k < 5; ++k) {
    u.width[k] = widths[k];
    u.depth[k] = depths[k];
  }
  // Σ_{i=o}^{o+t−1} (i + 1) / t keys per query.
  u.attention_keys = t > 0 ? o + (t + 1) / 2 : 0.0;
  u.attention_tiles = b * (a / tp) * std::ceil(t / 128);

  // Replicated: the QKV and MLP GEMM inputs, the two dropout masks (1 byte per value; none
  // without dropout), the two norm inputs; split: Q, K, V, the projection input, the
  // activation-function input(s), the second MLP GEMM input.
  const double mask = model.dropout ? 1.0 : 0.0;
  const double replicated = v * h + mask * h + v * h + mask * h + 2 * v * h;
  const double split = v * h * (1 + 2 * kv) + v * h + v * (g * f + f);
  double layer = bt * (replicated * rep + split / tp);
  // Scores: the softmax output, and with dropout its mask and output.
  const double scores = model.dropout ? 2 * v + 1 : v;
  if (!model.flash_attention) layer += scores * a * b * t * (o + t) / tp;
  u.layer_activation = layer;
  u.activation = u.n * layer + (last ? bt * (2 * v * h * rep + 4 * V / tp) : 0.0);
  u.logits_gradient = last ? bt * 4 * V / tp : 0.0;

  const bool context = at.context;
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
    // The tensor group: t GPUs in a row from a multiple of t (its slowest hop is the path
    // from the first to the last).
    const double one = device.allreduce_seconds(bytes, parallel.tensor, 0, parallel.tensor - 1);
    const bool first = at.first;
    u.forward_collectives = (2 * u.n + (first ? 1 : 0)) * one;
    u.backward_collectives = (2 * u.n + (last ? 1 : 0)) * one;
  }
  return u;
}

}  // namespace pipesched::detail::transformer
