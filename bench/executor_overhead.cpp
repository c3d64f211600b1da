// Executor overhead on the in-process transport: synthetic stages whose actions sleep for
// set times (1 ms forward, 1 ms input gradient, 1 ms weight gradient), 1F1B and Zero Bubble
// H1, 4 and 8 ranks, 16 microbatches. The counter `ratio` is the measured step time over the
// simulated makespan for the same costs: 1.0 would be an executor that adds nothing.
#include <benchmark/benchmark.h>

#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/synthetic.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

constexpr double action_seconds = 1e-3;

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

  double total = 0;
  for (auto _ : state) {
    ps::StepResult r = pipe.step(data);
    state.SetIterationTime(r.seconds);
    total += r.seconds;
  }
  state.counters["simulated_ms"] = makespan * 1e3;
  state.counters["measured_ms"] = total / state.iterations() * 1e3;
  state.counters["ratio"] = total / state.iterations() / makespan;
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
