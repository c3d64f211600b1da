// Profile, then plan, on a stage model written here (not a toy one): profile() runs it on
// threads and profiled_cost() reads the step into a ProfiledCost whose times rank the stages
// as their work does, whose bytes are the model's own, and with which simulate() predicts the
// measured peak exactly and the measured step time roughly. Hand-made steps pin down the byte
// attribution, the weight-gradient parts, the transfer estimate, the fallbacks and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/toy/layer_profile.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace test_profile {

namespace ps = pipesched;

namespace {

using std::chrono::microseconds;

// Stands in for heavier layers: waits on the wall clock, so a rank descheduled by a busy
// machine still measures about the intended time.
void spin_for(microseconds d) {
  if (d.count() <= 0) return;
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// [dense-stage]
// A user's stage: y = silu(W x) for each row x of a microbatch (rows x in -> rows x out), with
// `work` of busy-waiting in each call. Its stash holds the input, the pre-activation and its
// sigmoid after forward; after backward_input only the input and dz, what W's gradient needs.
class DenseStage {
 public:
  using tensor_type = std::vector<double>;
  struct stash_type {
    std::vector<double> x, z, sig, dz;
  };

  DenseStage(int in, int out, microseconds work)
      : in_(in), out_(out), work_(work), w_(std::size_t(in) * out), g_(w_.size()) {
    for (std::size_t i = 0; i < w_.size(); ++i)
      w_[i] = 0.1 * std::sin(0.7 * double(i) + in);
  }

  tensor_type forward(const tensor_type& x, stash_type& st) {
    spin_for(work_);
    const std::size_t rows = x.size() / in_;
    st.x = x;
    st.z.assign(rows * out_, 0.0);
    st.sig.resize(rows * out_);
    tensor_type y(rows * out_);
    for (std::size_t r = 0; r < rows; ++r)
      for (int o = 0; o < out_; ++o) {
        double z = 0;
        for (int i = 0; i < in_; ++i)
          z += w_[std::size_t(o) * in_ + i] * x[r * in_ + i];
        const std::size_t k = r * out_ + o;
        st.z[k] = z;
        st.sig[k] = 1 / (1 + std::exp(-z));
        y[k] = z * st.sig[k];
      }
    return y;
  }

  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    spin_for(work_);
    const std::size_t rows = dy.size() / out_;
    st.dz.resize(dy.size());
    for (std::size_t k = 0; k < dy.size(); ++k)
      st.dz[k] = dy[k] * (st.sig[k] * (1 + st.z[k] * (1 - st.sig[k])));
    tensor_type dx(rows * in_, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
      for (int o = 0; o < out_; ++o)
        for (int i = 0; i < in_; ++i)
          dx[r * in_ + i] += w_[std::size_t(o) * in_ + i] * st.dz[r * out_ + o];
    st.z = {};  // W needs only x and dz
    st.sig = {};
    return dx;
  }

  void backward_weight(stash_type& st) {
    spin_for(work_);
    const std::size_t rows = st.x.size() / in_;
    for (std::size_t r = 0; r < rows; ++r)
      for (int o = 0; o < out_; ++o)
        for (int i = 0; i < in_; ++i)
          g_[std::size_t(o) * in_ + i] += st.dz[r * out_ + o] * st.x[r * in_ + i];
    st = {};
  }

  std::size_t stash_bytes(const stash_type& st) const {
    return sizeof(double) * (st.x.size() + st.z.size() + st.sig.size() + st.dz.size());
  }
  // What a checkpointed forward keeps (lets the executor run R).
  std::size_t input_bytes(const tensor_type& x) const { return sizeof(double) * x.size(); }
  void zero_gradients() { std::fill(g_.begin(), g_.end(), 0.0); }

  // The byte counts a microbatch of `rows` rows makes, as the stash above holds them.
  std::size_t activation_bytes(int rows) const { return sizeof(double) * rows * (in_ + 2 * out_); }
  std::size_t wgrad_bytes(int rows) const { return sizeof(double) * rows * (in_ + out_); }
  std::size_t boundary_bytes(int rows) const { return sizeof(double) * rows * in_; }

  int in() const { return in_; }
  int out() const { return out_; }

 private:
  int in_, out_;
  microseconds work_;
  std::vector<double> w_, g_;
};
// [dense-stage]

static_assert(ps::stage_model<DenseStage>);

constexpr int rows = 3;  // rows per microbatch (per slice in the sliced test)

// Two stages, 6 -> 10 -> 4 features; stage 1 does `ratio` times the busy-waiting of stage 0.
std::vector<DenseStage> two_stages(microseconds work, int ratio = 3) {
  return {DenseStage(6, 10, work), DenseStage(10, 4, work * ratio)};
}

// Inputs of `rows_per_unit` rows; loss 0.5 |y - t|^2.
ps::TrainingData<std::vector<double>> dense_data(const std::vector<DenseStage>& stages,
                                                 int rows_per_unit = rows) {
  const int in = stages.front().in(), out = stages.back().out();
  ps::TrainingData<std::vector<double>> d;
  d.input = [=](int m, int k) {
    std::vector<double> x(std::size_t(rows_per_unit) * in);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::cos(0.3 * double(i) + m + 0.5 * k);
    return x;
  };
  d.loss = [=](const std::vector<double>& y, int m, int k, double& loss) {
    std::vector<double> dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double t = 0.1 * double((i + std::size_t(m) + std::size_t(k)) % out);
      dy[i] = y[i] - t;
      loss += 0.5 * dy[i] * dy[i];
    }
    return dy;
  };
  return d;
}

double median_seconds(const std::vector<ps::StepResult>& steps) {
  std::vector<double> s;
  for (const ps::StepResult& r : steps)
    s.push_back(r.seconds);
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// Throws invalid_problem whose message contains `part`.
void expect_refused(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no invalid_problem; expected one mentioning '" << part << "'";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TimedProfile, TheSlowerStageIsMeasuredSlowerInEveryKindOfAction) {
  const microseconds work(300);
  std::vector<DenseStage> stages = two_stages(work);
  const ps::ProfiledCost cost = ps::profile(stages, dense_data(stages), {.repeats = 5});
  ASSERT_EQ(cost.stages.size(), 2u);
  const ps::StageProfile &fast = cost.stages[0], &slow = cost.stages[1];
  const double least = std::chrono::duration<double>(work).count();
  // The busy-wait bounds each call from below; the true ratio is 3.
  EXPECT_GE(fast.forward, least);
  EXPECT_GE(fast.backward_input, least);
  EXPECT_GE(fast.backward_weight, least);
  EXPECT_GE(fast.recompute, least);  // the default schedule runs an R per stage
  EXPECT_GT(slow.forward, 1.5 * fast.forward);
  EXPECT_GT(slow.backward_input, 1.5 * fast.backward_input);
  EXPECT_GT(slow.backward_weight, 1.5 * fast.backward_weight);
  EXPECT_GT(slow.recompute, 1.5 * fast.recompute);
  // A pointer handed between threads: the wake-up of the waiting one, however long the
  // machine's load makes it (its exact reading is tested on a hand-made step below).
  EXPECT_GE(cost.transfer, 0.0);
  EXPECT_TRUE(std::isfinite(cost.transfer));
}

TEST(Profile, ByteFiguresAreTheBytesTheModelReports) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const ps::ProfiledCost cost = ps::profile(stages, dense_data(stages), {.repeats = 1});
  ASSERT_EQ(cost.stages.size(), 2u);
  EXPECT_TRUE(cost.slices.empty());
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const ps::StageProfile& p = cost.stages[s];
    EXPECT_EQ(p.activation_bytes, double(stages[s].activation_bytes(rows)));
    EXPECT_EQ(p.wgrad_bytes, double(stages[s].wgrad_bytes(rows)));
    EXPECT_EQ(p.boundary_bytes, double(stages[s].boundary_bytes(rows)));
    EXPECT_EQ(p.context_gradient_bytes, 0.0);
    EXPECT_TRUE(p.wgrad_part_bytes.empty());
  }
}

// With fill_waits a recompute or W may run ahead of its place in the list; its memory point
// still pairs with it (the actions are read in the order they ran), so the bytes stay exact.
TEST(Profile, ByteFiguresStayExactWhenWaitsAreFilled) {
  std::vector<DenseStage> stages = two_stages(microseconds(100));
  // Zero Bubble H1 defers each W, and early full checkpointing leaves an R pending before each
  // backward: both are work a waiting rank runs early.
  const ps::Schedule deferred = ps::checkpoint_full(
      ps::schedule::zero_bubble_h1({.ranks = 2, .microbatches = 4}), ps::RecomputeTiming::Early);
  ps::ExecutorOptions filling;
  filling.fill_waits = true;
  const ps::ProfiledCost cost = ps::profile(
      stages, dense_data(stages), {.schedule = deferred, .repeats = 2, .executor = filling});
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(cost.stages[s].activation_bytes, double(stages[s].activation_bytes(rows)));
    EXPECT_EQ(cost.stages[s].wgrad_bytes, double(stages[s].wgrad_bytes(rows)));
    EXPECT_EQ(cost.stages[s].boundary_bytes, double(stages[s].boundary_bytes(rows)));
  }
}

// The figures profiled on one schedule predict the bytes of others exactly.
TEST(Profile, SimulatedPeaksOfOtherSchedulesEqualTheMeasuredOnes) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const auto data = dense_data(stages);
  const ps::ProfiledCost cost = ps::profile(stages, data, {.repeats = 1});
  const ps::Problem p{.ranks = 2, .microbatches = 4};
  const std::vector<ps::Schedule> schedules = {
      ps::schedule::gpipe(p, ps::WGradMode::Split), ps::schedule::one_f_one_b(p),
      ps::checkpoint_full(ps::schedule::one_f_one_b(p, ps::WGradMode::Split))};
  for (const ps::Schedule& s : schedules) {
    SCOPED_TRACE(s.name);
    ps::inproc::Pipeline<DenseStage> pipe(s, stages);
    const ps::StepResult measured = pipe.step(data);
    const ps::SimulationResult sim = ps::simulate(s, cost);
    ASSERT_FALSE(sim.deadlock) << sim.deadlock_report;
    for (std::size_t r = 0; r < 2; ++r)
      EXPECT_EQ(sim.ranks[r].peak_memory, measured.ranks[r].peak_bytes) << "rank " << r;
  }
}

// Planning with the profiled bytes: selective checkpointing under a byte budget the plain
// schedule exceeds gives a schedule that stays within it when run.
TEST(Profile, ACheckpointPlanMadeWithTheProfileFitsItsBudgetWhenRun) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const auto data = dense_data(stages);
  // [plan-with-it]
  const ps::ProfiledCost cost = ps::profile(stages, data);
  const ps::Schedule plain =
      ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 8}, ps::WGradMode::Split);
  const double peak = ps::simulate(plain, cost).peak_memory_max;  // bytes
  const ps::MemoryBudget budget{.all = 0.8 * peak};
  const ps::Schedule planned = ps::checkpoint_selective(plain, cost, budget);
  // [plan-with-it]
  ASSERT_GT(std::count_if(planned.ranks[0].begin(), planned.ranks[0].end(),
                          [](const ps::Action& a) { return a.kind == ps::OpKind::R; }),
            0);
  ps::inproc::Pipeline<DenseStage> pipe(planned, stages);
  const ps::StepResult run = pipe.step(data);
  const ps::SimulationResult sim = ps::simulate(planned, cost);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_LE(run.ranks[r].peak_bytes, budget.all) << "rank " << r;
    EXPECT_EQ(run.ranks[r].peak_bytes, sim.ranks[r].peak_memory) << "rank " << r;
  }
}

TEST(TimedProfile, SimulatedMakespanIsNearTheMeasuredStep) {
  std::vector<DenseStage> stages = two_stages(microseconds(400));
  const auto data = dense_data(stages);
  // [profile-then-plan]
  std::vector<ps::StepResult> measured;
  const ps::ProfiledCost cost = ps::profile(stages, data, {.repeats = 3, .measured = &measured});
  const ps::SimulationResult predicted = ps::simulate(measured.front().executed, cost);
  // [profile-then-plan]
  ASSERT_FALSE(predicted.deadlock) << predicted.deadlock_report;
  // Generous: on a loaded machine a rank waits for a core after each receive, which the step
  // pays and the figures (each action's own time, the least transfer) do not.
  const double step = median_seconds(measured);
  EXPECT_GT(predicted.makespan, step / 5);
  EXPECT_LT(predicted.makespan, step * 3);

  // Another schedule, run and simulated with the same figures.
  const ps::Schedule gpipe = ps::schedule::gpipe(ps::Problem{.ranks = 2, .microbatches = 6});
  ps::inproc::Pipeline<DenseStage> pipe(gpipe, stages);
  std::vector<ps::StepResult> runs;
  for (int i = 0; i < 3; ++i)
    runs.push_back(pipe.step(data));
  const double gpipe_step = median_seconds(runs);
  const double gpipe_makespan = ps::simulate(gpipe, cost).makespan;
  EXPECT_GT(gpipe_makespan, gpipe_step / 5);
  EXPECT_LT(gpipe_makespan, gpipe_step * 3);
}

TEST(Profile, AFusedBackwardIsSplitByTheWeightShareAndUnmeasuredBytesErrHigh) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const auto data = dense_data(stages);
  const ps::Schedule fused = ps::schedule::one_f_one_b(ps::Problem{.ranks = 2, .microbatches = 4});
  ps::inproc::Pipeline<DenseStage> pipe(fused, stages);
  const ps::ProfiledCost cost = ps::profiled_cost(pipe.step(data), {.weight_share = 0.25});
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const ps::StageProfile& p = cost.stages[s];
    const double b = p.backward_input + p.backward_weight;
    EXPECT_GT(b, 0.0);
    EXPECT_NEAR(p.backward_weight, 0.25 * b, 1e-12 * b);
    EXPECT_EQ(p.recompute, 0.0);  // no R ran: ProfiledCost takes the forward's time
    EXPECT_EQ(p.activation_bytes, double(stages[s].activation_bytes(rows)));
    // Neither measured: a checkpointed forward keeps all, an I frees nothing.
    EXPECT_EQ(p.boundary_bytes, p.activation_bytes);
    EXPECT_EQ(p.wgrad_bytes, p.activation_bytes);
  }
  EXPECT_FALSE(ps::simulate(fused, cost).deadlock);
}

TEST(Profile, ASlicedScheduleGivesPerSliceFigures) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const int slice_rows = 2;
  const auto data = dense_data(stages, slice_rows);
  const ps::Schedule sliced = ps::schedule::seq_1f1b(
      ps::Problem{.ranks = 2, .microbatches = 2, .slices = 2}, ps::WGradMode::Split);
  const ps::ProfiledCost cost = ps::profile(stages, data, {.schedule = sliced, .repeats = 1});
  ASSERT_EQ(cost.slices.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    ASSERT_EQ(cost.slices[s].size(), 2u);
    double forward = 0;
    for (const ps::StageProfile& k : cost.slices[s]) {
      EXPECT_EQ(k.activation_bytes, double(stages[s].activation_bytes(slice_rows)));
      EXPECT_EQ(k.wgrad_bytes, double(stages[s].wgrad_bytes(slice_rows)));
      forward += k.forward;
    }
    // A whole microbatch is its slices together.
    EXPECT_EQ(cost.stages[s].activation_bytes, 2.0 * stages[s].activation_bytes(slice_rows));
    EXPECT_DOUBLE_EQ(cost.stages[s].forward, forward);
  }
  const ps::SimulationResult sim = ps::simulate(sliced, cost);
  EXPECT_FALSE(sim.deadlock) << sim.deadlock_report;
}

// A step written by hand: rank 0 runs stage 0 with its W in two parts, rank 1 stage 1 fused.
ps::StepResult hand_made_step() {
  using ps::Action;
  using ps::OpKind;
  auto act = [](OpKind k, int stage, int part = 0) { return Action::make(k, stage, 0, 0, part); };
  ps::Schedule s{
      "hand-made",
      ps::Problem{.ranks = 2, .stages = 2, .microbatches = 1},
      ps::Placement::linear(2),
      {{act(OpKind::F, 0), act(OpKind::SendF, 0), act(OpKind::RecvB, 0), act(OpKind::I, 0),
        act(OpKind::W, 0, 0), act(OpKind::W, 0, 1)},
       {act(OpKind::RecvF, 1), act(OpKind::F, 1), act(OpKind::B, 1), act(OpKind::SendB, 1)}}};
  std::vector<ps::RankRun> runs(2);
  runs[0].rank = 0;
  runs[0].timing = {{0, 1}, {1, 1.1}, {1.1, 5}, {5, 6}, {6, 6.5}, {6.5, 7}};
  runs[0].memory = {{1, 100}, {6, 60}, {6.5, 40}, {7, 0}};
  runs[1].rank = 1;
  // Its receive waited from 0 for the send that started at 1: 0.3 from send to arrival.
  runs[1].timing = {{0, 1.3}, {1.3, 2.3}, {2.3, 4.5}, {4.5, 4.6}};
  runs[1].memory = {{2.3, 70}, {4.5, 0}};
  return ps::StepResult::from_runs(std::move(runs), std::move(s));
}

TEST(Profile, AHandMadeStepGivesItsFiguresPartsAndLeastTransfer) {
  const ps::ProfiledCost cost = ps::profiled_cost(hand_made_step());
  ASSERT_EQ(cost.stages.size(), 2u);
  const ps::StageProfile &a = cost.stages[0], &b = cost.stages[1];
  EXPECT_DOUBLE_EQ(a.forward, 1.0);
  EXPECT_DOUBLE_EQ(a.backward_input, 1.0);
  EXPECT_DOUBLE_EQ(a.backward_weight, 1.0);  // both parts of the unit's W
  EXPECT_EQ(a.activation_bytes, 100.0);
  EXPECT_EQ(a.wgrad_bytes, 60.0);
  EXPECT_EQ(a.wgrad_part_bytes, (std::vector<double>{20.0, 40.0}));
  EXPECT_DOUBLE_EQ(b.forward, 1.0);
  EXPECT_DOUBLE_EQ(b.backward_input + b.backward_weight, 2.2);
  EXPECT_EQ(b.activation_bytes, 70.0);
  // The receives waited 0.3 (forward) and 0.5 (backward) after their sends began.
  EXPECT_DOUBLE_EQ(cost.transfer, 0.3);
  EXPECT_EQ(ps::profiled_cost(hand_made_step(), {.transfer = 0.0}).transfer, 0.0);
}

TEST(Profile, RefusesStepsItCannotRead) {
  expect_refused([] { ps::profiled_cost(ps::StepResult{}); }, "no rank runs");
  expect_refused(
      [] {
        ps::StepResult s = hand_made_step();
        s.ranks.pop_back();
        ps::profiled_cost(s);
      },
      "1 rank runs but its executed schedule has 2 ranks");
  expect_refused(
      [] {
        ps::StepResult s = hand_made_step();
        s.ranks[1].timing.pop_back();
        ps::profiled_cost(s);
      },
      "rank 1 measured 3 action timings");
  expect_refused(
      [] {
        ps::StepResult s = hand_made_step();
        s.ranks[0].memory[1].time = 5.5;
        ps::profiled_cost(s);
      },
      "line up");
  expect_refused([] { ps::profiled_cost(hand_made_step(), {.weight_share = 1.5}); },
                 "weight_share is 1.5");
  expect_refused([] { ps::profiled_cost(hand_made_step(), {.transfer = -1.0}); }, "transfer is");

  // A stage whose work ran only inside OVERLAP actions, or that never ran a backward.
  auto one_rank = [](std::vector<ps::Action> list) {
    ps::Schedule s{"hand-made",
                   ps::Problem{.ranks = 1, .stages = 1, .microbatches = 1},
                   ps::Placement::linear(1),
                   {list}};
    std::vector<ps::RankRun> runs(1);
    for (std::size_t i = 0; i < list.size(); ++i)
      runs[0].timing.push_back({double(i), double(i + 1)});
    return ps::StepResult::from_runs(std::move(runs), std::move(s));
  };
  const ps::Action f = ps::Action::make(ps::OpKind::F, 0, 0);
  const ps::Action b = ps::Action::make(ps::OpKind::B, 0, 0);
  expect_refused(
      [&] { ps::profiled_cost(one_rank({ps::Action::overlap(f, b)})); },
      "stage 0 ran no forward F of its own in the step (its forwards ran inside OVERLAP");
  expect_refused([&] { ps::profiled_cost(one_rank({f})); }, "stage 0 ran no backward");
}

TEST(Profile, RefusesWhatItCannotRun) {
  std::vector<DenseStage> stages = two_stages(microseconds(0));
  const auto data = dense_data(stages);
  std::vector<DenseStage> none;
  expect_refused([&] { ps::profile(none, data); }, "no stage models");
  const ps::Schedule three = ps::schedule::one_f_one_b(ps::Problem{.ranks = 3, .microbatches = 3});
  expect_refused([&] { ps::profile(stages, data, {.schedule = three}); },
                 "has 3 stages but 2 stage models were given");
  expect_refused([&] { ps::profile(stages, data, {.repeats = 0}); }, "repeats is 0");
  expect_refused([&] { ps::profile(stages, data, {.warmup_steps = -1}); }, "warmup_steps is -1");
  ps::TrainingData<std::vector<double>> no_loss{data.input, {}};
  expect_refused([&] { ps::profile(stages, no_loss); }, "no loss function");
  expect_refused([] { ps::profiling_schedule(0); }, "stages is 0");
}

TEST(Profile, TheDefaultScheduleSplitsBackwardsAndRecomputesOneMicrobatchPerStage) {
  const ps::Schedule s = ps::profiling_schedule(3);
  EXPECT_EQ(s.problem.microbatches, 6);
  for (int r = 0; r < 3; ++r) {
    int recomputes = 0, splits = 0;
    for (const ps::Action& a : s.ranks[r]) {
      recomputes += a.kind == ps::OpKind::R;
      splits += a.kind == ps::OpKind::I;
      if (a.kind == ps::OpKind::R) {
        EXPECT_EQ(a.microbatch, 0);
      }
    }
    EXPECT_EQ(recomputes, 1) << "rank " << r;
    EXPECT_EQ(splits, 6) << "rank " << r;
  }
  EXPECT_EQ(ps::profiling_schedule(2, 5, false).problem.microbatches, 5);
  EXPECT_FALSE(ps::simulate(s).deadlock);
}

}  // namespace

// ---- Per-layer profiles: measured once, composed into any partition ----

TEST(LayerProfile, ToyGptLayersComposeTheBytesOfAnyPartitionExactly) {
  const ps::toy::GptConfig c{.vocabulary = 32,
                             .hidden = 16,
                             .heads = 2,
                             .ffn = 64,
                             .sequence = 16,
                             .blocks = 6,
                             .microbatch_size = 2};
  const ps::LayerGrid grid{
      .tensor = {1, 2}, .microbatch_sizes = {1, 2}, .tokens = {8, 16}, .prefixes = {0, 8}};
  std::size_t reported = 0;
  const ps::LayerProfile p = ps::toy::gpt_layer_profile<double>(
      c, grid, {.repeats = 1, .progress = [&](std::size_t done, std::size_t all) {
                  EXPECT_EQ(done, ++reported);
                  EXPECT_EQ(all, grid.points());
                }});
  EXPECT_EQ(reported, 16u);
  ASSERT_EQ(p.samples().size(), 48u);
  EXPECT_EQ(p.tensor_degrees(), (std::vector<int>{1, 2}));
  for (const ps::LayerSample& s : p.samples())
    if (s.part == ps::LayerPart::Layer) {
      EXPECT_GT(s.figures.forward, 0);
      EXPECT_GT(s.figures.backward_input, 0);
      EXPECT_GT(s.figures.backward_weight, 0);
      EXPECT_GT(s.figures.recompute, 0);
    }
  // One shard of two holds less than the whole layer.
  EXPECT_LT(p.at(ps::LayerPart::Layer, 2, 2, 16, 0).activation_bytes,
            p.at(ps::LayerPart::Layer, 1, 2, 16, 0).activation_bytes);

  ps::TransformerCost cost{
      ps::toy::gpt_model_shape(c, sizeof(double)), ps::presets::find_device("a100-80gb"), {}};
  cost.measured = std::make_shared<const ps::LayerProfile>(p);
  // Partitions the profile never ran (2, 3 and 4 stages; 6 blocks over 4 is 2, 2, 1, 1), whole
  // and in two slices: the composed bytes are the toy's own.
  for (int stages : {2, 3, 4})
    for (int slices : {1, 2}) {
      SCOPED_TRACE(std::to_string(stages) + " stages, " + std::to_string(slices) + " slices");
      std::vector<ps::toy::GptStage<double>> model;
      for (int s = 0; s < stages; ++s)
        model.emplace_back(c, s, stages);
      const ps::ProfiledCost exact = ps::toy::gpt_profiled_cost(model, slices);
      const ps::Problem problem{
          .ranks = stages, .stages = stages, .microbatches = 2, .slices = slices};
      const ps::CostContext ctx{problem, ps::Placement::linear(stages), 1};
      for (int s = 0; s < stages; ++s)
        for (int k = 0; k < slices; ++k) {
          const ps::StageProfile& want = slices == 1 ? exact.stages[s] : exact.slices[s][k];
          const ps::Action f = ps::Action::make(ps::OpKind::F, s, 0, k);
          const ps::Action i = ps::Action::make(ps::OpKind::I, s, 0, k);
          EXPECT_DOUBLE_EQ(cost.memory_delta(ctx, f, false), want.activation_bytes) << s << k;
          EXPECT_DOUBLE_EQ(cost.memory_delta(ctx, i, false),
                           -(want.activation_bytes - want.wgrad_bytes))
              << s << k;
          EXPECT_GT(cost.duration(ctx, f), cost.device.action_overhead);
        }
    }
}

// A measure of the caller's own (what gpu::gpt_layer_profile gives to time the stages on a GPU)
// is called once per grid point with the profiling schedule of that point, and what it returns
// is the profile: here an in-process pipeline through profile_steps, whose bytes are the
// default measure's.
TEST(LayerProfile, ACallersMeasureRunsEachPointsStagesUnderItsProfilingSchedule) {
  const ps::toy::GptConfig c{.vocabulary = 32,
                             .hidden = 16,
                             .heads = 2,
                             .ffn = 32,
                             .sequence = 16,
                             .blocks = 4,
                             .microbatch_size = 2,
                             .seed = 5};
  const ps::LayerGrid grid{
      .tensor = {1}, .microbatch_sizes = {2}, .tokens = {8, 16}, .prefixes = {0, 8}};
  const int longest = 16 + 8;
  namespace td = ps::toy::detail;
  using Stage = ps::toy::GptStage<double>;
  auto make_stages = [&](const ps::LayerPoint& at) {
    std::vector<Stage> v;
    for (int s = 0; s < 3; ++s)
      v.emplace_back(td::layer_point_config(c, at, longest), s, 3);
    return v;
  };
  auto data = std::make_shared<ps::toy::StepData<double>>();
  auto make_data = [&](const ps::LayerPoint& at) {
    *data = td::layer_point_data<double>(c, at, longest, 2);
    const bool sliced = at.prefix > 0;
    ps::TrainingData<ps::toy::Tensor<double>> d;
    d.input = [data, sliced](int mb, int k) {
      return data->input(td::layer_point_entry(mb, k, sliced));
    };
    d.loss = [data, sliced](const ps::toy::Tensor<double>& y, int mb, int k, double& loss) {
      return data->loss_gradient(y, td::layer_point_entry(mb, k, sliced), loss);
    };
    return d;
  };
  int calls = 0;
  auto measure = [&](std::vector<Stage>& stages, const auto& d, const ps::ProfileOptions& o) {
    ++calls;
    EXPECT_TRUE(o.schedule.has_value());
    EXPECT_EQ(o.schedule->name, "layer-profiling");
    EXPECT_EQ(o.repeats, 1);
    ps::inproc::Pipeline<Stage> pipe(*o.schedule, stages);
    return ps::profile_steps(pipe, d, o);
  };
  const ps::LayerProfile mine =
      ps::profile_layers(ps::toy::gpt_model_shape(c, sizeof(double)), grid, make_stages, make_data,
                         {.repeats = 1}, measure);
  EXPECT_EQ(calls, static_cast<int>(grid.points()));
  const ps::LayerProfile usual = ps::toy::gpt_layer_profile<double>(c, grid, {.repeats = 1});
  ASSERT_EQ(mine.samples().size(), usual.samples().size());
  for (std::size_t i = 0; i < mine.samples().size(); ++i) {
    EXPECT_EQ(mine.samples()[i].at, usual.samples()[i].at);
    EXPECT_EQ(mine.samples()[i].figures.activation_bytes,
              usual.samples()[i].figures.activation_bytes);
    EXPECT_EQ(mine.samples()[i].figures.boundary_bytes, usual.samples()[i].figures.boundary_bytes);
  }
  // profile_steps refuses what profile refuses.
  std::vector<Stage> stages = make_stages({.tensor = 1, .microbatch_size = 2, .tokens = 8});
  ps::inproc::Pipeline<Stage> pipe(ps::layer_profiling_schedule(1, 2), stages);
  const auto d = make_data({.tensor = 1, .microbatch_size = 2, .tokens = 8});
  EXPECT_THROW((void)ps::profile_steps(pipe, d, {.repeats = 0}), ps::invalid_problem);
  EXPECT_THROW((void)ps::profile_steps(pipe, d, {.warmup_steps = -1}), ps::invalid_problem);
}

// ---- The toy GPT as the planner's model, and back ----

TEST(ToyGptModel, AModelTheToyCanBeComesBackAsItsConfigAndOthersAreRefused) {
  const ps::toy::GptConfig c{.vocabulary = 40,
                             .hidden = 24,
                             .heads = 3,
                             .ffn = 72,
                             .sequence = 12,
                             .blocks = 5,
                             .microbatch_size = 3,
                             .seed = 9};
  std::vector<std::string> notes;
  const ps::toy::GptConfig back = ps::toy::gpt_config_of(
      ps::toy::gpt_model_shape(c, sizeof(double)), sizeof(double), 9, &notes);
  EXPECT_EQ(back.vocabulary, c.vocabulary);
  EXPECT_EQ(back.hidden, c.hidden);
  EXPECT_EQ(back.heads, c.heads);
  EXPECT_EQ(back.ffn, c.ffn);
  EXPECT_EQ(back.sequence, c.sequence);
  EXPECT_EQ(back.blocks, c.blocks);
  EXPECT_EQ(back.microbatch_size, c.microbatch_size);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_TRUE(notes.empty());
  // A datasheet model the toy can be, with what differs noted.
  ps::ModelShape m = ps::toy::gpt_model_shape(c, 2);
  m.flash_attention = true;
  m.dropout = true;
  (void)ps::toy::gpt_config_of(m, sizeof(double), 1, &notes);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("keeps its attention probabilities"), std::string::npos);
  EXPECT_NE(notes[1].find("dropout"), std::string::npos);
  EXPECT_NE(notes[2].find("2-byte"), std::string::npos);
  auto refused = [&](ps::ModelShape bad, const std::string& part) {
    try {
      (void)ps::toy::gpt_config_of(bad, sizeof(double), 1);
      ADD_FAILURE() << "no refusal for " << part;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the toy GPT cannot build this model"),
                std::string::npos);
    }
  };
  ps::ModelShape bad = m;
  bad.gated_mlp = true;
  refused(bad, "gated (SwiGLU");
  bad = m;
  bad.kv_heads = 1;
  refused(bad, "1 key/value heads for 3 query heads");
  bad = m;
  bad.tied_embeddings = true;
  refused(bad, "shares the embedding");
}

TEST(ToyGptModel, StageBlocksCutTheModelAsGivenAndTheSameModelTrainsAlike) {
  ps::toy::GptConfig c{.vocabulary = 16,
                       .hidden = 8,
                       .heads = 2,
                       .ffn = 16,
                       .sequence = 6,
                       .blocks = 6,
                       .microbatch_size = 2};
  c.stage_blocks = {3, 2, 1};
  int first = 0;
  for (int s = 0; s < 3; ++s) {
    const ps::toy::GptStage<double> stage(c, s, 3);
    EXPECT_EQ(static_cast<int>(stage.blocks().size()), c.stage_blocks[static_cast<std::size_t>(s)]);
    EXPECT_EQ(stage.first_block(), first);
    first += c.stage_blocks[static_cast<std::size_t>(s)];
  }
  // The same weights however the blocks are cut: the stages' parameters, joined, are equal.
  ps::toy::GptConfig even = c;
  even.stage_blocks.clear();
  std::vector<double> cut, whole;
  for (int s = 0; s < 3; ++s) {
    ps::toy::GptStage<double> a(c, s, 3), b(even, s, 3);
    for (const auto& t : a.parameters())
      cut.insert(cut.end(), t.data.begin(), t.data.end());
    for (const auto& t : b.parameters())
      whole.insert(whole.end(), t.data.begin(), t.data.end());
  }
  EXPECT_EQ(cut, whole);
  for (const std::vector<int>& bad :
       {std::vector<int>{3, 2}, std::vector<int>{3, 3, 1}, std::vector<int>{6, 0, 0}}) {
    ps::toy::GptConfig b = c;
    b.stage_blocks = bad;
    try {
      (void)ps::toy::GptStage<double>(b, 0, 3);
      ADD_FAILURE() << "no refusal";
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find("stage_blocks has"), std::string::npos) << e.what();
    }
  }
}

}  // namespace test_profile
