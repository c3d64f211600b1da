// Numerical kernels the host toy models share (linear, GELU, LayerNorm, causal attention),
// forward and hand-written backward, all in the element type T; and the checks every toy
// stash and stage makes (call order, block partition).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"

namespace pipesched::toy::detail {

// ---- linear: y[n, out] = x[n, in] · W[out, in]ᵀ + b[out] -------------------------------------

template <class T>
void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * in;
    T* yr = y + static_cast<std::ptrdiff_t>(r) * out;
    for (int o = 0; o < out; ++o) {
      const T* wo = w + static_cast<std::ptrdiff_t>(o) * in;
      T acc = b != nullptr ? b[o] : T(0);
      for (int i = 0; i < in; ++i)
        acc += wo[i] * xr[i];
      yr[o] = acc;
    }
  }
}

// dx[n, in] = dy[n, out] · W[out, in] (overwrites dx).
template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * out;
    T* dxr = dx + static_cast<std::ptrdiff_t>(r) * in;
    std::fill(dxr, dxr + in, T(0));
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      const T* wo = w + static_cast<std::ptrdiff_t>(o) * in;
      for (int i = 0; i < in; ++i)
        dxr[i] += g * wo[i];
    }
  }
}

// dW[out, in] += dyᵀ · x and db[out] += Σ_rows dy (db may be null).
template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dw, T* db, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * out;
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * in;
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      if (db != nullptr) db[o] += g;
      T* dwo = dw + static_cast<std::ptrdiff_t>(o) * in;
      for (int i = 0; i < in; ++i)
        dwo[i] += g * xr[i];
    }
  }
}

// ---- GELU (tanh form: smooth everywhere, so finite differences check it) ----------------------

template <class T>
T gelu(T x) {
  const T c = T(0.7978845608028654);  // sqrt(2 / pi)
  const T u = c * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

template <class T>
T gelu_derivative(T x) {
  const T c = T(0.7978845608028654);
  const T x2 = x * x;
  const T t = std::tanh(c * (x + T(0.044715) * x * x2));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x2);
}

// ---- LayerNorm over rows of width h: y = x̂·γ + β, x̂ = (x − mean)·rstd -------------------------

inline constexpr double layer_norm_epsilon = 1e-5;

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* xhat, T* rstd, T* y, int n,
                        int h) {
  for (int r = 0; r < n; ++r) {
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * h;
    T* xh = xhat + static_cast<std::ptrdiff_t>(r) * h;
    T* yr = y + static_cast<std::ptrdiff_t>(r) * h;
    T mean = 0;
    for (int i = 0; i < h; ++i)
      mean += xr[i];
    mean /= T(h);
    T var = 0;
    for (int i = 0; i < h; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= T(h);
    const T rs = T(1) / std::sqrt(var + T(layer_norm_epsilon));
    rstd[r] = rs;
    for (int i = 0; i < h; ++i) {
      xh[i] = (xr[i] - mean) * rs;
      yr[i] = xh[i] * gamma[i] + beta[i];
    }
  }
}

// y = x̂·γ + β from a kept x̂ (the weight pass rebuilds a LayerNorm output this way instead of
// keeping it: the same operations, so the same bits).
template <class T>
void layer_norm_apply(const T* xhat, const T* gamma, const T* beta, T* y, int n, int h) {
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < h; ++i) {
      const std::ptrdiff_t k = static_cast<std::ptrdiff_t>(r) * h + i;
      y[k] = xhat[k] * gamma[i] + beta[i];
    }
}

// dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ γ (overwrites dx).
template <class T>
void layer_norm_backward_input(const T* dy, const T* xhat, const T* rstd, const T* gamma, T* dx,
                               int n, int h) {
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * h;
    const T* xh = xhat + static_cast<std::ptrdiff_t>(r) * h;
    T* dxr = dx + static_cast<std::ptrdiff_t>(r) * h;
    T mean_d = 0;
    T mean_dx = 0;
    for (int i = 0; i < h; ++i) {
      const T d = dyr[i] * gamma[i];
      mean_d += d;
      mean_dx += d * xh[i];
    }
    mean_d /= T(h);
    mean_dx /= T(h);
    for (int i = 0; i < h; ++i)
      dxr[i] = rstd[r] * (dyr[i] * gamma[i] - mean_d - xh[i] * mean_dx);
  }
}

// dγ += Σ_rows dy ⊙ x̂, dβ += Σ_rows dy.
template <class T>
void layer_norm_backward_weight(const T* dy, const T* xhat, T* dgamma, T* dbeta, int n, int h) {
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < h; ++i) {
      const std::ptrdiff_t k = static_cast<std::ptrdiff_t>(r) * h + i;
      dgamma[i] += dy[k] * xhat[k];
      dbeta[i] += dy[k];
    }
}

// ---- causal multi-head attention ---------------------------------------------------------------
//
// Queries and keys/values are separate operands on purpose: query i sits at position
// `query_offset + i` and attends to keys 0 … query_offset + i, so keys and values of an earlier
// part of the sequence (a prefix held elsewhere) can be passed in front of the current ones.
// With the whole sequence at once, keys == queries and query_offset == 0.

struct AttentionShape {
  int queries = 0;       // query rows
  int keys = 0;          // key/value rows (≥ query_offset + queries)
  int query_offset = 0;  // position of query 0 among the keys
  int heads = 1;
  int head_dim = 1;
};

// For one sequence: q rows have stride q_stride, k and v rows kv_stride, head `hd` occupies
// columns [hd·head_dim, (hd+1)·head_dim). Writes the probabilities p[heads, queries, keys]
// (zero where masked) and out[queries, heads·head_dim] (row stride out_stride).
template <class T>
void causal_attention_forward(const T* q, int q_stride, const T* k, const T* v, int kv_stride, T* p,
                              T* out, int out_stride, const AttentionShape& s) {
  const T scale = T(1) / std::sqrt(T(s.head_dim));
  for (int hd = 0; hd < s.heads; ++hd) {
    const int col = hd * s.head_dim;
    for (int i = 0; i < s.queries; ++i) {
      const T* qi = q + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      T* pi = p + (static_cast<std::ptrdiff_t>(hd) * s.queries + i) * s.keys;
      const int last = s.query_offset + i;  // the causal mask: keys after the query are hidden
      T max_score = -std::numeric_limits<T>::infinity();
      for (int j = 0; j <= last; ++j) {
        const T* kj = k + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        T dot = 0;
        for (int d = 0; d < s.head_dim; ++d)
          dot += qi[d] * kj[d];
        pi[j] = dot * scale;
        max_score = std::max(max_score, pi[j]);
      }
      T sum = 0;
      for (int j = 0; j <= last; ++j) {
        pi[j] = std::exp(pi[j] - max_score);
        sum += pi[j];
      }
      for (int j = 0; j <= last; ++j)
        pi[j] /= sum;
      for (int j = last + 1; j < s.keys; ++j)
        pi[j] = T(0);
      T* oi = out + static_cast<std::ptrdiff_t>(i) * out_stride + col;
      for (int d = 0; d < s.head_dim; ++d)
        oi[d] = T(0);
      for (int j = 0; j <= last; ++j) {
        const T* vj = v + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        for (int d = 0; d < s.head_dim; ++d)
          oi[d] += pi[j] * vj[d];
      }
    }
  }
}

// Adds the gradients of q, k and v (same layouts and strides as their operands: dq like q, dk
// and dv like k and v) given dout and the probabilities of the forward. Accumulates, so the
// gradients of prefix keys/values held elsewhere can be gathered across calls.
template <class T>
void causal_attention_backward(const T* dout, int dout_stride, const T* q, int q_stride, const T* k,
                               const T* v, int kv_stride, const T* p, T* dq, T* dk, T* dv,
                               const AttentionShape& s) {
  const T scale = T(1) / std::sqrt(T(s.head_dim));
  std::vector<T> dp(static_cast<std::size_t>(s.keys));
  for (int hd = 0; hd < s.heads; ++hd) {
    const int col = hd * s.head_dim;
    for (int i = 0; i < s.queries; ++i) {
      const T* pi = p + (static_cast<std::ptrdiff_t>(hd) * s.queries + i) * s.keys;
      const T* doi = dout + static_cast<std::ptrdiff_t>(i) * dout_stride + col;
      const T* qi = q + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      T* dqi = dq + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      const int last = s.query_offset + i;
      T weighted = 0;  // Σ_j p_ij · dp_ij, the softmax backward's correction
      for (int j = 0; j <= last; ++j) {
        const T* vj = v + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        T dot = 0;
        for (int d = 0; d < s.head_dim; ++d)
          dot += doi[d] * vj[d];
        dp[static_cast<std::size_t>(j)] = dot;
        weighted += pi[j] * dot;
      }
      for (int j = 0; j <= last; ++j) {
        const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        const T ds = pi[j] * (dp[static_cast<std::size_t>(j)] - weighted) * scale;
        for (int d = 0; d < s.head_dim; ++d) {
          dqi[d] += ds * k[row + d];
          dk[row + d] += ds * qi[d];
          dv[row + d] += pi[j] * doi[d];
        }
      }
    }
  }
}

// ---- call-order checks shared by every toy stash ---------------------------------------------

// Where a stash is in its life: empty, holding a forward's activations, or holding what the
// weight gradient still needs after backward_input.
enum class StashPhase : std::uint8_t { Empty, Forwarded, InputDone };

inline void require_phase(StashPhase actual, StashPhase wanted, const char* who, const char* op) {
  if (actual == wanted) return;
  std::string what = std::string(who) + "::" + op + ": ";
  if (wanted == StashPhase::Forwarded)
    what += actual == StashPhase::Empty
                ? "the stash holds no forward; call forward for this microbatch first"
                : "backward_input already ran on this stash; call backward_weight next";
  else
    what += actual == StashPhase::Empty
                ? "the stash is empty; backward_weight needs backward_input to run first"
                : "backward_input has not run on this stash yet; call it before backward_weight";
  throw invalid_schedule(what);
}

// ---- partition of the global block list over stages ------------------------------------------

// Blocks [first, last) of stage `stage` when `blocks` blocks are split over `stages` stages as
// evenly as possible, earlier stages taking the remainder. Throws when the split is impossible.
inline std::pair<int, int> block_range(int blocks, int stage, int stages, const char* model) {
  if (blocks < 1)
    throw invalid_problem(std::string(model) + ": blocks is " + std::to_string(blocks) +
                          "; a model needs at least 1 block");
  if (stages < 1 || stages > blocks)
    throw invalid_problem(std::string(model) + ": stages is " + std::to_string(stages) + "; with " +
                          std::to_string(blocks) + " blocks it must be between 1 and " +
                          std::to_string(blocks) +
                          " (every stage needs a block; raise blocks for more stages)");
  if (stage < 0 || stage >= stages)
    throw invalid_problem(std::string(model) + ": stage is " + std::to_string(stage) +
                          "; it must be between 0 and " + std::to_string(stages - 1));
  const int base = blocks / stages;
  const int extra = blocks % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

inline void require_positive(int value, const char* model, const char* name) {
  if (value < 1)
    throw invalid_problem(std::string(model) + ": " + name + " is " + std::to_string(value) +
                          "; it must be at least 1");
}

}  // namespace pipesched::toy::detail
