// Cost models by capability: the planner asks a cost model for what it can answer
// (analysis/cost_capabilities.hpp), not for its type. A cost model that is not a
// TransformerCost takes part in the cluster search, and one that lacks a capability a request
// needs is refused with a sentence that names the capability.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/io/layout.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"
#include "pipesched/tune/layout_search.hpp"
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

// The plan of `order` on `cost` within `budget` bytes per rank (the order fitted where that
// helps, no recompute), simulated.
ps::SimulationResult planned(const char* order, const ps::TransformerCost& cost, int ranks,
                             int microbatches, double budget) {
  const ps::GeneratorInfo& g = ps::find_generator(order);
  ps::MemoryBudget b;
  if (budget > 0) b.all = budget;
  const auto plan = ps::assemble_plan(g, {.ranks = ranks, .microbatches = microbatches}, cost, b,
                                      {.wgrad = g.default_wgrad}, ps::find_checkpoint("none"));
  return ps::simulate(plan.schedule, plan.cost);
}

// The automatic layout balances the ranks' work, the ends included, under the budget the plan
// is built for: ZB-V within 1F1B's peak memory, which loses to 1F1B on Llama 2 13B over 8 ranks
// with the even split (rank 0 holds the first stage and the last, with the LM head), beats it
// with the layout found; the layout's step is its plan's, and the search is deterministic.
TEST(LayoutSearch, ZbvWithinOneFOneBsMemoryBeatsOneFOneBWithTheLayoutFound) {
  ps::TransformerCost cost{
      ps::presets::find_model("llama2-13b"), ps::presets::find_device("rtx-4090"), {}};
  const int P = 8, M = 32;
  const ps::SimulationResult one = planned("1f1b", cost, P, M, 0);
  const double budget = one.peak_memory_max;
  const ps::SimulationResult even = planned("zb-v", cost, P, M, budget);
  ASSERT_FALSE(even.deadlock);
  EXPECT_GT(even.makespan, 0.99 * one.makespan);  // no better than 1F1B evenly split

  const ps::GeneratorInfo& g = ps::find_generator("zb-v");
  ps::MemoryBudget b;
  b.all = budget;
  const ps::LayoutSearchResult found =
      ps::search_plan_layout(g, {.ranks = P, .microbatches = M}, cost, b,
                             {.wgrad = g.default_wgrad}, ps::find_checkpoint("none"));
  ASSERT_EQ(found.layers.size(), 2u * P);
  int sum = 0;
  for (int n : found.layers)
    sum += n;
  EXPECT_EQ(sum, 40);
  EXPECT_NEAR(found.even_step, even.makespan, 1e-9 * even.makespan);
  EXPECT_GT(found.evaluations, 7);
  EXPECT_LE(found.evaluations, ps::LayoutSearchOptions{}.max_evaluations);

  ps::TransformerCost laid = cost;
  laid.parallel.layers = found.layers;
  const ps::SimulationResult best = planned("zb-v", laid, P, M, budget);
  EXPECT_DOUBLE_EQ(best.makespan, found.step);
  EXPECT_LE(best.peak_memory_max, budget);
  EXPECT_LT(best.makespan, 0.96 * one.makespan)
      << ps::to_string(ps::Layout::of_stage_layers(found.layers));

  const ps::LayoutSearchResult again =
      ps::search_plan_layout(g, {.ranks = P, .microbatches = M}, cost, b,
                             {.wgrad = g.default_wgrad}, ps::find_checkpoint("none"));
  EXPECT_EQ(again.layers, found.layers);
  EXPECT_EQ(again.evaluations, found.evaluations);

  // Fewer evaluations allowed, fewer made; none is refused by name.
  const ps::LayoutSearchResult short_search = ps::search_plan_layout(
      g, {.ranks = P, .microbatches = M}, cost, b, {.wgrad = g.default_wgrad},
      ps::find_checkpoint("none"), {.max_evaluations = 3});
  EXPECT_EQ(short_search.evaluations, 3);
  EXPECT_LE(short_search.step, short_search.even_step);
  try {
    (void)ps::search_plan_layout(g, {.ranks = P, .microbatches = M}, cost, b,
                                 {.wgrad = g.default_wgrad}, ps::find_checkpoint("none"),
                                 {.max_evaluations = 0});
    ADD_FAILURE() << "accepted max_evaluations = 0";
  } catch (const ps::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_evaluations"), std::string::npos) << e.what();
  }
}

// An end of the pipeline may hold no layer (Megatron's "E|...|L" layouts): the first stage then
// holds only the embedding (a lookup: no compute beyond an action's overhead, no activations
// kept), the last only the LM head and loss; a stage between them may not be empty.
TEST(LayoutSearch, AnEndStageMayHoldNoLayerAndAMiddleOneMust) {
  ps::TransformerCost cost{ps::presets::find_model("gpt3-1.3b"),  // 24 layers
                           ps::presets::find_device("a100-80gb"),
                           {}};
  const ps::Layout layout = ps::parse_layout("E|t*12|t*12|L");
  cost.parallel.layers = layout.stage_layers();
  EXPECT_EQ(cost.parallel.layers, (std::vector<int>{0, 12, 12, 0}));
  EXPECT_EQ(ps::to_string(ps::Layout::of_stage_layers(cost.parallel.layers)), "E|(t*12|)*2L");
  const ps::Problem p{.ranks = 4, .stages = 4, .microbatches = 4};
  const ps::Placement placement = ps::Placement::linear(4);
  const ps::CostContext ctx{p, placement, 1};
  const auto f = [&](int stage) {
    return cost.duration(ctx, ps::Action::make(ps::OpKind::F, stage, 0));
  };
  EXPECT_DOUBLE_EQ(f(0), cost.device.action_overhead);
  EXPECT_EQ(cost.memory_delta(ctx, ps::Action::make(ps::OpKind::F, 0, 0), false), 0.0);
  EXPECT_GT(f(3), cost.device.action_overhead);  // the LM head
  EXPECT_LT(f(3), f(1) / 4);
  EXPECT_GT(cost.memory_delta(ctx, ps::Action::make(ps::OpKind::F, 3, 0), false), 0.0);
  const ps::Schedule s = ps::find_generator("1f1b").generate(p, ps::WGradMode::Fused);
  EXPECT_FALSE(ps::simulate(s, cost).deadlock);

  cost.parallel.layers = {12, 0, 12, 0};
  try {
    (void)f(1);
    ADD_FAILURE() << "accepted an empty middle stage";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("Parallelism.layers[1]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least one layer"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ps::Layout::of_stage_layers({3, 0, 3}), ps::invalid_problem);
  EXPECT_THROW((void)ps::Layout::of_stage_layers({}), ps::invalid_problem);
  EXPECT_EQ(ps::Layout::of_stage_layers({5}).stages.front(),
            (ps::LayoutStage{.embedding = true, .layers = 5, .loss = true}));
}

// V-Half holds each rank to about half of 1F1B's rank-0 peak. 1F1B runs its own, even split:
// a layout given to the V (2p stages) does not change the target, and is not refused for having
// 2p entries where 1F1B has p stages.
TEST(LayoutSearch, VHalfsMemoryTargetIsOneFOneBsWithItsOwnEvenSplit) {
  ps::TransformerCost cost{ps::presets::find_model("gpt3-1.3b"),  // 24 layers
                           ps::presets::find_device("rtx-4090"),
                           {}};
  const ps::Problem p{.ranks = 4, .microbatches = 16};
  const ps::GeneratorInfo& g = ps::find_generator("v-half");
  const ps::Schedule even = g.generate_with_cost(p, ps::WGradMode::Split, ps::CostRef(cost));
  ps::TransformerCost laid = cost;
  laid.parallel.layers = {2, 3, 3, 4, 4, 3, 3, 2};
  const ps::Schedule s = g.generate_with_cost(p, ps::WGradMode::Split, ps::CostRef(laid));
  // Half of 1F1B's 4 microbatches on rank 0 (of 6 layers each) plus one: 3 microbatches' worth.
  const ps::SimulationResult one = ps::simulate(
      ps::find_generator("1f1b").generate({.ranks = 4, .microbatches = 16}, ps::WGradMode::Fused),
      cost);
  const double cap = one.ranks.front().peak_memory * std::min(1.0, 3.0 / 4);
  for (const ps::Schedule* x : {&even, &s}) {
    const ps::SimulationResult r = ps::simulate(*x, x == &s ? laid : cost);
    EXPECT_FALSE(r.deadlock);
    for (const auto& rank : r.ranks)
      EXPECT_LE(rank.peak_memory, cap * (1 + 1e-12));
  }
  // Exactly ZB-V under the layout within that cap.
  ps::MemoryBudget within;
  within.all = cap;
  const ps::Schedule expected =
      ps::schedule::zero_bubble_v_within(p, ps::WGradMode::Split, ps::CostRef(laid), within);
  EXPECT_EQ(s.ranks, expected.ranks);
}

// The planner searches layouts (tuning::Request::layout_search): ZB-V on Llama-2 13B over 8
// RTX 4090s within 1F1B's memory plans faster on the layout it finds than on its even split;
// the plan says its layers per stage, and its cost model reproduces its step.
TEST(LayoutSearch, TheTunerSearchesTheBestPlansLayouts) {
  const ps::ModelShape model = ps::presets::find_model("llama2-13b");
  const ps::DeviceSpec device = ps::presets::find_device("rtx-4090");
  const ps::TransformerCost cost{model, device, {}};
  ps::tuning::Request req{.ranks = 8, .global_batch = 32};
  req.bases = {"zb-v"};
  req.microbatch_sizes = {1};
  req.checkpoints = {ps::CheckpointMode::None};
  req.threads = 2;
  ps::MemoryBudget budget;
  budget.all = planned("1f1b", cost, 8, 32, 0).peak_memory_max;
  req.budget = budget;
  const ps::tuning::Result plain = ps::tune(req, model, device);
  req.layout_search = 2;
  const ps::tuning::Result laid = ps::tune(req, model, device);
  ASSERT_TRUE(plain.best.has_value());
  ASSERT_TRUE(laid.best.has_value());
  EXPECT_LT(laid.best->makespan, 0.96 * plain.best->makespan);
  EXPECT_NE(laid.best->layers_per_stage, plain.best->layers_per_stage);
  EXPECT_GT(laid.candidates_total, plain.candidates_total);
  const ps::TransformerCost& planned_cost = ps::cost_of<ps::TransformerCost>(*laid.best);
  EXPECT_EQ(planned_cost.parallel.layers, laid.best->layers_per_stage);
  EXPECT_DOUBLE_EQ(ps::simulate(laid.best->schedule, planned_cost).makespan, laid.best->makespan);
  for (double peak : laid.best->peak_per_rank)
    EXPECT_LE(peak, budget.all * (1 + 1e-9));

  // A cost model whose layers cannot be set is refused by name, before any search.
  ps::tuning::Request uniform{.ranks = 4, .global_batch = 8};
  uniform.layout_search = 1;
  try {
    (void)ps::tune(uniform, ps::UniformCost{});
    ADD_FAILURE() << "a UniformCost searched layouts";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("layout_cost"), std::string::npos) << e.what();
  }
  uniform.layout_search = 65;
  EXPECT_THROW((void)ps::tune(uniform, ps::UniformCost{}), ps::invalid_argument);
}

}  // namespace

}  // namespace test_cost_capabilities
