// Error checks for CUDA runtime and cuBLAS calls: a failing call throws cuda_error naming the
// call, the file and the line, and what the library says went wrong.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! A CUDA runtime, cuBLAS or NCCL call failed; the message names the call, file and line.
class cuda_error : public error {
 public:
  using error::error;
  void throw_after(const Message& prefix) const override { throw cuda_error(prefix + message()); }
};

namespace detail::gpu {

inline std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line);
}

inline void check(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky-free error so the next call reports its own
  throw cuda_error(where(call, file, line) + " failed: " + cudaGetErrorName(code) + " (" +
                   cudaGetErrorString(code) + ")");
}

inline const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "a cuBLAS error";
  }
}

inline void check(cublasStatus_t code, const char* call, const char* file, int line) {
  if (code != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(where(call, file, line) + " failed: " + cublas_name(code));
}

}  // namespace detail::gpu

}  // namespace pipesched

//! Checks a CUDA runtime or cuBLAS call; throws pipesched::cuda_error naming it on failure.
#define PIPESCHED_CUDA_CHECK(call) \
  ::pipesched::detail::gpu::check((call), #call, __FILE__, __LINE__)
