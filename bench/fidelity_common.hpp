// What the fidelity benchmarks share (bench/fidelity.cpp on threads, bench/mpi_fidelity.cpp
// over MPI; docs/benchmarks.md, "Fidelity"): the toy GPT sizes and the profile grid, the
// configurations, the prediction of one, the machine-speed probe, and the summary statistics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
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

// The simulated step of `s` on `device` with the measured layers `profile` for the toy GPT
// `c`, the ranks sharing `cores` cores when they are more.
inline double predict(const Schedule& s, const toy::GptConfig& c, const DeviceSpec& device,
                      const std::shared_ptr<const LayerProfile>& profile, int cores) {
  TransformerCost cost{toy::gpt_model_shape(c, sizeof(double)), device, {}};
  cost.measured = profile;
  return s.rank_count() > cores ? simulate(s, cost, SharedCompute{cores}).makespan
                                : simulate(s, cost).makespan;
}

// One layer's F + I + W at (microbatch 2, 64 tokens, no prefix), as the profile times it: the
// machine's speed now.
inline double probe(const toy::GptConfig& c) {
  const LayerGrid one{.tensor = {1}, .microbatch_sizes = {2}, .tokens = {64}, .prefixes = {0}};
  const LayerProfile p = toy::gpt_layer_profile<double>(c, one, {.repeats = 3});
  const LayerFigures f = p.at(LayerPart::Layer, 1, 2, 64, 0);
  return f.forward + f.backward_input + f.backward_weight;
}

// That figure in `profile`.
inline double profiled_probe(const LayerProfile& profile) {
  const LayerFigures at = profile.at(LayerPart::Layer, 1, 2, 64, 0);
  return at.forward + at.backward_input + at.backward_weight;
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
