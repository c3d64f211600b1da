// Recompute (R) in the executor: a checkpointed unit keeps only its stage input from F to R,
// where forward runs again. Training the toy GPT and MLP this way gives the sequential
// reference's loss and gradients, and the bytes held peak exactly where the simulator says.
// With fill_waits, pending recomputes run while a receive waits: numerics stay the same,
// the step gets no slower, and the memory budget holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/toy/synthetic.hpp"

#include "exec_support.hpp"

namespace test_recompute {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

using namespace exec_test;

// What the simulator needs to predict the executor's bytes: the stages' analytic stash sizes
// and, for checkpointed units, the bytes of each stage's input (taken from a forward pass of
// microbatch 0, so stage 0's is the token ids or features data.input gives).
template <class Stage, class Data>
ps::ProfiledCost cost_of(const std::vector<Stage>& stages, const Data& data) {
  ps::ProfiledCost c;
  auto x = data.input(0);
  for (const Stage& s : stages) {
    c.stages.push_back({.forward = 1,
                        .backward_input = 1,
                        .backward_weight = 1,
                        .activation_bytes = double(s.activation_bytes()),
                        .wgrad_bytes = double(s.wgrad_bytes()),
                        .boundary_bytes = double(x.bytes())});
    typename Stage::stash_type stash;
    x = s.forward(x, stash);
  }
  return c;
}

// Trains `schedule` for two steps (SGD between them, from each rank's optimizer hook) and
// compares each step with the sequential reference. Returns the runs' total `filled`.
template <class Stage, class Config, class Data>
int expect_matches_sequential(const ps::Schedule& schedule, const Config& config, const Data& data,
                              ps::ExecutorOptions options, RunChecks checks = {}) {
  using T = typename Stage::tensor_type::value_type;
  const int stages = schedule.problem.stages;
  std::vector<Stage> ref, piped;
  for (int s = 0; s < stages; ++s) {
    ref.emplace_back(config, s, stages);
    piped.emplace_back(config, s, stages);
  }
  options.optimizer = toy::sgd_optimizer(schedule.placement, piped, learning_rate);
  ps::inproc::Pipeline<Stage> pipe(schedule, piped, options);
  const ps::SimulationResult predicted = ps::simulate(schedule, cost_of(ref, data));
  const auto training = toy::training_data(data);
  int filled = 0;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [r, ref_loss, ref_grads] =
        step_against_reference<T>(pipe, piped, ref, data, training);
    if (accumulates_in_order(schedule)) {
      EXPECT_EQ(r.loss, ref_loss);
      EXPECT_TRUE(toy::flat_gradients(piped) == ref_grads);
    }
    for (int rank = 0; rank < schedule.rank_count(); ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      const ps::RankRun& run = r.ranks[rank];
      if (checks.exact_peak) {
        EXPECT_EQ(run.peak_bytes, predicted.ranks[rank].peak_memory);
      }
      EXPECT_LE(run.peak_bytes, checks.budget);
      if (!options.fill_waits) {
        EXPECT_EQ(run.filled, 0);
      }
      filled += run.filled;
    }
  }
  return filled;
}

// The schedules every toy test runs: 1F1B (fused and split backward) and interleaved 1F1B
// with two chunks per rank, on 4 ranks and 8 microbatches.
template <class Fn>
void for_each_base_schedule(Fn&& fn) {
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    SCOPED_TRACE(std::string("1f1b ") + ps::to_string(wg));
    fn(ps::schedule::one_f_one_b(p, wg));
  }
  SCOPED_TRACE("interleaved-1f1b V=2");
  fn(ps::schedule::interleaved_1f1b(p));
}

ps::MemoryBudget budget_of(double bytes) {
  ps::MemoryBudget b;
  b.all = bytes;
  return b;
}

ps::ExecutorOptions filling(double budget = unlimited) {
  ps::ExecutorOptions o;
  o.fill_waits = true;
  o.memory_budget_bytes = budget;
  return o;
}

template <class T>
class Recompute : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(Recompute, Precisions);

// A budget that checkpointing some units meets: 60 % of the largest per-rank peak without it.
template <class Stage, class Config, class Data>
double selective_budget(const ps::Schedule& base, const Config& config, const Data& data) {
  std::vector<Stage> stages;
  for (int s = 0; s < base.problem.stages; ++s)
    stages.emplace_back(config, s, base.problem.stages);
  return 0.6 * ps::simulate(base, cost_of(stages, data)).peak_memory_max;
}

}  // namespace

TYPED_TEST(Recompute, GptFullCheckpointingMatchesSequentialAndSimulatedPeak) {
  const toy::GptConfig config{.blocks = 8};
  const auto data = toy::make_gpt_data<TypeParam>(config, 8, 5);
  for_each_base_schedule([&](const ps::Schedule& base) {
    const ps::Schedule s = ps::checkpoint_full(base);
    ASSERT_EQ(count_recomputes(s), s.problem.stages * s.problem.microbatches);
    expect_matches_sequential<toy::GptStage<TypeParam>>(s, config, data, {});
  });
}

TYPED_TEST(Recompute, GptSelectiveCheckpointingStaysWithinItsBudget) {
  using Stage = toy::GptStage<TypeParam>;
  const toy::GptConfig config{.blocks = 8};
  const auto data = toy::make_gpt_data<TypeParam>(config, 8, 6);
  for_each_base_schedule([&](const ps::Schedule& base) {
    std::vector<Stage> stages;
    for (int s = 0; s < base.problem.stages; ++s)
      stages.emplace_back(config, s, base.problem.stages);
    const double budget = selective_budget<Stage>(base, config, data);
    std::vector<char> chosen;
    const ps::Schedule s =
        ps::checkpoint_selective(base, cost_of(stages, data), budget_of(budget), &chosen);
    const auto n = std::count(chosen.begin(), chosen.end(), char(1));
    EXPECT_GT(n, 0);
    EXPECT_LT(n, static_cast<long>(chosen.size()));
    EXPECT_EQ(count_recomputes(s), n);
    expect_matches_sequential<Stage>(s, config, data, {}, {.exact_peak = true, .budget = budget});
  });
}

TYPED_TEST(Recompute, GptMarioCheckpointingStaysWithinItsBudget) {
  using Stage = toy::GptStage<TypeParam>;
  const toy::GptConfig config{.blocks = 8};
  const auto data = toy::make_gpt_data<TypeParam>(config, 8, 9);
  for_each_base_schedule([&](const ps::Schedule& base) {
    std::vector<Stage> stages;
    for (int s = 0; s < base.problem.stages; ++s)
      stages.emplace_back(config, s, base.problem.stages);
    const double budget = selective_budget<Stage>(base, config, data);
    const ps::Schedule s = ps::checkpoint_mario(base, cost_of(stages, data), budget_of(budget));
    EXPECT_GT(count_recomputes(s), 0);
    // Mario's order differs from the base (hoisted recomputes, preposed forwards); the
    // numbers must not.
    expect_matches_sequential<Stage>(s, config, data, {}, {.exact_peak = true, .budget = budget});
  });
}

TYPED_TEST(Recompute, MlpFullAndSelectiveCheckpointing) {
  using Stage = toy::MlpStage<TypeParam>;
  const toy::MlpConfig config{.blocks = 8};
  const auto data = toy::make_mlp_data<TypeParam>(config, 8, 9);
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  {
    SCOPED_TRACE("1f1b full");
    expect_matches_sequential<Stage>(ps::checkpoint_full(ps::schedule::one_f_one_b(p)), config,
                                     data, {});
  }
  SCOPED_TRACE("interleaved-1f1b selective");
  const ps::Schedule base = ps::schedule::interleaved_1f1b(p);
  std::vector<Stage> stages;
  for (int s = 0; s < base.problem.stages; ++s)
    stages.emplace_back(config, s, base.problem.stages);
  const double budget = selective_budget<Stage>(base, config, data);
  const ps::Schedule s = ps::checkpoint_selective(base, cost_of(stages, data), budget_of(budget));
  EXPECT_GT(count_recomputes(s), 0);
  expect_matches_sequential<Stage>(s, config, data, {}, {.exact_peak = true, .budget = budget});
}

TYPED_TEST(Recompute, GptFillingWaitsKeepsNumericsAndBudget) {
  using Stage = toy::GptStage<TypeParam>;
  const toy::GptConfig config{.blocks = 8};
  const auto data = toy::make_gpt_data<TypeParam>(config, 8, 4);
  for_each_base_schedule([&](const ps::Schedule& base) {
    const ps::Schedule s = ps::checkpoint_full(base);
    {
      SCOPED_TRACE("no budget");
      expect_matches_sequential<Stage>(s, config, data, filling(), {.exact_peak = false});
    }
    // Room for about one and a half stage activations above the static peak: some fills fit,
    // not all.
    std::vector<Stage> stages;
    for (int st = 0; st < s.problem.stages; ++st)
      stages.emplace_back(config, st, s.problem.stages);
    const ps::ProfiledCost cost = cost_of(stages, data);
    const double budget =
        ps::simulate(s, cost).peak_memory_max + 1.5 * cost.stages[1].activation_bytes;
    SCOPED_TRACE("budget " + std::to_string(budget));
    expect_matches_sequential<Stage>(s, config, data, filling(budget),
                                     {.exact_peak = false, .budget = budget});
  });
}

namespace {

constexpr toy::SyntheticCost synthetic_cost{.forward = 2e-3,
                                            .backward_input = 2e-3,
                                            .backward_weight = 2e-3,
                                            .activation_bytes = 1000,
                                            .wgrad_bytes = 500};

ps::ProfiledCost synthetic_profile(int stages) {
  return toy::synthetic_profiled_cost(synthetic_cost, stages);
}

// True when some action of rank `rank` ran before the action listed just ahead of it: a
// recompute run early, drawn where it ran.
bool ran_out_of_order(const ps::StepResult& r, int rank) {
  const auto& t = r.ranks[rank].timing;
  for (std::size_t i = 1; i < t.size(); ++i)
    if (r.executed.ranks[rank][i].kind == ps::OpKind::R && t[i].end <= t[i - 1].start) return true;
  return false;
}

}  // namespace

TEST(TimedRecomputeFill, FillingWaitsIsNoSlowerAndRunsRecomputesEarly) {
  const ps::Schedule s = ps::checkpoint_full(
      ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}), ps::RecomputeTiming::Early);
  std::vector<toy::SyntheticStage> stages(4, toy::SyntheticStage(synthetic_cost));
  const ps::SimulationResult sim = ps::simulate(s, synthetic_profile(4));
  ps::inproc::Pipeline<toy::SyntheticStage> plain(s, stages);
  ps::inproc::Pipeline<toy::SyntheticStage> filled_pipe(s, stages, filling());
  const auto data = toy::synthetic_training_data();
  // Alternate the two and keep each one's best step: the machine is shared and noisy.
  double best_plain = unlimited, best_filling = unlimited;
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const ps::StepResult a = plain.step(data);
    const ps::StepResult b = filled_pipe.step(data);
    best_plain = std::min(best_plain, a.seconds);
    best_filling = std::min(best_filling, b.seconds);
    int filled = 0;
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(a.ranks[rank].filled, 0);
      EXPECT_EQ(a.ranks[rank].peak_bytes, sim.ranks[rank].peak_memory) << "rank " << rank;
      filled += b.ranks[rank].filled;
      const auto& mem = b.ranks[rank].memory;
      for (std::size_t i = 1; i < mem.size(); ++i)
        EXPECT_LE(mem[i - 1].time, mem[i].time) << "rank " << rank;
    }
    EXPECT_GT(filled, 0);
    // Rank 0 waits longest for its first gradient: its first recompute runs in that wait.
    EXPECT_GT(b.ranks[0].filled, 0);
    EXPECT_TRUE(ran_out_of_order(b, 0));
    EXPECT_FALSE(ran_out_of_order(a, 0));
  }
  EXPECT_LE(best_filling, 1.02 * best_plain)
      << "filling " << best_filling << " s, plain " << best_plain << " s";
  // A late recompute (RL, full checkpointing as Megatron-LM runs it) waits for its gradient:
  // filling never runs one ahead of its place.
  const ps::Schedule late =
      ps::checkpoint_full(ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}));
  ps::inproc::Pipeline<toy::SyntheticStage> late_pipe(late, stages, filling());
  const ps::StepResult l = late_pipe.step(data);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(l.ranks[rank].filled, 0) << "rank " << rank;
    EXPECT_FALSE(ran_out_of_order(l, rank)) << "rank " << rank;
  }
}

TEST(TimedRecomputeFill, BudgetBoundsTheFills) {
  const ps::Schedule s = ps::checkpoint_full(
      ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}), ps::RecomputeTiming::Early);
  std::vector<toy::SyntheticStage> stages(4, toy::SyntheticStage(synthetic_cost));
  const ps::SimulationResult sim = ps::simulate(s, synthetic_profile(4));
  const double act = double(synthetic_cost.activation_bytes);
  for (double extra : {0.0, 0.5 * act, 1.5 * act}) {
    SCOPED_TRACE("extra " + std::to_string(extra));
    const double budget = sim.peak_memory_max + extra;
    ps::inproc::Pipeline<toy::SyntheticStage> pipe(s, stages, filling(budget));
    for (int step = 0; step < 2; ++step) {
      const ps::StepResult r = pipe.step(toy::synthetic_training_data());
      for (int rank = 0; rank < 4; ++rank)
        EXPECT_LE(r.ranks[rank].peak_bytes, budget) << "rank " << rank;
      // Rank 0 (list: … F(m+3) R(m) RECV_B(m) B(m) …) waits for each gradient holding its
      // static peak; a fill there adds a whole activation until the fill's own place, so it
      // fits only with room for one more.
      if (extra < act) {
        EXPECT_EQ(r.ranks[0].filled, 0);
      } else {
        EXPECT_GT(r.ranks[0].filled, 0);
      }
    }
  }
  EXPECT_THROW((ps::inproc::Pipeline<toy::SyntheticStage>(s, stages, filling(-1))),
               ps::invalid_problem);
}

namespace {

// A stage model whose tensor says nothing about its size: y = w·x on one number.
// `Sized` adds `input_bytes`, the stage model's own way to size a kept input.
template <bool Sized>
struct OpaqueStage {
  struct tensor_type {
    double v = 0;
  };
  struct stash_type {
    double x = 0, dy = 0;
    bool held = false;
  };
  double w = 0.5, gw = 0;
  int forwards = 0;

  tensor_type forward(const tensor_type& x, stash_type& st) {
    ++forwards;
    st = {x.v, 0, true};
    return {w * x.v};
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    if (!st.held) throw std::logic_error("backward_input without a stash");
    st.dy = dy.v;
    return {w * dy.v};
  }
  void backward_weight(stash_type& st) {
    gw += st.dy * st.x;
    st = {};
  }
  std::size_t stash_bytes(const stash_type& st) const { return st.held ? 24 : 0; }
  void zero_gradients() { gw = 0; }
  std::size_t input_bytes(const tensor_type&) const requires Sized { return 8; }
};

template <bool Sized>
ps::TrainingData<typename OpaqueStage<Sized>::tensor_type> opaque_data() {
  ps::TrainingData<typename OpaqueStage<Sized>::tensor_type> d;
  d.input = [](int m, int) { return typename OpaqueStage<Sized>::tensor_type{1.0 + m}; };
  d.loss = [](const typename OpaqueStage<Sized>::tensor_type& y, int, int, double& loss) {
    loss += y.v;
    return typename OpaqueStage<Sized>::tensor_type{1.0};
  };
  return d;
}

}  // namespace

TEST(RecomputeFill, StageModelWithoutInputSizeIsRefusedOnlyWithRecompute) {
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4});
  const ps::Schedule full = ps::checkpoint_full(base);
  std::vector<OpaqueStage<false>> stages(2);
  EXPECT_NO_THROW((ps::inproc::Pipeline<OpaqueStage<false>>(base, stages)));
  try {
    ps::inproc::Pipeline<OpaqueStage<false>> pipe(full, stages);
    FAIL() << "expected invalid_problem";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("stage model needs input_bytes(...) to checkpoint"),
              std::string::npos)
        << e.what();
  }
}

TEST(RecomputeFill, InputBytesSizesTheKeptInputAndRecomputeRunsForwardAgain) {
  const ps::Schedule s =
      ps::checkpoint_full(ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4}));
  std::vector<OpaqueStage<true>> stages(2);
  ps::inproc::Pipeline<OpaqueStage<true>> pipe(s, stages);
  const ps::StepResult r = pipe.step(opaque_data<true>());
  ps::ProfiledCost cost;
  cost.stages.assign(2, {.activation_bytes = 24, .wgrad_bytes = 24, .boundary_bytes = 8});
  const ps::SimulationResult sim = ps::simulate(s, cost);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.ranks[rank].peak_bytes, sim.ranks[rank].peak_memory) << "rank " << rank;
    EXPECT_EQ(stages[rank].forwards, 2 * 4) << "every forward ran again at its R";
  }
  // loss = Σ_m w² (1 + m), d loss / d w_s = Σ_m w (1 + m) for each of the two stages.
  EXPECT_DOUBLE_EQ(r.loss, 0.25 * (1 + 2 + 3 + 4));
  EXPECT_DOUBLE_EQ(stages[0].gw, 0.5 * 10);
  EXPECT_DOUBLE_EQ(stages[1].gw, 0.5 * 10);
}

}  // namespace test_recompute
