// What every GPU toy layer shares: the device and a cuBLAS handle bound to its compute stream
// (the Engine), the row-major linear layer as column-major cuBLAS GEMMs, and a layer's
// parameters and gradients on the device with the double sums float gradients accumulate in.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/toy/cuda/detail/layer_kernels.cuh"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy::gpu::detail {

// One stage model's device and cuBLAS handle. Shared by the stage's layers (a stage model
// moves, its layers keep pointing at the same engine); not copyable.
class Engine {
 public:
  explicit Engine(CudaDevice device) : device_(std::move(device)) {
    device_.activate();
    copy_.emplace();
    PIPESCHED_CUDA_CHECK(cublasCreate(&blas_));
    try {
      PIPESCHED_CUDA_CHECK(cublasSetStream(blas_, device_.compute()));
      // No reduced-precision shortcuts (TF32): the tests compare with a host reference.
      PIPESCHED_CUDA_CHECK(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));
    } catch (...) {
      cublasDestroy(blas_);
      throw;
    }
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine() {
    // The copies still queued read or write pinned buffers this engine frees.
    if (copy_) cudaStreamSynchronize(*copy_);
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  cudaStream_t stream() const noexcept { return device_.compute(); }
  //! The stream copies of offloaded activations run on, beside the compute stream.
  cudaStream_t copy_stream() const noexcept { return *copy_; }
  //! Orders the copy stream after the work queued on the compute stream so far.
  void copy_after_compute() {
    PIPESCHED_CUDA_CHECK(cudaEventRecord(to_copy_, stream()));
    PIPESCHED_CUDA_CHECK(cudaStreamWaitEvent(*copy_, to_copy_, 0));
  }
  //! Orders the compute stream after the work queued on the copy stream so far.
  void compute_after_copy() {
    PIPESCHED_CUDA_CHECK(cudaEventRecord(to_compute_, *copy_));
    PIPESCHED_CUDA_CHECK(cudaStreamWaitEvent(stream(), to_compute_, 0));
  }
  //! Pinned host memory of `bytes`: a buffer whose copies have run, or a new one.
  PinnedBuffer pinned(std::size_t bytes) {
    reap();
    auto it = free_.find(bytes);
    if (it == free_.end()) return PinnedBuffer(bytes);
    PinnedBuffer b = std::move(it->second);
    free_.erase(it);
    return b;
  }
  //! Takes `buffers` back once the copy stream's work queued so far (the copies back that read
  //! them) has run; pinned() hands them out again from then on.
  void retire(std::vector<PinnedBuffer> buffers) {
    if (buffers.empty()) return;
    Retired r{std::make_unique<CudaEvent>(), std::move(buffers)};
    PIPESCHED_CUDA_CHECK(cudaEventRecord(*r.done, *copy_));
    retired_.push_back(std::move(r));
  }
  cublasHandle_t blas() const noexcept { return blas_; }
  const CudaDevice& device() const noexcept { return device_; }

 private:
  // Moves the buffers whose copies have run to the free list.
  void reap() {
    while (!retired_.empty() && cudaEventQuery(*retired_.front().done) == cudaSuccess) {
      for (PinnedBuffer& b : retired_.front().buffers)
        free_.emplace(b.bytes(), std::move(b));
      retired_.pop_front();
    }
    (void)cudaGetLastError();  // a query of an unfinished event leaves cudaErrorNotReady
  }

  struct Retired {
    std::unique_ptr<CudaEvent> done;  // recorded on the copy stream after the copies back
    std::vector<PinnedBuffer> buffers;
  };

  CudaDevice device_;
  cublasHandle_t blas_ = nullptr;
  std::optional<CudaStream> copy_;
  CudaEvent to_copy_, to_compute_;
  std::deque<Retired> retired_;
  std::multimap<std::size_t, PinnedBuffer> free_;
};

using EnginePtr = std::shared_ptr<Engine>;

inline void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                 float* c, int ldc) {
  PIPESCHED_CUDA_CHECK(cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc));
}
inline void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 double alpha, const double* a, int lda, const double* b, int ldb, double beta,
                 double* c, int ldc) {
  PIPESCHED_CUDA_CHECK(cublasDgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc));
}

// A row-major [r, c] matrix is, to column-major cuBLAS, its transpose [c, r] with leading
// dimension c; each call below is the row-major product written in those terms.

// y[n, out] = x[n, in] · W[out, in]ᵀ + b (b may be null) + residual (may be null).
template <class T>
void linear_forward(const Engine& g, const T* x, const T* w, const T* b, const T* residual, T* y,
                    int n, int in, int out) {
  if (n < 1 || out < 1) return;
  gemm(g.blas(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, T(1), w, in, x, in, T(0), y, out);
  if (b != nullptr || residual != nullptr) add_bias(y, b, residual, n, out, g.stream());
}

// dx[n, in] = dy[n, out] · W[out, in] (+ residual, may be null).
template <class T>
void linear_backward_input(const Engine& g, const T* dy, const T* w, const T* residual, T* dx,
                           int n, int in, int out) {
  if (n < 1 || in < 1) return;
  gemm(g.blas(), CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, T(1), w, in, dy, out, T(0), dx, in);
  if (residual != nullptr) add_bias<T>(dx, nullptr, residual, n, in, g.stream());
}

// dW[out, in] += dy[n, out]ᵀ · x[n, in] and db[out] += Σ_rows dy (db may be null), summed in
// acc_t<T>: a float model's operands are widened to double and multiplied by a double GEMM, so
// the sum over rows is as wide as the host model's.
template <class T>
void linear_backward_weight(const Engine& g, const T* dy, const T* x, acc_t<T>* dw, acc_t<T>* db,
                            int n, int in, int out) {
  using A = acc_t<T>;
  if (n < 1 || in < 1 || out < 1) return;
  const cudaStream_t s = g.stream();
  if constexpr (std::is_same_v<A, T>) {
    gemm(g.blas(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, A(1), x, in, dy, out, A(1), dw, in);
  } else {
    DeviceTensor<A> wide_x({n, in}, s), wide_dy({n, out}, s);
    cast(x, wide_x.data(), wide_x.size(), s);
    cast(dy, wide_dy.data(), wide_dy.size(), s);
    gemm(g.blas(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, A(1), wide_x.data(), in, wide_dy.data(),
         out, A(1), dw, in);
  }
  if (db != nullptr) column_sums(dy, static_cast<const T*>(nullptr), db, n, out, s);
}

// A layer's parameters, its visible gradients and (for float) the double sums behind them, on
// the device — the twin of toy::detail::GradientSums. Contributions add into `sum(i)`;
// `publish` rounds the sums into the visible gradients.
template <class T>
class DeviceParameters {
 public:
  using sum_type = acc_t<T>;

  DeviceParameters() = default;
  //! Copies of `host` (a host layer's parameters, in its order) and zero gradients.
  DeviceParameters(std::span<const Tensor<T>> host, cudaStream_t stream) {
    for (const Tensor<T>& p : host) {
      params_.push_back(DeviceTensor<T>::from_host(p.shape, p.data, stream));
      grads_.push_back(DeviceTensor<T>::zeros(p.shape, stream));
      if constexpr (separate) sums_.push_back(DeviceTensor<sum_type>::zeros(p.shape, stream));
    }
  }

  const T* operator[](std::size_t i) const noexcept { return params_[i].data(); }
  sum_type* sum(std::size_t i) noexcept {
    if constexpr (separate)
      return sums_[i].data();
    else
      return grads_[i].data();
  }

  void publish(std::initializer_list<std::size_t> indices, cudaStream_t s) {
    if constexpr (separate)
      for (std::size_t i : indices)
        cast(sums_[i].data(), grads_[i].data(), grads_[i].size(), s);
  }

  void zero(cudaStream_t s) {
    for (DeviceTensor<T>& g : grads_)
      fill(g.data(), g.size(), T(0), s);
    for (DeviceTensor<sum_type>& g : sums_)
      fill(g.data(), g.size(), sum_type(0), s);
  }

  void sgd(double lr, cudaStream_t s) {
    for (std::size_t i = 0; i < params_.size(); ++i)
      detail::sgd(params_[i].data(), grads_[i].data(), params_[i].size(), lr, s);
  }

  // Keeps a device copy of the parameters (made on first use), on `s`: what `restore` puts back.
  void snapshot(cudaStream_t s) {
    if (saved_.size() != params_.size()) {
      saved_.clear();
      for (const DeviceTensor<T>& p : params_)
        saved_.push_back(DeviceTensor<T>::zeros(p.shape(), s));
    }
    for (std::size_t i = 0; i < params_.size(); ++i)
      PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(saved_[i].data(), params_[i].data(), params_[i].bytes(),
                                           cudaMemcpyDeviceToDevice, s));
  }
  // Puts the last snapshot back into the parameters, on `s` (nothing before a first snapshot).
  void restore(cudaStream_t s) {
    for (std::size_t i = 0; i < saved_.size() && i < params_.size(); ++i)
      PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(params_[i].data(), saved_[i].data(), params_[i].bytes(),
                                           cudaMemcpyDeviceToDevice, s));
  }

  // The visible gradients as device spans (what a data-parallel reduction overwrites).
  void append_gradient_spans(std::vector<std::span<T>>& out) {
    for (DeviceTensor<T>& g : grads_)
      out.emplace_back(g.data(), g.size());
  }

  // The parameters as device spans (what a ZeRO all-gather overwrites).
  void append_parameter_spans(std::vector<std::span<T>>& out) {
    for (DeviceTensor<T>& p : params_)
      out.emplace_back(p.data(), p.size());
  }

  void append_parameters(std::vector<Tensor<T>>& out) const { append(params_, out); }
  void append_gradients(std::vector<Tensor<T>>& out) const { append(grads_, out); }

 private:
  static constexpr bool separate = !std::is_same_v<sum_type, T>;

  static void append(const std::vector<DeviceTensor<T>>& from, std::vector<Tensor<T>>& out) {
    for (const DeviceTensor<T>& d : from) {
      Tensor<T> t(d.shape());
      t.data = d.to_host();
      out.push_back(std::move(t));
    }
  }

  std::vector<DeviceTensor<T>> params_;
  std::vector<DeviceTensor<T>> grads_;
  std::vector<DeviceTensor<sum_type>> sums_;  // empty when T is already the sum type
  std::vector<DeviceTensor<T>> saved_;        // the parameters at the last snapshot
};

// A device copy of `x` on `stream` (a stash keeps its own copy, as the host models do).
template <class T>
DeviceTensor<T> copy_of(const DeviceTensor<T>& x, cudaStream_t stream) {
  return x.clone(stream);
}

}  // namespace pipesched::toy::gpu::detail
