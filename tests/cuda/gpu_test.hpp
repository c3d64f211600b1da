// Shared by the GPU tests: what a test that needs a GPU does where there is none. By default it
// skips with the CUDA runtime's reason (ctest lists it as skipped, never as passed); with
// PIPESCHED_REQUIRE_GPU=1 in the environment (scripts/gpu-check.sh sets it) it fails with that
// reason instead, so a machine whose driver, devices or CUDA_VISIBLE_DEVICES leave the runtime
// without a GPU cannot pass the check by skipping everything.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

#include "pipesched/device/cuda/cuda_device.cuh"

namespace pipesched::testing_support {

//! Whether PIPESCHED_REQUIRE_GPU asks for a missing GPU to fail the tests rather than skip them
//! (set to anything but empty or "0").
inline bool gpu_required() {
  const char* v = std::getenv("PIPESCHED_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

}  // namespace pipesched::testing_support

//! In a test body: when this process sees no usable GPU, skip with the runtime's reason, or
//! fail with it when PIPESCHED_REQUIRE_GPU is set.
#define PIPESCHED_NEEDS_GPU()                                                          \
  do {                                                                                 \
    const ::pipesched::GpuStatus status = ::pipesched::gpu_status();                   \
    if (!status.available()) {                                                         \
      if (::pipesched::testing_support::gpu_required())                                \
        GTEST_FAIL() << "this test needs a GPU and PIPESCHED_REQUIRE_GPU is set, but " \
                     << status.reason;                                                 \
      GTEST_SKIP() << status.reason;                                                   \
    }                                                                                  \
  } while (0)
