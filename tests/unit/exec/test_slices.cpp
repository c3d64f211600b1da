// Slice-aware execution: the toy GPT with its microbatches cut into 2 and 4 sequence slices,
// run on 4 ranks through seq-1f1b, slice-pipe (V = 2) and GPipe, fused and split, with and
// without checkpointing, gives the loss and gradients of the unsliced sequential reference,
// and holds exactly the bytes the simulator predicts — the keys/values and their gradients in
// the slice contexts included. Also the model's slice calls on their own, the slicing of the
// data, the per-slice ProfiledCost, and the errors a wrong order gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"

#include "exec_support.hpp"

namespace test_slices {

namespace ps = pipesched;
namespace toy = pipesched::toy;

static_assert(ps::slice_aware_stage_model<toy::GptStage<double>>);
static_assert(ps::slice_aware_stage_model<toy::GptStage<float>>);
static_assert(ps::check_stage_model<toy::GptStage<float>>());
static_assert(!ps::slice_aware_stage_model<toy::MlpStage<double>>);
static_assert(ps::stage_model<toy::MlpStage<double>>);

namespace {

using namespace exec_test;

// The toy GPT every pipelined test runs: 8 blocks, 16-token sequences.
const toy::GptConfig gpt_config{.sequence = 16, .blocks = 8};

// Trains `schedule` (microbatches cut into its problem's slices) for two steps with SGD from
// each rank's optimizer hook, and compares each step with the unsliced sequential reference.
// Returns the runs' total `filled`.
template <class Stage, class Config, class Data>
int expect_matches_unsliced(const ps::Schedule& schedule, const Config& config, const Data& data,
                            const ps::ProfiledCost& cost, ps::ExecutorOptions options = {},
                            RunChecks checks = {}) {
  using T = typename Stage::tensor_type::value_type;
  const int stages = schedule.problem.stages;
  std::vector<Stage> ref = make_stages<Stage>(config, stages);
  std::vector<Stage> piped = make_stages<Stage>(config, stages);
  options.optimizer = toy::sgd_optimizer(schedule.placement, piped, learning_rate);
  ps::inproc::Pipeline<Stage> pipe(schedule, piped, options);
  const ps::SimulationResult predicted = ps::simulate(schedule, cost);
  EXPECT_FALSE(predicted.deadlock) << predicted.deadlock_report;
  const auto training = toy::training_data(data, schedule.problem.slices);
  int filled = 0;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [r, ref_loss, ref_grads] =
        step_against_reference<T>(pipe, piped, ref, data, training);
    for (int rank = 0; rank < schedule.rank_count(); ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      const ps::RankRun& run = r.ranks[rank];
      if (checks.exact_peak) {
        EXPECT_EQ(run.peak_bytes, predicted.ranks[rank].peak_memory);
      }
      EXPECT_LE(run.peak_bytes, checks.budget);
      filled += run.filled;
    }
  }
  return filled;
}

template <class T>
void expect_gpt_matches(const ps::Schedule& s, ps::ExecutorOptions options = {},
                        RunChecks checks = {}, const toy::GptConfig& config = gpt_config) {
  const auto data = toy::make_gpt_data<T>(config, s.problem.microbatches, 17);
  const auto stages = make_stages<toy::GptStage<T>>(config, s.problem.stages);
  expect_matches_unsliced<toy::GptStage<T>>(
      s, config, data, toy::gpt_profiled_cost(stages, s.problem.slices), options, checks);
}

// The slice-level schedules on 4 ranks and 4 microbatches: seq-1f1b and slice-pipe with two
// chunks per rank, for 2 and 4 slices, fused and split backward.
template <class Fn>
void for_each_sliced_schedule(Fn&& fn) {
  for (int k : {2, 4})
    for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
      const ps::Problem p{.ranks = 4, .microbatches = 4, .slices = k};
      {
        SCOPED_TRACE("seq-1f1b K=" + std::to_string(k) + " " + ps::to_string(wg));
        fn(ps::schedule::seq_1f1b(p, wg));
      }
      SCOPED_TRACE("slice-pipe V=2 K=" + std::to_string(k) + " " + ps::to_string(wg));
      fn(ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 4, .slices = k}, wg));
    }
}

template <class T>
class Slices : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(Slices, Precisions);

}  // namespace

// ---- the executor on slice-level schedules ----------------------------------------------

TYPED_TEST(Slices, SliceSchedulesMatchTheUnslicedReference) {
  for_each_sliced_schedule([](const ps::Schedule& s) { expect_gpt_matches<TypeParam>(s); });
}

TYPED_TEST(Slices, GPipeOverSlices) {
  for (int k : {2, 4})
    for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
      SCOPED_TRACE("gpipe K=" + std::to_string(k) + " " + ps::to_string(wg));
      expect_gpt_matches<TypeParam>(
          ps::schedule::gpipe({.ranks = 4, .microbatches = 4, .slices = k}, wg));
    }
}

TYPED_TEST(Slices, FullCheckpointingKeepsInputAndContext) {
  for_each_sliced_schedule([](const ps::Schedule& base) {
    const ps::Schedule s = ps::checkpoint_full(base);
    expect_gpt_matches<TypeParam>(s);
  });
}

TYPED_TEST(Slices, MarioCheckpointingFitsABudgetFromTheToyBytes) {
  for (int k : {2, 4}) {
    const ps::Schedule base = ps::schedule::slice_pipe(
        {.ranks = 4, .stages = 8, .microbatches = 4, .slices = k}, ps::WGradMode::Fused);
    SCOPED_TRACE("slice-pipe V=2 K=" + std::to_string(k));
    const auto stages = make_stages<toy::GptStage<TypeParam>>(gpt_config, 8);
    const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages, k);
    // Halfway between what full checkpointing needs and what no checkpointing holds.
    const double least = ps::simulate(ps::checkpoint_full(base), cost).peak_memory_max;
    const double most = ps::simulate(base, cost).peak_memory_max;
    ASSERT_LT(least, most);
    ps::MemoryBudget budget;
    budget.all = 0.5 * (least + most);
    const ps::Schedule s = ps::checkpoint_mario(base, cost, budget);
    EXPECT_TRUE(std::any_of(s.ranks.begin(), s.ranks.end(), [](const auto& list) {
      return std::any_of(list.begin(), list.end(),
                         [](const ps::Action& a) { return a.kind == ps::OpKind::R; });
    }));
    expect_gpt_matches<TypeParam>(s, {}, {.exact_peak = true, .budget = budget.all});
  }
}

TYPED_TEST(Slices, LastSliceTakesTheRemainder) {
  // 10 tokens in 4 slices: 2, 2, 2 and 4 — the attention prefix, the positions and the
  // byte counts all follow the uneven cut.
  toy::GptConfig config = gpt_config;
  config.sequence = 10;
  EXPECT_EQ(toy::slice_bounds(10, 3, 4), (toy::SliceBounds{6, 4}));
  for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    SCOPED_TRACE(ps::to_string(wg));
    const ps::Schedule s = ps::schedule::seq_1f1b({.ranks = 4, .microbatches = 4, .slices = 4}, wg);
    expect_gpt_matches<TypeParam>(s, {}, {}, config);
    expect_gpt_matches<TypeParam>(ps::checkpoint_full(s), {}, {}, config);
  }
}

TYPED_TEST(Slices, FillingWaitsWithSlicesKeepsNumericsAndBudget) {
  const ps::Schedule s = ps::checkpoint_full(
      ps::schedule::seq_1f1b({.ranks = 4, .microbatches = 4, .slices = 2}, ps::WGradMode::Split));
  const auto stages = make_stages<toy::GptStage<TypeParam>>(gpt_config, 4);
  const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages, 2);
  const double budget =
      ps::simulate(s, cost).peak_memory_max + 1.5 * cost.slices[1][1].activation_bytes;
  ps::ExecutorOptions options;
  options.fill_waits = true;
  options.memory_budget_bytes = budget;
  expect_gpt_matches<TypeParam>(s, options, {.exact_peak = false, .budget = budget});
}

TEST(SlicesPlainModel, RowSlicesOfTheMlpRunWithoutAContext) {
  // A stage model without a context may run sliced schedules when its slices are independent:
  // the MLP's rows are, so seq-1f1b over row slices gives the unsliced step.
  const toy::MlpConfig config{.blocks = 8, .microbatch_size = 4};
  const auto data = toy::make_mlp_data<double>(config, 4, 3);
  const ps::Schedule s = ps::schedule::seq_1f1b({.ranks = 4, .microbatches = 4, .slices = 2});
  // Each row slice holds half a microbatch's activations: the per-stage figures divided by K.
  const auto stages = make_stages<toy::MlpStage<double>>(config, 4);
  expect_matches_unsliced<toy::MlpStage<double>>(s, config, data, toy::mlp_profiled_cost(stages));
}

// ---- a slice-aware model without slices behaves as before ---------------------------------

namespace {

// The toy GPT stage with only the whole-sequence calls: what a model without slices is.
template <class T>
struct WholeSequenceGpt {
  using tensor_type = toy::Tensor<T>;
  using stash_type = typename toy::GptStage<T>::stash_type;
  toy::GptStage<T> stage;
  WholeSequenceGpt(const toy::GptConfig& c, int s, int n) : stage(c, s, n) {}
  tensor_type forward(const tensor_type& x, stash_type& st) { return stage.forward(x, st); }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    return stage.backward_input(dy, st);
  }
  void backward_weight(stash_type& st) { stage.backward_weight(st); }
  std::size_t stash_bytes(const stash_type& st) const { return stage.stash_bytes(st); }
  void zero_gradients() { stage.zero_gradients(); }
};
static_assert(!ps::slice_aware_stage_model<WholeSequenceGpt<double>>);

}  // namespace

TYPED_TEST(Slices, OneSliceBehavesAsAModelWithoutSlices) {
  using T = TypeParam;
  const auto data = toy::make_gpt_data<T>(gpt_config, 8, 5);
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  for (const ps::Schedule& s : {ps::schedule::one_f_one_b(p, ps::WGradMode::Split),
                                ps::checkpoint_full(ps::schedule::one_f_one_b(p))}) {
    SCOPED_TRACE(s.name);
    auto aware = make_stages<toy::GptStage<T>>(gpt_config, 4);
    auto whole = make_stages<WholeSequenceGpt<T>>(gpt_config, 4);
    ps::inproc::Pipeline<toy::GptStage<T>> a(s, aware);
    ps::inproc::Pipeline<WholeSequenceGpt<T>> b(s, whole);
    const ps::StepResult ra = a.step(toy::training_data(data));
    const ps::StepResult rb = b.step(toy::training_data(data));
    EXPECT_EQ(ra.loss, rb.loss);
    std::vector<T> ga = toy::flat_gradients(aware);
    std::vector<T> gb;
    for (const auto& w : whole)
      for (const auto& g : w.stage.gradients())
        gb.insert(gb.end(), g.data.begin(), g.data.end());
    EXPECT_TRUE(ga == gb);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(ra.ranks[r].peak_bytes, rb.ranks[r].peak_bytes) << "rank " << r;
      ASSERT_EQ(ra.ranks[r].memory.size(), rb.ranks[r].memory.size());
      for (std::size_t i = 0; i < ra.ranks[r].memory.size(); ++i)
        EXPECT_EQ(ra.ranks[r].memory[i].value, rb.ranks[r].memory[i].value);
    }
  }
}

// ---- the model's slice calls --------------------------------------------------------------

TYPED_TEST(Slices, SlicedCallsComputeTheWholeSequence) {
  // One microbatch through a 3-stage GPT, whole and in K slices: the forward is the same
  // arithmetic (bit-identical logits), the input gradients and weight gradients agree to
  // rounding, and the contexts hold exactly the analytic keys/values and their gradients.
  using T = TypeParam;
  const auto data = toy::make_gpt_data<T>(gpt_config, 1, 2);
  for (int k : {1, 2, 4}) {
    SCOPED_TRACE("K=" + std::to_string(k));
    auto whole = make_stages<toy::GptStage<T>>(gpt_config, 3);
    auto sliced = make_stages<toy::GptStage<T>>(gpt_config, 3);
    for (auto& s : whole)
      s.zero_gradients();
    for (auto& s : sliced)
      s.zero_gradients();
    // Whole sequence.
    std::vector<typename toy::GptStage<T>::stash_type> ws(3);
    auto x = data.input(0);
    for (int s = 0; s < 3; ++s)
      x = whole[s].forward(x, ws[s]);
    const toy::Tensor<T> logits = x;
    double whole_loss = 0;
    auto dy = data.loss_gradient(logits, 0, whole_loss);
    for (int s = 2; s >= 0; --s) {
      dy = whole[s].backward_input(dy, ws[s]);
      whole[s].backward_weight(ws[s]);
    }
    // Slices: forwards first to last, backwards last to first.
    std::vector<typename toy::GptStage<T>::context_type> ctx(3);
    std::vector<std::vector<typename toy::GptStage<T>::stash_type>> st(
        static_cast<std::size_t>(k), std::vector<typename toy::GptStage<T>::stash_type>(3));
    std::vector<toy::Tensor<T>> out(static_cast<std::size_t>(k));
    std::size_t held = 0;
    for (int j = 0; j < k; ++j) {
      auto y = data.input(0, j, k);
      for (int s = 0; s < 3; ++s) {
        y = sliced[s].forward(y, st[j][s], ctx[s], j);
        const toy::SliceStashBytes b = sliced[s].slice_bytes(j, k);
        EXPECT_EQ(sliced[s].stash_bytes(st[j][s]), b.activation);
        held += b.key_values;
      }
      out[j] = y;
      // The slice's logits are the whole sequence's columns, bit for bit.
      const toy::SliceBounds at = toy::slice_bounds(gpt_config.sequence, j, k);
      for (int i = 0; i < y.dim(0); ++i)
        for (int t = 0; t < at.length; ++t)
          for (int v = 0; v < y.dim(2); ++v)
            ASSERT_EQ(y(i, t, v), logits(i, at.start + t, v));
    }
    std::size_t in_context = 0;
    for (int s = 0; s < 3; ++s)
      in_context += sliced[s].context_bytes(ctx[s]);
    EXPECT_EQ(in_context, held);
    double sliced_loss = 0;
    for (int j = k - 1; j >= 0; --j) {
      auto g = data.loss_gradient(out[j], 0, j, k, sliced_loss);
      for (int s = 2; s >= 0; --s) {
        const std::size_t before = sliced[s].context_bytes(ctx[s]);
        g = sliced[s].backward_input(g, st[j][s], ctx[s], j);
        const toy::SliceStashBytes b = sliced[s].slice_bytes(j, k);
        EXPECT_EQ(sliced[s].stash_bytes(st[j][s]), b.wgrad);
        // The first backward takes the gradient buffers of every earlier slice; each
        // slice's own backward frees its keys/values and its buffer.
        std::size_t taken = 0;
        if (j == k - 1)
          for (int e = 0; e < k; ++e)
            taken += sliced[s].slice_bytes(e, k).key_value_gradients;
        EXPECT_EQ(sliced[s].context_bytes(ctx[s]) + b.key_values + b.key_value_gradients,
                  before + taken);
        sliced[s].backward_weight(st[j][s]);
      }
    }
    for (int s = 0; s < 3; ++s)
      EXPECT_EQ(sliced[s].context_bytes(ctx[s]), 0u) << "stage " << s;
    EXPECT_NEAR(sliced_loss, whole_loss, tolerance<T>() * whole_loss);
    EXPECT_LE(toy::max_relative_error(toy::flat_gradients(sliced), toy::flat_gradients(whole)),
              tolerance<T>());
  }
}

TEST(SlicesModel, OneSliceCallsEqualTheWholeSequenceCalls) {
  // K = 1 through the context is the same arithmetic as the whole-sequence calls.
  const auto data = toy::make_gpt_data<double>(gpt_config, 1, 4);
  auto a = make_stages<toy::GptStage<double>>(gpt_config, 2);
  auto b = make_stages<toy::GptStage<double>>(gpt_config, 2);
  std::vector<toy::GptStage<double>::stash_type> sa(2), sb(2);
  std::vector<toy::GptStage<double>::context_type> ctx(2);
  auto xa = data.input(0), xb = data.input(0);
  for (int s = 0; s < 2; ++s) {
    xa = a[s].forward(xa, sa[s]);
    xb = b[s].forward(xb, sb[s], ctx[s], 0);
    EXPECT_EQ(a[s].stash_bytes(sa[s]), b[s].stash_bytes(sb[s]) + b[s].context_bytes(ctx[s]));
  }
  ASSERT_EQ(xa, xb);
  double la = 0, lb = 0;
  auto ga = data.loss_gradient(xa, 0, la), gb = data.loss_gradient(xb, 0, 0, 1, lb);
  EXPECT_EQ(la, lb);
  for (int s = 1; s >= 0; --s) {
    ga = a[s].backward_input(ga, sa[s]);
    gb = b[s].backward_input(gb, sb[s], ctx[s], 0);
    EXPECT_EQ(ga, gb);
    a[s].backward_weight(sa[s]);
    b[s].backward_weight(sb[s]);
  }
  EXPECT_EQ(toy::flat_gradients(a), toy::flat_gradients(b));
}

TEST(SlicesModel, CheckpointedSliceRecomputesFromInputAndContext) {
  // Forward slice 0 and 1, drop slice 1's stash, run its forward again from its input (a
  // recompute): the same stash and output, the context unchanged.
  const auto data = toy::make_gpt_data<double>(gpt_config, 1, 8);
  toy::GptStage<double> stage(gpt_config, 0, 1);
  toy::GptStage<double>::context_type ctx;
  toy::GptStage<double>::stash_type s0, s1, again;
  stage.forward(data.input(0, 0, 2), s0, ctx, 0);
  const auto y = stage.forward(data.input(0, 1, 2), s1, ctx, 1);
  const std::size_t bytes = stage.context_bytes(ctx);
  EXPECT_EQ(stage.forward(data.input(0, 1, 2), again, ctx, 1), y);
  EXPECT_EQ(stage.context_bytes(ctx), bytes);
  EXPECT_EQ(stage.stash_bytes(again), stage.stash_bytes(s1));
}

TEST(SlicesModel, WrongOrdersAndMismatchesThrow) {
  const auto data = toy::make_gpt_data<double>(gpt_config, 1, 8);
  auto stages = make_stages<toy::GptStage<double>>(gpt_config, 2);
  using Stash = toy::GptStage<double>::stash_type;
  using Context = toy::GptStage<double>::context_type;
  {
    Context ctx;
    Stash st;
    // Slice 1 before slice 0: its attention needs slice 0's keys/values.
    EXPECT_THROW(stages[0].forward(data.input(0, 1, 2), st, ctx, 1), ps::invalid_schedule);
    EXPECT_THROW(stages[0].forward(data.input(0, 0, 2), st, ctx, -1), ps::invalid_problem);
  }
  {
    Context ctx;
    Stash a, b;
    const auto y0 = stages[0].forward(data.input(0, 0, 2), a, ctx, 0);
    const auto y1 = stages[0].forward(data.input(0, 1, 2), b, ctx, 1);
    // Slice 0's backward before slice 1's: slice 1 has gradients for slice 0's keys/values.
    try {
      stages[0].backward_input(toy::Tensor<double>(y0.shape, 0.1), a, ctx, 0);
      ADD_FAILURE() << "slice 0's backward ran before slice 1's";
    } catch (const ps::invalid_schedule& e) {
      EXPECT_NE(std::string(e.what()).find("backwards last to first"), std::string::npos)
          << e.what();
    }
    // A stash of slice 1 with the backward of slice 0, or with the whole-sequence backward.
    EXPECT_THROW(stages[0].backward_input(toy::Tensor<double>(y1.shape, 0.1), b, ctx, 0),
                 ps::invalid_schedule);
    EXPECT_THROW(stages[0].backward_input(toy::Tensor<double>(y1.shape, 0.1), b),
                 ps::invalid_schedule);
    // The context of stage 0 given to stage 1.
    Stash c;
    EXPECT_THROW(stages[1].forward(y0, c, ctx, 0), ps::invalid_schedule);
    // The right order works, and a recompute after the backward does not.
    stages[0].backward_input(toy::Tensor<double>(y1.shape, 0.1), b, ctx, 1);
    EXPECT_THROW(stages[0].forward(data.input(0, 1, 2), b, ctx, 1), ps::invalid_schedule);
    EXPECT_NO_THROW(stages[0].backward_input(toy::Tensor<double>(y0.shape, 0.1), a, ctx, 0));
  }
  // A slice past the end of the position table.
  toy::GptEmbedding<double> embedding(gpt_config);
  toy::GptEmbedding<double>::stash_type est;
  EXPECT_THROW(embedding.forward(toy::Tensor<double>({1, 4}, 1.0), est, gpt_config.sequence - 2),
               ps::invalid_problem);
}

// ---- data slicing and the per-slice cost model ---------------------------------------------

TEST(SlicesData, SliceLossesAddUpToTheWholeLoss) {
  const auto data = toy::make_gpt_data<double>(gpt_config, 2, 9);
  auto model = make_stages<toy::GptStage<double>>(gpt_config, 1);
  toy::GptStage<double>::stash_type st;
  const auto logits = model[0].forward(data.input(1), st);
  double whole = 0;
  const auto grad = data.loss_gradient(logits, 1, whole);
  for (int k : {2, 3, 4}) {
    SCOPED_TRACE("K=" + std::to_string(k));
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      const toy::SliceBounds at = toy::slice_bounds(gpt_config.sequence, j, k);
      const auto ids = data.input(1, j, k);
      ASSERT_EQ(ids.shape, (std::vector<int>{gpt_config.microbatch_size, at.length}));
      toy::Tensor<double> part({logits.dim(0), at.length, logits.dim(2)});
      for (int i = 0; i < logits.dim(0); ++i)
        for (int t = 0; t < at.length; ++t) {
          EXPECT_EQ(ids(i, t), data.input(1)(i, at.start + t));
          for (int v = 0; v < logits.dim(2); ++v)
            part(i, t, v) = logits(i, at.start + t, v);
        }
      const auto g = data.loss_gradient(part, 1, j, k, sum);
      // Each token's gradient is the whole loss's, bit for bit.
      for (int i = 0; i < logits.dim(0); ++i)
        for (int t = 0; t < at.length; ++t)
          for (int v = 0; v < logits.dim(2); ++v)
            ASSERT_EQ(g(i, t, v), grad(i, at.start + t, v));
    }
    EXPECT_NEAR(sum, whole, 1e-14 * whole);
  }
  EXPECT_THROW(data.input(0, 0, gpt_config.sequence + 1), ps::invalid_problem);
  EXPECT_THROW(data.input(0, 2, 2), ps::invalid_problem);
  EXPECT_THROW(toy::training_data(data, 0), ps::invalid_problem);
  EXPECT_THROW(toy::slice_bounds(8, -1, 2), ps::invalid_problem);
}

TEST(SlicesCost, PerSliceFiguresAndContextGradients) {
  // Two slices on one stage: slice k's figures are used as given (not divided by K); the
  // first backward (slice 1) takes every slice's gradient buffers, slice 0's frees its own.
  const ps::Schedule s = ps::schedule::seq_1f1b({.ranks = 1, .microbatches = 1, .slices = 2});
  ps::ProfiledCost cost;
  cost.stages = {ps::StageProfile{.activation_bytes = 999}};
  cost.slices = {
      {ps::StageProfile{.forward = 2,
                        .activation_bytes = 100,
                        .wgrad_bytes = 40,
                        .boundary_bytes = 30,
                        .context_gradient_bytes = 7,
                        .wgrad_part_bytes = {15, 25}},
       ps::StageProfile{
           .forward = 3, .activation_bytes = 200, .wgrad_bytes = 60, .boundary_bytes = 50}}};
  const ps::CostContext ctx{s.problem, s.placement, 2};
  using ps::Action, ps::OpKind;
  EXPECT_EQ(cost.duration(ctx, Action::make(OpKind::F, 0, 0, 1)), 3);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::F, 0, 0, 0), false), 100);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::F, 0, 0, 0), true), 30);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::R, 0, 0, 1), true), 150);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::I, 0, 0, 1), false), -140 + 7);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::I, 0, 0, 0), false), -60 - 7);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::B, 0, 0, 1), false), -200 + 7);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::W, 0, 0, 0, 1), false), -25);
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::W, 0, 0, 1, 1), false), -30);
  // A stage without a full per-slice table falls back to its per-stage figures over K.
  cost.slices.clear();
  EXPECT_EQ(cost.memory_delta(ctx, Action::make(OpKind::F, 0, 0, 1), false), 999.0 / 2);
}

}  // namespace test_slices
