// The fidelity benchmark: profile -> plan -> run -> compare (docs/benchmarks.md, "Fidelity").
//
// 1. Profile: the toy GPT's layers at two sizes are measured over a grid
//    (toy::gpt_layer_profile: a one-rank pipeline of three stages on one thread), and the
//    latency of a message between two threads once, on a two-stage run.
// 2. Plan: each configuration (schedule x microbatches x slices x checkpointing x ranks) is
//    simulated under TransformerCost with that profile as its measured layers — partitions,
//    slice lengths and schedules the profile never ran — and, where more ranks than cores run,
//    with the cores shared (SharedCompute).
// 3. Run: the same schedule trains the toy GPT on threads (inproc::Pipeline).
// 4. Compare: measured / simulated per configuration; the median and worst |ratio − 1| and
//    Kendall's τ between the predicted and measured order, apart for the configurations with at
//    most one busy rank per core and for those with more.
//
// A shared machine's speed drifts: the same layer measured minutes apart can differ by half.
// So nothing is measured once. The benchmark runs in rounds (--rounds, default 3); each round
// profiles the layers again and then runs every configuration. Two estimates are compared:
//
// - fastest: each profile figure the fastest over the rounds, each configuration's step the
//   fastest over all its steps. A machine's noise only ever adds time (another tenant, a
//   preemption, a slower clock), so the minimum is the estimate of the work itself
//   (Chen and Revels, "Robust benchmarking in noisy environments", 2016), and the profile's
//   and the step's minima are estimates of the same quiet machine.
// - median: each profile figure the median over the rounds, each step the median of its steps.
//
// Round-to-round, the profiles' layer figures are also compared with each other: how far one
// measurement of the same layers strays from another on this machine at this time.
//
// --loaded profiles the layers while the other cores run the same layers (as the pipeline's
// other ranks will), instead of with them idle.
//
// Usage: fidelity [--rounds N] [--repeats N] [--loaded] [--quick]
#include <algorithm>
#include <atomic>
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
  int rounds = 3, repeats = 3;
  bool quick = false, loaded = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--loaded") {
      loaded = true;
    } else {
      std::fprintf(stderr, "usage: fidelity [--rounds N] [--repeats N] [--loaded] [--quick]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  repeats = std::clamp(repeats, 1, 1000);
  rounds = std::clamp(rounds, 1, 100);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<toy::GptConfig> sizes = model_sizes();
  const ps::LayerGrid grid = profile_grid();

  // The latency of a message between two threads, once.
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

  std::vector<Config> configs = configurations(2);
  for (int ranks : {4, 8})
    for (const Config& c : configurations(ranks))
      configs.push_back(c);
  if (quick) configs.resize(std::min<std::size_t>(configs.size(), 8));
  std::printf("fidelity: toy GPT (8 blocks, sequence 64, microbatches of 2; hidden 32 and 64)\n");
  std::printf(
      "%zu configurations, %d rounds of (profile %zu grid points per size, then every "
      "configuration: 1 warm-up and %d measured steps); message latency between threads "
      "%.1f us (median); %d cores; the layers profiled %s\n",
      configs.size(), rounds, grid.points(), repeats, latency * 1e6, cores,
      loaded ? "with the other cores running the same layers (--loaded)"
             : "with the other cores idle");

  // 1 and 3, in rounds: the profiles, then every configuration's steps.
  std::vector<std::vector<ps::LayerProfile>> profiled(sizes.size());
  std::vector<std::vector<double>> steps(configs.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      // --loaded: the other cores run the same layers meanwhile, as the pipeline's other ranks
      // will when the configurations run.
      std::atomic<bool> stop{false};
      std::vector<std::thread> load;
      for (int t = 1; loaded && t < cores; ++t)
        load.emplace_back([&, k] {
          while (!stop)
            (void)toy::gpt_layer_profile<double>(sizes[k], grid, {.repeats = 1});
        });
      profiled[k].push_back(toy::gpt_layer_profile<double>(sizes[k], grid, {.repeats = 3}));
      stop = true;
      for (std::thread& t : load)
        t.join();
    }
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& cfg = configs[i];
      const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
      const ps::Schedule s = schedule_of(cfg);
      std::vector<toy::GptStage<double>> stages = gpt_stages(s, c);
      const auto data = toy::make_gpt_data<double>(c, cfg.microbatches, 5);
      const auto training = toy::training_data(data, cfg.slices);
      ps::inproc::Pipeline<toy::GptStage<double>> pipe(s, stages);
      (void)pipe.step(training);  // warm-up
      for (int r = 0; r < repeats; ++r)
        steps[i].push_back(pipe.step(training).seconds);
    }
    std::printf("round %d done at %.0f s\n", round + 1,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }

  // 2 and 4: predictions from each estimate of the profile, against that estimate of the steps.
  const Estimates e = estimates(profiled);
  print_header();
  Comparison fast_a, fast_b, med_a, med_b;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& cfg = configs[i];
    const auto k = static_cast<std::size_t>(cfg.size);
    const toy::GptConfig& c = sizes[k];
    const ps::Schedule s = schedule_of(cfg);
    const bool shared = cfg.ranks > cores;
    const ps::DeviceSpec device = threads_device(latency);
    const double sim_fast = predict(s, c, device, e.fastest[k], cores);
    const double sim_med = predict(s, c, device, e.median[k], cores);
    const double meas_fast = fastest(steps[i]), meas_med = median(steps[i]);
    print_row(cfg, c.hidden, sim_fast, meas_fast, sim_med, meas_med, shared);
    (shared ? fast_b : fast_a).add(sim_fast, meas_fast);
    (shared ? med_b : med_a).add(sim_med, meas_med);
  }
  std::printf("\n");
  summary("at most one busy rank per core, fastest", fast_a.simulated, fast_a.measured);
  summary("  the same, medians", med_a.simulated, med_a.measured);
  summary("more ranks than cores (SharedCompute), fastest", fast_b.simulated, fast_b.measured);
  summary("  the same, medians", med_b.simulated, med_b.measured);
  print_noise(profiled);
  return 0;
}
