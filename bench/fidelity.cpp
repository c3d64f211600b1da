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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/analysis/shared_compute.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/layer_profile.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

struct Config {
  int size = 0;  // index into the model sizes
  std::string schedule;
  int ranks = 2;
  int chunks = 1;
  int microbatches = 4;
  int slices = 1;
  bool checkpoint = false;
  std::string label() const {
    std::string s = schedule + " pp" + std::to_string(ranks);
    if (chunks > 1) s += " v" + std::to_string(chunks);
    s += " m" + std::to_string(microbatches);
    if (slices > 1) s += " k" + std::to_string(slices);
    if (checkpoint) s += " ckpt";
    return s;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Kendall's τ-b of two orders: concordant minus discordant pairs over the pairs not tied.
double kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  double concordant = 0, discordant = 0, tied_x = 0, tied_y = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = i + 1; j < x.size(); ++j) {
      const double a = x[i] - x[j], b = y[i] - y[j];
      if (a == 0 && b == 0) continue;
      if (a == 0) {
        ++tied_x;
      } else if (b == 0) {
        ++tied_y;
      } else if ((a > 0) == (b > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  const double n1 = concordant + discordant + tied_x, n2 = concordant + discordant + tied_y;
  return n1 > 0 && n2 > 0 ? (concordant - discordant) / std::sqrt(n1 * n2) : 0.0;
}

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

// This machine's threads as a device: messages are handed over in memory (no copy), taking
// the measured latency; memory is not the limit here.
// One layer's F + I + W at (microbatch 2, 64 tokens, no prefix), as the profile times it: the
// machine's speed now.
double probe(const toy::GptConfig& c) {
  const ps::LayerGrid one{.tensor = {1}, .microbatch_sizes = {2}, .tokens = {64}, .prefixes = {0}};
  const ps::LayerProfile p = toy::gpt_layer_profile<double>(c, one, {.repeats = 3});
  const ps::LayerFigures f = p.at(ps::LayerPart::Layer, 1, 2, 64, 0);
  return f.forward + f.backward_input + f.backward_weight;
}

ps::DeviceSpec threads_device(double latency) {
  ps::DeviceSpec d;
  d.name = "threads";
  d.peak_flops = 1e12;  // unused: the profile gives every kernel's time
  d.memory_bandwidth = 1e10;
  d.memory_bytes = 1e12;
  d.link_bandwidth = 1e14;  // a pointer changes hands: the fastest link a device may have
  d.link_latency = latency;
  d.ranks_per_node = 1024;
  d.node_link_bandwidth = 1e14;
  d.node_link_latency = latency;
  return d;
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

  // The two model sizes: 8 blocks, sequence 64, microbatches of 2 sequences.
  std::vector<toy::GptConfig> sizes;
  for (int hidden : {32, 64})
    sizes.push_back({.vocabulary = 128,
                     .hidden = hidden,
                     .heads = 4,
                     .ffn = 4 * hidden,
                     .sequence = 64,
                     .blocks = 8,
                     .microbatch_size = 2,
                     .seed = 3});

  // 1. Profile.
  const ps::LayerGrid grid{
      .tensor = {1}, .microbatch_sizes = {2}, .tokens = {16, 32, 64}, .prefixes = {0, 16, 32, 48}};
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
  std::vector<Config> configs;
  for (int size = 0; size < 2; ++size)
    for (int m : {4, 8})
      for (bool ckpt : {false, true}) {
        configs.push_back({size, "1f1b", 2, 1, m, 1, ckpt});
        configs.push_back({size, "gpipe", 2, 1, m, 1, ckpt});
        configs.push_back({size, "zb-h1", 2, 1, m, 1, ckpt});
        configs.push_back({size, "interleaved-1f1b", 2, 2, m, 1, ckpt});
        configs.push_back({size, "seq-1f1b", 2, 1, m, 2, ckpt});
        configs.push_back({size, "slice-pipe", 2, 1, m, 4, ckpt});
      }
  for (int size = 0; size < 2; ++size)
    for (const char* name : {"1f1b", "zb-h1", "gpipe"})
      configs.push_back({size, name, 4, 1, 8, 1, false});
  if (quick) configs.resize(std::min<std::size_t>(configs.size(), 8));

  std::printf("%-34s %5s %11s %11s %9s %6s %11s\n", "configuration", "size", "simulated",
              "measured", "meas/sim", "drift", "meas/(sim*d)");
  std::vector<double> sim_a, meas_a, sim_b, meas_b, simd_a, simd_b;
  for (const Config& cfg : configs) {
    const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
    const ps::GeneratorInfo& g = ps::find_generator(cfg.schedule);
    const ps::Problem problem{.ranks = cfg.ranks,
                              .stages = cfg.ranks * cfg.chunks,
                              .microbatches = cfg.microbatches,
                              .slices = cfg.slices};
    ps::Schedule s = g.generate(problem, g.default_wgrad);
    if (cfg.checkpoint) s = ps::checkpoint_full(s);
    ps::TransformerCost cost{toy::gpt_model_shape(c, sizeof(double)), threads_device(latency), {}};
    cost.measured = profiles[static_cast<std::size_t>(cfg.size)];
    const bool shared = cfg.ranks > cores;
    const double simulated = shared ? ps::simulate(s, cost, ps::SharedCompute{cores}).makespan
                                    : ps::simulate(s, cost).makespan;
    std::vector<toy::GptStage<double>> stages;
    for (int st = 0; st < s.problem.stages; ++st)
      stages.emplace_back(c, st, s.problem.stages);
    const auto data = toy::make_gpt_data<double>(c, cfg.microbatches, 5);
    const auto training = toy::training_data(data, cfg.slices);
    const ps::LayerFigures at =
        profiles[static_cast<std::size_t>(cfg.size)]->at(ps::LayerPart::Layer, 1, 2, 64, 0);
    const double profiled = at.forward + at.backward_input + at.backward_weight;
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
  auto summary = [](const char* what, const std::vector<double>& sim,
                    const std::vector<double>& meas) {
    if (sim.empty()) return;
    std::vector<double> err;
    for (std::size_t i = 0; i < sim.size(); ++i)
      err.push_back(std::fabs(meas[i] / sim[i] - 1));
    std::printf(
        "%s: %zu configurations; median |meas/sim - 1| %.1f %%, worst %.1f %%, "
        "Kendall's tau %.3f\n",
        what, sim.size(), 100 * median(err), 100 * *std::max_element(err.begin(), err.end()),
        kendall_tau(sim, meas));
  };
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
