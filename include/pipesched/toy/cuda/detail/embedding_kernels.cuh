// The GPU toy GPT's embedding kernels: the gather of token and position rows, and the
// scatter-adds of their gradients.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>

#include "pipesched/toy/cuda/detail/kernel_support.cuh"

namespace pipesched::toy::gpu::detail {

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

}  // namespace pipesched::toy::gpu::detail
