// The executor on the in-process transport with a small affine stage model: every schedule
// family computes what sequential training computes, holds the bytes the simulator
// predicts, and stops cleanly on faults.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/exec/replay.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace test_executor {

namespace ps = pipesched;

namespace {

// y = tanh(a ⊙ x + c) elementwise on a vector of width 3; stash keeps x and y for the
// backward, then x and dz (the pre-activation gradient) for the weight gradient.
struct AffineStage {
  using tensor_type = std::vector<double>;
  struct stash_type {
    std::vector<double> x, y, dz;
  };
  std::vector<double> a, c, ga, gc;
  std::function<void(const char*)> fail_on;  // test hook

  explicit AffineStage(int stage) {
    for (int i = 0; i < 3; ++i) {
      a.push_back(0.5 + 0.1 * stage + 0.05 * i);
      c.push_back(0.01 * (stage - i));
    }
    ga.assign(3, 0.0);
    gc.assign(3, 0.0);
  }
  tensor_type forward(const tensor_type& x, stash_type& st) {
    if (fail_on) fail_on("forward");
    tensor_type y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      y[i] = std::tanh(a[i] * x[i] + c[i]);
    st.x = x;
    st.y = y;
    return y;
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    if (fail_on) fail_on("backward_input");
    tensor_type dx(dy.size());
    st.dz.resize(dy.size());
    for (std::size_t i = 0; i < dy.size(); ++i) {
      st.dz[i] = dy[i] * (1 - st.y[i] * st.y[i]);
      dx[i] = st.dz[i] * a[i];
    }
    st.y.clear();
    st.y.shrink_to_fit();
    return dx;
  }
  void backward_weight(stash_type& st) {
    for (std::size_t i = 0; i < st.dz.size(); ++i) {
      ga[i] += st.dz[i] * st.x[i];
      gc[i] += st.dz[i];
    }
    st = {};
  }
  std::size_t stash_bytes(const stash_type& st) const {
    return (st.x.size() + st.y.size() + st.dz.size()) * sizeof(double);
  }
  void zero_gradients() {
    ga.assign(3, 0.0);
    gc.assign(3, 0.0);
  }
};

ps::TrainingData<std::vector<double>> make_data(int microbatches) {
  ps::TrainingData<std::vector<double>> d;
  d.input = [](int m, int) { return std::vector<double>{0.1 * m - 0.3, 0.2, -0.05 * m}; };
  d.loss = [microbatches](const std::vector<double>& y, int m, int, double& loss) {
    std::vector<double> g(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double target = 0.1 * double(i) - 0.02 * m;
      loss += 0.5 * (y[i] - target) * (y[i] - target) / microbatches;
      g[i] = (y[i] - target) / microbatches;
    }
    return g;
  };
  return d;
}

// Sequential reference: every microbatch forward through all stages, then backward.
double sequential(std::vector<AffineStage>& stages, const ps::TrainingData<std::vector<double>>& d,
                  int microbatches) {
  double loss = 0;
  for (auto& s : stages)
    s.zero_gradients();
  for (int m = 0; m < microbatches; ++m) {
    std::vector<AffineStage::stash_type> st(stages.size());
    std::vector<double> x = d.input(m, 0);
    for (std::size_t s = 0; s < stages.size(); ++s)
      x = stages[s].forward(x, st[s]);
    std::vector<double> g = d.loss(x, m, 0, loss);
    for (std::size_t s = stages.size(); s-- > 0;) {
      g = stages[s].backward_input(g, st[s]);
      stages[s].backward_weight(st[s]);
    }
  }
  return loss;
}

std::vector<AffineStage> make_stages(int n) {
  std::vector<AffineStage> v;
  for (int s = 0; s < n; ++s)
    v.emplace_back(s);
  return v;
}

double max_rel(const std::vector<AffineStage>& a, const std::vector<AffineStage>& b) {
  double worst = 0;
  for (std::size_t s = 0; s < a.size(); ++s)
    for (int i = 0; i < 3; ++i)
      for (auto [x, y] : {std::pair{a[s].ga[i], b[s].ga[i]}, std::pair{a[s].gc[i], b[s].gc[i]}})
        worst = std::max(worst, std::abs(x - y) / std::max({std::abs(x), std::abs(y), 1e-300}));
  return worst;
}

// The memory the simulator predicts for AffineStage: 2 vectors after F (x, y), 2 after I
// (x, dz).
ps::ProfiledCost affine_cost(int stages) {
  ps::ProfiledCost c;
  c.stages.assign(stages, ps::StageProfile{.forward = 1,
                                           .backward_input = 1,
                                           .backward_weight = 1,
                                           .activation_bytes = 6 * sizeof(double),
                                           .wgrad_bytes = 6 * sizeof(double)});
  return c;
}

}  // namespace

TEST(Executor, EveryGeneratorMatchesSequentialAndTheSimulatedPeak) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {1, 2, 4})
      for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
        if ((wg == ps::WGradMode::Fused && !g.fused) || (wg == ps::WGradMode::Split && !g.split))
          continue;
        const int m = 2 * p;
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " " + ps::to_string(wg));
        ps::Schedule s = g.generate({.ranks = p, .microbatches = m}, wg);
        auto data = make_data(m);
        // With model replicas (chimera) the reference is one copy of the model; each replica's
        // stage s starts as the model's stage s, and the copies' gradients add up to its own.
        const int model_stages = s.problem.replica_stages();
        auto ref = make_stages(model_stages);
        const double ref_loss = sequential(ref, data, m);
        std::vector<AffineStage> piped;
        for (int st = 0; st < s.problem.stages; ++st)
          piped.emplace_back(st % model_stages);
        ps::inproc::Pipeline<AffineStage> pipe(s, piped);
        for (int step = 0; step < 2; ++step) {
          ps::StepResult r = pipe.step(data);
          EXPECT_NEAR(r.loss, ref_loss, 1e-12 * std::abs(ref_loss));
          std::vector<AffineStage> summed(piped.begin(), piped.begin() + model_stages);
          for (int st = model_stages; st < s.problem.stages; ++st)
            for (int i = 0; i < 3; ++i) {
              summed[st % model_stages].ga[i] += piped[st].ga[i];
              summed[st % model_stages].gc[i] += piped[st].gc[i];
            }
          EXPECT_LE(max_rel(summed, ref), 1e-12);
          ps::SimulationResult sim = ps::simulate(s, affine_cost(s.problem.stages));
          for (int rank = 0; rank < p; ++rank)
            EXPECT_EQ(r.ranks[rank].peak_bytes, sim.ranks[rank].peak_memory) << "rank " << rank;
        }
      }
}

TEST(Executor, RunsPyTorchCsvSchedules) {
  for (const char* f : {"zb1p_2rank_2stagep_compute.csv", "zb1p_2rank_2stagep_comms.csv",
                        "dualpipev_4rank_10mb.csv"}) {
    SCOPED_TRACE(f);
    ps::Schedule s = ps::read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + f);
    const int m = s.problem.microbatches;
    auto data = make_data(m);
    auto ref = make_stages(s.problem.stages);
    const double ref_loss = sequential(ref, data, m);
    auto piped = make_stages(s.problem.stages);
    ps::inproc::Pipeline<AffineStage> pipe(s, piped);
    ps::StepResult r = pipe.step(data);
    EXPECT_NEAR(r.loss, ref_loss, 1e-12 * std::abs(ref_loss));
    EXPECT_LE(max_rel(piped, ref), 1e-12);
  }
}

TEST(TimedExecutor, LayerExceptionStopsEveryRankAndNamesRankAndAction) {
  ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  auto stages = make_stages(4);
  int calls = 0;
  stages[2].fail_on = [&calls](const char* op) {
    if (std::string(op) == "forward" && ++calls == 3) throw std::runtime_error("boom in stage 2");
  };
  ps::inproc::Pipeline<AffineStage> pipe(
      s, stages, {.receive_timeout = std::chrono::seconds(30), .optimizer = {}});
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(make_data(8));
    FAIL() << "expected an execution_error";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(std::string(e.what()).find("rank 2 failed at position"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(2F2): boom in stage 2"), std::string::npos) << e.what();
  }
  // Every rank stopped at once, not after the 30 s receive timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // The pipeline is usable again once the fault is gone.
  stages[2].fail_on = nullptr;
  EXPECT_NO_THROW(pipe.step(make_data(8)));
}

TEST(TimedExecutor, ReceiveThatNeverComesTimesOut) {
  // Rank 1 waits for microbatch 1's activation, which rank 0 never sends: drop rank 0's
  // second forward and its send from the lowered schedule.
  ps::Schedule s = ps::lower_communication(ps::schedule::gpipe({.ranks = 2, .microbatches = 2}));
  // Keep the schedule valid for the executor's check by giving rank 0 a list that simply
  // stalls: a timeout is what a lost message looks like, so use a transport that loses it.
  struct LossyTransport : ps::inproc::Transport<std::vector<double>> {
    using ps::inproc::Transport<std::vector<double>>::Transport;
    void send(int from, int to, const ps::MessageKey& k, std::vector<double>&& x) {
      if (k.microbatch == 1 && k.direction == ps::Direction::Forward) return;  // lost
      ps::inproc::Transport<std::vector<double>>::send(from, to, k, std::move(x));
    }
  };
  LossyTransport t(2);
  auto stages = make_stages(2);
  const auto timeout = std::chrono::milliseconds(300);
  ps::Executor<AffineStage, LossyTransport> e0(s, 0, {&stages[0]}, t, {},
                                               {.receive_timeout = timeout, .optimizer = {}});
  ps::Executor<AffineStage, LossyTransport> e1(s, 1, {&stages[1]}, t, {},
                                               {.receive_timeout = timeout, .optimizer = {}});
  auto data = make_data(2);
  const auto start = ps::HostDevice{}.mark();
  std::mutex mu;
  std::exception_ptr first;  // the first failure that is not a wake-up by abort()
  auto run = [&](auto& exec) {
    try {
      exec.step(data, start);
    } catch (const ps::transport_aborted&) {
    } catch (...) {
      std::lock_guard lock(mu);
      if (!first) first = std::current_exception();
      t.abort();
    }
  };
  {
    std::jthread a([&] { run(e0); });
    std::jthread b([&] { run(e1); });
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(first);
  try {
    std::rethrow_exception(first);
  } catch (const ps::execution_error& e) {
    // Rank 1 waits for the lost activation; rank 0 for a gradient that therefore never
    // comes. Whichever gives up first names itself and its receive.
    EXPECT_TRUE(e.action().kind == ps::OpKind::RecvF || e.action().kind == ps::OpKind::RecvB);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(e.rank()) + " failed at"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("waited 0.3"), std::string::npos) << e.what();
  }
  EXPECT_GE(elapsed, timeout);
  EXPECT_LT(elapsed, timeout + std::chrono::milliseconds(500));
}

TEST(Executor, RefusesMismatchedStagesAndInvalidSchedules) {
  ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2});
  auto stages = make_stages(1);
  EXPECT_THROW((ps::inproc::Pipeline<AffineStage>(s, stages)), ps::invalid_problem);
  s.ranks[0].pop_back();
  auto two = make_stages(2);
  EXPECT_THROW((ps::inproc::Pipeline<AffineStage>(s, two)), ps::invalid_schedule);
}

TEST(Executor, TimelineHasEveryActionInOrder) {
  ps::Schedule s = ps::schedule::zero_bubble_h1({.ranks = 2, .microbatches = 4});
  auto stages = make_stages(2);
  ps::inproc::Pipeline<AffineStage> pipe(s, stages);
  ps::StepResult r = pipe.step(make_data(4));
  ps::SimulationResult t = r.timeline();
  ASSERT_EQ(t.timing.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(t.timing[rank].size(), r.executed.ranks[rank].size());
    for (std::size_t i = 1; i < t.timing[rank].size(); ++i)
      EXPECT_LE(t.timing[rank][i - 1].end, t.timing[rank][i].start + 1e-12);
  }
  EXPECT_GT(t.makespan, 0);
  EXPECT_EQ(t.peak_memory_max, r.ranks[0].peak_bytes);
}

// The executor adds no gap of its own: on every rank, two compute actions with no receive
// between them follow each other at once, and the step is within reach of the simulator's
// replay of the times its own actions measured (ps::replay). Synthetic stages that sleep 2 ms
// (no core needed, so 4 ranks on any machine) and the toy GPT's real layers on 2 ranks, under
// ZB-H1, whose W actions run back to back with other work. The bounds are loose against a
// shared machine's preemption (bench/executor_overhead measures 1.01-1.02 of the replay and
// gaps of about 1 us); a gap of milliseconds between independent actions would fail them.
namespace {

struct Gaps {
  double mean_without_receive = 0;
  int without_receive = 0;
};

Gaps gaps_of(const ps::StepResult& r) {
  double sum = 0;
  Gaps g;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& list = r.executed.ranks[i];
    const auto& timing = r.ranks[i].timing;
    double previous_end = -1;
    bool received = false;
    for (std::size_t p = 0; p < list.size(); ++p) {
      const ps::OpKind k = list[p].kind;
      if (k == ps::OpKind::RecvF || k == ps::OpKind::RecvB) received = true;
      if (!ps::is_compute(k)) continue;
      if (previous_end >= 0 && !received) {
        sum += timing[p].start - previous_end;
        ++g.without_receive;
      }
      previous_end = timing[p].end;
      received = false;
    }
  }
  g.mean_without_receive = g.without_receive > 0 ? sum / g.without_receive : 0.0;
  return g;
}

}  // namespace

TEST(TimedExecutor, NoGapOfItsOwnBetweenActionsAndTheStepNearItsReplay) {
  const ps::Schedule s = ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8});
  const ps::toy::SyntheticCost cost{.forward = 2e-3,
                                    .backward_input = 2e-3,
                                    .backward_weight = 2e-3,
                                    .activation_bytes = 1 << 10,
                                    .wgrad_bytes = 1 << 9};
  std::vector<ps::toy::SyntheticStage> stages(4, ps::toy::SyntheticStage(cost));
  ps::inproc::Pipeline<ps::toy::SyntheticStage> pipe(s, stages);
  const auto data = ps::toy::synthetic_training_data();
  (void)pipe.step(data);
  // A gap the executor makes is in every step; one the machine makes (a preemption on a shared
  // host) is in some: the smallest of three steps' mean gaps is the executor's.
  double measured = 0, replayed = 0, smallest_gap = 1;
  for (int i = 0; i < 3; ++i) {
    const ps::StepResult r = pipe.step(data);
    const Gaps g = gaps_of(r);
    ASSERT_GT(g.without_receive, 20);
    smallest_gap = std::min(smallest_gap, g.mean_without_receive);
    measured += r.seconds;
    replayed += ps::replay(s, r).makespan;
  }
  EXPECT_LT(smallest_gap, 1e-4);
  EXPECT_GE(measured / replayed, 1.0 - 1e-9);  // nothing runs faster than its dependencies
  // (1.01-1.02 in a plain build; hand-offs cost more under ThreadSanitizer, 1.20 on 0.5 ms
  // actions there, hence 2 ms actions and this bound.)
  EXPECT_LT(measured / replayed, 1.25);

  // The toy GPT's real layers, the case where a gap once hid between weight gradients.
  ps::toy::GptConfig c{.vocabulary = 64,
                       .hidden = 32,
                       .heads = 4,
                       .ffn = 128,
                       .sequence = 32,
                       .blocks = 4,
                       .microbatch_size = 2,
                       .seed = 3};
  const ps::Schedule z = ps::schedule::zero_bubble_h1({.ranks = 2, .microbatches = 8});
  std::vector<ps::toy::GptStage<double>> gpt;
  for (int st = 0; st < 2; ++st)
    gpt.emplace_back(c, st, 2);
  ps::inproc::Pipeline<ps::toy::GptStage<double>> run(z, gpt);
  const auto batches = ps::toy::make_gpt_data<double>(c, 8, 5);
  const auto training = ps::toy::training_data(batches);
  (void)run.step(training);
  smallest_gap = 1;
  for (int i = 0; i < 3; ++i) {
    const ps::StepResult r = run.step(training);
    const Gaps g = gaps_of(r);
    ASSERT_GT(g.without_receive, 10);
    smallest_gap = std::min(smallest_gap, g.mean_without_receive);
    EXPECT_GE(r.seconds / ps::replay(z, r).makespan, 1.0 - 1e-9);
  }
  EXPECT_LT(smallest_gap, 1e-4);
}

}  // namespace test_executor
