// A synthetic stage on the GPU: forward, backward_input and backward_weight each launch a
// kernel that spins for its set duration (read from the GPU's nanosecond global timer), and
// the stash holds a set byte count — for measuring what the executor and a GPU transport add
// to a schedule's simulated makespan.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"

namespace pipesched::toy::gpu {

namespace detail {

__device__ inline std::uint64_t global_nanoseconds() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread spins until `nanoseconds` have passed since it started, then copies `n` values.
// The kernels are static (one copy per translation unit): a header's non-template kernel would
// otherwise be defined again by every .cu file that includes it, and the link would fail.
static __global__ void spin_and_copy(std::uint64_t nanoseconds, const float* in, float* out,
                                     int n) {
  const std::uint64_t start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) {
  }
  for (int i = 0; i < n; ++i)
    out[i] = in[i];
}

static __global__ void spin(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) {
  }
}

inline std::uint64_t to_ns(double seconds) {
  return static_cast<std::uint64_t>(std::llround(seconds * 1e9));
}

}  // namespace detail

//! The GPU twin of toy::SyntheticStage: each action is one single-thread kernel on the
//! device's compute stream that runs for its `SyntheticCost` duration; tensors (a few floats)
//! are copied through. Its figures are those of the host stage, so `ProfiledCost` built from
//! SyntheticCost predicts it.
class SyntheticStage {
 public:
  using tensor_type = DeviceTensor<float>;   //!< copied through unchanged
  using Stash = toy::SyntheticStage::Stash;  //!< the host stage's: a byte count and a phase
  using stash_type = Stash;                  //!< what a forward keeps for the backward

  //! A stage of `cost`'s durations and byte counts on `device`; throws `invalid_problem` for
  //! a negative or non-finite duration.
  SyntheticStage(const SyntheticCost& cost, CudaDevice device)
      : host_(cost), device_(std::move(device)) {}

  //! Runs for the forward's duration on the compute stream and returns a copy of `x`.
  tensor_type forward(const tensor_type& x, Stash& stash) {
    stash = Stash{host_.cost().activation_bytes, toy::detail::StashPhase::Forwarded};
    return pass(x, host_.cost().forward);
  }
  //! Runs for backward_input's duration and returns a copy of `dy`.
  tensor_type backward_input(const tensor_type& dy, Stash& stash) {
    toy::detail::require_phase(stash.phase, toy::detail::StashPhase::Forwarded,
                               "gpu::SyntheticStage", "backward_input");
    stash = Stash{host_.cost().wgrad_bytes, toy::detail::StashPhase::InputDone};
    return pass(dy, host_.cost().backward_input);
  }
  //! Runs for backward_weight's duration and empties the stash.
  void backward_weight(Stash& stash) {
    toy::detail::require_phase(stash.phase, toy::detail::StashPhase::InputDone,
                               "gpu::SyntheticStage", "backward_weight");
    stash = Stash{};
    detail::spin<<<1, 1, 0, device_.compute()>>>(detail::to_ns(host_.cost().backward_weight));
    PIPESCHED_CUDA_CHECK(cudaGetLastError());
  }

  //! The byte count the stash stands for.
  std::size_t stash_bytes(const Stash& stash) const noexcept { return stash.bytes; }
  //! Nothing to zero: the stage has no parameters.
  void zero_gradients() {}
  //! Bytes a stash holds right after forward.
  std::size_t activation_bytes() const noexcept { return host_.activation_bytes(); }
  //! Bytes a stash holds right after backward_input.
  std::size_t wgrad_bytes() const noexcept { return host_.wgrad_bytes(); }
  //! The durations and byte counts the stage was built with.
  const SyntheticCost& cost() const noexcept { return host_.cost(); }

  //! A small input for the first stage, on `device`'s compute stream. Uploading waits for the
  //! stream, so call it before a step (synthetic_training_data does), never inside one.
  static tensor_type sample_input(const CudaDevice& device) {
    return tensor_type::from_host({4}, std::vector<float>(4, 1.0f), device.compute());
  }

 private:
  tensor_type pass(const tensor_type& x, double seconds) {
    tensor_type y(x.shape(), device_.compute());
    detail::spin_and_copy<<<1, 1, 0, device_.compute()>>>(detail::to_ns(seconds), x.data(),
                                                          y.data(), static_cast<int>(x.size()));
    PIPESCHED_CUDA_CHECK(cudaGetLastError());
    return y;
  }

  toy::SyntheticStage host_;  // validates the cost and keeps the figures
  CudaDevice device_;
};

//! A step's data for synthetic GPU stages: the input is uploaded once, here, to `first` (the
//! device of stage 0); each microbatch's input is a device-to-device copy of it on `first`'s
//! compute stream, and the loss gradient a copy of the output on its own stream. Neither
//! callback waits for the GPU, so a step's host threads run ahead of it as the design asks.
inline TrainingData<DeviceTensor<float>> synthetic_training_data(const CudaDevice& first) {
  // The device is held before the tensor, so its stream outlives the tensor freed in its order.
  struct Uploaded {
    CudaDevice device;
    DeviceTensor<float> input;
  };
  auto up = std::make_shared<const Uploaded>(Uploaded{first, SyntheticStage::sample_input(first)});
  TrainingData<DeviceTensor<float>> data;
  data.input = [up](int, int) { return up->input.clone(up->device.compute()); };
  data.loss = [](const DeviceTensor<float>& y, int, int, double&) { return y.clone(y.stream()); };
  return data;
}

//! Runs `schedule` with synthetic GPU stages of `cost` on cuda_local::Pipeline (every rank on GPU
//! 0): one warm-up step, then `steps` steps; returns the fastest step over the simulated
//! makespan for the same costs, and checks every step's measured peak against the simulated
//! one (throws `error` naming the rank when they differ).
inline double synthetic_ratio(const Schedule& schedule, const SyntheticCost& cost, int steps = 5) {
  const SimulationResult sim =
      simulate(schedule, toy::synthetic_profiled_cost(cost, schedule.problem.stages));
  auto devices = cuda_local::Pipeline<SyntheticStage>::devices_for(schedule);
  std::vector<SyntheticStage> stages;
  for (int st = 0; st < schedule.problem.stages; ++st)
    stages.emplace_back(cost, devices[static_cast<std::size_t>(schedule.placement.rank_of(st))]);
  cuda_local::Pipeline<SyntheticStage> pipe(schedule, devices, stages);
  const TrainingData<DeviceTensor<float>> data =
      synthetic_training_data(devices[static_cast<std::size_t>(schedule.placement.rank_of(0))]);
  pipe.step(data);  // warm up: streams, pools, kernels
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < steps; ++i) {
    const StepResult r = pipe.step(data);
    for (int k = 0; k < schedule.rank_count(); ++k)
      if (r.ranks[static_cast<std::size_t>(k)].peak_bytes !=
          sim.ranks[static_cast<std::size_t>(k)].peak_memory)
        throw error("synthetic_ratio: rank " + std::to_string(k) + " held " +
                    std::to_string(r.ranks[static_cast<std::size_t>(k)].peak_bytes) +
                    " bytes at peak, the simulator predicts " +
                    std::to_string(sim.ranks[static_cast<std::size_t>(k)].peak_memory) + ".");
    best = std::min(best, r.seconds);
  }
  return best / sim.makespan;
}

}  // namespace pipesched::toy::gpu
