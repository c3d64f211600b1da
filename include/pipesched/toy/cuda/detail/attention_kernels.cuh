// The GPU toy GPT's causal attention: forward and backward kernels with slice offsets (a slice's
// queries against the keys/values of every slice up to its own), and the bookkeeping kernels of
// a slice's key/value gradients. Every launcher enqueues on the stream it is given and checks
// the launch.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>

#include "pipesched/toy/cuda/detail/kernel_support.cuh"

namespace pipesched::toy::gpu::detail {

// ---- causal attention ------------------------------------------------------------------------
//
// Layouts (per sequence i of the batch): queries q [tokens, h]; keys and values side by side
// kv [keys, 2h] (keys in columns [0, h), values in [h, 2h)); head hd owns columns
// [hd·head_dim, (hd+1)·head_dim) of each. Query t sits at position offset + t and sees keys
// 0 … offset + t. Probabilities p [batch, heads, tokens, keys] (zero where masked).

struct AttentionDims {
  int tokens = 0;
  int keys = 0;
  int offset = 0;
  int heads = 1;
  int head_dim = 1;
  __host__ __device__ int hidden() const { return heads * head_dim; }
};

// One block per (query, head, sequence): scores, masked softmax, then the weighted values.
template <class T>
__global__ void attention_forward_kernel(const T* q, const T* kv, T* p, T* out, AttentionDims d) {
  using A = acc_t<T>;
  const int t = blockIdx.x, hd = blockIdx.y, i = blockIdx.z;
  const int h = d.hidden();
  const std::size_t col = static_cast<std::size_t>(hd) * d.head_dim;
  const T* qt = q + (static_cast<std::size_t>(i) * d.tokens + t) * h + col;
  const T* kb = kv + static_cast<std::size_t>(i) * d.keys * 2 * h + col;
  T* pt = p + ((static_cast<std::size_t>(i) * d.heads + hd) * d.tokens + t) * d.keys;
  const int last = d.offset + t;
  const A scale = A(1) / dev_sqrt(A(d.head_dim));
  A local_max = -CUDART_INF;
  for (int j = threadIdx.x; j < d.keys; j += blockDim.x) {
    if (j > last) {
      pt[j] = T(0);
      continue;
    }
    const T* kj = kb + static_cast<std::size_t>(j) * 2 * h;
    A dot = 0;
    for (int e = 0; e < d.head_dim; ++e)
      dot += A(qt[e]) * A(kj[e]);
    const T score = T(dot * scale);
    pt[j] = score;
    local_max = local_max > A(score) ? local_max : A(score);
  }
  const A max_score = block_max(local_max);
  A local_sum = 0;
  for (int j = threadIdx.x; j <= last && j < d.keys; j += blockDim.x) {
    const A e = dev_exp(A(pt[j]) - max_score);
    pt[j] = T(e);
    local_sum += A(pt[j]);
  }
  const A total = block_sum(local_sum);
  for (int j = threadIdx.x; j <= last && j < d.keys; j += blockDim.x)
    pt[j] = T(A(pt[j]) / total);
  __syncthreads();  // every probability of the row is written before any thread reads them
  T* ot = out + (static_cast<std::size_t>(i) * d.tokens + t) * h + col;
  for (int e = threadIdx.x; e < d.head_dim; e += blockDim.x) {
    A acc = 0;
    for (int j = 0; j <= last && j < d.keys; ++j)
      acc += A(pt[j]) * A(kb[static_cast<std::size_t>(j) * 2 * h + h + e]);
    ot[e] = T(acc);
  }
}

template <class T>
void attention_forward(const T* q, const T* kv, T* p, T* out, int batch, const AttentionDims& d,
                       cudaStream_t s) {
  if (batch < 1 || d.tokens < 1) return;
  const dim3 grid(static_cast<unsigned>(d.tokens), static_cast<unsigned>(d.heads),
                  static_cast<unsigned>(batch));
  attention_forward_kernel<<<grid, block_threads, 0, s>>>(q, kv, p, out, d);
  check_launch("attention_forward_kernel");
}

// Backward, query side. One block per (query, head, sequence): the score gradients
// ds_j = p_j · (dp_j − Σ_k p_k dp_k) · scale with dp_j = dout · v_j (kept in `ds`, same layout as
// p, for the key side) and the query gradient dq = Σ_j ds_j k_j (overwritten).
template <class T>
__global__ void attention_backward_query_kernel(const T* dout, const T* kv, const T* p,
                                                acc_t<T>* ds, T* dq, AttentionDims d) {
  using A = acc_t<T>;
  const int t = blockIdx.x, hd = blockIdx.y, i = blockIdx.z;
  const int h = d.hidden();
  const std::size_t col = static_cast<std::size_t>(hd) * d.head_dim;
  const std::size_t row = (static_cast<std::size_t>(i) * d.tokens + t) * h + col;
  const T* kb = kv + static_cast<std::size_t>(i) * d.keys * 2 * h + col;
  const std::size_t prow = ((static_cast<std::size_t>(i) * d.heads + hd) * d.tokens + t) * d.keys;
  const T* pt = p + prow;
  A* dst = ds + prow;
  const int last = d.offset + t;
  const A scale = A(1) / dev_sqrt(A(d.head_dim));
  A local = 0;
  for (int j = threadIdx.x; j < d.keys; j += blockDim.x) {
    if (j > last) {
      dst[j] = A(0);
      continue;
    }
    const T* vj = kb + static_cast<std::size_t>(j) * 2 * h + h;
    A dot = 0;
    for (int e = 0; e < d.head_dim; ++e)
      dot += A(dout[row + e]) * A(vj[e]);
    dst[j] = dot;  // dp_j for now
    local += A(pt[j]) * dot;
  }
  const A weighted = block_sum(local);
  for (int j = threadIdx.x; j <= last && j < d.keys; j += blockDim.x)
    dst[j] = A(pt[j]) * (dst[j] - weighted) * scale;
  __syncthreads();  // every ds of the row is written before any thread reads them
  for (int e = threadIdx.x; e < d.head_dim; e += blockDim.x) {
    A acc = 0;
    for (int j = 0; j <= last && j < d.keys; ++j)
      acc += dst[j] * A(kb[static_cast<std::size_t>(j) * 2 * h + e]);
    dq[row + e] = T(acc);
  }
}

// Backward, key side. One block per (key, head, sequence): dk_j = Σ_t ds_tj q_t and
// dv_j = Σ_t p_tj dout_t over the queries t that see key j, written (not added) in double into
// dkv [batch, keys, 2h] — every element is written, masked keys of no query get 0.
template <class T>
__global__ void attention_backward_key_kernel(const T* dout, const T* q, const T* p,
                                              const acc_t<T>* ds, acc_t<T>* dkv, AttentionDims d) {
  using A = acc_t<T>;
  const int j = blockIdx.x, hd = blockIdx.y, i = blockIdx.z;
  const int h = d.hidden();
  const std::size_t col = static_cast<std::size_t>(hd) * d.head_dim;
  const int first = j - d.offset > 0 ? j - d.offset : 0;  // the first query that sees key j
  const std::size_t pbase = (static_cast<std::size_t>(i) * d.heads + hd) * d.tokens;
  A* to = dkv + (static_cast<std::size_t>(i) * d.keys + j) * 2 * h + col;
  for (int e = threadIdx.x; e < d.head_dim; e += blockDim.x) {
    A dk = 0, dv = 0;
    for (int t = first; t < d.tokens; ++t) {
      const std::size_t row = (static_cast<std::size_t>(i) * d.tokens + t) * h + col + e;
      const std::size_t pk = (pbase + t) * d.keys + j;
      dk += ds[pk] * A(q[row]);
      dv += A(p[pk]) * A(dout[row]);
    }
    to[e] = dk;
    to[h + e] = dv;
  }
}

template <class T>
void attention_backward(const T* dout, const T* q, const T* kv, const T* p, acc_t<T>* ds, T* dq,
                        acc_t<T>* dkv, int batch, const AttentionDims& d, cudaStream_t s) {
  if (batch < 1 || d.tokens < 1) return;
  const dim3 queries(static_cast<unsigned>(d.tokens), static_cast<unsigned>(d.heads),
                     static_cast<unsigned>(batch));
  attention_backward_query_kernel<<<queries, block_threads, 0, s>>>(dout, kv, p, ds, dq, d);
  check_launch("attention_backward_query_kernel");
  const dim3 keys(static_cast<unsigned>(d.keys), static_cast<unsigned>(d.heads),
                  static_cast<unsigned>(batch));
  attention_backward_key_kernel<<<keys, block_threads, 0, s>>>(dout, q, p, ds, dkv, d);
  check_launch("attention_backward_key_kernel");
}

// The slice's q/k/v gradient [batch, tokens, 3h]: its queries' gradient dq, then its own
// keys'/values' gradient (rows offset … offset + tokens − 1 of dkv) plus what later slices left
// in `later` [batch, tokens, 2h] (may be null), rounded to T once.
template <class T>
__global__ void assemble_dqkv_kernel(const T* dq, const acc_t<T>* dkv, const acc_t<T>* later,
                                     T* out, int tokens, int keys, int offset, int h,
                                     std::size_t n) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const std::size_t width = 3 * static_cast<std::size_t>(h);
  const std::size_t r = k / width;
  const std::size_t c = k % width;
  if (c < static_cast<std::size_t>(h)) {
    out[k] = dq[r * h + c];
    return;
  }
  const std::size_t i = r / static_cast<std::size_t>(tokens);
  const std::size_t t = r % static_cast<std::size_t>(tokens);
  const std::size_t e = c - h;
  acc_t<T> v = dkv[(i * keys + offset + t) * 2 * h + e];
  if (later != nullptr) v = later[r * 2 * h + e] + v;
  out[k] = static_cast<T>(v);
}

template <class T>
void assemble_dqkv(const T* dq, const acc_t<T>* dkv, const acc_t<T>* later, T* out, int batch,
                   int tokens, int keys, int offset, int h, cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(batch) * tokens * 3 * h;
  if (n == 0) return;
  assemble_dqkv_kernel<<<grid_for(n), block_threads, 0, s>>>(dq, dkv, later, out, tokens, keys,
                                                             offset, h, n);
  check_launch("assemble_dqkv_kernel");
}

// An earlier slice's key/value gradient sums [batch, length, 2h] += rows start … start + length − 1
// of dkv [batch, keys, 2h].
template <class A>
__global__ void add_key_rows_kernel(A* to, const A* dkv, int length, int keys, int start, int h2,
                                    std::size_t n) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const std::size_t r = k / static_cast<std::size_t>(h2);
  const std::size_t e = k % static_cast<std::size_t>(h2);
  const std::size_t i = r / static_cast<std::size_t>(length);
  const std::size_t t = r % static_cast<std::size_t>(length);
  to[k] += dkv[(i * keys + start + t) * h2 + e];
}

template <class A>
void add_key_rows(A* to, const A* dkv, int batch, int length, int keys, int start, int h2,
                  cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(batch) * length * h2;
  if (n == 0) return;
  add_key_rows_kernel<<<grid_for(n), block_threads, 0, s>>>(to, dkv, length, keys, start, h2, n);
  check_launch("add_key_rows_kernel");
}

}  // namespace pipesched::toy::gpu::detail
