// The fidelity benchmark: profile -> plan -> run -> compare (docs/benchmarks.md, "Fidelity").
//
// 1. Profile: the toy GPT's layers at two sizes are measured once over a grid
//    (toy::gpt_layer_profile: a one-rank pipeline of three stages on one thread), and the
//    latency of a message between two threads is measured once on a two-stage run.
// 2. Plan: each configuration (schedule x microbatches x slices x checkpointing x ranks) is
//    simulated under TransformerCost with that profile as its measured layers — partitions,
//    slice lengths and schedules the profile never ran — and, where more ranks than cores run,
//    with the cores shared (SharedCompute).
// 3. Run: the same schedule trains the toy GPT on threads (inproc::Pipeline); the measured
//    step is the median over the repeats.
// 4. Compare: measured / simulated per configuration; the median and worst |ratio − 1| and
//    Kendall's τ between the predicted and measured order, apart for the configurations with at
//    most one busy rank per core and for those with more.
//
// A shared machine's speed drifts: the same layer measured minutes apart can differ by half.
// So the benchmark also measures the machine's speed around each run — one layer's F, I and W at
// one grid point, timed as the profile times it, before and after the run — and prints the
// ratio of that to the same figure in the profile (`drift`) and the measured step against the
// prediction scaled by it. The drift uses no figure of the configuration, only the machine's
// speed at the time; both comparisons are printed. At the end the layers are profiled again and
// the two profiles compared: how far one measurement of the same layers strays from another on
// this machine at this time (the noise floor no prediction can beat).
//
// Usage: fidelity [--repeats N] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fidelity_common.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;
using namespace pipesched::bench::fidelity;
using pipesched::bench::kendall_tau;
using pipesched::bench::median;

namespace {

// The median time from a send starting to its receive returning, over the messages whose
// receiver was already waiting: the latency a message between two threads adds.
double median_latency(const std::vector<ps::StepResult>& steps) {
  std::vector<double> seen;
  for (const ps::StepResult& step : steps) {
    const std::vector<double> one = ps::detail::profiling::waiting_latencies(step);
    seen.insert(seen.end(), one.begin(), one.end());
  }
  return seen.empty() ? 0.0 : median(seen);
}

// This machine's threads as a device: messages are handed over in memory (no copy: a pointer
// changes hands, the fastest link a device may have), taking the measured latency.
ps::DeviceSpec threads_device(double latency) {
  return machine_device("threads", 1024, 1e14, latency);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: fidelity [--repeats N] [--quick]\n");
      return 2;
    }
  }
  if (repeats < 1) repeats = 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const std::vector<toy::GptConfig> sizes = model_sizes();

  // 1. Profile.
  const ps::LayerGrid grid = profile_grid();
  std::vector<std::shared_ptr<const ps::LayerProfile>> profiles;
  const auto t0 = std::chrono::steady_clock::now();
  for (const toy::GptConfig& c : sizes)
    profiles.push_back(std::make_shared<const ps::LayerProfile>(
        toy::gpt_layer_profile<double>(c, grid, {.repeats = quick ? 3 : 7})));
  double latency = 0;
  {
    toy::GptConfig c = sizes.front();
    c.blocks = 2;
    std::vector<toy::GptStage<double>> stages;
    for (int s = 0; s < 2; ++s)
      stages.emplace_back(c, s, 2);
    const auto data = toy::make_gpt_data<double>(c, 8, 1);
    std::vector<ps::StepResult> measured;
    (void)ps::profile(stages, toy::training_data(data),
                      {.repeats = quick ? 3 : 7, .measured = &measured});
    latency = median_latency(measured);
  }
  const double profile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fidelity: toy GPT (8 blocks, sequence 64, microbatches of 2; hidden 32 and 64)\n");
  std::printf(
      "profile: %zu grid points per size in %.1f s; message latency between threads "
      "%.1f us (median); %d cores\n\n",
      grid.points(), profile_seconds, latency * 1e6, cores);

  // 2-4. The configurations.
  std::vector<Config> configs = configurations(2);
  for (const Config& c : configurations(4))
    configs.push_back(c);
  if (quick) configs.resize(std::min<std::size_t>(configs.size(), 8));

  std::printf("%-34s %5s %11s %11s %9s %6s %11s\n", "configuration", "size", "simulated",
              "measured", "meas/sim", "drift", "meas/(sim*d)");
  std::vector<double> sim_a, meas_a, sim_b, meas_b, simd_a, simd_b;
  for (const Config& cfg : configs) {
    const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
    const ps::Schedule s = schedule_of(cfg);
    const auto& profile = profiles[static_cast<std::size_t>(cfg.size)];
    const bool shared = cfg.ranks > cores;
    const double simulated = predict(s, c, threads_device(latency), profile, cores);
    std::vector<toy::GptStage<double>> stages;
    for (int st = 0; st < s.problem.stages; ++st)
      stages.emplace_back(c, st, s.problem.stages);
    const auto data = toy::make_gpt_data<double>(c, cfg.microbatches, 5);
    const auto training = toy::training_data(data, cfg.slices);
    const double profiled = profiled_probe(*profile);
    const double before = probe(c);
    ps::inproc::Pipeline<toy::GptStage<double>> pipe(s, stages);
    (void)pipe.step(training);  // warm-up
    std::vector<double> steps;
    for (int r = 0; r < repeats; ++r)
      steps.push_back(pipe.step(training).seconds);
    const double measured = median(steps);
    const double drift = 0.5 * (before + probe(c)) / profiled;
    std::printf("%-34s %5d %8.2f ms %8.2f ms %9.3f %6.3f %11.3f%s\n", cfg.label().c_str(), c.hidden,
                simulated * 1e3, measured * 1e3, measured / simulated, drift,
                measured / (simulated * drift), shared ? "  (shared)" : "");
    (shared ? sim_b : sim_a).push_back(simulated);
    (shared ? simd_b : simd_a).push_back(simulated * drift);
    (shared ? meas_b : meas_a).push_back(measured);
  }
  std::printf("\n");
  summary("at most one busy rank per core", sim_a, meas_a);
  summary("  the same, prediction x drift", simd_a, meas_a);
  summary("more ranks than cores (SharedCompute)", sim_b, meas_b);
  summary("  the same, prediction x drift", simd_b, meas_b);
  // The noise floor: the same grid profiled again, each layer's F + I + W against the first.
  std::vector<double> again;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const ps::LayerProfile second =
        toy::gpt_layer_profile<double>(sizes[k], grid, {.repeats = quick ? 3 : 7});
    for (const ps::LayerSample& x : second.samples()) {
      if (x.part != ps::LayerPart::Layer) continue;
      const ps::LayerFigures f =
          profiles[k]->at(ps::LayerPart::Layer, 1, x.at.microbatch_size, x.at.tokens, x.at.prefix);
      const double a = f.forward + f.backward_input + f.backward_weight;
      const double b = x.figures.forward + x.figures.backward_input + x.figures.backward_weight;
      again.push_back(std::fabs(b / a - 1));
    }
  }
  std::printf(
      "noise floor: the layers profiled again differ from the first profile by %.1f %% "
      "(median), %.1f %% (worst) over %zu points\n",
      100 * median(again), 100 * *std::max_element(again.begin(), again.end()), again.size());
  return 0;
}
