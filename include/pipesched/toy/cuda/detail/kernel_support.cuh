// What every GPU toy kernel and launcher builds on: the accumulation type, the block size and
// grid of a launch, the launch check, Thrust on a stream without host synchronization, device
// math in either precision, block-wide sums and maxima on cub::BlockReduce, and the token check
// of the embedding and the loss.
#pragma once

#include <cuda_runtime.h>

#include <thrust/execution_policy.h>
#include <cmath>
#include <cstddef>
#include <cub/block/block_reduce.cuh>
#include <string>

#include "pipesched/device/cuda/check.cuh"
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

// A token id (or label) held as a T value: a whole number in [0, vocabulary).
template <class T>
__device__ bool valid_token(T value, int vocabulary) {
  return value >= T(0) && value < T(vocabulary) && value == dev_floor(value);
}

}  // namespace pipesched::toy::gpu::detail
