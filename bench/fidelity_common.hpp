// What the fidelity benchmarks share (bench/fidelity.cpp on threads, bench/mpi_fidelity.cpp
// over MPI; docs/benchmarks.md, "Fidelity"): the toy GPT sizes and the profile grid, the
// configurations, the prediction of one, profiles of several rounds combined, and the summary
// statistics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipesched/analysis/shared_compute.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/layer_profile.hpp"
#include "stats.hpp"

namespace pipesched::bench::fidelity {

namespace toy = pipesched::toy;

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

// The two model sizes: 8 blocks, sequence 64, microbatches of 2 sequences, hidden 32 and 64.
inline std::vector<toy::GptConfig> model_sizes() {
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
  return sizes;
}

// The grid the layers are profiled over: every slice length and prefix the configurations use.
inline LayerGrid profile_grid() {
  return {
      .tensor = {1}, .microbatch_sizes = {2}, .tokens = {16, 32, 64}, .prefixes = {0, 16, 32, 48}};
}

// The configurations on `ranks` pipeline ranks: on 2, every schedule × microbatches 4, 8 ×
// checkpointing or not at both sizes; on more, 1F1B, ZB-H1 and GPipe at 8 microbatches.
inline std::vector<Config> configurations(int ranks) {
  std::vector<Config> configs;
  if (ranks == 2) {
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
  } else {
    for (int size = 0; size < 2; ++size)
      for (const char* name : {"1f1b", "zb-h1", "gpipe"})
        configs.push_back({size, name, ranks, 1, 8, 1, false});
  }
  return configs;
}

// This machine as a device whose kernels a profile times: `ranks_per_node` ranks on one node,
// every message on one link of `bandwidth` and `latency`, direct or (`staged`) through host
// memory; memory is not the limit.
inline DeviceSpec machine_device(const char* name, int ranks_per_node, double bandwidth,
                                 double latency, bool staged = false) {
  DeviceSpec d;
  d.name = name;
  d.peak_flops = 1e12;  // unused: the profile gives every kernel's time
  d.memory_bandwidth = 1e10;
  d.memory_bytes = 1e12;
  d.link_bandwidth = bandwidth;
  d.link_latency = latency;
  d.peer_to_peer = !staged;
  d.ranks_per_node = ranks_per_node;
  d.node_link_bandwidth = bandwidth;
  d.node_link_latency = latency;
  return d;
}

// The schedule of `cfg`.
inline Schedule schedule_of(const Config& cfg) {
  const GeneratorInfo& g = find_generator(cfg.schedule);
  const Problem problem{.ranks = cfg.ranks,
                        .stages = cfg.ranks * cfg.chunks,
                        .microbatches = cfg.microbatches,
                        .slices = cfg.slices};
  Schedule s = g.generate(problem, g.default_wgrad);
  if (cfg.checkpoint) s = checkpoint_full(s);
  return s;
}

// The host toy GPT `c` cut into the stages of `s`, one model per stage.
inline std::vector<toy::GptStage<double>> gpt_stages(const Schedule& s, const toy::GptConfig& c) {
  std::vector<toy::GptStage<double>> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(c, st, s.problem.stages);
  return stages;
}

// The simulated step of `s` on `device` with the measured layers `profile` for the toy GPT
// `c` (of the profile's value width), the ranks sharing `cores` cores when they are more.
inline double predict(const Schedule& s, const toy::GptConfig& c, const DeviceSpec& device,
                      const std::shared_ptr<const LayerProfile>& profile, int cores) {
  TransformerCost cost{toy::gpt_model_shape(c, profile->model().bytes_per_value), device, {}};
  cost.measured = profile;
  return s.rank_count() > cores ? simulate(s, cost, SharedCompute{cores}).makespan
                                : simulate(s, cost).makespan;
}

// Profiles of the same grid measured at different times, figure by figure: each time figure
// of each sample `pick`ed from its values over the profiles (the fastest, or the median); the
// bytes, which do not vary, are the first profile's.
template <class Pick>
LayerProfile combined(const std::vector<LayerProfile>& rounds, Pick pick) {
  std::vector<LayerSample> out = rounds.front().samples();
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto field = [&](double LayerFigures::*f) {
      std::vector<double> v;
      for (const LayerProfile& p : rounds) {
        const LayerSample& x = p.samples().at(i);
        if (x.part != out[i].part || !(x.at == out[i].at))
          throw std::logic_error("combined: the profiles are not of one grid");
        v.push_back(x.figures.*f);
      }
      out[i].figures.*f = pick(v);
    };
    field(&LayerFigures::forward);
    field(&LayerFigures::backward_input);
    field(&LayerFigures::backward_weight);
    field(&LayerFigures::recompute);
  }
  return LayerProfile(rounds.front().model(), rounds.front().device(), std::move(out));
}

inline double fastest(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

// How far two profiles of the same grid differ: |b / a - 1| of each layer's F + I + W.
inline std::vector<double> layer_differences(const LayerProfile& a, const LayerProfile& b) {
  std::vector<double> out;
  for (std::size_t i = 0; i < a.samples().size(); ++i) {
    const LayerSample& x = a.samples()[i];
    const LayerSample& y = b.samples().at(i);
    if (x.part != LayerPart::Layer) continue;
    const double tx = x.figures.forward + x.figures.backward_input + x.figures.backward_weight;
    const double ty = y.figures.forward + y.figures.backward_input + y.figures.backward_weight;
    out.push_back(std::fabs(ty / tx - 1));
  }
  return out;
}

// Predicted and measured steps of a set of configurations, in one order.
struct Comparison {
  std::vector<double> simulated, measured;
  void add(double sim, double meas) {
    simulated.push_back(sim);
    measured.push_back(meas);
  }
};

// The profiles of every round, per model size, combined two ways: each figure's fastest and
// its median over the rounds.
struct Estimates {
  std::vector<std::shared_ptr<const LayerProfile>> fastest, median;
};
inline Estimates estimates(const std::vector<std::vector<LayerProfile>>& profiled) {
  Estimates e;
  for (const std::vector<LayerProfile>& rounds : profiled) {
    e.fastest.push_back(std::make_shared<const LayerProfile>(combined(rounds, fastest)));
    e.median.push_back(std::make_shared<const LayerProfile>(
        combined(rounds, [](const std::vector<double>& v) { return bench::median(v); })));
  }
  return e;
}

// The machine's noise: each round's profiles (every size's) against the first round's.
inline void print_noise(const std::vector<std::vector<LayerProfile>>& profiled) {
  for (std::size_t round = 1; round < profiled.front().size(); ++round) {
    std::vector<double> d;
    for (const std::vector<LayerProfile>& rounds : profiled)
      for (double x : layer_differences(rounds[0], rounds[round]))
        d.push_back(x);
    std::printf(
        "noise: the layers profiled in round %zu differ from round 1 by %.1f %% (median), "
        "%.1f %% (worst) over %zu points\n",
        round + 1, 100 * bench::median(d), 100 * *std::max_element(d.begin(), d.end()), d.size());
  }
}

// The text table of the host benchmarks: its header, and one configuration's row.
inline void print_header() {
  std::printf("\n%-34s %5s | %10s %10s %8s | %10s %10s %8s\n", "configuration", "size", "sim fast",
              "meas fast", "ratio", "sim med", "meas med", "ratio");
}
inline void print_row(const Config& cfg, int hidden, double sim_fast, double meas_fast,
                      double sim_med, double meas_med, bool shared) {
  std::printf("%-34s %5d | %7.2f ms %7.2f ms %8.3f | %7.2f ms %7.2f ms %8.3f%s\n",
              cfg.label().c_str(), hidden, sim_fast * 1e3, meas_fast * 1e3, meas_fast / sim_fast,
              sim_med * 1e3, meas_med * 1e3, meas_med / sim_med, shared ? "  (shared)" : "");
}

// One line of the summary: the median and worst |measured / simulated − 1| and Kendall's τ.
inline void summary(const char* what, const std::vector<double>& sim,
                    const std::vector<double>& meas) {
  if (sim.empty()) return;
  std::vector<double> err;
  for (std::size_t i = 0; i < sim.size(); ++i)
    err.push_back(std::fabs(meas[i] / sim[i] - 1));
  std::printf(
      "%s: %zu configurations; median |meas/sim - 1| %.1f %%, worst %.1f %%, "
      "Kendall's tau %.3f\n",
      what, sim.size(), 100 * bench::median(err), 100 * *std::max_element(err.begin(), err.end()),
      bench::kendall_tau(sim, meas));
}

}  // namespace pipesched::bench::fidelity
