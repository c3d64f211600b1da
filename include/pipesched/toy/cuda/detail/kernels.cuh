// The GPU toy models' kernels, all of them: what every launcher builds on, the layers'
// elementwise and per-row kernels, causal attention, the embedding, the losses.
#pragma once

#include "pipesched/toy/cuda/detail/attention_kernels.cuh"
#include "pipesched/toy/cuda/detail/embedding_kernels.cuh"
#include "pipesched/toy/cuda/detail/kernel_support.cuh"
#include "pipesched/toy/cuda/detail/layer_kernels.cuh"
#include "pipesched/toy/cuda/detail/loss_kernels.cuh"
