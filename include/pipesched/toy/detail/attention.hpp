// Causal multi-head attention on the host, forward and hand-written backward, in the element
// type T: per sequence (queries against a prefix of keys/values, so a slice can attend to the
// slices before it), and over a batch in the layouts the GPT block keeps — the host twins of the
// launchers in toy/cuda/detail/attention_kernels.cuh.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace pipesched::toy::detail {

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
// gradients of prefix keys/values held elsewhere can be gathered across calls. dk and dv sum
// over queries, which a sequence cut into slices visits in another order (later slices first),
// so they are kept in A — accumulator_t<T> for float — and rounded to T once by the caller; a
// query's dq sums over keys in the same order however the sequence is cut and stays in T.
template <class T, class A>
void causal_attention_backward(const T* dout, int dout_stride, const T* q, int q_stride, const T* k,
                               const T* v, int kv_stride, const T* p, T* dq, A* dk, A* dv,
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
          dk[row + d] += A(ds) * A(qi[d]);
          dv[row + d] += A(pi[j]) * A(doi[d]);
        }
      }
    }
  }
}

// ---- over a batch, in the GPT block's layouts --------------------------------------------------
//
// Per sequence i of `batch`: queries q [tokens, h] (h = heads·head_dim), keys and values side
// by side kv [keys, 2h] (keys in columns [0, h), values in [h, 2h)), probabilities
// p [heads, tokens, keys]; `shape.queries` is the tokens, `shape.keys` the keys.

// Probabilities p and the attention output out [batch, tokens, h] (overwritten).
template <class T>
void attention_forward(const T* q, const T* kv, T* p, T* out, int batch,
                       const AttentionShape& shape) {
  const int s = shape.queries;
  const int keys = shape.keys;
  const int h = shape.heads * shape.head_dim;
  for (int i = 0; i < batch; ++i) {
    const T* k = kv + static_cast<std::ptrdiff_t>(i) * keys * 2 * h;
    causal_attention_forward(q + static_cast<std::ptrdiff_t>(i) * s * h, h, k, k + h, 2 * h,
                             p + static_cast<std::ptrdiff_t>(i) * shape.heads * s * keys,
                             out + static_cast<std::ptrdiff_t>(i) * s * h, h, shape);
  }
}

// Adds the gradients of the queries into dq [batch, tokens, h] and of the keys/values into dkv
// [batch, keys, 2h] (in A), given the output's, dout [batch, tokens, h]; a caller starts them
// at zero.
template <class T, class A>
void attention_backward(const T* dout, const T* q, const T* kv, const T* p, T* dq, A* dkv,
                        int batch, const AttentionShape& shape) {
  const int s = shape.queries;
  const int keys = shape.keys;
  const int h = shape.heads * shape.head_dim;
  for (int i = 0; i < batch; ++i) {
    const std::ptrdiff_t k0 = static_cast<std::ptrdiff_t>(i) * keys * 2 * h;
    const std::ptrdiff_t q0 = static_cast<std::ptrdiff_t>(i) * s * h;
    causal_attention_backward(dout + q0, h, q + q0, h, kv + k0, kv + k0 + h, 2 * h,
                              p + static_cast<std::ptrdiff_t>(i) * shape.heads * s * keys, dq + q0,
                              dkv + k0, dkv + k0 + h, shape);
  }
}

// A slice's q/k/v gradient out [batch, tokens, 3h]: its queries' gradient dq, then its own
// keys'/values' gradient (rows offset … offset + tokens − 1 of dkv [batch, keys, 2h]) plus what
// later slices left in `later` [batch, tokens, 2h] (may be null), rounded to T once.
template <class T, class A>
void assemble_dqkv(const T* dq, const A* dkv, const A* later, T* out, int batch, int tokens,
                   int keys, int offset, int h) {
  for (int i = 0; i < batch; ++i)
    for (int t = 0; t < tokens; ++t) {
      T* to = out + (static_cast<std::ptrdiff_t>(i) * tokens + t) * 3 * h;
      const T* own_q = dq + (static_cast<std::ptrdiff_t>(i) * tokens + t) * h;
      const A* own_kv = dkv + (static_cast<std::ptrdiff_t>(i) * keys + offset + t) * 2 * h;
      std::copy(own_q, own_q + h, to);
      // The one rounding of the key/value sums to T.
      if (later != nullptr) {
        const A* add = later + (static_cast<std::ptrdiff_t>(i) * tokens + t) * 2 * h;
        for (int d = 0; d < 2 * h; ++d)
          to[h + d] = static_cast<T>(add[d] + own_kv[d]);
      } else {
        for (int d = 0; d < 2 * h; ++d)
          to[h + d] = static_cast<T>(own_kv[d]);
      }
    }
}

// An earlier slice's key/value gradient sums to [batch, length, h2] += rows start … start +
// length − 1 of dkv [batch, keys, h2].
template <class A>
void add_key_rows(A* to, const A* dkv, int batch, int length, int keys, int start, int h2) {
  for (int i = 0; i < batch; ++i)
    for (int t = 0; t < length; ++t) {
      A* row = to + (static_cast<std::ptrdiff_t>(i) * length + t) * h2;
      const A* from = dkv + (static_cast<std::ptrdiff_t>(i) * keys + start + t) * h2;
      for (int d = 0; d < h2; ++d)
        row[d] += from[d];
    }
}

}  // namespace pipesched::toy::detail
