// The GPU toy GPT's layers measured over a grid: toy::gpt_layer_profile's twin, the three
// stages of each grid point built on one GPU and timed there by cuda-local's events (one rank,
// one compute stream), so a profile of the kernels the GPU runs.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/exec/layer_profiler.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/toy/cuda/data.cuh"
#include "pipesched/toy/cuda/gpt.cuh"
#include "pipesched/toy/layer_profile.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"

namespace pipesched::toy::gpu {

//! Measures the layers of the GPU toy GPT (gpu::GptStage<T> of `config`'s widths and
//! vocabulary) on `device` over `grid`, as toy::gpt_layer_profile measures the host model's:
//! at each point three stages of a three-block model with the point's microbatch size on one
//! cuda-local rank (`device`'s compute stream), the same token streams cut into the prefix
//! and the slice, every figure from the GPU's events. The profile's model is
//! gpt_model_shape(config, sizeof(T)); `options.device` names the GPU in the profile. Throws
//! invalid_problem for a grid LayerGrid::check refuses and for tensor degrees other than 1
//! (a shard's kernels are timed on the host model; the GPU stage needs an NCCL group for
//! them), and cuda_error when the GPU fails.
template <class T>
LayerProfile gpt_layer_profile(const GptConfig& config, const LayerGrid& grid,
                               const CudaDevice& device, const LayerProfileOptions& options = {}) {
  grid.check();
  if (grid.tensor != std::vector<int>{1})
    throw invalid_problem(
        "gpu::gpt_layer_profile: the grid's tensor degrees are not {1}; the GPU profile times "
        "whole layers (profile tensor-parallel shards with toy::gpt_layer_profile on the host, "
        "or give tensor = {1})");
  const int longest = *std::max_element(grid.tokens.begin(), grid.tokens.end()) +
                      *std::max_element(grid.prefixes.begin(), grid.prefixes.end());
  auto make_stages = [&](const LayerPoint& at) {
    const GptConfig c = toy::detail::layer_point_config(config, at, longest);
    std::vector<GptStage<T>> stages;
    stages.reserve(3);
    for (int s = 0; s < 3; ++s)
      stages.emplace_back(c, s, 3, device);
    return stages;
  };
  auto make_data = [&](const LayerPoint& at) {
    const StepData<T> host =
        toy::detail::layer_point_data<T>(config, at, longest, options.microbatches);
    const TrainingData<DeviceTensor<T>> whole = gpu::training_data(host, device, device);
    const bool sliced = at.prefix > 0;
    TrainingData<DeviceTensor<T>> d;
    d.input = [whole, sliced](int mb, int slice) {
      return whole.input(toy::detail::layer_point_entry(mb, slice, sliced), 0);
    };
    d.loss = [whole, sliced](const DeviceTensor<T>& out, int mb, int slice, double& loss) {
      return whole.loss(out, toy::detail::layer_point_entry(mb, slice, sliced), 0, loss);
    };
    return d;
  };
  auto measure = [&](std::vector<GptStage<T>>& stages, const TrainingData<DeviceTensor<T>>& data,
                     const ProfileOptions& o) {
    cuda_local::Pipeline<GptStage<T>> pipe(*o.schedule, {device}, stages);
    return profile_steps(pipe, data, o);
  };
  return profile_layers(gpt_model_shape(config, static_cast<int>(sizeof(T))), grid, make_stages,
                        make_data, options, measure);
}

}  // namespace pipesched::toy::gpu
