// Stages of different types in one pipeline: the toy GPT as an embedding stage, block stages and
// a head stage, held in a StageVariant, trained on threads through 1F1B, interleaved, Zero Bubble
// (split, and cut into weight-gradient parts), slice-level schedules with 2 slices and full
// checkpointing, gives the loss and gradients of sequential training of the whole model and holds
// exactly the bytes the simulator predicts. Also which capabilities a variant has, a stage without
// slices between slice-aware ones, and the errors of a stage model of the wrong role or a stash of
// another stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/exec/stage_variant.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"

#include "exec_support.hpp"

namespace test_heterogeneous_stages {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

using namespace exec_test;

using Embed = toy::GptEmbeddingStage<double>;
using Block = toy::GptBlockStage<double>;
using Head = toy::GptHeadStage<double>;
using GptVariant = toy::GptPipelineStage<double>;

static_assert(ps::check_stage_model<GptVariant>());
static_assert(ps::slice_aware_stage_model<GptVariant>);
static_assert(ps::splits_weight_gradient<GptVariant>);

// The toy GPT every pipelined test runs: 8 blocks (up to 8 stages), 16-token sequences.
const toy::GptConfig gpt_config{.sequence = 16, .blocks = 8};

// Trains `schedule` on the embedding / block / head stages for two steps, SGD from each rank's
// optimizer hook, and compares every step with sequential training of the whole model as one
// GptStage (the flat parameter and gradient lists of any split are in the same order) and the
// measured peaks with the simulator's, from the byte figures of GptStages of the same split.
// Chimera's two replicas: each a pipeline of embedding, block and head stages from the same
// weights; after the step their gradients are summed and both copies must hold the sequential
// model's gradients and, after the update, its parameters.
void expect_replicas_match_sequential(const ps::Schedule& schedule) {
  const int replicas = schedule.problem.replicas;
  const int model_stages = schedule.problem.replica_stages();
  const auto data = toy::make_gpt_data<double>(gpt_config, schedule.problem.microbatches, 13);
  std::vector<toy::GptStage<double>> whole = make_stages<toy::GptStage<double>>(gpt_config, 1);
  std::vector<toy::GptPipelineStage<double>> piped;
  for (int q = 0; q < replicas; ++q)
    for (auto& stage : toy::make_gpt_pipeline_stages<double>(gpt_config, model_stages))
      piped.push_back(std::move(stage));
  ps::inproc::Pipeline<toy::GptPipelineStage<double>> pipe(schedule, piped);
  std::vector<toy::GptStage<double>> same_split;
  for (int st = 0; st < schedule.problem.stages; ++st)
    same_split.emplace_back(gpt_config, st % model_stages, model_stages);
  const ps::SimulationResult predicted =
      ps::simulate(schedule, toy::gpt_profiled_cost(same_split, 1, 1));
  const auto training = toy::training_data(data, 1);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(whole, data);
    const auto ref_grads = toy::flat_gradients(whole);
    toy::sgd_update(whole, learning_rate);
    const ps::StepResult r = pipe.step(training);
    EXPECT_LE(std::abs(r.loss - ref_loss), tolerance<double>() * std::abs(ref_loss));
    toy::sum_replica_gradients(piped, replicas);
    toy::sgd_update(piped, learning_rate);
    for (int q = 0; q < replicas; ++q) {
      EXPECT_LE(toy::max_relative_error(toy::flat_replica_gradients(piped, replicas, q), ref_grads),
                tolerance<double>())
          << "replica " << q;
      EXPECT_LE(toy::max_relative_error(toy::flat_replica_parameters(piped, replicas, q),
                                        toy::flat_parameters(whole)),
                tolerance<double>())
          << "replica " << q;
    }
    for (int rank = 0; rank < schedule.rank_count(); ++rank)
      EXPECT_EQ(r.ranks[rank].peak_bytes, predicted.ranks[rank].peak_memory) << "rank " << rank;
  }
}

void expect_matches_sequential(const ps::Schedule& schedule, int parts = 1) {
  if (schedule.problem.replicas > 1) return expect_replicas_match_sequential(schedule);
  const int stages = schedule.problem.stages;
  const int slices = std::max(1, schedule.problem.slices);
  const auto data = toy::make_gpt_data<double>(gpt_config, schedule.problem.microbatches, 13);
  std::vector<toy::GptStage<double>> whole = make_stages<toy::GptStage<double>>(gpt_config, 1);
  // [hetero-pipeline]
  std::vector<toy::GptPipelineStage<double>> piped =
      toy::make_gpt_pipeline_stages<double>(gpt_config, stages);
  ps::ExecutorOptions options;
  options.optimizer = toy::sgd_optimizer(schedule.placement, piped, learning_rate);
  ps::inproc::Pipeline<toy::GptPipelineStage<double>> pipe(schedule, piped, options);
  // [hetero-pipeline]
  ASSERT_TRUE(piped.front().holds<Embed>());
  ASSERT_TRUE(piped.back().holds<Head>());
  const auto same_split = make_stages<toy::GptStage<double>>(gpt_config, stages);
  const ps::SimulationResult predicted =
      ps::simulate(schedule, toy::gpt_profiled_cost(same_split, slices, parts));
  const auto training = toy::training_data(data, slices);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [r, ref_loss, ref_grads] =
        step_against_reference<double>(pipe, piped, whole, data, training);
    // Whole microbatches accumulated in the sequential order: the same arithmetic, bit for bit.
    if (slices == 1 && accumulates_in_order(schedule)) {
      EXPECT_EQ(r.loss, ref_loss);
      EXPECT_TRUE(toy::flat_gradients(piped) == ref_grads);
    }
    for (int rank = 0; rank < schedule.rank_count(); ++rank)
      EXPECT_EQ(r.ranks[rank].peak_bytes, predicted.ranks[rank].peak_memory) << "rank " << rank;
  }
}

// A stage without slices: each hidden channel scaled by its own weight, y = a ⊙ x. Row-wise, so
// running each slice on its own is right; it has no weight parts.
struct ChannelScale {
  using tensor_type = toy::Tensor<double>;
  struct stash_type {
    tensor_type x, dy;
  };

  explicit ChannelScale(int hidden) : scale({hidden}), gradient({hidden}) {
    for (int d = 0; d < hidden; ++d)
      scale[static_cast<std::size_t>(d)] = 0.8 + 0.05 * d;
  }
  tensor_type forward(const tensor_type& x, stash_type& st) const {
    st = stash_type{x, {}};
    tensor_type y = x;
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] *= scale[i % scale.size()];
    return y;
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) const {
    st.dy = dy;
    tensor_type dx = dy;
    for (std::size_t i = 0; i < dx.size(); ++i)
      dx[i] *= scale[i % scale.size()];
    return dx;
  }
  void backward_weight(stash_type& st) {
    for (std::size_t i = 0; i < st.x.size(); ++i)
      gradient[i % gradient.size()] += st.x[i] * st.dy[i];
    st = stash_type{};
  }
  std::size_t stash_bytes(const stash_type& st) const { return st.x.bytes() + st.dy.bytes(); }
  void zero_gradients() { gradient = tensor_type(gradient.shape); }
  toy::TensorRange<tensor_type> parameters() { return one(scale); }
  toy::TensorRange<const tensor_type> parameters() const { return one(scale); }
  toy::TensorRange<tensor_type> gradients() { return one(gradient); }
  toy::TensorRange<const tensor_type> gradients() const { return one(gradient); }

  template <class Tensor>
  static toy::TensorRange<Tensor> one(Tensor& t) {
    toy::TensorRange<Tensor> r;
    r.append(std::span<Tensor>(&t, 1));
    return r;
  }

  tensor_type scale, gradient;
};

using Mixed = ps::StageVariant<Embed, ChannelScale, Block, Head>;

// A stage model without parameters() and gradients().
struct NoParameters {
  using tensor_type = std::vector<float>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  void zero_gradients() {}
};

template <class S>
concept has_parameters = requires(S& s) {
  s.parameters();
};

}  // namespace

// ---- the capabilities of a variant ------------------------------------------------------

TEST(HeterogeneousStages, VariantHasACapabilityWhereItsAlternativesDo) {
  // Every GPT stage model has slices, whole-sequence calls and weight parts: so has the variant.
  EXPECT_TRUE(GptVariant::slice_aware);
  EXPECT_TRUE(GptVariant::whole_unit_calls);
  EXPECT_TRUE(GptVariant::splits_weights);
  EXPECT_FALSE(GptVariant::sizes_inputs);  // the executor sizes a kept input by Tensor::bytes()
  using GptExecutor = ps::Executor<GptVariant, ps::inproc::Transport<toy::Tensor<double>>>;
  EXPECT_TRUE(GptExecutor::slice_aware);
  EXPECT_TRUE(GptExecutor::splits_weights);
  EXPECT_TRUE(GptExecutor::can_checkpoint);

  // One alternative without slices and without parts: the variant keeps slices (that alternative
  // runs each slice on its own) but cannot cut weight gradients.
  EXPECT_TRUE(Mixed::slice_aware);
  EXPECT_TRUE(Mixed::whole_unit_calls);
  EXPECT_FALSE(Mixed::splits_weights);
  EXPECT_TRUE(ps::slice_aware_stage_model<Mixed>);
  EXPECT_FALSE(ps::splits_weight_gradient<Mixed>);
  EXPECT_FALSE(ps::slice_aware_stage_model<ps::StageVariant<ChannelScale>>);
  EXPECT_TRUE(ps::stage_model<ps::StageVariant<ChannelScale>>);

  // Parameters need a common type: a variant over a model without them has none.
  EXPECT_TRUE(has_parameters<Mixed>);
  EXPECT_FALSE(has_parameters<ps::StageVariant<NoParameters>>);
}

TEST(HeterogeneousStages, VariantWithoutPartsIsRefusedForAScheduleWithParts) {
  const ps::Problem p{.ranks = 4, .microbatches = 4};
  const ps::Schedule split = ps::schedule::zero_bubble_h1(p);
  const auto same_split = make_stages<toy::GptStage<double>>(gpt_config, 4);
  const ps::Schedule cut =
      ps::fill_weight_gradients(split, toy::gpt_profiled_cost(same_split, 1, 2), {}, 2);
  std::vector<Mixed> stages;
  stages.emplace_back(std::in_place_type<Embed>, gpt_config, 0, 3);
  stages.emplace_back(ChannelScale(gpt_config.hidden));
  stages.emplace_back(std::in_place_type<Block>, gpt_config, 1, 3);
  stages.emplace_back(std::in_place_type<Head>, gpt_config, 2, 3);
  EXPECT_NO_THROW({ ps::inproc::Pipeline<Mixed> pipe(split, stages); });
  try {
    ps::inproc::Pipeline<Mixed> pipe(cut, stages);
    ADD_FAILURE() << "a schedule with weight parts ran on a model that cannot split";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run a part"), std::string::npos) << e.what();
  }
}

// ---- embedding / block / head stages match sequential training --------------------------

TEST(HeterogeneousStages, EveryScheduleFamilyMatchesSequentialTraining) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int ranks : {2, 4})
      for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
        if ((wg == ps::WGradMode::Fused && !g.fused) || (wg == ps::WGradMode::Split && !g.split))
          continue;
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(ranks) + " " + ps::to_string(wg));
        expect_matches_sequential(g.generate({.ranks = ranks, .microbatches = 2 * ranks}, wg));
      }
}

TEST(HeterogeneousStages, NamedSchedulesMatchSequentialTraining) {
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  {
    SCOPED_TRACE("1f1b");
    expect_matches_sequential(ps::schedule::one_f_one_b(p));
  }
  {
    SCOPED_TRACE("interleaved-1f1b, 2 chunks per rank");
    expect_matches_sequential(ps::schedule::interleaved_1f1b(p));
  }
  {
    SCOPED_TRACE("zb-h1, split weight gradients");
    expect_matches_sequential(ps::schedule::zero_bubble_h1(p));
  }
  {
    SCOPED_TRACE("zb-h1, weight gradients in 3 parts");
    const auto same_split = make_stages<toy::GptStage<double>>(gpt_config, 4);
    const ps::Schedule cut = ps::fill_weight_gradients(
        ps::schedule::zero_bubble_h1(p), toy::gpt_profiled_cost(same_split, 1, 3), {}, 3);
    expect_matches_sequential(cut, 3);
  }
  {
    SCOPED_TRACE("1f1b, full checkpointing");
    expect_matches_sequential(ps::checkpoint_full(ps::schedule::one_f_one_b(p)));
  }
}

TEST(HeterogeneousStages, SlicedSchedulesMatchSequentialTraining) {
  const ps::Problem p{.ranks = 4, .microbatches = 4, .slices = 2};
  const ps::Problem v{.ranks = 4, .stages = 8, .microbatches = 4, .slices = 2};
  for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    SCOPED_TRACE(ps::to_string(wg));
    {
      SCOPED_TRACE("seq-1f1b K=2");
      expect_matches_sequential(ps::schedule::seq_1f1b(p, wg));
    }
    {
      SCOPED_TRACE("slice-pipe V=2 K=2");
      expect_matches_sequential(ps::schedule::slice_pipe(v, wg));
    }
    {
      SCOPED_TRACE("seq-1f1b K=2, full checkpointing");
      expect_matches_sequential(ps::checkpoint_full(ps::schedule::seq_1f1b(p, wg)));
    }
    {
      SCOPED_TRACE("slice-pipe V=2 K=2, full checkpointing");
      expect_matches_sequential(ps::checkpoint_full(ps::schedule::slice_pipe(v, wg)));
    }
  }
}

// ---- a stage without slices among slice-aware ones ------------------------------------------

TEST(HeterogeneousStages, StageWithoutSlicesRunsEachSliceOnItsOwn) {
  // Embedding, a channel scale (no context), blocks, head: sliced and checkpointed runs give what
  // the same stages give trained sequentially on whole sequences.
  auto make = [] {
    // [mixed-stages]
    using Mixed = ps::StageVariant<Embed, ChannelScale, Block, Head>;
    std::vector<Mixed> stages;
    stages.emplace_back(std::in_place_type<Embed>, gpt_config, 0, 3);  // built in place
    stages.emplace_back(ChannelScale(gpt_config.hidden));              // or moved in
    stages.emplace_back(std::in_place_type<Block>, gpt_config, 1, 3);
    stages.emplace_back(std::in_place_type<Head>, gpt_config, 2, 3);
    // [mixed-stages]
    return stages;
  };
  const ps::Problem p{.ranks = 4, .microbatches = 4, .slices = 2};
  const auto data = toy::make_gpt_data<double>(gpt_config, 4, 19);
  for (const ps::Schedule& s : {ps::schedule::seq_1f1b(p, ps::WGradMode::Split),
                                ps::checkpoint_full(ps::schedule::seq_1f1b(p)),
                                ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 4})}) {
    SCOPED_TRACE(s.name);
    std::vector<Mixed> ref = make();
    std::vector<Mixed> piped = make();
    ps::ExecutorOptions options;
    options.optimizer = toy::sgd_optimizer(s.placement, piped, learning_rate);
    ps::inproc::Pipeline<Mixed> pipe(s, piped, options);
    const auto training = toy::training_data(data, std::max(1, s.problem.slices));
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const double ref_loss = toy::sequential_step(ref, data);
      const auto ref_grads = toy::flat_gradients(ref);
      toy::sgd_update(ref, learning_rate);
      const ps::StepResult r = pipe.step(training);
      EXPECT_LE(std::abs(r.loss - ref_loss), tolerance<double>() * std::abs(ref_loss));
      EXPECT_LE(toy::max_relative_error(toy::flat_gradients(piped), ref_grads),
                tolerance<double>());
      EXPECT_LE(toy::max_relative_error(toy::flat_parameters(piped), toy::flat_parameters(ref)),
                tolerance<double>());
    }
  }
  // Its slice context is an empty stand-in: it holds no bytes.
  ChannelScale scale(gpt_config.hidden);
  Mixed m(scale);
  Mixed::stash_type st;
  Mixed::context_type ctx;
  const toy::Tensor<double> x({2, 8, gpt_config.hidden}, 0.5);
  const toy::Tensor<double> y = m.forward(x, st, ctx, 0);
  ChannelScale::stash_type own;
  EXPECT_TRUE(y.data == scale.forward(x, own).data);
  EXPECT_EQ(m.context_bytes(ctx), 0u);
  EXPECT_EQ(m.stash_bytes(st), scale.stash_bytes(own));
}

// ---- errors ---------------------------------------------------------------------------------

TEST(HeterogeneousStages, RoleStagesRefuseAnotherPlace) {
  auto expect_refused = [](auto make, const char* text) {
    try {
      make();
      ADD_FAILURE() << "built a stage in the wrong place; expected: " << text;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_refused([] { (void)Embed(gpt_config, 1, 4); }, "use GptBlockStage");
  expect_refused([] { (void)Embed(gpt_config, 0, 1); }, "use GptStage");
  expect_refused([] { (void)Block(gpt_config, 0, 4); }, "use GptEmbeddingStage");
  expect_refused([] { (void)Block(gpt_config, 3, 4); }, "use GptHeadStage");
  expect_refused([] { (void)Head(gpt_config, 2, 4); }, "use GptBlockStage");
  expect_refused([] { (void)Head(gpt_config, 9, 4); }, "it must be between 0 and 3");
  expect_refused([] { (void)toy::make_gpt_pipeline_stages<double>(gpt_config, 1); },
                 "use GptStage");
  // The role stages hold what GptStage holds in the same place.
  const auto v = toy::make_gpt_pipeline_stages<double>(gpt_config, 3);
  const auto g = make_stages<toy::GptStage<double>>(gpt_config, 3);
  EXPECT_TRUE(v[0].get<Embed>().has_embedding());
  EXPECT_FALSE(v[1].get<Block>().has_embedding());
  EXPECT_FALSE(v[1].get<Block>().has_head());
  EXPECT_TRUE(v[2].get<Head>().has_head());
  for (std::size_t s = 0; s < 3; ++s) {
    v[s].visit([&](const auto& stage) {
      EXPECT_EQ(stage.first_block(), g[s].first_block());
      EXPECT_EQ(stage.last_block(), g[s].last_block());
      EXPECT_EQ(stage.activation_bytes(), g[s].activation_bytes());
      EXPECT_EQ(stage.weight_parts(), g[s].weight_parts());
    });
    EXPECT_EQ(v[s].weight_parts(), g[s].weight_parts());
  }
  EXPECT_THROW((void)v[0].get<Head>(), ps::invalid_problem);
  EXPECT_EQ(v[1].get_if<Head>(), nullptr);
  // A block stage keeps nothing for an embedding or a head.
  EXPECT_LT(sizeof(Block::stash_type), sizeof(toy::GptStage<double>::stash_type));
}

TEST(HeterogeneousStages, StashOfAnotherStageTypeIsRefused) {
  auto v = toy::make_gpt_pipeline_stages<double>(gpt_config, 3);
  const auto data = toy::make_gpt_data<double>(gpt_config, 1, 3);
  GptVariant::stash_type st;
  EXPECT_EQ(v[0].stash_bytes(st), 0u);  // an empty stash holds nothing
  const toy::Tensor<double> y = v[0].forward(data.input(0), st);
  EXPECT_EQ(st.index(), 1u);  // the embedding stage's stash
  EXPECT_GT(v[0].stash_bytes(st), 0u);
  try {
    v[1].backward_input(y, st);
    ADD_FAILURE() << "a block stage took the embedding stage's stash";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("alternative 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v[1].stash_bytes(st), ps::invalid_schedule);
  // An empty stash reaches the stage model, which reports it as it would alone.
  GptVariant::stash_type empty;
  EXPECT_THROW(v[1].backward_weight(empty), ps::error);
}

}  // namespace test_heterogeneous_stages
