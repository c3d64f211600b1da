// The GPU toy layers' elementwise and per-row kernels: GELU and its gradient, casts, fills and
// the SGD update (Thrust functors), bias and residual adds, LayerNorm forward, backward and the
// rebuild of its output, and the column sums behind bias and LayerNorm weight gradients. Every
// launcher enqueues on the stream it is given and checks the launch.
#pragma once

#include <cuda_runtime.h>

#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/transform.h>
#include <cmath>
#include <cstddef>

#include "pipesched/toy/cuda/detail/kernel_support.cuh"
#include "pipesched/toy/detail/ops.hpp"

namespace pipesched::toy::gpu::detail {

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

}  // namespace pipesched::toy::gpu::detail
