// Checked NCCL calls: PIPESCHED_NCCL_CHECK throws pipesched::cuda_error naming the call.
#pragma once

#include <nccl.h>

#include <string>

#include "pipesched/device/cuda/check.cuh"

namespace pipesched {

namespace detail::nccl {

//! Throws cuda_error naming `call`, `file` and `line` when `code` is not ncclSuccess.
inline void check(ncclResult_t code, const char* call, const char* file, int line,
                  const char* hint = nullptr) {
  if (code == ncclSuccess) return;
  std::string what = detail::gpu::where(call, file, line) + " failed: " + ncclGetErrorString(code);
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0')
    what += std::string(" (") + last + ")";
  if (hint) what += std::string("; ") + hint;
  throw cuda_error(what);
}

}  // namespace detail::nccl

}  // namespace pipesched

//! Checks an NCCL call; throws pipesched::cuda_error naming the call, file and line (and what
//! ncclGetErrorString and ncclGetLastError say) on failure.
#define PIPESCHED_NCCL_CHECK(call) \
  ::pipesched::detail::nccl::check((call), #call, __FILE__, __LINE__)
