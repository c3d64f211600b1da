// Cost models by capability: the planner asks a cost model for what it can answer
// (analysis/cost_capabilities.hpp), not for its type. A cost model that is not a
// TransformerCost takes part in the cluster search, and one that lacks a capability a request
// needs is refused with a sentence that names the capability.
#include <gtest/gtest.h>

#include <string>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/tune/tune.hpp"

namespace test_cost_capabilities {

namespace {

namespace ps = pipesched;

// A program's own cost model: a TransformerCost's figures with its compute times scaled by a
// measured factor (as a user who timed their kernels at a fraction of the datasheet's rate
// would write). It holds a TransformerCost but is none, and answers every capability itself.
struct MeasuredCost {
  static constexpr ps::MemoryUnit memory_unit = ps::MemoryUnit::Bytes;
  ps::TransformerCost base;
  double compute_scale = 1.0;

  double duration(const ps::CostContext& ctx, const ps::Action& a) const {
    return compute_scale * base.duration(ctx, a);
  }
  double memory_delta(const ps::CostContext& ctx, const ps::Action& a, bool ckpt) const {
    return base.memory_delta(ctx, a, ckpt);
  }
  double transfer_time(const ps::CostContext& ctx, const ps::Action& a) const {
    return base.transfer_time(ctx, a);
  }
  double step_tail(const ps::CostContext& ctx, int rank) const { return base.step_tail(ctx, rank); }
  void check(const ps::CostContext& ctx) const { base.check(ctx); }
  // layered_cost
  int layer_count() const { return base.layer_count(); }
  int layers_of(const ps::CostContext& ctx, int stage) const { return base.layers_of(ctx, stage); }
  MeasuredCost evenly_layered() const { return {base.evenly_layered(), compute_scale}; }
  // device_memory_cost
  double static_bytes(const ps::CostContext& ctx, int rank) const {
    return base.static_bytes(ctx, rank);
  }
  ps::MemoryBudget memory_budget(const ps::Problem& p, const ps::Placement& placement) const {
    return base.memory_budget(p, placement);
  }
  // flop_counting_cost
  double peak_flops() const { return base.peak_flops(); }
  double training_flops_per_sequence() const { return base.training_flops_per_sequence(); }
  double usual_training_flops_per_sequence() const {
    return base.usual_training_flops_per_sequence();
  }
  // parallel_cost
  const ps::Parallelism& parallelism() const { return base.parallelism(); }
};

// Its cluster cost factory.
struct MeasuredFactory {
  ps::ModelShape model;
  ps::DeviceSpec device;
  double compute_scale = 1.0;
  MeasuredCost operator()(int b, const ps::Parallelism& par) const {
    return {ps::tuning::TransformerClusterFactory{model, device}(b, par), compute_scale};
  }
  int layer_count() const { return model.layers; }
  bool tensor_fits(int t) const {
    return ps::tuning::TransformerClusterFactory{model, device}.tensor_fits(t);
  }
  int gpus_per_node() const { return device.ranks_per_node; }
};

// Only the three questions every cost model answers.
struct PlainCost {
  ps::UniformCost base;
  double duration(const ps::CostContext& ctx, const ps::Action& a) const {
    return base.duration(ctx, a);
  }
  double memory_delta(const ps::CostContext& ctx, const ps::Action& a, bool ckpt) const {
    return base.memory_delta(ctx, a, ckpt);
  }
  double transfer_time(const ps::CostContext& ctx, const ps::Action& a) const {
    return base.transfer_time(ctx, a);
  }
};

static_assert(ps::layered_cost<ps::TransformerCost> && ps::sliceable_cost<ps::TransformerCost> &&
              ps::per_gemm_wgrad_cost<ps::TransformerCost> &&
              ps::device_memory_cost<ps::TransformerCost> &&
              ps::flop_counting_cost<ps::TransformerCost> &&
              ps::parallel_cost<ps::TransformerCost>);
static_assert(!ps::layered_cost<ps::UniformCost> && !ps::sliceable_cost<ps::UniformCost> &&
              !ps::per_gemm_wgrad_cost<ps::UniformCost> &&
              !ps::device_memory_cost<ps::UniformCost> && !ps::parallel_cost<ps::UniformCost>);
static_assert(ps::layered_cost<MeasuredCost> && ps::device_memory_cost<MeasuredCost> &&
              ps::flop_counting_cost<MeasuredCost> && ps::parallel_cost<MeasuredCost> &&
              !ps::sliceable_cost<MeasuredCost>);
static_assert(ps::cluster_cost_factory<MeasuredFactory>);
static_assert(!std::is_base_of_v<ps::TransformerCost, MeasuredCost>);

ps::tuning::ClusterRequest small_cluster() {
  ps::tuning::ClusterRequest req;
  req.gpus = 8;
  req.global_batch = 32;
  req.search.bases = {"1f1b", "zb-h1"};
  req.search.microbatch_sizes = {1, 2};
  req.search.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective};
  req.search.threads = 2;
  return req;
}

TEST(CostCapabilities, ClusterSearchRunsOverACostModelThatIsNoTransformerCost) {
  const ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  ps::DeviceSpec device = ps::presets::find_device("a100-80gb");
  const ps::tuning::ClusterRequest req = small_cluster();
  const ps::tuning::Result own = ps::tune_cluster(req, model, device);
  const ps::tuning::Result measured = ps::tune_cluster(req, MeasuredFactory{model, device, 1.0});
  ASSERT_TRUE(own.best.has_value());
  ASSERT_TRUE(measured.best.has_value());
  // At the datasheet's rate the user's model is TransformerCost's: the same plan, with every
  // figure its capabilities give (degrees, static bytes in the peak, layers, MFU).
  const ps::tuning::Plan& a = *own.best;
  const ps::tuning::Plan& b = *measured.best;
  EXPECT_EQ(ps::describe(a), ps::describe(b));
  EXPECT_DOUBLE_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.tensor, b.tensor);
  EXPECT_EQ(a.zero, b.zero);
  EXPECT_DOUBLE_EQ(a.peak_memory, b.peak_memory);
  EXPECT_EQ(a.layers_per_stage, b.layers_per_stage);
  EXPECT_DOUBLE_EQ(a.mfu, b.mfu);
  EXPECT_GT(b.mfu, 0);
  EXPECT_FALSE(b.layers_per_stage.empty());
  EXPECT_EQ(own.notes.size(), measured.notes.size());

  // Kernels measured at half the datasheet's speed: every step is slower, the MFU lower.
  const ps::tuning::Result slow = ps::tune_cluster(req, MeasuredFactory{model, device, 2.0});
  ASSERT_TRUE(slow.best.has_value());
  EXPECT_GT(slow.best->makespan, a.makespan * 1.3);
  EXPECT_LT(slow.best->mfu, a.mfu);
}

TEST(CostCapabilities, ARequestNeedingACapabilityTheCostLacksIsRefusedByName) {
  ps::tuning::Request req;
  req.ranks = 2;
  req.global_batch = 8;
  req.bases = {"seq-1f1b"};
  req.microbatch_sizes = {1};
  req.slices = {2};
  req.slicing = ps::SlicingMode::Balanced;
  const PlainCost plain;
  auto factory = [&](int) { return plain; };
  try {
    (void)ps::tune(req, factory);
    FAIL() << "balanced slicing over a cost model that cannot price slices was accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("sliceable_cost"), std::string::npos) << e.what();
  }
  req.slicing = ps::SlicingMode::Uniform;
  req.bases = {"zb-h1"};
  req.slices = {1};
  req.fine_wgrad = true;
  req.wgrad_parts = 0;
  try {
    (void)ps::tune(req, factory);
    FAIL() << "W per weight GEMM over a cost model that counts no GEMMs was accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("per_gemm_wgrad_cost"), std::string::npos) << e.what();
  }
  // What it can answer it plans: uniform slices and a number of W parts.
  req.wgrad_parts = 4;
  EXPECT_TRUE(ps::tune(req, factory).best.has_value());
}

// A cost model that counts layers is refused a pipeline deeper than its model, whatever its
// type.
TEST(CostCapabilities, ALayeredCostRefusesMoreStagesThanLayers) {
  const ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");  // 24 layers
  const ps::DeviceSpec device = ps::presets::find_device("a100-80gb");
  ps::tuning::Request req;
  req.ranks = 32;
  req.global_batch = 64;
  req.bases = {"1f1b"};
  req.microbatch_sizes = {1};
  auto factory = [&](int b) { return MeasuredFactory{model, device, 1.0}(b, ps::Parallelism{}); };
  const ps::tuning::Result r = ps::tune(req, factory);
  EXPECT_FALSE(r.best.has_value());
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().reason.find("24"), std::string::npos) << r.notes.front().reason;
}

}  // namespace

}  // namespace test_cost_capabilities
