// Weight gradients in parts: the toy GPT and MLP cut their weight-gradient work into pieces
// (one per weight GEMM) grouped into any number of parts, each a disjoint share whose stash
// bytes go as it completes; the executor runs W parts from the schedule (2W0:1), refuses them
// for a stage model that cannot split, holds exactly the bytes the simulator predicts part by
// part, and with `fill_waits` runs pending parts while a receive waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"

#include "exec_support.hpp"

namespace test_wgrad_parts {

namespace ps = pipesched;
namespace toy = pipesched::toy;

static_assert(ps::splits_weight_gradient<toy::GptStage<double>>);
static_assert(ps::splits_weight_gradient<toy::MlpStage<float>>);

namespace {

using namespace exec_test;

// Cuts every W of `s` into `parts` parts: part 0 where the W was, part j moved `spread · j`
// compute actions later (at most to the end of the list). Still valid: each part follows its I.
ps::Schedule cut_weights(const ps::Schedule& s, int parts, int spread) {
  ps::Schedule out = s;
  out.name = s.name + " W/" + std::to_string(parts);
  for (auto& list : out.ranks) {
    std::vector<ps::Action> next;
    std::vector<std::pair<int, ps::Action>> pending;  // compute actions still to wait, part
    auto flush = [&](bool all) {
      for (auto it = pending.begin(); it != pending.end();)
        if (all || it->first <= 0) {
          next.push_back(it->second);
          it = pending.erase(it);
        } else {
          ++it;
        }
    };
    for (const ps::Action& a : list) {
      if (a.kind == ps::OpKind::W) {
        next.push_back(ps::Action::make(ps::OpKind::W, a.stage, a.microbatch, a.slice, 0));
        for (int j = 1; j < parts; ++j)
          pending.push_back(
              {spread * j, ps::Action::make(ps::OpKind::W, a.stage, a.microbatch, a.slice, j)});
        flush(false);
        continue;
      }
      next.push_back(a);
      if (ps::is_compute(a.kind))
        for (auto& p : pending)
          --p.first;
      flush(false);
    }
    flush(true);
    list = std::move(next);
  }
  return out;
}

// The memory curve's values, in order (the simulator's and the executor's have one point per
// action that changes the bytes held).
std::vector<double> values(const std::vector<ps::MemoryPoint>& curve) {
  std::vector<double> v;
  for (const auto& p : curve)
    v.push_back(p.value);
  return v;
}

// Trains `s` two steps and compares with the sequential reference: loss, gradients,
// parameters, and every rank's memory curve with the simulator's, point by point.
template <class Stage, class Config, class Data>
void expect_matches(const ps::Schedule& s, const Config& config, const Data& data,
                    const ps::ProfiledCost& cost, ps::ExecutorOptions options = {}) {
  using T = typename Stage::tensor_type::value_type;
  std::vector<Stage> ref = make_stages<Stage>(config, s.problem.stages);
  std::vector<Stage> piped = make_stages<Stage>(config, s.problem.stages);
  options.optimizer = toy::sgd_optimizer(s.placement, piped, learning_rate);
  ps::inproc::Pipeline<Stage> pipe(s, piped, options);
  const ps::SimulationResult predicted = ps::simulate(s, cost);
  ASSERT_FALSE(predicted.deadlock) << predicted.deadlock_report;
  const auto training = toy::training_data(data, s.problem.slices);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Reordered runs (weight parts early, slices backwards last to first) add the same
    // contributions in another order; the models' double gradient sums keep that to rounding.
    const auto [r, ref_loss, ref_grads] =
        step_against_reference<T>(pipe, piped, ref, data, training);
    if (options.fill_waits) continue;
    for (int rank = 0; rank < s.rank_count(); ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_EQ(r.ranks[rank].peak_bytes, predicted.ranks[rank].peak_memory);
      EXPECT_EQ(values(r.ranks[rank].memory), values(predicted.ranks[rank].memory));
    }
  }
}

// ---- the toy models' parts ----------------------------------------------------------------

template <class Stage>
struct Model;
template <class T>
struct Model<toy::MlpStage<T>> {
  using Config = toy::MlpConfig;
  static Config config() { return {.blocks = 4}; }
  static toy::StepData<T> data(int microbatches) {
    return toy::make_mlp_data<T>(config(), microbatches, 7);
  }
};
template <class T>
struct Model<toy::GptStage<T>> {
  using Config = toy::GptConfig;
  static Config config() { return {.blocks = 4}; }
  static toy::StepData<T> data(int microbatches) {
    return toy::make_gpt_data<T>(config(), microbatches, 7);
  }
};

template <class Stage>
class WeightParts : public ::testing::Test {};
using Models = ::testing::Types<toy::MlpStage<float>, toy::MlpStage<double>, toy::GptStage<float>,
                                toy::GptStage<double>>;
TYPED_TEST_SUITE(WeightParts, Models);

}  // namespace

TYPED_TEST(WeightParts, PartsAddUpToTheWholeWeightGradient) {
  // For every cut (fewer parts than pieces, one per piece, more than pieces) and order, the
  // parts give the whole weight gradient bit for bit (each gradient tensor is one piece's), and
  // each part frees exactly its analytic share of the stash.
  using M = Model<TypeParam>;
  const auto data = M::data(1);
  for (int stages : {1, 2}) {
    auto probe = make_stages<TypeParam>(M::config(), stages);
    for (int s = 0; s < stages; ++s) {
      const int pieces = probe[s].weight_parts();
      EXPECT_GE(pieces, 2);
      for (int parts : {1, 2, 3, pieces, pieces + 2})
        for (bool reversed : {false, true}) {
          SCOPED_TRACE("stages=" + std::to_string(stages) + " stage=" + std::to_string(s) +
                       " parts=" + std::to_string(parts) + (reversed ? " reversed" : ""));
          auto whole = make_stages<TypeParam>(M::config(), stages);
          auto cut = make_stages<TypeParam>(M::config(), stages);
          std::vector<typename TypeParam::stash_type> sw(stages), sc(stages);
          auto xw = data.input(0), xc = data.input(0);
          for (int j = 0; j < stages; ++j) {
            xw = whole[j].forward(xw, sw[j]);
            xc = cut[j].forward(xc, sc[j]);
          }
          double loss = 0;
          auto gw = data.loss_gradient(xw, 0, loss), gc = gw;
          for (int j = stages - 1; j >= s; --j) {
            gw = whole[j].backward_input(gw, sw[j]);
            gc = cut[j].backward_input(gc, sc[j]);
          }
          whole[s].backward_weight(sw[s]);
          const std::vector<std::size_t> frees = cut[s].weight_part_bytes(parts);
          EXPECT_EQ(std::accumulate(frees.begin(), frees.end(), std::size_t{0}),
                    cut[s].wgrad_bytes());
          EXPECT_EQ(cut[s].stash_bytes(sc[s]), cut[s].wgrad_bytes());
          for (int i = 0; i < parts; ++i) {
            const int part = reversed ? parts - 1 - i : i;
            const std::size_t before = cut[s].stash_bytes(sc[s]);
            cut[s].backward_weight(sc[s], part, parts);
            EXPECT_EQ(before - cut[s].stash_bytes(sc[s]), frees[static_cast<std::size_t>(part)])
                << "part " << part;
          }
          EXPECT_EQ(cut[s].stash_bytes(sc[s]), 0u);
          EXPECT_TRUE(toy::flat_gradients(cut) == toy::flat_gradients(whole));
          // The stash is spent: one more part is refused.
          EXPECT_THROW(cut[s].backward_weight(sc[s], 0, parts), ps::invalid_schedule);
        }
    }
  }
}

TYPED_TEST(WeightParts, WrongPartsThrow) {
  using M = Model<TypeParam>;
  const auto data = M::data(1);
  auto model = make_stages<TypeParam>(M::config(), 1);
  typename TypeParam::stash_type st;
  const auto y = model[0].forward(data.input(0), st);
  // Before backward_input: nothing to compute a weight gradient from.
  EXPECT_THROW(model[0].backward_weight(st, 0, 2), ps::invalid_schedule);
  double loss = 0;
  model[0].backward_input(data.loss_gradient(y, 0, loss), st);
  EXPECT_THROW(model[0].backward_weight(st, 2, 2), ps::invalid_problem);
  EXPECT_THROW(model[0].backward_weight(st, -1, 2), ps::invalid_problem);
  EXPECT_THROW(model[0].backward_weight(st, 0, 0), ps::invalid_problem);
  model[0].backward_weight(st, 0, 3);
  EXPECT_THROW(model[0].backward_weight(st, 0, 3), ps::invalid_schedule);  // twice
  EXPECT_THROW(model[0].backward_weight(st, 1, 2), ps::invalid_schedule);  // cut another way
  EXPECT_THROW(model[0].backward_weight(st), ps::invalid_schedule);        // whole after a part
  EXPECT_THROW(model[0].weight_part_bytes(0), ps::invalid_problem);
  model[0].backward_weight(st, 1, 3);
  model[0].backward_weight(st, 2, 3);
  EXPECT_EQ(model[0].stash_bytes(st), 0u);
}

TEST(WeightPartsGpt, SliceStashesSplitByTheirOwnRows) {
  // A slice's weight parts free the slice's analytic shares.
  const toy::GptConfig config{.sequence = 16, .blocks = 4};
  const auto data = toy::make_gpt_data<double>(config, 1, 3);
  toy::GptStage<double> stage(config, 0, 1);
  toy::GptStage<double>::context_type ctx;
  std::vector<toy::GptStage<double>::stash_type> st(4);
  std::vector<toy::Tensor<double>> out(4);
  for (int k = 0; k < 4; ++k)
    out[k] = stage.forward(data.input(0, k, 4), st[k], ctx, k);
  for (int k = 3; k >= 0; --k) {
    SCOPED_TRACE("slice " + std::to_string(k));
    double loss = 0;
    stage.backward_input(data.loss_gradient(out[k], 0, k, 4, loss), st[k], ctx, k);
    const auto frees = stage.weight_part_bytes(3, k, 4);
    for (int part : {2, 0, 1}) {
      const std::size_t before = stage.stash_bytes(st[k]);
      stage.backward_weight(st[k], part, 3);
      EXPECT_EQ(before - stage.stash_bytes(st[k]), frees[static_cast<std::size_t>(part)]);
    }
    EXPECT_EQ(stage.stash_bytes(st[k]), 0u);
  }
}

// ---- the executor runs W parts -------------------------------------------------------------

namespace {

template <class T>
class ExecutorParts : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(ExecutorParts, Precisions);

}  // namespace

TYPED_TEST(ExecutorParts, SplitSchedulesWithPartsMatchSequentialAndSimulatedBytes) {
  using T = TypeParam;
  const toy::GptConfig config{.sequence = 8, .blocks = 8};
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  const std::vector<ps::Schedule> bases{ps::schedule::one_f_one_b(p, ps::WGradMode::Split),
                                        ps::schedule::zero_bubble_h1(p),
                                        ps::schedule::interleaved_1f1b(p, ps::WGradMode::Split)};
  const auto data = toy::make_gpt_data<T>(config, 8, 21);
  for (const ps::Schedule& base : bases)
    for (int parts : {2, 3, 5})
      for (int spread : {0, 3}) {
        const ps::Schedule s = cut_weights(base, parts, spread);
        SCOPED_TRACE(s.name + " spread " + std::to_string(spread));
        ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
        const auto stages = make_stages<toy::GptStage<T>>(config, s.problem.stages);
        expect_matches<toy::GptStage<T>>(s, config, data, toy::gpt_profiled_cost(stages, 1, parts));
      }
}

TYPED_TEST(ExecutorParts, SlicedAndCheckpointedWithParts) {
  // Parts of slices' weight gradients (2W0.1:2), with and without checkpointing.
  using T = TypeParam;
  const toy::GptConfig config{.sequence = 16, .blocks = 8};
  const auto data = toy::make_gpt_data<T>(config, 4, 23);
  for (int k : {2, 4}) {
    const ps::Problem p{.ranks = 4, .microbatches = 4, .slices = k};
    for (const ps::Schedule& base :
         {ps::schedule::seq_1f1b(p, ps::WGradMode::Split),
          ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 4, .slices = k},
                                   ps::WGradMode::Split)})
      for (bool checkpointed : {false, true}) {
        const ps::Schedule s = cut_weights(checkpointed ? ps::checkpoint_full(base) : base, 3, 2);
        SCOPED_TRACE(s.name + (checkpointed ? " checkpointed" : "") + " K=" + std::to_string(k));
        const auto stages = make_stages<toy::GptStage<T>>(config, s.problem.stages);
        expect_matches<toy::GptStage<T>>(s, config, data, toy::gpt_profiled_cost(stages, k, 3));
      }
  }
}

TYPED_TEST(ExecutorParts, PartsPlacedByTheFillPassRun) {
  // fill_weight_gradients places the parts in the waits the cost model predicts; the executor
  // runs what it places, holding the bytes the simulator predicts from the same figures.
  using T = TypeParam;
  const toy::GptConfig config{.sequence = 16, .blocks = 8};
  const auto data = toy::make_gpt_data<T>(config, 8, 31);
  for (int k : {1, 2}) {
    const ps::Problem p{.ranks = 4, .microbatches = 8, .slices = k};
    for (const ps::Schedule& base :
         {ps::schedule::seq_1f1b(p, ps::WGradMode::Split),
          ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 8, .slices = k},
                                   ps::WGradMode::Split)}) {
      const auto stages = make_stages<toy::GptStage<T>>(config, base.problem.stages);
      const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages, k, 3);
      const ps::Schedule s = ps::fill_weight_gradients(base, cost, ps::MemoryBudget{}, 3);
      SCOPED_TRACE(s.name + " K=" + std::to_string(k));
      expect_matches<toy::GptStage<T>>(s, config, data, cost);
    }
  }
}

TEST(ExecutorPartsMlp, MlpWeightPartsMatchSequential) {
  const toy::MlpConfig config{.blocks = 8};
  const auto data = toy::make_mlp_data<double>(config, 8, 2);
  const ps::Schedule s =
      cut_weights(ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8}), 2, 1);
  const auto stages = make_stages<toy::MlpStage<double>>(config, 4);
  expect_matches<toy::MlpStage<double>>(s, config, data, toy::mlp_profiled_cost(stages, 2));
}

namespace {

// y = w·x on one number, without a way to split its weight gradient.
struct WholeWeightStage {
  struct tensor_type {
    double v = 0;
  };
  struct stash_type {
    double x = 0, dy = 0;
  };
  double w = 0.5, gw = 0;
  tensor_type forward(const tensor_type& x, stash_type& st) {
    st = {x.v, 0};
    return {w * x.v};
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    st.dy = dy.v;
    return {w * dy.v};
  }
  void backward_weight(stash_type& st) { gw += st.dy * st.x; }
  std::size_t stash_bytes(const stash_type&) const { return 16; }
  void zero_gradients() { gw = 0; }
};

// A stage whose actions sleep and whose weight gradient splits into parts that sleep their
// share: long enough that rank 0 waits on its receives with parts pending.
struct SleepyPartsStage {
  using tensor_type = toy::Tensor<float>;
  struct stash_type {
    std::size_t bytes = 0;
    int parts_left = -1;
    bool input_done = false;
  };
  static constexpr double seconds = 2e-3;
  static void sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
  tensor_type forward(const tensor_type& x, stash_type& st) {
    sleep(seconds);
    st = {900, -1, false};
    return x;
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    sleep(seconds);
    st.bytes = 600;
    st.input_done = true;
    return dy;
  }
  void backward_weight(stash_type& st) {
    sleep(seconds);
    st = {};
  }
  int weight_parts() const { return 3; }
  void backward_weight(stash_type& st, int, int parts) {
    if (!st.input_done) throw std::logic_error("a weight part before backward_input");
    if (st.parts_left < 0) st.parts_left = parts;
    sleep(seconds / parts);
    st.bytes -= 600 / static_cast<std::size_t>(parts);
    if (--st.parts_left == 0) st = {};
  }
  std::size_t stash_bytes(const stash_type& st) const { return st.bytes; }
  void zero_gradients() {}
};
static_assert(ps::splits_weight_gradient<SleepyPartsStage>);
static_assert(!ps::splits_weight_gradient<WholeWeightStage>);

// Every W part pushed to the end of its rank's list: a rank that waits has parts pending.
ps::Schedule parts_at_the_end(const ps::Schedule& s, int parts) {
  return cut_weights(s, parts, 1 << 20);
}

bool ran_a_part_early(const ps::StepResult& r, int rank) {
  const auto& t = r.ranks[rank].timing;
  for (std::size_t i = 1; i < t.size(); ++i)
    if (r.executed.ranks[rank][i].kind == ps::OpKind::W && t[i].end <= t[i - 1].start) return true;
  return false;
}

}  // namespace

TEST(ExecutorPartsErrors, StageModelWithoutPartsIsRefused) {
  const ps::Schedule base =
      ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4}, ps::WGradMode::Split);
  std::vector<WholeWeightStage> stages(2);
  EXPECT_NO_THROW((ps::inproc::Pipeline<WholeWeightStage>(base, stages)));
  try {
    ps::inproc::Pipeline<WholeWeightStage> pipe(cut_weights(base, 2, 0), stages);
    FAIL() << "expected invalid_problem";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("the stage model cannot run a part"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("backward_weight(stash_type&, int part, int parts)"),
              std::string::npos)
        << e.what();
  }
}

// Its stages sleep, and what it asserts (rank 0 ran parts while it waited) depends on time: a
// Timed suite, run alone.
TEST(TimedExecutorPartsFill, PendingPartsFillWaits) {
  const ps::Schedule s = parts_at_the_end(
      ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}, ps::WGradMode::Split), 3);
  std::vector<SleepyPartsStage> stages(4);
  ps::ExecutorOptions fill;
  fill.fill_waits = true;
  ps::inproc::Pipeline<SleepyPartsStage> plain(s, stages);
  ps::inproc::Pipeline<SleepyPartsStage> filling(s, stages, fill);
  ps::TrainingData<toy::Tensor<float>> data;
  data.input = [](int, int) { return toy::Tensor<float>({2}, 1.0f); };
  data.loss = [](const toy::Tensor<float>& y, int, int, double&) { return y; };
  ps::ProfiledCost cost;
  cost.stages.assign(
      4, {.activation_bytes = 900, .wgrad_bytes = 600, .wgrad_part_bytes = {200, 200, 200}});
  const ps::SimulationResult sim = ps::simulate(s, cost);
  const ps::StepResult a = plain.step(data);
  const ps::StepResult b = filling.step(data);
  int filled = 0;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(a.ranks[rank].filled, 0);
    EXPECT_EQ(a.ranks[rank].peak_bytes, sim.ranks[rank].peak_memory);
    EXPECT_FALSE(ran_a_part_early(a, rank));
    // A part run early only frees bytes sooner.
    EXPECT_LE(b.ranks[rank].peak_bytes, sim.ranks[rank].peak_memory);
    filled += b.ranks[rank].filled;
  }
  // Rank 0 waits on every gradient from its neighbour while earlier units' parts are pending.
  EXPECT_GT(b.ranks[0].filled, 0);
  EXPECT_TRUE(ran_a_part_early(b, 0));
  EXPECT_GT(filled, 0);
}

TYPED_TEST(ExecutorParts, FillingWithPartsKeepsNumerics) {
  using T = TypeParam;
  const toy::GptConfig config{.sequence = 8, .blocks = 8};
  const auto data = toy::make_gpt_data<T>(config, 8, 29);
  ps::ExecutorOptions fill;
  fill.fill_waits = true;
  for (const ps::Schedule& base :
       {ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}, ps::WGradMode::Split),
        ps::checkpoint_full(ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8}),
                            ps::RecomputeTiming::Early)}) {
    const ps::Schedule s = parts_at_the_end(base, 4);
    SCOPED_TRACE(s.name);
    const auto stages = make_stages<toy::GptStage<T>>(config, s.problem.stages);
    // Parts run early add microbatches' weight gradients in another order: rounding only.
    expect_matches<toy::GptStage<T>>(s, config, data, toy::gpt_profiled_cost(stages, 1, 4), fill);
  }
}

}  // namespace test_wgrad_parts
