// A step's toy training data on the GPU: the inputs (whole or sliced) handed to the first
// stage on its device's compute stream, and the host model's loss — squared error or
// next-token cross-entropy — computed on the last stage's device, whose value is the one thing
// copied back to the host.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/toy/cuda/detail/loss_kernels.cuh"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/slicing.hpp"

//! The toy models as CUDA kernels: the MLP, the GPT and the synthetic stage on a CudaDevice.
namespace pipesched::toy::gpu {

namespace detail {

// The step's data uploaded once: inputs on the first device, targets on the last. The devices
// are held first so their streams outlive the tensors freed in their order.
template <class T>
struct UploadedData {
  UploadedData(CudaDevice f, CudaDevice l) : first(std::move(f)), last(std::move(l)) {}

  CudaDevice first, last;
  int microbatches = 0;
  int slices = 1;
  LossKind loss_kind = LossKind::SquaredError;
  std::vector<Tensor<T>> host_targets;  // for checking labels against the logits' classes
  std::vector<DeviceTensor<T>> inputs, targets;

  // Rows (MLP) or columns (GPT: along the sequence) of slice `slice` of `x` on `stream`.
  DeviceTensor<T> cut(const DeviceTensor<T>& x, int slice, cudaStream_t stream) const {
    if (slices == 1) return x.clone(stream);
    const bool along_sequence = loss_kind == LossKind::CrossEntropy;
    const int extent = along_sequence ? x.dim(1) : x.dim(0);
    const SliceBounds at = slice_bounds(extent, slice, slices);
    if (!along_sequence) {
      DeviceTensor<T> out({at.length, x.dim(1)}, stream);
      const std::size_t width = static_cast<std::size_t>(x.dim(1));
      PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(out.data(), x.data() + at.start * width, out.bytes(),
                                           cudaMemcpyDeviceToDevice, stream));
      return out;
    }
    DeviceTensor<T> out({x.dim(0), at.length}, stream);
    const std::size_t row = static_cast<std::size_t>(at.length) * sizeof(T);
    PIPESCHED_CUDA_CHECK(cudaMemcpy2DAsync(
        out.data(), row, x.data() + at.start, static_cast<std::size_t>(x.dim(1)) * sizeof(T), row,
        static_cast<std::size_t>(x.dim(0)), cudaMemcpyDeviceToDevice, stream));
    return out;
  }

  void check(int mb, const char* op) const {
    if (mb < 0 || mb >= microbatches)
      throw invalid_problem("gpu::training_data::" + std::string(op) + ": microbatch is " +
                            std::to_string(mb) + "; it must be between 0 and " +
                            std::to_string(microbatches - 1));
  }

  DeviceTensor<T> loss(const DeviceTensor<T>& output, int mb, int slice, double& loss) const {
    check(mb, "loss");
    const cudaStream_t s = last.compute();
    const DeviceTensor<T> target = cut(targets[static_cast<std::size_t>(mb)], slice, s);
    // The microbatch's terms: the mean's denominator, as in StepData::loss_gradient.
    const std::size_t total = targets[static_cast<std::size_t>(mb)].size();
    const double denominator = double(total) * microbatches;
    if (loss_kind == LossKind::SquaredError) {
      if (output.shape() != target.shape())
        throw invalid_problem("gpu::training_data::loss: output shape is " +
                              shape_string(output.shape()) + "; the targets have shape " +
                              shape_string(target.shape()));
      const std::size_t n = output.size();
      DeviceTensor<T> grad(output.shape(), s);
      DeviceTensor<double> squares({static_cast<int>(n)}, s);
      const T scale = T(2) / (T(total) * T(microbatches));
      if (n > 0) {
        squared_error_kernel<<<grid_for(n), block_threads, 0, s>>>(
            output.data(), target.data(), grad.data(), squares.data(), scale, n);
        check_launch("squared_error_kernel");
      }
      loss += sum_to_host(squares.data(), static_cast<int>(n), s) / denominator;
      return grad;
    }
    if (output.rank() != 3 || target.rank() != 2 || output.dim(0) != target.dim(0) ||
        output.dim(1) != target.dim(1))
      throw invalid_problem("gpu::training_data::loss: logits shape is " +
                            shape_string(output.shape()) + "; expected [" +
                            std::to_string(target.dim(0)) + ", " + std::to_string(target.dim(1)) +
                            ", vocabulary] to match the targets");
    const int classes = output.dim(2);
    for (T label : host_targets[static_cast<std::size_t>(mb)].data)
      if (!(label >= T(0) && label < T(classes)) || label != std::floor(label))
        throw invalid_problem("gpu::training_data::loss: target token " +
                              std::to_string(double(label)) + " is outside the logits' " +
                              std::to_string(classes) + " classes");
    const int tokens = target.dim(0) * target.dim(1);
    DeviceTensor<T> grad(output.shape(), s);
    DeviceTensor<double> per_token({tokens}, s);
    const T scale = T(1) / (T(total) * T(microbatches));
    if (tokens > 0) {
      cross_entropy_kernel<<<tokens, block_threads, 0, s>>>(
          output.data(), target.data(), grad.data(), per_token.data(), classes, scale);
      check_launch("cross_entropy_kernel");
    }
    loss += sum_to_host(per_token.data(), tokens, s) / denominator;
    return grad;
  }
};

}  // namespace detail

//! The executor's view of `host` on the GPU: every microbatch's input is uploaded once to
//! `first` (the device of stage 0) and its targets to `last` (the device of the last stage);
//! `input(mb, slice)` gives a copy of the (sliced, as StepData cuts it) input on `first`'s
//! compute stream, and `loss(output, mb, slice, loss)` computes StepData's loss on `last`'s
//! compute stream — the gradient stays on the device, the value is added to `loss` after one
//! copy to the host. The result owns its device copies (it does not refer to `host`). Throws
//! `invalid_problem` when slices is below 1 or does not fit the cut extent, and (at `loss`) when
//! a GPT target is not a class of the logits.
template <class T>
TrainingData<DeviceTensor<T>> training_data(const StepData<T>& host, const CudaDevice& first,
                                            const CudaDevice& last, int slices = 1) {
  if (slices < 1)
    throw invalid_problem("gpu::training_data: slices is " + std::to_string(slices) +
                          "; use 1 for whole microbatches or the schedule's slice count");
  if (host.microbatches < 1 || host.inputs.size() < static_cast<std::size_t>(host.microbatches) ||
      host.targets.size() < static_cast<std::size_t>(host.microbatches))
    throw invalid_problem("gpu::training_data: the step data has " +
                          std::to_string(host.microbatches) + " microbatches with " +
                          std::to_string(host.inputs.size()) + " inputs and " +
                          std::to_string(host.targets.size()) +
                          " targets; give at least one microbatch, each with input and target");
  auto d = std::make_shared<detail::UploadedData<T>>(first, last);
  d->microbatches = host.microbatches;
  d->slices = slices;
  d->loss_kind = host.loss_kind;
  for (int mb = 0; mb < host.microbatches; ++mb) {
    const Tensor<T>& x = host.inputs[static_cast<std::size_t>(mb)];
    if (x.rank() != 2)
      throw invalid_problem("gpu::training_data: the input of microbatch " + std::to_string(mb) +
                            " has shape " + shape_string(x.shape) +
                            "; expected [batch, sequence] ids or [rows, hidden] features");
    // Checks the slice count against the extent that is cut, as StepData does.
    if (slices > 1)
      (void)slice_bounds(host.loss_kind == LossKind::CrossEntropy ? x.dim(1) : x.dim(0), 0, slices);
    first.activate();
    d->inputs.push_back(DeviceTensor<T>::from_host(x.shape, x.data, first.compute()));
    const Tensor<T>& y = host.targets[static_cast<std::size_t>(mb)];
    last.activate();
    d->targets.push_back(DeviceTensor<T>::from_host(y.shape, y.data, last.compute()));
    d->host_targets.push_back(y);
  }
  first.activate();
  TrainingData<DeviceTensor<T>> out;
  out.input = [d](int mb, int slice) {
    d->check(mb, "input");
    return d->cut(d->inputs[static_cast<std::size_t>(mb)], slice, d->first.compute());
  };
  out.loss = [d](const DeviceTensor<T>& output, int mb, int slice, double& loss) {
    return d->loss(output, mb, slice, loss);
  };
  return out;
}

}  // namespace pipesched::toy::gpu
