// The CUDA device and the cuda-local transport: error checks name the call, file and line;
// cuda-local refuses ranks on different GPUs; device tensors round-trip; synthetic stages' data
// is uploaded once and copied on the stream; the executor runs synthetic GPU stages on one GPU
// with every rank on its own stream, and the measured step stays within 5 % of the simulated
// makespan. Tests that need a GPU skip, with the reason, where there is none (and fail with
// PIPESCHED_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/cuda/synthetic.cuh"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"

namespace ps = pipesched;

static_assert(ps::device<ps::CudaDevice>);
static_assert(
    ps::transport<ps::cuda_local::Transport<ps::DeviceTensor<float>>, ps::DeviceTensor<float>>);
static_assert(ps::stage_model<ps::toy::gpu::SyntheticStage>);
static_assert(ps::wire_tensor<ps::DeviceTensor<double>>);

namespace {

TEST(CudaCheck, AFailingCallIsNamedWithFileAndLine) {
  // Fails with or without a GPU: there is no GPU 9999.
  try {
    PIPESCHED_CUDA_CHECK(cudaSetDevice(9999));
    ADD_FAILURE() << "no error";
  } catch (const ps::cuda_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice(9999)"), std::string::npos) << what;
    EXPECT_NE(what.find("test_cuda_local.cu:"), std::string::npos) << what;
  }
}

TEST(CudaDevice, WithoutAGpuTheErrorSaysSo) {
  const ps::GpuStatus status = ps::gpu_status();
  if (status.available()) {
    EXPECT_NO_THROW(ps::CudaDevice{0});
    EXPECT_THROW(ps::CudaDevice{status.devices}, ps::cuda_error);
  } else {
    try {
      ps::CudaDevice d(0);
      ADD_FAILURE() << "no error";
    } catch (const ps::cuda_error& e) {
      EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos) << e.what();
    }
  }
}

TEST(CudaLocalTransport, EveryRankMustBeOnTheSameGpu) {
  // Checked before any GPU is touched, so this runs without one.
  EXPECT_NO_THROW(ps::detail::gpu::require_one_gpu({0, 0, 0, 0}, "cuda_local::Transport"));
  EXPECT_NO_THROW(ps::detail::gpu::require_one_gpu({3}, "cuda_local::Transport"));
  try {
    ps::detail::gpu::require_one_gpu({0, 0, 1, 0}, "cuda_local::Transport");
    ADD_FAILURE() << "no error";
  } catch (const ps::invalid_problem& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 2 is on GPU 1"), std::string::npos) << what;
    EXPECT_NE(what.find("nccl::Pipeline"), std::string::npos) << what;
  }
  EXPECT_THROW(ps::detail::gpu::require_one_gpu({}, "cuda_local::Transport"), ps::invalid_problem);
}

TEST(DeviceTensor, RoundTripAndClone) {
  PIPESCHED_NEEDS_GPU();
  ps::CudaDevice d(0);
  const std::vector<double> values{1.5, -2.0, 3.25, 4.0, 0.0, 7.0};
  auto t = ps::DeviceTensor<double>::from_host({2, 3}, values, d.compute());
  EXPECT_EQ(t.bytes(), 6 * sizeof(double));
  EXPECT_EQ(t.to_host(), values);
  auto c = t.clone(d.compute());
  EXPECT_EQ(c.to_host(), values);
  EXPECT_NE(c.data(), t.data());
  auto z = ps::DeviceTensor<float>::zeros({5}, d.compute());
  EXPECT_EQ(z.to_host(), std::vector<float>(5, 0.0f));
}

TEST(CudaLocalTransport, MessagesArriveByKeyOnTheReceiversStream) {
  PIPESCHED_NEEDS_GPU();
  std::vector<ps::CudaDevice> devices{ps::CudaDevice(0), ps::CudaDevice(0)};
  ps::cuda_local::Transport<ps::DeviceTensor<float>> t(devices);
  const ps::MessageKey a{1, 0, 0, ps::Direction::Forward}, b{1, 1, 0, ps::Direction::Forward};
  t.send(0, 1, b, ps::DeviceTensor<float>::from_host({2}, {3, 4}, devices[0].compute()));
  t.send(0, 1, a, ps::DeviceTensor<float>::from_host({2}, {1, 2}, devices[0].compute()));
  auto x = t.receive(1, a, std::chrono::seconds(5));
  EXPECT_EQ(x.stream(), devices[1].compute());
  EXPECT_EQ(x.to_host(), (std::vector<float>{1, 2}));
  auto y = t.try_receive(1, b);
  ASSERT_TRUE(y.has_value());
  EXPECT_EQ(y->to_host(), (std::vector<float>{3, 4}));
  EXPECT_FALSE(t.try_receive(1, b).has_value());
}

TEST(SyntheticStage, TrainingDataCopiesOneUploadOnTheComputeStream) {
  PIPESCHED_NEEDS_GPU();
  ps::CudaDevice first(0), last(0);
  const auto data = ps::toy::gpu::synthetic_training_data(first);
  for (int mb : {0, 3}) {
    ps::DeviceTensor<float> x = data.input(mb, 0);
    EXPECT_EQ(x.stream(), first.compute());
    EXPECT_EQ(x.to_host(), std::vector<float>(4, 1.0f));
    // Each microbatch gets its own copy: the executor frees inputs as it goes.
    EXPECT_NE(x.data(), data.input(mb, 0).data());
  }
  double loss = 0;
  const auto y = ps::DeviceTensor<float>::from_host({2}, {5, 6}, last.compute());
  const ps::DeviceTensor<float> dy = data.loss(y, 0, 0, loss);
  EXPECT_EQ(dy.stream(), last.compute());
  EXPECT_EQ(dy.to_host(), (std::vector<float>{5, 6}));
}

TEST(CudaLocalPipeline, SyntheticStepsStayWithinFivePercentOfTheSimulation) {
  PIPESCHED_NEEDS_GPU();
  const ps::toy::SyntheticCost cost{.forward = 1e-3,
                                    .backward_input = 1e-3,
                                    .backward_weight = 1e-3,
                                    .activation_bytes = 1 << 20,
                                    .wgrad_bytes = 1 << 19};
  for (const char* name : {"1f1b", "zb-h1"}) {
    const ps::GeneratorInfo& g = ps::find_generator(name);
    const ps::Schedule s = g.generate({.ranks = 4, .microbatches = 16}, g.default_wgrad);
    const double ratio = ps::toy::gpu::synthetic_ratio(s, cost);
    std::printf("cuda-local synthetic %s, 4 ranks: measured / simulated = %.3f\n", name, ratio);
    EXPECT_LE(ratio, 1.05) << name;
    EXPECT_GE(ratio, 0.99) << name;
  }
}

}  // namespace
