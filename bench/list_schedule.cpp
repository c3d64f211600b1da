// The list-scheduling engine against the private planner it replaced: ZB-H1 at p = 64,
// m = 512 (and smaller), both timed in the same iterations so that the ratio is taken in one
// run on one (noisy, shared) machine. The counter `engine_over_reference` is that ratio.
#include <benchmark/benchmark.h>

#include <chrono>

#include "pipesched/schedule/detail/greedy.hpp"
#include "reference_greedy.hpp"

namespace ps = pipesched;

namespace {

template <class Options>
Options zb_h1_options(int p, int m) {
  Options o;
  o.generator = "zb-h1";
  o.placement = ps::Placement::linear(p);
  o.microbatches = m;
  for (int r = 0; r < p; ++r)
    o.max_in_flight.push_back(p - r);
  return o;
}

void BM_ZeroBubbleH1_EngineVsReference(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  const auto engine_opt = zb_h1_options<ps::schedule::detail::GreedyOptions>(p, m);
  const auto ref_opt = zb_h1_options<ps::bench_reference::GreedyOptions>(p, m);
  using clock = std::chrono::steady_clock;
  double engine_s = 0, ref_s = 0;
  for (auto _ : state) {
    auto t0 = clock::now();
    auto a = ps::schedule::detail::greedy_list_schedule(engine_opt);
    auto t1 = clock::now();
    auto b = ps::bench_reference::greedy_list_schedule(ref_opt);
    auto t2 = clock::now();
    benchmark::DoNotOptimize(a.makespan);
    benchmark::DoNotOptimize(b.makespan);
    if (a.ranks != b.ranks) state.SkipWithError("the engine and the reference differ");
    engine_s += std::chrono::duration<double>(t1 - t0).count();
    ref_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["engine_ms"] = 1e3 * engine_s / n;
  state.counters["reference_ms"] = 1e3 * ref_s / n;
  state.counters["engine_over_reference"] = engine_s / ref_s;
}

}  // namespace

BENCHMARK(BM_ZeroBubbleH1_EngineVsReference)
    ->Args({8, 64})
    ->Args({16, 128})
    ->Args({64, 512})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
