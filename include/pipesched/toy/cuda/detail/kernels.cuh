// The GPU toy models' kernels: elementwise functors for Thrust, per-row LayerNorm and softmax
// kernels built on cub::BlockReduce, column sums for bias and LayerNorm weight gradients, causal
// attention forward and backward with slice offsets, the embedding's gather and scatter-add,
// and the losses. Every launcher enqueues on the stream it is given and checks the launch.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/transform.h>
#include <cmath>
#include <cstddef>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <string>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/toy/detail/ops.hpp"

namespace pipesched::toy::gpu::detail {

//! What sums inside kernels and weight gradients accumulate in (double for float models).
template <class T>
using acc_t = toy::detail::accumulator_t<T>;

// Threads per block of every kernel; the per-row kernels reduce over a block of this size.
inline constexpr int block_threads = 128;

// Thrust on `stream` without the host synchronization plain `par` adds after each algorithm.
inline auto on(cudaStream_t stream) {
  return thrust::cuda::par_nosync.on(stream);
}

inline unsigned grid_for(std::size_t n) {
  return static_cast<unsigned>((n + block_threads - 1) / block_threads);
}

inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw cuda_error(std::string("launching ") + kernel + " failed: " + cudaGetErrorName(e) + " (" +
                     cudaGetErrorString(e) + ")");
}

// ---- device math in either precision ------------------------------------------------------

__device__ inline float dev_tanh(float x) {
  return tanhf(x);
}
__device__ inline double dev_tanh(double x) {
  return tanh(x);
}
__device__ inline double dev_exp(double x) {
  return exp(x);
}
__device__ inline double dev_log(double x) {
  return log(x);
}
__device__ inline double dev_sqrt(double x) {
  return sqrt(x);
}
__device__ inline float dev_floor(float x) {
  return floorf(x);
}
__device__ inline double dev_floor(double x) {
  return floor(x);
}

struct MaxOp {
  __device__ double operator()(double a, double b) const { return a > b ? a : b; }
};

// ---- elementwise functors (Thrust) ---------------------------------------------------------

template <class T>
struct Gelu {
  __host__ __device__ T operator()(T x) const {
    const T c = T(0.7978845608028654);  // sqrt(2 / pi)
    const T u = c * (x + T(0.044715) * x * x * x);
#ifdef __CUDA_ARCH__
    return T(0.5) * x * (T(1) + dev_tanh(u));
#else
    return T(0.5) * x * (T(1) + std::tanh(u));
#endif
  }
};

// d · gelu'(x): the pre-activation gradient from the activation's.
template <class T>
struct GeluGradient {
  __host__ __device__ T operator()(T d, T x) const {
    const T c = T(0.7978845608028654);
    const T x2 = x * x;
#ifdef __CUDA_ARCH__
    const T t = dev_tanh(c * (x + T(0.044715) * x * x2));
#else
    const T t = std::tanh(c * (x + T(0.044715) * x * x2));
#endif
    return d *
           (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x2));
  }
};

template <class To>
struct CastTo {
  template <class From>
  __host__ __device__ To operator()(From v) const {
    return static_cast<To>(v);
  }
};

template <class T>
struct Plus {
  __host__ __device__ T operator()(T a, T b) const { return a + b; }
};

// p − lr · g, the host reference's SGD update.
template <class T>
struct SgdUpdate {
  T lr;
  __host__ __device__ T operator()(T p, T g) const { return p - lr * g; }
};

template <class T>
void gelu(const T* x, T* y, std::size_t n, cudaStream_t s) {
  if (n > 0) thrust::transform(on(s), x, x + n, y, Gelu<T>{});
}
// d[i] *= gelu'(x[i])
template <class T>
void times_gelu_gradient(T* d, const T* x, std::size_t n, cudaStream_t s) {
  if (n > 0) thrust::transform(on(s), d, d + n, x, d, GeluGradient<T>{});
}
// y[i] += x[i]
template <class T>
void add_into(T* y, const T* x, std::size_t n, cudaStream_t s) {
  if (n > 0) thrust::transform(on(s), y, y + n, x, y, Plus<T>{});
}
template <class From, class To>
void cast(const From* x, To* y, std::size_t n, cudaStream_t s) {
  if (n > 0) thrust::transform(on(s), x, x + n, y, CastTo<To>{});
}
template <class T>
void fill(T* x, std::size_t n, T value, cudaStream_t s) {
  if (n > 0) thrust::fill(on(s), x, x + n, value);
}
template <class T>
void sgd(T* p, const T* g, std::size_t n, double lr, cudaStream_t s) {
  if (n > 0) thrust::transform(on(s), p, p + n, g, p, SgdUpdate<T>{static_cast<T>(lr)});
}

// ---- bias, residual, LayerNorm apply ---------------------------------------------------------

// y[r, c] = y[r, c] + b[c] (+ residual[r, c]); b and residual may be null.
template <class T>
__global__ void add_bias_kernel(T* y, const T* b, const T* residual, std::size_t n, int width) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  T v = y[k];
  if (b != nullptr) v += b[k % static_cast<std::size_t>(width)];
  if (residual != nullptr) v += residual[k];
  y[k] = v;
}

template <class T>
void add_bias(T* y, const T* b, const T* residual, int rows, int width, cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  if (n == 0) return;
  add_bias_kernel<<<grid_for(n), block_threads, 0, s>>>(y, b, residual, n, width);
  check_launch("add_bias_kernel");
}

// y = x̂ · γ + β (the weight pass rebuilds a LayerNorm output this way).
template <class T>
__global__ void layer_norm_apply_kernel(const T* xhat, const T* gamma, const T* beta, T* y,
                                        std::size_t n, int h) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const std::size_t c = k % static_cast<std::size_t>(h);
  y[k] = xhat[k] * gamma[c] + beta[c];
}

template <class T>
void layer_norm_apply(const T* xhat, const T* gamma, const T* beta, T* y, int rows, int h,
                      cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(h);
  if (n == 0) return;
  layer_norm_apply_kernel<<<grid_for(n), block_threads, 0, s>>>(xhat, gamma, beta, y, n, h);
  check_launch("layer_norm_apply_kernel");
}

// ---- per-row reductions ----------------------------------------------------------------------

// The block-wide sum of every thread's `value`, returned to every thread. Ends with a barrier,
// so the shared storage can be used again at once.
template <class A>
__device__ A block_sum(A value) {
  using Reduce = cub::BlockReduce<A, block_threads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ A result;
  const A total = Reduce(temp).Sum(value);
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  const A out = result;
  __syncthreads();
  return out;
}

template <class A>
__device__ A block_max(A value) {
  using Reduce = cub::BlockReduce<A, block_threads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ A result;
  const A total = Reduce(temp).Reduce(value, MaxOp{});
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  const A out = result;
  __syncthreads();
  return out;
}

// One block per row of width h: x̂ = (x − mean)·rstd, y = x̂·γ + β; statistics in double.
template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* gamma, const T* beta, T* xhat,
                                          T* rstd, T* y, int h) {
  using A = acc_t<T>;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(h);
  A sum = 0;
  for (int i = threadIdx.x; i < h; i += blockDim.x)
    sum += A(x[row + i]);
  const A mean = block_sum(sum) / A(h);
  A squares = 0;
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    const A d = A(x[row + i]) - mean;
    squares += d * d;
  }
  const A var = block_sum(squares) / A(h);
  const A rs = A(1) / dev_sqrt(var + A(toy::detail::layer_norm_epsilon));
  if (threadIdx.x == 0) rstd[blockIdx.x] = T(rs);
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    const T xh = T((A(x[row + i]) - mean) * rs);
    xhat[row + i] = xh;
    y[row + i] = xh * gamma[i] + beta[i];
  }
}

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* xhat, T* rstd, T* y, int rows,
                        int h, cudaStream_t s) {
  if (rows < 1 || h < 1) return;
  layer_norm_forward_kernel<<<rows, block_threads, 0, s>>>(x, gamma, beta, xhat, rstd, y, h);
  check_launch("layer_norm_forward_kernel");
}

// One block per row: dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ⊙ x̂)) with dx̂ = dy ⊙ γ, plus
// `residual` (may be null).
template <class T>
__global__ void layer_norm_backward_input_kernel(const T* dy, const T* xhat, const T* rstd,
                                                 const T* gamma, const T* residual, T* dx, int h) {
  using A = acc_t<T>;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(h);
  A sum_d = 0, sum_dx = 0;
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    const A d = A(dy[row + i]) * A(gamma[i]);
    sum_d += d;
    sum_dx += d * A(xhat[row + i]);
  }
  const A mean_d = block_sum(sum_d) / A(h);
  const A mean_dx = block_sum(sum_dx) / A(h);
  const A rs = A(rstd[blockIdx.x]);
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    const A d = A(dy[row + i]) * A(gamma[i]);
    T v = T(rs * (d - mean_d - A(xhat[row + i]) * mean_dx));
    if (residual != nullptr) v += residual[row + i];
    dx[row + i] = v;
  }
}

template <class T>
void layer_norm_backward_input(const T* dy, const T* xhat, const T* rstd, const T* gamma,
                               const T* residual, T* dx, int rows, int h, cudaStream_t s) {
  if (rows < 1 || h < 1) return;
  layer_norm_backward_input_kernel<<<rows, block_threads, 0, s>>>(dy, xhat, rstd, gamma, residual,
                                                                  dx, h);
  check_launch("layer_norm_backward_input_kernel");
}

// One block per column c of a [rows, width] matrix: out[c] += Σ_r a[r, c] · b[r, c] (b null: 1),
// summed in double — bias gradients and LayerNorm γ/β gradients.
template <class T, class G>
__global__ void column_sums_kernel(const T* a, const T* b, G* out, int rows, int width) {
  using A = acc_t<T>;
  const int c = blockIdx.x;
  A sum = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::size_t k = static_cast<std::size_t>(r) * static_cast<std::size_t>(width) + c;
    sum += b != nullptr ? A(a[k]) * A(b[k]) : A(a[k]);
  }
  const A total = block_sum(sum);
  if (threadIdx.x == 0) out[c] += static_cast<G>(total);
}

template <class T, class G>
void column_sums(const T* a, const T* b, G* out, int rows, int width, cudaStream_t s) {
  if (rows < 1 || width < 1) return;
  column_sums_kernel<<<width, block_threads, 0, s>>>(a, b, out, rows, width);
  check_launch("column_sums_kernel");
}

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

// ---- embedding -------------------------------------------------------------------------------

template <class T>
__device__ bool valid_token(T value, int vocabulary) {
  return value >= T(0) && value < T(vocabulary) && value == dev_floor(value);
}

// y[i, t, :] = tokens[id(i, t), :] + positions[offset + t, :]. An id that is not a whole number
// in [0, vocabulary) gives NaN rows (never an out-of-bounds read), so it cannot pass unnoticed.
template <class T>
__global__ void embedding_forward_kernel(const T* ids, const T* tokens, const T* positions, T* y,
                                         int sequence, int offset, int h, int vocabulary,
                                         std::size_t n) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const std::size_t r = k / static_cast<std::size_t>(h);
  const std::size_t e = k % static_cast<std::size_t>(h);
  const std::size_t t = r % static_cast<std::size_t>(sequence);
  const T id = ids[r];
  if (!valid_token(id, vocabulary)) {
    y[k] = T(CUDART_NAN);
    return;
  }
  y[k] = tokens[static_cast<std::size_t>(id) * h + e] + positions[(offset + t) * h + e];
}

// dtokens[v, e] += Σ over rows whose id is v of dy[row, e] (one thread per element, so no two
// threads add into one place).
template <class T, class G>
__global__ void embedding_token_gradient_kernel(const T* ids, const T* dy, G* dtokens, int rows,
                                                int h, int vocabulary) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<std::size_t>(vocabulary) * h) return;
  const int v = static_cast<int>(k / static_cast<std::size_t>(h));
  const std::size_t e = k % static_cast<std::size_t>(h);
  acc_t<T> sum = 0;
  bool any = false;
  for (int r = 0; r < rows; ++r)
    if (valid_token(ids[r], vocabulary) && static_cast<int>(ids[r]) == v) {
      sum += acc_t<T>(dy[static_cast<std::size_t>(r) * h + e]);
      any = true;
    }
  if (any) dtokens[k] += static_cast<G>(sum);
}

// dpositions[offset + t, e] += Σ_i dy[i, t, e].
template <class T, class G>
__global__ void embedding_position_gradient_kernel(const T* dy, G* dpositions, int batch,
                                                   int sequence, int offset, int h) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<std::size_t>(sequence) * h) return;
  const std::size_t t = k / static_cast<std::size_t>(h);
  const std::size_t e = k % static_cast<std::size_t>(h);
  acc_t<T> sum = 0;
  for (int i = 0; i < batch; ++i)
    sum += acc_t<T>(dy[(static_cast<std::size_t>(i) * sequence + t) * h + e]);
  dpositions[(offset + t) * h + e] += static_cast<G>(sum);
}

// ---- losses ----------------------------------------------------------------------------------

// One block per token: loss[r] = log Σ exp(z) − z[label] (in double) and the gradient
// (softmax(z) − onehot(label)) · scale. A label outside the classes gives a NaN loss.
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const T* labels, T* grad, double* loss,
                                     int classes, T scale) {
  using A = double;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * classes;
  const T* z = logits + row;
  T* g = grad + row;
  const T label_value = labels[blockIdx.x];
  const bool valid = valid_token(label_value, classes);
  const int label = valid ? static_cast<int>(label_value) : -1;
  A local_max = -CUDART_INF;
  for (int c = threadIdx.x; c < classes; c += blockDim.x)
    local_max = local_max > A(z[c]) ? local_max : A(z[c]);
  const A max_z = block_max(local_max);
  A local_sum = 0;
  for (int c = threadIdx.x; c < classes; c += blockDim.x)
    local_sum += dev_exp(A(z[c]) - max_z);
  const A total = block_sum(local_sum);
  for (int c = threadIdx.x; c < classes; c += blockDim.x) {
    T v = T(dev_exp(A(z[c]) - max_z) / total * A(scale));
    if (c == label) v -= scale;
    g[c] = v;
  }
  if (threadIdx.x == 0)
    loss[blockIdx.x] = valid ? dev_log(total) + max_z - A(z[label]) : double(CUDART_NAN);
}

// grad = scale · (out − target), squares = (out − target)² in double.
template <class T>
__global__ void squared_error_kernel(const T* out, const T* target, T* grad, double* squares,
                                     T scale, std::size_t n) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const T diff = out[k] - target[k];
  grad[k] = scale * diff;
  squares[k] = double(diff) * double(diff);
}

// Σ values[0 … n) with cub::DeviceReduce, copied to the host: the one host synchronization of a
// loss.
inline double sum_to_host(const double* values, int n, cudaStream_t s) {
  if (n < 1) return 0.0;
  DeviceTensor<double> total({1}, s);
  std::size_t temp_bytes = 0;
  PIPESCHED_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, values, total.data(), n, s));
  DeviceTensor<unsigned char> temp({static_cast<int>(temp_bytes > 0 ? temp_bytes : 1)}, s);
  PIPESCHED_CUDA_CHECK(cub::DeviceReduce::Sum(temp.data(), temp_bytes, values, total.data(), n, s));
  double host = 0;
  PIPESCHED_CUDA_CHECK(
      cudaMemcpyAsync(&host, total.data(), sizeof(double), cudaMemcpyDeviceToHost, s));
  PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

}  // namespace pipesched::toy::gpu::detail
