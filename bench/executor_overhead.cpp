// Executor overhead on the in-process transport: synthetic stages whose actions sleep for
// set times (1 ms forward, 1 ms input gradient, 1 ms weight gradient), 1F1B and Zero Bubble
// H1, 4 and 8 ranks, 16 microbatches. The counter `ratio` is the measured step time over the
// simulated makespan for the same costs: 1.0 would be an executor and stages that add nothing.
// `replay_ratio` is the measured step over the simulator's replay of the same step with each
// action at the time it measured: what the executor adds between actions (hand-offs, waking a
// waiting rank, bookkeeping), without what the stages' sleeps overran (the operating system's
// timers and preemption, `overrun_us` per action).
#include <benchmark/benchmark.h>

#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/exec/replay.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

constexpr double action_seconds = 1e-3;

// Seconds the compute actions of `r` ran past their nominal times, per action.
double mean_overrun(const ps::StepResult& r, const toy::SyntheticCost& cost) {
  double over = 0, n = 0;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& list = r.executed.ranks[i];
    for (std::size_t p = 0; p < list.size(); ++p) {
      const ps::OpKind k = list[p].kind;
      if (!ps::is_compute(k)) continue;
      const double nominal = k == ps::OpKind::F   ? cost.forward
                             : k == ps::OpKind::B ? cost.backward_input + cost.backward_weight
                             : k == ps::OpKind::I ? cost.backward_input
                                                  : cost.backward_weight;
      over += r.ranks[i].timing[p].end - r.ranks[i].timing[p].start - nominal;
      ++n;
    }
  }
  return n > 0 ? over / n : 0.0;
}

void run_case(benchmark::State& state, const char* name) {
  const int ranks = static_cast<int>(state.range(0));
  const ps::GeneratorInfo& g = ps::find_generator(name);
  const ps::Schedule s = g.generate({.ranks = ranks, .microbatches = 16}, g.default_wgrad);
  const toy::SyntheticCost cost{.forward = action_seconds,
                                .backward_input = action_seconds,
                                .backward_weight = action_seconds,
                                .activation_bytes = 1 << 20,
                                .wgrad_bytes = 1 << 19};
  std::vector<toy::SyntheticStage> stages(s.problem.stages, toy::SyntheticStage(cost));
  const ps::ProfiledCost predicted = toy::synthetic_profiled_cost(cost, s.problem.stages);
  const double makespan = ps::simulate(s, predicted).makespan;

  ps::inproc::Pipeline<toy::SyntheticStage> pipe(s, stages);
  const auto data = toy::synthetic_training_data();
  pipe.step(data);  // warm up: threads, allocations, page faults

  double total = 0, replayed = 0, overrun = 0;
  for (auto _ : state) {
    ps::StepResult r = pipe.step(data);
    state.SetIterationTime(r.seconds);
    total += r.seconds;
    replayed += ps::replay(s, r).makespan;
    overrun += mean_overrun(r, cost);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["simulated_ms"] = makespan * 1e3;
  state.counters["measured_ms"] = total / n * 1e3;
  state.counters["ratio"] = total / n / makespan;
  state.counters["replay_ratio"] = total / replayed;
  state.counters["overrun_us"] = overrun / n * 1e6;
}

void BM_OneFOneB(benchmark::State& state) {
  run_case(state, "1f1b");
}
void BM_ZeroBubbleH1(benchmark::State& state) {
  run_case(state, "zb-h1");
}

BENCHMARK(BM_OneFOneB)
    ->Arg(4)
    ->Arg(8)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZeroBubbleH1)
    ->Arg(4)
    ->Arg(8)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
