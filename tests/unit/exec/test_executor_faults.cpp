// Receive timeouts and failures the executor must attach: a timeout too long for the clock
// (hours::max(), infinity, 1e10 s) means no deadline and a healthy step runs; a timeout of 0,
// a negative one or NaN is refused when the pipeline is built; a layer that throws something
// not derived from std::exception, and an optimizer hook that throws, reach the caller as the
// execution_error of their rank, with the position, and every rank stops.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"

#include "exec_support.hpp"

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
  ps::InprocPipeline<FaultyMlp> pipe(s, stages, options);
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
  ps::InprocTransport<int> t(2);
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
  ps::InprocTransport<int> t(2);
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
    ps::InprocPipeline<FaultyMlp> pipe(s, stages, options);
    ADD_FAILURE() << "a receive_timeout of " << value << " s was accepted";
  } catch (const ps::invalid_problem& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("receive_timeout"), std::string::npos) << what;
    EXPECT_NE(what.find(value + " s"), std::string::npos) << what;
    EXPECT_NE(what.find("more than 0"), std::string::npos) << what;
    EXPECT_NE(what.find("infinity"), std::string::npos) << what;
  }
}

TEST(ExecutorTimeout, ZeroNegativeAndNanAreRefusedAtConstruction) {
  expect_refused(Seconds(0), "0");
  expect_refused(Seconds(-1.5), "-1.5");
  expect_refused(std::chrono::milliseconds(-1), "-0.001");
  expect_refused(Seconds(std::numeric_limits<double>::quiet_NaN()), "nan");
  expect_refused(Seconds(-std::numeric_limits<double>::infinity()), "-inf");
}

// Throws `fault` (by `throw_it`) in stage 2's third forward of 1F1B on 4 ranks; the step
// must end, on every rank, with rank 2's execution_error at 2F2 saying `expected`.
void expect_fault_attached(const std::function<void()>& throw_it, const std::string& expected) {
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const auto data = toy::make_mlp_data<double>(mlp_config, s.problem.microbatches, 7);
  auto stages = faulty_stages(s.problem.stages);
  int calls = 0;
  stages[2].fault = [&] {
    if (++calls == 3) throw_it();
  };
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::InprocPipeline<FaultyMlp> pipe(s, stages, options);
  const auto t0 = Clock::now();
  try {
    pipe.step(toy::training_data(data));
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().stage, 2);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(std::string(e.what()).find("rank 2 failed at position " +
                                         std::to_string(e.position()) + " (2F2): " + expected),
              std::string::npos)
        << e.what();
  }
  // Every rank stopped at once, not after the 30 s receive timeout.
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  // The pipeline runs the next step once the fault is gone.
  stages[2].fault = nullptr;
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
  ps::InprocPipeline<FaultyMlp> pipe(s, stages, options);
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
  ps::InprocPipeline<FaultyMlp> pipe(s, stages, options);
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

}  // namespace
