// Shared by the GPU tests: skip (with the CUDA runtime's reason) where there is no GPU.
#pragma once

#include <gtest/gtest.h>

#include "pipesched/device/cuda/cuda_device.cuh"

//! In a test body: GTEST_SKIP with the reason when this process sees no usable GPU.
#define PIPESCHED_NEEDS_GPU()                                        \
  do {                                                               \
    const ::pipesched::GpuStatus status = ::pipesched::gpu_status(); \
    if (!status.available()) GTEST_SKIP() << status.reason;          \
  } while (0)
