// How generate + validate + lower + simulate scale with the schedule size:
// Interleaved 1F1B, V = 2, split backward, from p = 4, m = 32 up to p = 64, m = 512.
// Reports actions per second per phase and fits the growth (BigO) over the action count.
#include <benchmark/benchmark.h>

#include "pipesched/pipesched.hpp"

namespace ps = pipesched;

namespace {

ps::Problem problem_for(const benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  return {.ranks = p, .stages = 2 * p, .microbatches = 8 * p};
}

ps::Schedule make(const ps::Problem& p) {
  return ps::schedule::interleaved_1f1b(p, ps::WGradMode::Split);
}

void finish(benchmark::State& state, std::size_t actions) {
  state.SetComplexityN(static_cast<int64_t>(actions));
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["actions_per_s"] =
      benchmark::Counter(static_cast<double>(actions) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// The whole pipeline: what `pipesched simulate --schedule interleaved-1f1b` does.
void BM_GenerateValidateLowerSimulate(benchmark::State& state) {
  const ps::Problem p = problem_for(state);
  std::size_t actions = 0;
  for (auto _ : state) {
    ps::Schedule s = make(p);
    ps::ValidationReport rep = ps::check(s);
    ps::Schedule lowered = ps::lower_communication(s);
    ps::SimulationResult r = ps::simulate(lowered);
    benchmark::DoNotOptimize(r.makespan);
    if (!rep.ok() || r.deadlock) state.SkipWithError("schedule invalid");
    actions = s.action_count();
  }
  finish(state, actions);
}

void BM_Generate(benchmark::State& state) {
  const ps::Problem p = problem_for(state);
  std::size_t actions = 0;
  for (auto _ : state) {
    ps::Schedule s = make(p);
    actions = s.action_count();
    benchmark::DoNotOptimize(s.ranks.data());
  }
  finish(state, actions);
}

void BM_Validate(benchmark::State& state) {
  const ps::Schedule s = make(problem_for(state));
  for (auto _ : state) {
    ps::ValidationReport rep = ps::check(s);
    benchmark::DoNotOptimize(rep.violations.data());
  }
  finish(state, s.action_count());
}

void BM_Simulate(benchmark::State& state) {
  const ps::Schedule s = make(problem_for(state));
  for (auto _ : state) {
    ps::SimulationResult r = ps::simulate(s);
    benchmark::DoNotOptimize(r.makespan);
  }
  finish(state, s.action_count());
}

#define PIPESCHED_SIZES \
  RangeMultiplier(2)->Range(4, 64)->Unit(benchmark::kMillisecond)->Complexity(benchmark::oN)
BENCHMARK(BM_GenerateValidateLowerSimulate)->PIPESCHED_SIZES;
BENCHMARK(BM_Generate)->PIPESCHED_SIZES;
BENCHMARK(BM_Validate)->PIPESCHED_SIZES;
BENCHMARK(BM_Simulate)->PIPESCHED_SIZES;

}  // namespace

BENCHMARK_MAIN();
