// The GPU toy models (gpu::MlpStage, gpu::GptStage) against the host double reference: trained
// for two steps with SGD through cuda_local::Pipeline on 4 ranks — 1F1B, ZB-H1, a Mario plan and a
// slice-pipe plan for the GPT, 1F1B for the MLP — they give the reference's loss, gradients and
// parameters, and every rank's measured peak equals the simulator's prediction from the HOST
// stages' figures. Side by side with the host stage, a GPU stage's stash and context bytes are
// the host's at every call, and a GPU layer refuses a weight piece out of range as the host layer
// does; a failed optimizer step is rolled back on every GPU rank. The static interface is
// checked without a GPU; every other test skips, with the reason, where there is none (and
// fails with PIPESCHED_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../unit/exec/exec_support.hpp"
#include "gpu_test.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/executor.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/toy/cuda/compare.cuh"
#include "pipesched/toy/cuda/data.cuh"
#include "pipesched/toy/cuda/gpt.cuh"
#include "pipesched/toy/cuda/layer_profile.cuh"
#include "pipesched/toy/cuda/mlp.cuh"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/layer_profile.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"

namespace ps = pipesched;
namespace toy = pipesched::toy;
namespace gpu = pipesched::toy::gpu;

// What the executor sees of the GPU models: the host models' shape of interface.
static_assert(ps::check_stage_model<gpu::GptStage<float>>());
static_assert(ps::slice_aware_stage_model<gpu::GptStage<float>>);
static_assert(ps::slice_aware_stage_model<gpu::GptStage<double>>);
static_assert(ps::splits_weight_gradient<gpu::GptStage<float>>);
static_assert(ps::splits_weight_gradient<gpu::GptStage<double>>);
static_assert(ps::check_stage_model<gpu::MlpStage<double>>());
static_assert(ps::stage_model<gpu::MlpStage<float>>);
static_assert(!ps::slice_aware_stage_model<gpu::MlpStage<float>>);
static_assert(ps::splits_weight_gradient<gpu::MlpStage<float>>);
static_assert(ps::splits_weight_gradient<gpu::MlpStage<double>>);

namespace {

template <class Stage>
using CudaExecutor =
    ps::Executor<Stage, ps::cuda_local::Transport<typename Stage::tensor_type>, ps::CudaDevice>;

constexpr double learning_rate = 0.05;

// Loss and parameters: float within 1e-5 of the double reference, double within 1e-12.
template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

// Gradients. A float model's own rounding already moves its gradients about 1e-4 from the
// double model's by max_relative_error (its floor is 1e-3 of the largest gradient, and small
// gradients are sums of much larger terms): the host float toy models measure 7e-5 to 1e-4 on
// these configs with their parameters set to the same values. So a float gradient is held to
// 1e-3 — ten times that, yet far below what a wrong kernel gives — and a double one to 1e-12.
template <class T>
double gradient_tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-3;
}

template <class Stage, class Config, class... Device>
std::vector<Stage> make_stages(const Config& config, int stages, const Device&... device) {
  std::vector<Stage> v;
  v.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages, device...);
  return v;
}

// Trains `schedule` on the GPU stages `Gpu` (microbatches cut into its slices) for two steps,
// SGD from each rank's optimizer hook, and compares each step with the host double reference
// `Reference` run sequentially on unsliced data; the simulated peak per rank comes from `cost`.
template <class Gpu, class Reference, class Config, class Data, class RefData>
void expect_matches_reference(const ps::Schedule& schedule, const Config& config, const Data& data,
                              const RefData& ref_data, const ps::ProfiledCost& cost) {
  using T = typename Gpu::value_type;
  const ps::SimulationResult predicted = ps::simulate(schedule, cost);
  ASSERT_FALSE(predicted.deadlock) << predicted.deadlock_report;
  const auto steps = gpu::compare_with_reference<Gpu, Reference>(schedule, config, data, ref_data,
                                                                 cost, 2, learning_rate);
  for (std::size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_LE(steps[step].loss, tolerance<T>());
    EXPECT_LE(steps[step].gradients, gradient_tolerance<T>());
    EXPECT_LE(steps[step].parameters, tolerance<T>());
    EXPECT_TRUE(steps[step].peaks_match);
  }
}

template <class T>
void expect_gpt_matches(const ps::Schedule& s, const toy::GptConfig& config,
                        const ps::ProfiledCost& cost) {
  const auto data = toy::make_gpt_data<T>(config, s.problem.microbatches, 17);
  const auto ref_data = toy::make_gpt_data<double>(config, s.problem.microbatches, 17);
  expect_matches_reference<gpu::GptStage<T>, toy::GptStage<double>>(s, config, data, ref_data,
                                                                    cost);
}

const toy::GptConfig whole_config{.blocks = 8};                   // 8-token sequences
const toy::GptConfig sliced_config{.sequence = 16, .blocks = 8};  // cut into slices

// The message of the invalid_problem `fn` throws; fails the test when it throws none.
template <class Fn>
std::string problem_message(Fn&& fn) {
  try {
    fn();
  } catch (const ps::invalid_problem& e) {
    return e.what();
  }
  ADD_FAILURE() << "no invalid_problem";
  return {};
}

// Runs `host` and `dev` (a host layer and its GPU twin, built from it) through forward and
// backward_input on `x`, then asks both for each weight piece out of range: the GPU layer must
// refuse it with the host layer's sentence under its own name, keep its stash, and then run its
// pieces as the host layer does.
template <class T, class Host, class Dev, class... Whole>
void expect_pieces_refused_alike(Host& host, Dev& dev, const toy::Tensor<T>& x,
                                 const ps::CudaDevice& device, Whole... whole) {
  typename Host::stash_type hs;
  typename Dev::Stash ds;
  const toy::Tensor<T> y = host.forward(x, hs);
  const toy::Tensor<T> dy(y.shape, T(0.5));
  host.backward_input(dy, hs);
  const auto dev_x = ps::DeviceTensor<T>::from_host(x.shape, x.data, device.compute());
  dev.forward(dev_x, ds, whole...);
  dev.backward_input(ps::DeviceTensor<T>::from_host(dy.shape, dy.data, device.compute()), ds,
                     whole...);
  const int pieces = Host::weight_pieces;
  for (int piece : {pieces, -1, pieces + 5}) {
    SCOPED_TRACE("piece " + std::to_string(piece));
    const std::string on_host = problem_message([&] { host.backward_weight_piece(hs, piece); });
    EXPECT_EQ(problem_message([&] { dev.backward_weight_piece(ds, piece); }), "gpu::" + on_host);
    EXPECT_EQ(dev.stash_bytes(ds), host.stash_bytes(hs));
  }
  for (int piece = pieces; piece-- > 0;) {
    host.backward_weight_piece(hs, piece);
    dev.backward_weight_piece(ds, piece);
    EXPECT_EQ(dev.stash_bytes(ds), host.stash_bytes(hs));
  }
  EXPECT_EQ(dev.stash_bytes(ds), 0u);
  EXPECT_THROW(dev.backward_weight_piece(ds, 0), ps::invalid_schedule);  // the stash is spent
  PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(device.compute()));
}

template <class T>
class CudaToy : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(CudaToy, Precisions);

// ---- a step commits or rolls back on the GPU too ---------------------------------------------

// An optimizer that throws on rank 1 after updating its stages, in the first step: the GPU
// stages' snapshot and rollback hooks (device copies of the parameters) put every rank back, so
// the retried step and the next give the fault-free run's losses and parameters, bit for bit.
TEST(CudaToyCommit, AFailedOptimizerIsRolledBackOnEveryGpuRank) {
  PIPESCHED_NEEDS_GPU();
  using Gpu = gpu::GptStage<double>;
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const int n = s.problem.stages;
  const auto data = toy::make_gpt_data<double>(whole_config, s.problem.microbatches, 17);
  auto run = [&](bool faulty, std::vector<double>& losses) {
    auto devices = ps::cuda_local::Pipeline<Gpu>::devices_for(s);
    std::vector<Gpu> piped;
    piped.reserve(static_cast<std::size_t>(n));
    for (int st = 0; st < n; ++st)
      piped.emplace_back(whole_config, st, n,
                         devices[static_cast<std::size_t>(s.placement.rank_of(st))]);
    bool armed = faulty;
    ps::ExecutorOptions options;
    gpu::use_sgd(options, s.placement, piped, learning_rate);
    auto sgd = options.optimizer;
    options.optimizer = [&, sgd](int rank) {
      sgd(rank);
      if (armed && rank == 1) throw std::runtime_error("optimizer fault after the update");
    };
    ps::cuda_local::Pipeline<Gpu> pipe(s, devices, piped, options);
    const auto training =
        gpu::training_data(data, devices[static_cast<std::size_t>(s.placement.rank_of(0))],
                           devices[static_cast<std::size_t>(s.placement.rank_of(n - 1))]);
    if (faulty) {
      try {
        pipe.step(training);
        ADD_FAILURE() << "the optimizer fault did not fail the step";
      } catch (const ps::execution_error& e) {
        EXPECT_TRUE(e.rolled_back()) << e.what();
        EXPECT_EQ(e.rank(), 1);
      }
      armed = false;
    }
    for (int step = 0; step < 2; ++step)
      losses.push_back(pipe.step(training).loss);
    std::vector<double> params;
    for (const Gpu& st : piped)
      for (const auto& t : st.host_parameters())
        params.insert(params.end(), t.data.begin(), t.data.end());
    return params;
  };
  std::vector<double> clean_losses, faulty_losses;
  const std::vector<double> clean = run(false, clean_losses);
  const std::vector<double> rolled = run(true, faulty_losses);
  EXPECT_EQ(faulty_losses, clean_losses);
  EXPECT_EQ(rolled, clean);
}

// ---- the layers profiled on the GPU ---------------------------------------------------------

// gpu::gpt_layer_profile measures the grid the host profile measures: the same samples in the
// same order, every byte figure the host stages' (the GPU stage holds the host stage's bytes),
// and every time a GPU time above zero; a tensor-parallel grid is refused with the reason.
TEST(CudaToyProfile, TheGpuLayerProfileIsTheHostProfilesGridWithTheHostsBytes) {
  PIPESCHED_NEEDS_GPU();
  const toy::GptConfig config{.vocabulary = 32,
                              .hidden = 16,
                              .heads = 2,
                              .ffn = 32,
                              .sequence = 16,
                              .blocks = 4,
                              .microbatch_size = 2,
                              .seed = 5};
  const ps::LayerGrid grid{
      .tensor = {1}, .microbatch_sizes = {2}, .tokens = {8, 16}, .prefixes = {0, 8}};
  ps::CudaDevice device(0);
  const ps::LayerProfile dev =
      gpu::gpt_layer_profile<float>(config, grid, device, {.repeats = 2, .device = "GPU 0"});
  const ps::LayerProfile host = toy::gpt_layer_profile<float>(config, grid, {.repeats = 1});
  EXPECT_EQ(dev.device(), "GPU 0");
  EXPECT_EQ(dev.model().bytes_per_value, 4);
  ASSERT_EQ(dev.samples().size(), grid.points() * 3);
  ASSERT_EQ(dev.samples().size(), host.samples().size());
  for (std::size_t i = 0; i < dev.samples().size(); ++i) {
    const ps::LayerSample& g = dev.samples()[i];
    const ps::LayerSample& h = host.samples()[i];
    SCOPED_TRACE("sample " + std::to_string(i));
    EXPECT_EQ(g.part, h.part);
    EXPECT_EQ(g.at, h.at);
    EXPECT_EQ(g.figures.activation_bytes, h.figures.activation_bytes);
    EXPECT_EQ(g.figures.wgrad_bytes, h.figures.wgrad_bytes);
    EXPECT_EQ(g.figures.boundary_bytes, h.figures.boundary_bytes);
    if (g.part == ps::LayerPart::Layer) {
      EXPECT_GT(g.figures.forward, 0);
      EXPECT_GT(g.figures.backward_input, 0);
      EXPECT_GT(g.figures.backward_weight, 0);
      EXPECT_GT(g.figures.recompute, 0);
    }
  }
  ps::LayerGrid sharded = grid;
  sharded.tensor = {2};
  try {
    (void)gpu::gpt_layer_profile<float>(config, sharded, device);
    ADD_FAILURE() << "a tensor-parallel grid was not refused";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("tensor degrees"), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- without a GPU -------------------------------------------------------------------------

TEST(CudaToyInterface, TheExecutorTakesTheGpuModelsAsTheHostOnes) {
  // Slice contexts, weight parts and checkpointing (sized by DeviceTensor::bytes) as on the
  // host; the MLP has no context, as the host MLP.
  EXPECT_TRUE(CudaExecutor<gpu::GptStage<float>>::slice_aware);
  EXPECT_TRUE(CudaExecutor<gpu::GptStage<double>>::splits_weights);
  EXPECT_TRUE(CudaExecutor<gpu::GptStage<double>>::can_checkpoint);
  EXPECT_FALSE(CudaExecutor<gpu::MlpStage<float>>::slice_aware);
  EXPECT_TRUE(CudaExecutor<gpu::MlpStage<float>>::splits_weights);
  EXPECT_TRUE(CudaExecutor<gpu::MlpStage<double>>::can_checkpoint);
  EXPECT_TRUE((std::is_same_v<gpu::GptStage<float>::tensor_type, ps::DeviceTensor<float>>));
  EXPECT_TRUE((std::is_same_v<gpu::MlpStage<double>::tensor_type, ps::DeviceTensor<double>>));
}

// ---- side by side with the host stage ------------------------------------------------------

TYPED_TEST(CudaToy, StashAndContextBytesFollowTheHostStageCallByCall) {
  PIPESCHED_NEEDS_GPU();
  using T = TypeParam;
  // One stage holding the embedding, every block and the head; two slices of 16 tokens, the
  // weight gradient of each in three parts.
  const toy::GptConfig config = sliced_config;
  ps::CudaDevice device(0);
  toy::GptStage<T> host(config, 0, 1);
  gpu::GptStage<T> dev(config, 0, 1, device);
  const auto data = toy::make_gpt_data<T>(config, 1, 3);
  typename toy::GptStage<T>::Context host_context;
  typename gpu::GptStage<T>::Context dev_context;
  std::vector<typename toy::GptStage<T>::Stash> host_stash(2);
  std::vector<typename gpu::GptStage<T>::Stash> dev_stash(2);
  auto expect_same_bytes = [&](const char* when) {
    SCOPED_TRACE(when);
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(dev.stash_bytes(dev_stash[k]), host.stash_bytes(host_stash[k])) << "slice " << k;
    EXPECT_EQ(dev.context_bytes(dev_context), host.context_bytes(host_context));
  };
  std::vector<toy::Tensor<T>> host_out;
  std::vector<ps::DeviceTensor<T>> dev_out;
  for (int k = 0; k < 2; ++k) {
    const toy::Tensor<T> ids = data.input(0, k, 2);
    host_out.push_back(host.forward(ids, host_stash[k], host_context, k));
    dev_out.push_back(
        dev.forward(ps::DeviceTensor<T>::from_host(ids.shape, ids.data, device.compute()),
                    dev_stash[k], dev_context, k));
    expect_same_bytes("forward");
  }
  for (int k = 0; k < 2; ++k)
    EXPECT_LE(toy::max_relative_error(dev_out[k].to_host(), host_out[k].data), tolerance<T>())
        << "logits of slice " << k;
  for (int k = 1; k >= 0; --k) {
    double loss = 0;
    const toy::Tensor<T> dy = data.loss_gradient(host_out[k], 0, k, 2, loss);
    host.backward_input(dy, host_stash[k], host_context, k);
    dev.backward_input(ps::DeviceTensor<T>::from_host(dy.shape, dy.data, device.compute()),
                       dev_stash[k], dev_context, k);
    expect_same_bytes("backward_input");
  }
  for (int k = 0; k < 2; ++k)
    for (int part = 0; part < 3; ++part) {
      host.backward_weight(host_stash[k], part, 3);
      dev.backward_weight(dev_stash[k], part, 3);
      expect_same_bytes("a weight part");
    }
  std::vector<double> host_grads, dev_grads;
  for (const auto& t : host.gradients())
    host_grads.insert(host_grads.end(), t.data.begin(), t.data.end());
  for (const auto& t : dev.host_gradients())
    dev_grads.insert(dev_grads.end(), t.data.begin(), t.data.end());
  EXPECT_LE(toy::max_relative_error(dev_grads, host_grads), gradient_tolerance<T>());
  // A wrong order is refused as on the host.
  typename gpu::GptStage<T>::Stash empty;
  EXPECT_THROW(dev.backward_weight(empty), ps::invalid_schedule);
}

TYPED_TEST(CudaToy, OutOfRangeWeightPieceIsRefusedAsOnTheHost) {
  PIPESCHED_NEEDS_GPU();
  using T = TypeParam;
  ps::CudaDevice device(0);
  const auto engine = std::make_shared<gpu::detail::Engine>(device);
  {
    SCOPED_TRACE("GptBlock");
    const toy::GptConfig config = whole_config;
    toy::GptBlock<T> host(config, 0);
    gpu::detail::GptBlock<T> dev(engine, host, config);
    expect_pieces_refused_alike<T>(host, dev, toy::Tensor<T>({2, 5, config.hidden}, T(0.25)),
                                   device, nullptr, -1, 0);
  }
  {
    SCOPED_TRACE("MlpBlock");
    const toy::MlpConfig config{};
    toy::MlpBlock<T> host(config, 0);
    gpu::detail::MlpBlock<T> dev(engine, host, config.hidden, config.ffn);
    expect_pieces_refused_alike<T>(host, dev, toy::Tensor<T>({3, config.hidden}, T(0.25)), device);
  }
}

// ---- pipelined on 4 ranks against the host double reference --------------------------------

TYPED_TEST(CudaToy, GptOneFOneB) {
  PIPESCHED_NEEDS_GPU();
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto host = make_stages<toy::GptStage<TypeParam>>(whole_config, s.problem.stages);
  expect_gpt_matches<TypeParam>(s, whole_config, toy::gpt_profiled_cost(host));
}

TYPED_TEST(CudaToy, GptZeroBubbleH1) {
  PIPESCHED_NEEDS_GPU();
  const ps::Schedule s = ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8});
  const auto host = make_stages<toy::GptStage<TypeParam>>(whole_config, s.problem.stages);
  expect_gpt_matches<TypeParam>(s, whole_config, toy::gpt_profiled_cost(host));
}

TYPED_TEST(CudaToy, GptMarioUnderSixtyPercentOfOneFOneB) {
  PIPESCHED_NEEDS_GPU();
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto host = make_stages<toy::GptStage<TypeParam>>(whole_config, base.problem.stages);
  const ps::ProfiledCost cost = toy::gpt_profiled_cost(host);
  ps::MemoryBudget budget;
  budget.all = 0.6 * ps::simulate(base, cost).peak_memory_max;
  const ps::Schedule s = ps::checkpoint_mario(base, cost, budget);
  EXPECT_GT(exec_test::count_recomputes(s), 0);
  for (int rank = 0; rank < s.rank_count(); ++rank)
    EXPECT_LE(ps::simulate(s, cost).ranks[rank].peak_memory, budget.all) << "rank " << rank;
  expect_gpt_matches<TypeParam>(s, whole_config, cost);
}

// Activations offloaded to pinned host memory on the copy stream and reloaded before their
// backward, within half of each rank's peak (one unit's at least): 1F1B and ZB-H1 train as the
// host reference does, and each rank's device and host bytes are the simulator's.
TYPED_TEST(CudaToy, GptOffloadedUnder1F1BAndZbH1) {
  PIPESCHED_NEEDS_GPU();
  for (const ps::Schedule& base : {ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}),
                                   ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8})}) {
    SCOPED_TRACE(base.name);
    const auto host = make_stages<toy::GptStage<TypeParam>>(whole_config, base.problem.stages);
    const ps::ProfiledCost cost = toy::gpt_profiled_cost(host);
    const ps::SimulationResult own = ps::simulate(base, cost);
    ps::MemoryBudget budget;
    for (int r = 0; r < base.rank_count(); ++r)
      budget.per_rank.push_back(
          std::max(0.5 * own.ranks[r].peak_memory, cost.stages[r].activation_bytes));
    const ps::Schedule s = ps::apply_offload(base, cost, budget);
    EXPECT_GT(s.count(ps::OpKind::Offload), 0u);
    expect_gpt_matches<TypeParam>(s, whole_config, cost);
  }
}

TYPED_TEST(CudaToy, GptSlicePipeTwoSlices) {
  PIPESCHED_NEEDS_GPU();
  for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    SCOPED_TRACE(std::string("slice-pipe V=2 K=2 ") + ps::to_string(wg));
    const ps::Schedule s =
        ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 4, .slices = 2}, wg);
    const auto host = make_stages<toy::GptStage<TypeParam>>(sliced_config, s.problem.stages);
    expect_gpt_matches<TypeParam>(s, sliced_config, toy::gpt_profiled_cost(host, s.problem.slices));
  }
}

TYPED_TEST(CudaToy, MlpOneFOneB) {
  PIPESCHED_NEEDS_GPU();
  using T = TypeParam;
  const toy::MlpConfig config{.blocks = 8};
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto host = make_stages<toy::MlpStage<T>>(config, s.problem.stages);
  expect_matches_reference<gpu::MlpStage<T>, toy::MlpStage<double>>(
      s, config, toy::make_mlp_data<T>(config, 8, 17), toy::make_mlp_data<double>(config, 8, 17),
      toy::mlp_profiled_cost(host));
}
