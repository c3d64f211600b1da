// The host toy models (residual MLP, tiny causal GPT) in float and double: concepts,
// deterministic and partition-independent parameters, gradients against finite differences,
// stash byte counts against the analytic prediction, causal masking, call-order errors, and
// the data, loss and reference helpers the numerics tests build on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ranges>
#include <string>
#include <vector>

#include "pipesched/exec/concepts.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/memory.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/toy/slicing.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/toy/tensor.hpp"

namespace test_toy_models {

namespace ps = pipesched;
namespace toy = pipesched::toy;

static_assert(ps::check_stage_model<toy::MlpStage<float>>());
static_assert(ps::check_stage_model<toy::MlpStage<double>>());
static_assert(ps::check_stage_model<toy::GptStage<float>>());
static_assert(ps::check_stage_model<toy::GptStage<double>>());
static_assert(ps::check_layer<toy::MlpBlock<float>>());
static_assert(ps::check_layer<toy::MlpBlock<double>>());
static_assert(ps::check_layer<toy::GptEmbedding<double>>());
static_assert(ps::check_layer<toy::GptBlock<double>>());
static_assert(ps::check_layer<toy::GptHead<double>>());
static_assert(ps::check_layer<toy::GptBlock<float>>());
// The chain of stage concepts (exec/concepts.hpp): the toy models are trainable and reducible;
// the GPT takes a tensor group, the MLP does not; a synthetic stage has no weights to train.
static_assert(ps::trainable_stage<toy::MlpStage<float>>);
static_assert(ps::reducible_stage<toy::MlpStage<double>>);
static_assert(ps::reducible_stage<toy::GptStage<float>>);
static_assert(ps::tensor_parallel_stage<toy::GptStage<double>>);
static_assert(!ps::tensor_parallel_stage<toy::MlpStage<double>>);
static_assert(!ps::trainable_stage<toy::SyntheticStage>);
static_assert(!ps::reducible_stage<toy::SyntheticStage>);
static_assert(std::ranges::forward_range<toy::TensorRange<toy::Tensor<float>>>);
static_assert(std::ranges::forward_range<toy::TensorRange<const toy::Tensor<double>>>);

namespace {

// What a typed test needs to know about a toy model.
template <class Stage>
struct Model;

template <class T>
struct Model<toy::MlpStage<T>> {
  using Config = toy::MlpConfig;
  static Config config() { return {}; }
  static toy::StepData<T> data(const Config& c, int microbatches, std::uint64_t seed = 7) {
    return toy::make_mlp_data<T>(c, microbatches, seed);
  }
  static constexpr double learning_rate = 0.5;
};

template <class T>
struct Model<toy::GptStage<T>> {
  using Config = toy::GptConfig;
  static Config config() { return {}; }
  static toy::StepData<T> data(const Config& c, int microbatches, std::uint64_t seed = 7) {
    return toy::make_gpt_data<T>(c, microbatches, seed);
  }
  static constexpr double learning_rate = 0.2;
};

// Pipelined runs must match the reference to this relative error (see max_relative_error).
template <class T>
constexpr double tolerance = std::is_same_v<T, double> ? 1e-12 : 1e-5;

template <class Stage, class Config>
std::vector<Stage> make_stages(const Config& config, int stages) {
  std::vector<Stage> v;
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages);
  return v;
}

// Forward of one microbatch through every stage, stashes kept.
template <class Stage>
toy::Tensor<toy::stage_value_t<Stage>> forward_all(std::vector<Stage>& stages,
                                                   std::vector<typename Stage::stash_type>& st,
                                                   toy::Tensor<toy::stage_value_t<Stage>> x) {
  st.resize(stages.size());
  for (std::size_t s = 0; s < stages.size(); ++s)
    x = stages[s].forward(x, st[s]);
  return x;
}

template <class Stage>
class ToyModel : public ::testing::Test {};

using Models = ::testing::Types<toy::MlpStage<float>, toy::MlpStage<double>, toy::GptStage<float>,
                                toy::GptStage<double>>;
TYPED_TEST_SUITE(ToyModel, Models);

}  // namespace

TYPED_TEST(ToyModel, InitializationIsDeterministicAndSeeded) {
  using M = Model<TypeParam>;
  auto config = M::config();
  auto a = make_stages<TypeParam>(config, 2);
  auto b = make_stages<TypeParam>(config, 2);
  EXPECT_EQ(toy::flat_parameters(a), toy::flat_parameters(b));
  config.seed += 1;
  auto c = make_stages<TypeParam>(config, 2);
  EXPECT_NE(toy::flat_parameters(a), toy::flat_parameters(c));
  // Blocks draw from their own streams: two blocks of one model differ.
  const auto& blocks = a[0].blocks();
  ASSERT_GE(blocks.size(), 2u);
  EXPECT_NE(blocks[0].parameters()[2], blocks[1].parameters()[2]);
  // Gradients start at zero.
  for (auto g : toy::flat_gradients(a))
    ASSERT_EQ(g, 0);
}

TYPED_TEST(ToyModel, PartitionDoesNotChangeTheModel) {
  using M = Model<TypeParam>;
  auto config = M::config();
  config.blocks = 5;
  const auto data = M::data(config, 3);
  auto whole = make_stages<TypeParam>(config, 1);
  const auto params = toy::flat_parameters(whole);
  std::vector<typename TypeParam::stash_type> st;
  std::vector<decltype(data.input(0))> outputs;
  for (int mb = 0; mb < data.microbatches; ++mb)
    outputs.push_back(forward_all(whole, st, data.input(mb)));
  const double loss = toy::sequential_step(whole, data);
  const auto grads = toy::flat_gradients(whole);
  for (int stages : {2, 3, 4, 5}) {
    SCOPED_TRACE("stages=" + std::to_string(stages));
    auto split = make_stages<TypeParam>(config, stages);
    // Earlier stages take the remainder; together the stages hold every block once.
    int next = 0;
    for (const auto& s : split) {
      EXPECT_EQ(s.first_block(), next);
      EXPECT_GE(s.last_block() - s.first_block(), config.blocks / stages);
      EXPECT_LE(s.last_block() - s.first_block(), config.blocks / stages + 1);
      next = s.last_block();
    }
    EXPECT_EQ(next, config.blocks);
    // Same operations in the same order: equal bits, not merely close values.
    EXPECT_EQ(toy::flat_parameters(split), params);
    for (int mb = 0; mb < data.microbatches; ++mb)
      EXPECT_EQ(forward_all(split, st, data.input(mb)), outputs[static_cast<std::size_t>(mb)])
          << "microbatch " << mb;
    EXPECT_EQ(toy::sequential_step(split, data), loss);
    EXPECT_EQ(toy::flat_gradients(split), grads);
  }
}

TYPED_TEST(ToyModel, StashBytesMatchThePrediction) {
  using M = Model<TypeParam>;
  using T = toy::stage_value_t<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 1);
  for (int stages : {1, 2, 4}) {
    auto model = make_stages<TypeParam>(config, stages);
    std::vector<typename TypeParam::stash_type> st;
    const auto out = forward_all(model, st, data.input(0));
    for (int s = 0; s < stages; ++s) {
      SCOPED_TRACE("stages=" + std::to_string(stages) + " stage=" + std::to_string(s));
      const auto& stage = model[static_cast<std::size_t>(s)];
      auto& stash = st[static_cast<std::size_t>(s)];
      EXPECT_GT(stage.activation_bytes(), 0u);
      EXPECT_EQ(stage.stash_bytes(stash), stage.activation_bytes());
    }
    double loss = 0;
    auto dy = data.loss_gradient(out, 0, loss);
    for (int s = stages - 1; s >= 0; --s) {
      SCOPED_TRACE("stages=" + std::to_string(stages) + " stage=" + std::to_string(s));
      auto& stage = model[static_cast<std::size_t>(s)];
      auto& stash = st[static_cast<std::size_t>(s)];
      dy = stage.backward_input(dy, stash);
      EXPECT_EQ(stage.stash_bytes(stash), stage.wgrad_bytes());
      stage.backward_weight(stash);
      EXPECT_EQ(stage.stash_bytes(stash), 0u);
    }
  }
  // The per-layer formulas scale with the element size.
  EXPECT_EQ(toy::mlp_block_stash_bytes<T>(2, 8, 16).activation, 2 * (8 + 32) * sizeof(T));
  EXPECT_EQ(toy::gpt_block_stash_bytes<T>(2, 8, 8, 2, 32).activation,
            (16 * (48 + 2 + 64) + 2 * 2 * 64) * sizeof(T));
}

TYPED_TEST(ToyModel, InterleavedMicrobatchesMatchSequential) {
  // Units of different microbatches in a pipeline order (all forwards, then input backwards
  // newest first, then weight backwards oldest first): a stash carries everything a unit
  // needs, so the step equals the sequential one.
  using M = Model<TypeParam>;
  using T = toy::stage_value_t<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 3);
  auto reference = make_stages<TypeParam>(config, 2);
  const double expected_loss = toy::sequential_step(reference, data);
  auto model = make_stages<TypeParam>(config, 2);
  for (auto& s : model)
    s.zero_gradients();
  std::vector<std::vector<typename TypeParam::stash_type>> st(3);
  std::vector<toy::Tensor<T>> out(3);
  for (int mb = 0; mb < 3; ++mb)
    out[mb] = forward_all(model, st[mb], data.input(mb));
  double loss = 0;
  for (int mb = 2; mb >= 0; --mb) {
    auto dy = data.loss_gradient(out[mb], mb, loss);
    for (int s = 1; s >= 0; --s)
      dy = model[s].backward_input(dy, st[mb][s]);
  }
  for (int mb = 0; mb < 3; ++mb)
    for (int s = 0; s < 2; ++s)
      model[s].backward_weight(st[mb][s]);
  EXPECT_NEAR(loss, expected_loss, tolerance<T> * expected_loss);
  EXPECT_LE(toy::max_relative_error(toy::flat_gradients(model), toy::flat_gradients(reference)),
            tolerance<T>);
}

TYPED_TEST(ToyModel, ForwardIsRepeatableForRecompute) {
  using M = Model<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 1);
  auto model = make_stages<TypeParam>(config, 2);
  typename TypeParam::stash_type first, again;
  const auto x = data.input(0);
  const auto y = model[0].forward(x, first);
  // A stash that already holds a forward is simply replaced.
  EXPECT_EQ(model[0].forward(x, first), y);
  EXPECT_EQ(model[0].forward(x, again), y);
  EXPECT_EQ(model[0].stash_bytes(again), model[0].stash_bytes(first));
  const decltype(y) dy(y.shape, 0.25);
  EXPECT_EQ(model[0].backward_input(dy, first), model[0].backward_input(dy, again));
  EXPECT_EQ(model[0].stash_bytes(again), model[0].stash_bytes(first));
}

TYPED_TEST(ToyModel, LossDecreasesUnderSgd) {
  using M = Model<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 2);
  auto model = make_stages<TypeParam>(config, 2);
  const double initial = toy::sequential_step(model, data);
  double loss = initial;
  for (int step = 0; step < 6; ++step) {
    toy::sgd_update(model, M::learning_rate);
    loss = toy::sequential_step(model, data);
  }
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(loss, 0.9 * initial);
}

TYPED_TEST(ToyModel, CallsOutOfOrderThrow) {
  using M = Model<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 1);
  auto model = make_stages<TypeParam>(config, 2);
  auto& last = model[1];
  typename TypeParam::stash_type stash;
  std::vector<typename TypeParam::stash_type> st;
  const auto out = forward_all(model, st, data.input(0));
  const decltype(out) dy(out.shape, 0.5);
  EXPECT_THROW(last.backward_input(dy, stash), ps::invalid_schedule);
  EXPECT_THROW(last.backward_weight(stash), ps::invalid_schedule);
  EXPECT_THROW(last.backward_weight(st[1]), ps::invalid_schedule);
  EXPECT_THROW(last.backward_input(decltype(out)({1, 2, 3}, 0.5), st[1]), ps::invalid_problem);
  EXPECT_THROW(model[0].backward_input(dy, st[1]), ps::invalid_schedule);  // another's stash
  last.backward_input(dy, st[1]);
  EXPECT_THROW(last.backward_input(dy, st[1]), ps::invalid_schedule);
  last.backward_weight(st[1]);
  EXPECT_EQ(last.stash_bytes(st[1]), 0u);
  EXPECT_THROW(last.backward_weight(st[1]), ps::invalid_schedule);
  // An input of the wrong width.
  EXPECT_THROW(model[1].forward(decltype(out)({2, 8, 3}, 0.5), stash), ps::invalid_problem);
  EXPECT_THROW(model[1].forward(decltype(out)({2, 3}, 0.5), stash), ps::invalid_problem);
}

TYPED_TEST(ToyModel, ImpossibleConfigsThrow) {
  using M = Model<TypeParam>;
  auto config = M::config();
  EXPECT_THROW(TypeParam(config, 0, config.blocks + 1), ps::invalid_problem);
  EXPECT_THROW(TypeParam(config, 2, 2), ps::invalid_problem);
  EXPECT_THROW(TypeParam(config, -1, 2), ps::invalid_problem);
  EXPECT_THROW(TypeParam(config, 0, 0), ps::invalid_problem);
  config.hidden = 0;
  EXPECT_THROW(TypeParam(config, 0, 1), ps::invalid_problem);
  config = M::config();
  config.blocks = 0;
  EXPECT_THROW(TypeParam(config, 0, 1), ps::invalid_problem);
  try {
    TypeParam(M::config(), 0, 9);
    ADD_FAILURE() << "nine stages of four blocks were accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("stages is 9"), std::string::npos) << e.what();
  }
}

// ---- gradients against finite differences (double) ---------------------------------------

namespace {
template <class Stage>
class GradientCheck : public ::testing::Test {};
using DoubleModels = ::testing::Types<toy::MlpStage<double>, toy::GptStage<double>>;
TYPED_TEST_SUITE(GradientCheck, DoubleModels);

// Fourth-order central difference: truncation O(h⁴), so a moderate h keeps rounding small.
template <class Fn>
double central_difference(Fn&& loss_at, double value, double h = 1e-3) {
  return (-loss_at(value + 2 * h) + 8 * loss_at(value + h) - 8 * loss_at(value - h) +
          loss_at(value - 2 * h)) /
         (12 * h);
}

double gradient_error(double numeric, double analytic) {
  // Some true gradients are exactly zero (softmax ignores the key bias); those differ from
  // their finite difference by rounding only, which the absolute floor absorbs.
  return std::abs(numeric - analytic) / std::max({std::abs(numeric), std::abs(analytic), 1e-6});
}
}  // namespace

TYPED_TEST(GradientCheck, ParametersMatchFiniteDifferences) {
  using M = Model<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 2);
  for (int stages : {1, 3}) {
    auto model = make_stages<TypeParam>(config, stages);
    toy::sequential_step(model, data);
    const auto grads = toy::flat_gradients(model);
    std::size_t offset = 0;
    int tensor_index = 0;
    for (auto& stage : model)
      for (auto& tensor : stage.parameters()) {
        for (std::size_t i : {std::size_t{0}, tensor.size() / 2, tensor.size() - 1}) {
          SCOPED_TRACE("stages=" + std::to_string(stages) + " tensor " +
                       std::to_string(tensor_index) + " " + toy::shape_string(tensor.shape) +
                       " element " + std::to_string(i));
          const double saved = tensor[i];
          const double numeric = central_difference(
              [&](double v) {
                tensor[i] = v;
                return toy::sequential_loss(model, data);
              },
              saved);
          tensor[i] = saved;
          EXPECT_LE(gradient_error(numeric, grads[offset + i]), 1e-6)
              << "numeric " << numeric << " analytic " << grads[offset + i];
        }
        offset += tensor.size();
        ++tensor_index;
      }
    EXPECT_EQ(offset, grads.size());
  }
}

TYPED_TEST(GradientCheck, StageBoundaryGradientMatchesFiniteDifferences) {
  // The gradient a later stage sends back is d loss / d (its input): perturb that input.
  using M = Model<TypeParam>;
  const auto config = M::config();
  const auto data = M::data(config, 1);
  auto model = make_stages<TypeParam>(config, 2);
  typename TypeParam::stash_type first, second;
  const auto boundary = model[0].forward(data.input(0), first);
  double loss = 0;
  const auto dy = data.loss_gradient(model[1].forward(boundary, second), 0, loss);
  const auto dx = model[1].backward_input(dy, second);
  ASSERT_EQ(dx.shape, boundary.shape);
  for (std::size_t i = 0; i < boundary.size(); i += 5) {
    SCOPED_TRACE("element " + std::to_string(i));
    const double numeric = central_difference(
        [&](double v) {
          auto x = boundary;
          x[i] = v;
          typename TypeParam::stash_type s;
          double l = 0;
          data.loss_gradient(model[1].forward(x, s), 0, l);
          return l;
        },
        boundary[i]);
    EXPECT_LE(gradient_error(numeric, dx[i]), 1e-6);
  }
}

// ---- GPT specifics -----------------------------------------------------------------------

TEST(GptStage, AttentionIsCausal) {
  const toy::GptConfig config;
  auto model = make_stages<toy::GptStage<double>>(config, 1);
  const auto data = toy::make_gpt_data<double>(config, 1, 3);
  const auto ids = data.input(0);
  toy::GptStage<double>::stash_type st;
  const auto logits = model[0].forward(ids, st);
  ASSERT_EQ(logits.shape, (std::vector<int>{2, config.sequence, config.vocabulary}));
  for (int t = 0; t < config.sequence; ++t) {
    SCOPED_TRACE("changed position " + std::to_string(t));
    auto changed = ids;
    changed(0, t) = double((int(ids(0, t)) + 5) % config.vocabulary);
    const auto out = model[0].forward(changed, st);
    for (int p = 0; p < config.sequence; ++p) {
      bool same = true;
      for (int v = 0; v < config.vocabulary; ++v)
        same = same && out(0, p, v) == logits(0, p, v);
      EXPECT_EQ(same, p < t) << "position " << p;
      for (int v = 0; v < config.vocabulary; ++v)
        ASSERT_EQ(out(1, p, v), logits(1, p, v)) << "another sequence of the batch changed";
    }
  }
}

TEST(GptStage, StagesCarryTheRightLayersAndShapes) {
  toy::GptConfig config;
  config.blocks = 5;
  auto model = make_stages<toy::GptStage<float>>(config, 3);
  EXPECT_TRUE(model[0].has_embedding());
  EXPECT_FALSE(model[0].has_head());
  EXPECT_FALSE(model[1].has_embedding());
  EXPECT_FALSE(model[1].has_head());
  EXPECT_TRUE(model[2].has_head());
  EXPECT_EQ(model[0].blocks().size(), 2u);
  EXPECT_EQ(model[1].blocks().size(), 2u);
  EXPECT_EQ(model[2].blocks().size(), 1u);
  const auto data = toy::make_gpt_data<float>(config, 1, 1);
  std::vector<toy::GptStage<float>::stash_type> st(3);
  auto x = data.input(0);
  const std::vector<int> activation{config.microbatch_size, config.sequence, config.hidden};
  x = model[0].forward(x, st[0]);
  EXPECT_EQ(x.shape, activation);
  x = model[1].forward(x, st[1]);
  EXPECT_EQ(x.shape, activation);
  x = model[2].forward(x, st[2]);
  EXPECT_EQ(x.shape, (std::vector<int>{config.microbatch_size, config.sequence, 16}));
  // Stage 0's input is token ids: its input gradient is zeros of the ids' shape.
  auto dx = model[0].backward_input(toy::Tensor<float>(activation, 1.0f), st[0]);
  EXPECT_EQ(dx, toy::Tensor<float>(data.input(0).shape));
  // Shorter sequences are accepted (sequence slices will rely on it), longer ones are not.
  toy::GptStage<float>::stash_type s;
  EXPECT_EQ(model[0].forward(toy::Tensor<float>({1, 3}, 2.0f), s).shape,
            (std::vector<int>{1, 3, config.hidden}));
  EXPECT_THROW(model[0].forward(toy::Tensor<float>({1, config.sequence + 1}), s),
               ps::invalid_problem);
}

TEST(GptStage, BadTokensAndShapesThrow) {
  toy::GptConfig config;
  auto model = make_stages<toy::GptStage<double>>(config, 2);
  toy::GptStage<double>::stash_type st;
  toy::Tensor<double> ids({2, 4}, 1.0);
  ids(1, 2) = 16;  // == vocabulary
  EXPECT_THROW(model[0].forward(ids, st), ps::invalid_problem);
  ids(1, 2) = 2.5;
  EXPECT_THROW(model[0].forward(ids, st), ps::invalid_problem);
  ids(1, 2) = -1;
  EXPECT_THROW(model[0].forward(ids, st), ps::invalid_problem);
  ids(1, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(model[0].forward(ids, st), ps::invalid_problem);
  ids(1, 2) = 15;
  EXPECT_NO_THROW(model[0].forward(ids, st));
  config.heads = 3;  // 8 is not a multiple of 3
  EXPECT_THROW(toy::GptStage<double>(config, 0, 1), ps::invalid_problem);
}

// ---- data, loss and reference helpers ----------------------------------------------------

TEST(StepData, IsDeterministicAndSumsToTheStepLoss) {
  const toy::GptConfig gpt;
  const auto a = toy::make_gpt_data<double>(gpt, 3, 5);
  const auto b = toy::make_gpt_data<double>(gpt, 3, 5);
  const auto c = toy::make_gpt_data<double>(gpt, 3, 6);
  for (int mb = 0; mb < 3; ++mb)
    EXPECT_EQ(a.input(mb), b.input(mb));
  EXPECT_NE(a.input(0), c.input(0));
  EXPECT_NE(a.input(0), a.input(1));
  // Targets are the next tokens of the same rows.
  for (int t = 0; t + 1 < gpt.sequence; ++t)
    EXPECT_EQ(a.targets[0](1, t), a.input(0)(1, t + 1));
  EXPECT_THROW(a.input(3), ps::invalid_problem);
  EXPECT_THROW(a.input(-1), ps::invalid_problem);

  // Uniform logits: every token's loss is log(vocabulary), and so is the step loss.
  double loss = 0;
  for (int mb = 0; mb < 3; ++mb) {
    const auto g =
        a.loss_gradient(toy::Tensor<double>({2, gpt.sequence, gpt.vocabulary}), mb, loss);
    double sum = 0;
    for (double v : g.data)
      sum += v;
    EXPECT_NEAR(sum, 0.0, 1e-15);  // softmax minus one-hot sums to zero per token
  }
  EXPECT_NEAR(loss, std::log(double(gpt.vocabulary)), 1e-12);
  EXPECT_THROW(a.loss_gradient(toy::Tensor<double>({2, gpt.sequence, 3, 1}), 0, loss),
               ps::invalid_problem);

  const toy::MlpConfig mlp;
  const auto m = toy::make_mlp_data<float>(mlp, 2, 5);
  double mse = 0;
  for (int mb = 0; mb < 2; ++mb) {
    auto out = m.targets[static_cast<std::size_t>(mb)];
    for (float& v : out.data)
      v += 0.5f;  // every element off by 0.5
    const auto g = m.loss_gradient(out, mb, mse);
    for (float v : g.data)
      EXPECT_FLOAT_EQ(v, 2 * 0.5f / (16 * 2));
  }
  EXPECT_NEAR(mse, 0.25, 1e-7);
  EXPECT_THROW(m.loss_gradient(toy::Tensor<float>({2, 7}), 0, mse), ps::invalid_problem);
  EXPECT_THROW(toy::make_mlp_data<float>(mlp, 0, 1), ps::invalid_problem);
}

// The slice bookkeeping the host and GPU GPT stages share: offsets from the lengths forwarded,
// forwards first to last, backwards last to first, a recompute of the same length only.
TEST(SliceLedger, OrdersSlicesAndGivesOffsets) {
  toy::SliceLedger l;
  EXPECT_EQ(l.begin_forward("f", 0, 3), 0);
  l.end_forward(0, 3);
  EXPECT_THROW(l.begin_forward("f", 2, 4), pipesched::invalid_schedule);  // slice 1 has not run
  EXPECT_EQ(l.begin_forward("f", 1, 4), 3);
  l.end_forward(1, 4);
  EXPECT_EQ(l.begin_forward("f", 2, 5), 7);
  l.end_forward(2, 5);
  EXPECT_EQ(l.begin_forward("f", 1, 4), 3);  // a recompute
  try {
    l.begin_forward("stage", 1, 2);
    ADD_FAILURE() << "a recompute of another length was taken";
  } catch (const pipesched::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("stage: slice 1 ran with 4 tokens and now with 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(l.begin_backward("b", 1), pipesched::invalid_schedule);  // slice 2 still live
  EXPECT_THROW(l.begin_backward("b", 3), pipesched::invalid_schedule);  // never forwarded
  EXPECT_EQ(l.begin_backward("b", 2), 7);
  l.end_backward(2);
  EXPECT_EQ(l.begin_backward("b", 1), 3);
  l.end_backward(1);
  EXPECT_THROW(l.begin_forward("f", 1, 4), pipesched::invalid_schedule);  // its backward ran
  EXPECT_THROW(l.begin_forward("f", 2, 5), pipesched::invalid_schedule);  // slice 1 is done
  EXPECT_EQ(l.offset(3), 12);
}

TEST(Reference, MaxRelativeError) {
  const std::vector<double> a{1.0, -2.0, 0.0, 4.0};
  EXPECT_EQ(toy::max_relative_error(a, a), 0.0);
  EXPECT_NEAR(toy::max_relative_error(a, {1.0, -2.0, 0.0, 4.004}), 0.004 / 4.004, 1e-12);
  // Near-zero entries are judged against 1e-3 of the largest magnitude (4 here).
  EXPECT_NEAR(toy::max_relative_error(a, {1.0, -2.0, 4e-6, 4.0}), 1e-3, 1e-12);
  EXPECT_NEAR(toy::max_relative_error(a, {1.0, -2.0, 4e-6, 4.0}, 0.0), 1.0, 1e-12);
  EXPECT_EQ(toy::max_relative_error(a, {1.0, -2.0, std::nan(""), 4.0}),
            std::numeric_limits<double>::infinity());
  EXPECT_THROW(toy::max_relative_error(a, {1.0}), ps::invalid_problem);
  std::vector<toy::MlpStage<double>> none;
  EXPECT_THROW(toy::sequential_step(none, toy::make_mlp_data<double>({}, 1, 1)),
               ps::invalid_problem);
}

TEST(Tensor, ShapeAccessAndRandomStreams) {
  toy::Tensor<float> t({2, 3, 4}, 1.5f);
  EXPECT_EQ(t.size(), 24u);
  EXPECT_EQ(t.bytes(), 24 * sizeof(float));
  EXPECT_EQ(t.rank(), 3);
  t(1, 2, 3) = 7;
  EXPECT_EQ(t[23], 7);
  t(0, 1, 0) = 5;
  EXPECT_EQ(t[4], 5);
  toy::Tensor<double> m({3, 2});
  m(2, 1) = 9;
  EXPECT_EQ(m[5], 9);
  EXPECT_EQ(toy::Tensor<double>().size(), 0u);
  EXPECT_EQ(toy::shape_string({2, 8}), "[2, 8]");
  toy::Random r1(1, 2), r2(1, 2), r3(1, 3);
  EXPECT_EQ(r1.next(), r2.next());
  EXPECT_NE(r1.next(), r3.next());
  for (int i = 0; i < 1000; ++i) {
    const double u = r1.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const int k = r1.below(5);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, 5);
  }
  // A float and a double tensor from one stream hold the same values up to rounding.
  toy::Random rf(4, 4), rd(4, 4);
  const auto f = toy::uniform_tensor<float>({8}, rf, 1.0);
  const auto d = toy::uniform_tensor<double>({8}, rd, 1.0);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(f[i], static_cast<float>(d[i]));
}

}  // namespace test_toy_models
