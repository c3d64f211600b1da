// The MEPipe report, part 1: activation memory and step time of slice-level schedules under
// UniformCost defaults (f = 1, b = 2, w = 1): 1F1B, seq-1f1b and slice-pipe at p = 16 and
// p = 8, m = 2p, and slice-pipe's warm-up frontier at p = 8. Prints markdown.
//
//   build/default/bench/mepipe_report
#include <cstdio>
#include <string>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"

namespace ps = pipesched;

int main() {
  for (int p : {16, 8}) {
    const int m = 2 * p;
    const ps::SimulationResult base =
        ps::simulate(ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}));
    std::printf("\n### p = %d, m = %d (1F1B: makespan %.1f, largest peak %.2f microbatches)\n\n", p,
                m, base.makespan, base.peak_memory_max);
    std::printf(
        "| schedule | slices | chunks | makespan | vs 1F1B | largest peak | below 1F1B |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int k : {4, 8}) {
      auto row = [&](const char* name, int chunks, const ps::Schedule& s) {
        const ps::SimulationResult r = ps::simulate(s);
        std::printf("| %s | %d | %d | %.2f | %.3f | %.3f | %.1f %% |\n", name, k, chunks,
                    r.makespan, r.makespan / base.makespan, r.peak_memory_max,
                    100 * (1 - r.peak_memory_max / base.peak_memory_max));
      };
      row("seq-1f1b", 1, ps::schedule::seq_1f1b({.ranks = p, .microbatches = m, .slices = k}));
      for (int v : {2, 4})
        row("slice-pipe (default warm-up)", v,
            ps::schedule::slice_pipe(
                {.ranks = p, .stages = v * p, .microbatches = m, .slices = k}));
    }
  }
  // The warm-up knob at p = 8: fewer forwards before the first backward hold fewer slices.
  const int p = 8, m = 16;
  const ps::SimulationResult base =
      ps::simulate(ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}));
  const ps::SimulationResult seq4 =
      ps::simulate(ps::schedule::seq_1f1b({.ranks = p, .microbatches = m, .slices = 4}));
  std::printf(
      "\n### Warm-up frontier, p = 8, m = 16 (seq-1f1b at 4 slices: makespan %.2f, peak %.3f)\n\n",
      seq4.makespan, seq4.peak_memory_max);
  std::printf(
      "| slices | chunks | warm-up (rank 0) | makespan | vs 1F1B | largest peak | below 1F1B |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int k : {4, 8})
    for (int v : {2, 4}) {
      const ps::Problem pr{.ranks = p, .stages = v * p, .microbatches = m, .slices = k};
      const int most = ps::schedule::detail::slice_warmup(p, v, k, 0);
      const int least = (v - 1) * ps::schedule::detail::slice_group(p, k) + k - 1;
      for (int w = most; w >= least; w -= std::max(1, (most - least) / 3)) {
        const ps::SimulationResult r =
            ps::simulate(ps::schedule::slice_pipe(pr, ps::WGradMode::Fused, {.warmup = w}));
        std::printf("| %d | %d | %d%s | %.2f | %.3f | %.3f | %.1f %% |\n", k, v, w,
                    w == most ? " (default)" : "", r.makespan, r.makespan / base.makespan,
                    r.peak_memory_max, 100 * (1 - r.peak_memory_max / base.peak_memory_max));
      }
    }
  return 0;
}
