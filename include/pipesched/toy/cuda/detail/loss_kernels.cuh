// The GPU toy models' losses: next-token cross-entropy and squared error with their gradients,
// and the sum of the per-element terms copied to the host.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cub/device/device_reduce.cuh>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/toy/cuda/detail/kernel_support.cuh"

namespace pipesched::toy::gpu::detail {

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
