// Receive timeouts and failures the executor must attach: a timeout too long for the clock
// (hours::max(), infinity, 1e10 s) means no deadline and a healthy step runs; a timeout of 0,
// a negative one, NaN or one under a millisecond is refused when the pipeline is built; a
// layer that throws something not derived from std::exception, and an optimizer or snapshot
// hook that throws, reach the caller as the execution_error of their rank, with the position,
// and every rank stops; a step commits on every rank or on none.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

#include "exec_support.hpp"

namespace test_executor_faults {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

const toy::MlpConfig mlp_config{
    .hidden = 6, .ffn = 8, .blocks = 4, .microbatch_size = 2, .seed = 3};

// A toy MLP stage whose forward can be told to fail: `fault` runs before every forward and
// may throw whatever the test wants.
struct FaultyMlp : toy::MlpStage<double> {
  using Base = toy::MlpStage<double>;
  using Base::Base;
  using Base::forward;
  std::function<void()> fault;
  std::function<void()> zero_fault;  // runs before every zero_gradients
  tensor_type forward(const tensor_type& x, stash_type& st) {
    if (fault) fault();
    return Base::forward(x, st);
  }
  void zero_gradients() {
    if (zero_fault) zero_fault();
    Base::zero_gradients();
  }
};

std::vector<FaultyMlp> faulty_stages(int n) {
  return exec_test::make_stages<FaultyMlp>(mlp_config, n);
}

// One step of 1F1B on 4 ranks with `timeout`, checked against the sequential reference.
void expect_healthy_step(Seconds timeout) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto ref = exec_test::make_stages<toy::MlpStage<double>>(mlp_config, s.problem.stages);
  const double ref_loss = toy::sequential_step(ref, data);
  auto stages = faulty_stages(s.problem.stages);
  ps::ExecutorOptions options;
  options.receive_timeout = timeout;
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  for (int step = 0; step < 2; ++step) {
    ps::StepResult r;
    ASSERT_NO_THROW(r = pipe.step(toy::training_data(data)));
    EXPECT_NEAR(r.loss, ref_loss, 1e-12 * std::abs(ref_loss));
  }
}

TEST(ExecutorTimeout, HoursMaxMeansNoDeadline) {
  expect_healthy_step(std::chrono::hours::max());
}

TEST(ExecutorTimeout, InfinityMeansNoDeadline) {
  expect_healthy_step(Seconds(std::numeric_limits<double>::infinity()));
}

TEST(ExecutorTimeout, TimeoutPastTheClocksRangeMeansNoDeadline) {
  // 1e10 s is more nanoseconds than the steady clock's 64-bit count holds. 9.22337203e9 s
  // fits the count, 6.9 s short of its end, but not once added to the clock's time now
  // (the time since boot, on Linux).
  expect_healthy_step(Seconds(1e10));
  expect_healthy_step(Seconds(9.22337203e9));
}

// Without a deadline a receive still gets a message that comes late.
TEST(TimedExecutorTimeout, ForeverReceiveWaitsForALateMessage) {
  ps::inproc::Transport<int> t(2);
  const ps::MessageKey key{1, 0, 0, ps::Direction::Forward};
  std::jthread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.send(0, 1, key, 7);
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(t.receive(1, key, Seconds(std::numeric_limits<double>::infinity())), 7);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90));
}

// Without a deadline a receive still wakes when another rank aborts.
TEST(TimedExecutorTimeout, ForeverReceiveWakesOnAbort) {
  ps::inproc::Transport<int> t(2);
  std::jthread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.abort();
  });
  EXPECT_THROW(t.receive(1, {1, 0, 0, ps::Direction::Forward}, std::chrono::hours::max()),
               ps::transport_aborted);
}

// The refusal names the option, the value given and what is accepted.
void expect_refused(Seconds timeout, const std::string& value) {
  SCOPED_TRACE("receive_timeout = " + value);
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  auto stages = faulty_stages(s.problem.stages);
  ps::ExecutorOptions options;
  options.receive_timeout = timeout;
  try {
    ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
    ADD_FAILURE() << "a receive_timeout of " << value << " s was accepted";
  } catch (const ps::invalid_problem& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("receive_timeout"), std::string::npos) << what;
    EXPECT_NE(what.find(value + " s"), std::string::npos) << what;
    EXPECT_NE(what.find("at least 0.001 s (1 ms)"), std::string::npos) << what;
    EXPECT_NE(what.find("infinity"), std::string::npos) << what;
  }
}

TEST(ExecutorTimeout, ZeroNegativeAndNanAreRefusedAtConstruction) {
  expect_refused(Seconds(0), "0");
  // Positive but too short for any receive: every step would fail.
  expect_refused(Seconds(1e-300), "1e-300");
  expect_refused(std::chrono::microseconds(999), "0.000999");
  expect_refused(Seconds(-1.5), "-1.5");
  expect_refused(std::chrono::milliseconds(-1), "-0.001");
  expect_refused(Seconds(std::numeric_limits<double>::quiet_NaN()), "nan");
  expect_refused(Seconds(-std::numeric_limits<double>::infinity()), "-inf");
}

// The shortest timeout accepted is 1 ms (the pipeline is only built, no step is run: a step
// with a 1 ms receive timeout fails on a loaded machine).
TEST(ExecutorTimeout, OneMillisecondIsAccepted) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  auto stages = faulty_stages(s.problem.stages);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::milliseconds(1);
  EXPECT_NO_THROW(ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options));
}

// Throws `fault` (by `throw_it`) in stage `stage`'s third forward of 1F1B on 4 ranks; the step
// must end, on every rank, with that rank's execution_error at its F of microbatch 2 saying
// `expected`.
void expect_fault_attached(const std::function<void()>& throw_it, const std::string& expected,
                           int stage = 2) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  const auto at = static_cast<std::size_t>(stage);
  int calls = 0;
  stages[at].fault = [&] {
    if (++calls == 3) throw_it();
  };
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  const auto t0 = Clock::now();
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    const std::string r = std::to_string(stage);
    EXPECT_EQ(e.rank(), stage);
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().stage, stage);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(
        std::string(e.what()).find("rank " + r + " failed at position " +
                                   std::to_string(e.position()) + " (" + r + "F2): " + expected),
        std::string::npos)
        << e.what();
  }
  // Every rank stopped at once, not after the 30 s receive timeout.
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  // The pipeline runs the next step once the fault is gone.
  stages[at].fault = nullptr;
  EXPECT_NO_THROW(pipe.step(toy::training_data(data)));
}

TEST(TimedExecutorFaults, NonStandardExceptionGetsRankAndAction) {
  expect_fault_attached([] { throw 42; },
                        "a non-standard exception (not derived from std::exception)");
}

TEST(TimedExecutorFaults, NonStandardClassExceptionGetsRankAndAction) {
  struct NotAnError {};
  expect_fault_attached([] { throw NotAnError{}; },
                        "a non-standard exception (not derived from std::exception)");
}

// Rank 0's list runs on the thread that calls step (the others on threads of their own), and
// a failure there stops the ranks on the other threads as one on theirs does.
TEST(TimedExecutorFaults, RankZeroRunsOnTheCallingThreadAndItsFailureStopsTheOthers) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  std::vector<std::thread::id> ran_on(stages.size());  // each written by its stage's thread only
  for (std::size_t i = 0; i < stages.size(); ++i)
    stages[i].fault = [&ran_on, i] { ran_on[i] = std::this_thread::get_id(); };
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  pipe.step(toy::training_data(data));
  EXPECT_EQ(ran_on[0], std::this_thread::get_id());
  for (std::size_t i = 1; i < ran_on.size(); ++i) {
    EXPECT_NE(ran_on[i], std::thread::id{}) << "stage " << i << " never ran";
    EXPECT_NE(ran_on[i], std::this_thread::get_id()) << "stage " << i;
    for (std::size_t j = 0; j < i; ++j)
      EXPECT_NE(ran_on[i], ran_on[j]) << "stages " << j << " and " << i;
  }

  expect_fault_attached([] { throw std::runtime_error("rank 0 broke"); }, "rank 0 broke", 0);
}

// An optimizer hook that throws on rank `bad`: every rank stops; the error names rank `bad`,
// its optimizer step, and the position after its list.
void expect_optimizer_fault_attached(const ps::Schedule& s, int bad,
                                     const std::function<void()>& throw_it,
                                     const std::string& expected) {
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  bool armed = true;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  options.optimizer = [&](int rank) {
    if (armed && rank == bad) throw_it();
  };
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  const int list_size =
      static_cast<int>(ps::lower_communication(s).ranks[static_cast<std::size_t>(bad)].size());
  const auto t0 = Clock::now();
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), bad);
    EXPECT_EQ(e.position(), list_size);
    EXPECT_EQ(e.action().kind, ps::OpKind::Idle);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(bad) +
                                         " failed in its optimizer step: " + expected),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  armed = false;
  EXPECT_NO_THROW(pipe.step(toy::training_data(data)));
}

TEST(TimedExecutorFaults, OptimizerExceptionGetsRankAndPosition) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  expect_optimizer_fault_attached(
      s, 1, [] { throw std::runtime_error("optimizer boom"); }, "optimizer boom");
  // In 1F1B rank 0 ends last: when its optimizer runs, every other rank has finished.
  expect_optimizer_fault_attached(
      s, 0, [] { throw 7; }, "a non-standard exception (not derived from std::exception)");
}

// zero_gradients runs before the list; what it throws is attached at position -1.
TEST(TimedExecutorFaults, ZeroGradientsExceptionGetsRank) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  stages[3].zero_fault = [] { throw 3.5; };
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  const auto t0 = Clock::now();
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(e.position(), -1);
    EXPECT_NE(std::string(e.what()).find("rank 3 failed before its list (zero_gradients): a "
                                         "non-standard exception"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  stages[3].zero_fault = nullptr;
  EXPECT_NO_THROW(pipe.step(toy::training_data(data)));
}

// ---- a step commits on every rank or on none ------------------------------------------------

using CountingMlp = exec_test::Counting<toy::MlpStage<double>>;

ps::Schedule generated(const char* name, int ranks, int microbatches) {
  const ps::GeneratorInfo& g = ps::find_generator(name);
  return g.generate({.ranks = ranks, .microbatches = microbatches}, g.default_wgrad);
}

// Trains `steps` steps of `s` (SGD with its rollback, `fill` waits or not) with a fault
// injected into one random step of each of `trials` runs — in any compute action of any
// stage, in one rank's snapshot (std::bad_alloc), or in one rank's optimizer before or after
// it updated — then retries that step. The failed step must say it was rolled back and leave
// every parameter as it was before the step, and every step's loss (the retried one's too)
// and the final parameters must equal the fault-free run's, bit for bit.
void expect_faults_roll_back(const ps::Schedule& s, bool fill, int trials, unsigned seed) {
  SCOPED_TRACE(s.name + (fill ? " with filled waits" : ""));
  constexpr int steps = 3;
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  const int n = s.problem.stages;
  // The fault-free run, counting each stage's calls per step.
  std::vector<double> clean_loss;
  std::vector<int> calls_per_step(static_cast<std::size_t>(n));
  std::vector<double> clean_params;
  {
    auto stages = exec_test::make_stages<CountingMlp>(mlp_config, n);
    ps::ExecutorOptions options;
    options.fill_waits = fill;
    toy::use_sgd(options, s.placement, stages, exec_test::learning_rate);
    ps::inproc::Pipeline<CountingMlp> pipe(s, stages, options);
    for (int k = 0; k < steps; ++k)
      clean_loss.push_back(pipe.step(toy::training_data(data)).loss);
    for (int i = 0; i < n; ++i)
      calls_per_step[static_cast<std::size_t>(i)] =
          stages[static_cast<std::size_t>(i)].calls / steps;
    clean_params = toy::flat_parameters(stages);
  }
  std::mt19937 rng(seed);
  int optimizer_faults = 0, snapshot_faults = 0;
  for (int t = 0; t < trials; ++t) {
    auto stages = exec_test::make_stages<CountingMlp>(mlp_config, n);
    ps::ExecutorOptions options;
    options.fill_waits = fill;
    toy::use_sgd(options, s.placement, stages, exec_test::learning_rate);
    // One trial in four breaks an update: rank `bad_rank`'s snapshot throws (its optimizer
    // never runs), or its optimizer throws before or after updating.
    const bool in_optimizer = rng() % 4 == 0;
    const int bad_rank = static_cast<int>(rng() % static_cast<unsigned>(s.rank_count()));
    const unsigned phase = rng() % 3;  // 0: in the snapshot, 1: before, 2: after the update
    const bool in_snapshot = phase == 0, after_update = phase == 2;
    bool armed = false;
    auto sgd = options.optimizer;
    options.optimizer = [&, sgd](int rank) {
      if (armed && rank == bad_rank && phase == 1) throw std::runtime_error("optimizer fault");
      sgd(rank);
      if (armed && rank == bad_rank && after_update) throw std::runtime_error("optimizer fault");
    };
    auto keep = options.snapshot;
    options.snapshot = [&, keep](int rank) {
      if (armed && rank == bad_rank && in_snapshot) throw std::bad_alloc();
      keep(rank);
    };
    ps::inproc::Pipeline<CountingMlp> pipe(s, stages, options);
    const int faulty_step = static_cast<int>(rng() % steps);
    const int stage = static_cast<int>(rng() % static_cast<unsigned>(n));
    const int call =
        1 + static_cast<int>(
                rng() % static_cast<unsigned>(calls_per_step[static_cast<std::size_t>(stage)]));
    SCOPED_TRACE("trial " + std::to_string(t) + ": step " + std::to_string(faulty_step) +
                 (in_optimizer
                      ? ", rank " + std::to_string(bad_rank) +
                            (in_snapshot    ? "'s snapshot"
                             : after_update ? "'s optimizer after its update"
                                            : "'s optimizer")
                      : ", stage " + std::to_string(stage) + "'s call " + std::to_string(call)));
    for (int k = 0; k < steps; ++k) {
      for (CountingMlp& st : stages)
        st.calls = 0;
      if (k == faulty_step) {
        if (in_optimizer) {
          armed = true;
          ++(in_snapshot ? snapshot_faults : optimizer_faults);
        } else {
          stages[static_cast<std::size_t>(stage)].target = call;
        }
        const std::vector<double> before = toy::flat_parameters(stages);
        try {
          pipe.step(toy::training_data(data));
          ADD_FAILURE() << "the injected fault did not fail the step";
        } catch (const ps::execution_error& e) {
          // Every rank's parameters are those it had before the step.
          EXPECT_EQ(toy::flat_parameters(stages), before);
          EXPECT_TRUE(e.rolled_back()) << e.what();
          EXPECT_NE(std::string(e.what()).find("the step was rolled back"), std::string::npos)
              << e.what();
          if (in_optimizer) {
            EXPECT_EQ(e.rank(), bad_rank);
          } else {
            EXPECT_EQ(e.action().stage, stage) << e.what();
          }
        }
        armed = false;
        stages[static_cast<std::size_t>(stage)].target = 0;
        for (CountingMlp& st : stages)
          st.calls = 0;
      }
      EXPECT_EQ(pipe.step(toy::training_data(data)).loss, clean_loss[static_cast<std::size_t>(k)])
          << "step " << k;
    }
    EXPECT_EQ(toy::flat_parameters(stages), clean_params);
  }
  EXPECT_GT(optimizer_faults, 0);
  EXPECT_GT(snapshot_faults, 0);
}

TEST(StepCommit, RandomFaultsRollBackOneFOneB) {
  expect_faults_roll_back(generated("1f1b", 4, 8), false, 120, 1);
}

TEST(StepCommit, RandomFaultsRollBackZeroBubbleWithFilledWaits) {
  expect_faults_roll_back(generated("zb-h1", 4, 8), true, 120, 2);
}

// The parameters of rank r's stage (1F1B: rank r holds stage r).
std::vector<double> stage_parameters(const std::vector<toy::MlpStage<double>>& stages, int r) {
  return toy::flat_parameters(
      std::vector<toy::MlpStage<double>>{stages[static_cast<std::size_t>(r)]});
}

// A snapshot hook that throws (std::bad_alloc, in step 1 on rank 2 of 1F1B × 4) stops that
// rank before its optimizer: its parameters never changed. Only the ranks whose optimizer ran
// are rolled back (rank 2's rollback would put back step 0's snapshot and lose step 0's
// update), so every rank keeps exactly what it had before the step. The retried step commits,
// and the parameters then equal a fault-free run's.
TEST(StepCommit, SnapshotFaultRollsBackOnlyTheRanksWhoseOptimizerRan) {
  using Mlp = toy::MlpStage<double>;
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto clean = exec_test::make_stages<Mlp>(mlp_config, s.problem.stages);
  {
    ps::ExecutorOptions options;
    toy::use_sgd(options, s.placement, clean, exec_test::learning_rate);
    ps::inproc::Pipeline<Mlp> pipe(s, clean, options);
    pipe.step(toy::training_data(data));
    pipe.step(toy::training_data(data));
  }
  auto stages = exec_test::make_stages<Mlp>(mlp_config, s.problem.stages);
  ps::ExecutorOptions options;
  toy::use_sgd(options, s.placement, stages, exec_test::learning_rate);
  bool armed = false;
  std::vector<int> rollbacks(4, 0);  // each rank's thread counts its own
  options.snapshot = [&, keep = options.snapshot](int rank) {
    if (armed && rank == 2) throw std::bad_alloc();
    keep(rank);
  };
  options.rollback = [&, undo = options.rollback](int rank) {
    ++rollbacks[static_cast<std::size_t>(rank)];
    undo(rank);
  };
  ps::inproc::Pipeline<Mlp> pipe(s, stages, options);
  pipe.step(toy::training_data(data));  // step 0 commits
  std::vector<std::vector<double>> before;
  for (int r = 0; r < 4; ++r)
    before.push_back(stage_parameters(stages, r));
  armed = true;
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the snapshot fault did not fail the step";
  } catch (const ps::execution_error& e) {
    EXPECT_TRUE(e.rolled_back()) << e.what();
    EXPECT_EQ(e.rank(), 2);
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 2 failed in its optimizer step: std::bad_alloc"), std::string::npos)
        << what;
    EXPECT_NE(what.find("the step was rolled back"), std::string::npos) << what;
  }
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(stage_parameters(stages, r), before[static_cast<std::size_t>(r)]) << "rank " << r;
  EXPECT_EQ(rollbacks, (std::vector<int>{1, 1, 0, 1}));
  armed = false;
  pipe.step(toy::training_data(data));  // step 1 again: it commits
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(stage_parameters(stages, r), before[static_cast<std::size_t>(r)]) << "rank " << r;
  EXPECT_EQ(toy::flat_parameters(stages), toy::flat_parameters(clean));
}

// Without a rollback hook a snapshot that throws on rank 2 leaves the other ranks' updates
// (and rank 2 without one), and the error says the step was not rolled back; when every
// rank's snapshot throws, no parameter moved and the error says the step was rolled back.
TEST(StepCommit, SnapshotFaultWithoutRollbackTellsWhatChanged) {
  using Mlp = toy::MlpStage<double>;
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = exec_test::make_stages<Mlp>(mlp_config, s.problem.stages);
  ps::ExecutorOptions options;
  toy::use_sgd(options, s.placement, stages, exec_test::learning_rate);
  options.rollback = nullptr;
  bool every_rank = false;
  options.snapshot = [&](int rank) {
    if (every_rank || rank == 2) throw std::bad_alloc();
  };
  ps::inproc::Pipeline<Mlp> pipe(s, stages, options);
  std::vector<std::vector<double>> before;
  for (int r = 0; r < 4; ++r)
    before.push_back(stage_parameters(stages, r));
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the snapshot fault did not fail the step";
  } catch (const ps::execution_error& e) {
    EXPECT_FALSE(e.rolled_back()) << e.what();
    EXPECT_NE(std::string(e.what()).find("the step was NOT rolled back"), std::string::npos)
        << e.what();
  }
  for (int r = 0; r < 4; ++r) {
    const std::vector<double> now = stage_parameters(stages, r);
    if (r == 2)
      EXPECT_EQ(now, before[2]);
    else
      EXPECT_NE(now, before[static_cast<std::size_t>(r)]) << "rank " << r;
  }
  every_rank = true;
  const std::vector<double> all = toy::flat_parameters(stages);
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the snapshot faults did not fail the step";
  } catch (const ps::execution_error& e) {
    EXPECT_TRUE(e.rolled_back()) << e.what();
  }
  EXPECT_EQ(toy::flat_parameters(stages), all);
}

// Without a rollback hook an optimizer that throws leaves the others' updates, and says so.
TEST(StepCommit, OptimizerFaultWithoutRollbackSaysTheStepWasNotRolledBack) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  ps::ExecutorOptions options;
  options.optimizer = [](int rank) {
    if (rank == 2) throw std::runtime_error("optimizer boom");
  };
  ps::inproc::Pipeline<FaultyMlp> pipe(s, stages, options);
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_FALSE(e.rolled_back());
    EXPECT_EQ(e.rank(), 2);
    EXPECT_NE(std::string(e.what()).find("optimizer boom; the step was NOT rolled back"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no ExecutorOptions::rollback"), std::string::npos)
        << e.what();
  }
}

// A fault in a list applies no update anywhere: with a rank that finishes early (rank 3 of
// 1F1B) and a fault late on rank 0, rank 3's optimizer never runs.
TEST(StepCommit, NoRankUpdatesBeforeEveryListHasRun) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = exec_test::make_stages<CountingMlp>(mlp_config, s.problem.stages);
  std::atomic<int> updates{0};
  ps::ExecutorOptions options;
  options.optimizer = [&](int) { ++updates; };
  ps::inproc::Pipeline<CountingMlp> pipe(s, stages, options);
  pipe.step(toy::training_data(data));
  ASSERT_EQ(updates.load(), 4);
  updates = 0;
  stages[0].target = stages[0].calls;  // rank 0's last call of the step: its last W
  stages[0].calls = 0;
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_TRUE(e.rolled_back());
    EXPECT_EQ(e.rank(), 0);
  }
  EXPECT_EQ(updates.load(), 0);
}

}  // namespace

}  // namespace test_executor_faults
