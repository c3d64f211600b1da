// profile_layers: measures a model's own layers over a grid of unit sizes and returns a
// LayerProfile (analysis/layer_profile.hpp), from which TransformerCost::measured composes any
// partition, layer split, chunk count and slice length.
//
// At each grid point it builds three stage models — the first-stage extras with one layer,
// one layer, one layer with the last-stage extras — and runs them as a one-rank pipeline on
// one thread (no other rank competes for a core): a few microbatches, each through the three
// stages and back, backwards split into I and W, microbatch 0's measured slice checkpointed so
// R and the bytes a checkpointed forward keeps are measured too. The figures are `profile`'s
// (the executor's own timings and byte counts, medians over the repeats); the layer's are the
// middle stage's, the extras the first and last stages' less it (a time difference below zero,
// noise around an extra that costs nothing, is recorded as 0).
#pragma once

#include <algorithm>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/layer_profile.hpp"
#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/exec/training_data.hpp"

namespace pipesched {

//! The grid a layer profile measures: every combination of its tensor degrees, microbatch
//! sizes, slice lengths (tokens) and prefixes (tokens before the slice; 0 = the first slice).
struct LayerGrid {
  std::vector<int> tensor = {1};            //!< tensor-parallel degrees
  std::vector<int> microbatch_sizes = {1};  //!< sequences per microbatch
  std::vector<int> tokens = {};             //!< slice lengths (an unsliced unit: the sequence)
  std::vector<int> prefixes = {0};          //!< attention prefixes

  //! Points of the grid.
  std::size_t points() const noexcept {
    return tensor.size() * microbatch_sizes.size() * tokens.size() * prefixes.size();
  }

  //! Throws invalid_problem naming the list that is empty, holds a value out of range (degrees,
  //! sizes and lengths from 1, prefixes from 0) or a value twice, or when the grid has more
  //! points than a profile holds.
  void check() const {
    auto list = [](const std::vector<int>& v, const char* name, int lo, int hi) {
      if (v.empty())
        throw invalid_problem(std::string("LayerGrid: ") + name + " is empty; give at least one");
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] < lo || v[i] > hi)
          throw invalid_problem(std::string("LayerGrid: ") + name + " holds " +
                                std::to_string(v[i]) + "; give values from " + std::to_string(lo) +
                                " to " + std::to_string(hi));
        if (std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) !=
            v.begin() + static_cast<std::ptrdiff_t>(i))
          throw invalid_problem(std::string("LayerGrid: ") + name + " holds " +
                                std::to_string(v[i]) + " twice; give each value once");
      }
    };
    list(tensor, "tensor", 1, 1 << 16);
    list(microbatch_sizes, "microbatch_sizes", 1, ModelShape::max_microbatch_size);
    list(tokens, "tokens", 1, ModelShape::max_sequence);
    list(prefixes, "prefixes", 0, ModelShape::max_sequence);
    if (points() * 3 > LayerProfile::max_samples)
      throw invalid_problem("LayerGrid: " + std::to_string(points()) +
                            " points make more samples than a layer profile holds (" +
                            std::to_string(LayerProfile::max_samples) +
                            " over its three parts); measure fewer sizes");
  }
};

//! How `profile_layers` measures.
struct LayerProfileOptions {
  int microbatches = 2;     //!< microbatches of each measured step (microbatch 0 is checkpointed)
  int warmup_steps = 1;     //!< steps run first at each point and not measured
  int repeats = 3;          //!< measured steps at each point; each figure is their median
  std::string device = {};  //!< where the layers run, for the profile's `device`
  //! Called after each grid point with (points done, points in all); may be empty.
  std::function<void(std::size_t, std::size_t)> progress = {};
};

//! The schedule `profile_layers` runs at each point: one rank holding the three stages, each
//! of `microbatches` microbatches forward through them and back (I then W), its `slices`
//! slices (1, or 2: the prefix and the measured slice) forward in order and backward in
//! reverse, the last slice of microbatch 0 checkpointed (its R right before its I).
inline Schedule layer_profiling_schedule(int slices, int microbatches) {
  if (slices < 1 || slices > 2)
    throw invalid_problem("layer_profiling_schedule: slices is " + std::to_string(slices) +
                          "; give 1 (no prefix) or 2 (a prefix, then the measured slice)");
  if (microbatches < 1)
    throw invalid_problem("layer_profiling_schedule: microbatches is " +
                          std::to_string(microbatches) + "; give 1 or more");
  Schedule s;
  s.name = "layer-profiling";
  s.problem = Problem{.ranks = 1, .stages = 3, .microbatches = microbatches, .slices = slices};
  s.placement = Placement::interleaved(1, 3);
  s.ranks.resize(1);
  std::vector<Action>& list = s.ranks[0];
  const int measured = slices - 1;
  for (int m = 0; m < microbatches; ++m) {
    for (int st = 0; st < 3; ++st)
      for (int k = 0; k < slices; ++k)
        list.push_back(Action::make(OpKind::F, st, m, k));
    for (int st = 2; st >= 0; --st)
      for (int k = slices - 1; k >= 0; --k) {
        if (m == 0 && k == measured) list.push_back(Action::make(OpKind::R, st, m, k));
        list.push_back(Action::make(OpKind::I, st, m, k));
        list.push_back(Action::make(OpKind::W, st, m, k));
      }
  }
  return s;
}

namespace detail::layer_profiling {

inline LayerFigures figures_of(const StageProfile& p) {
  return {p.forward,          p.backward_input, p.backward_weight, p.recompute,
          p.activation_bytes, p.wgrad_bytes,    p.boundary_bytes};
}

// `a` less `b`, each field at least 0.
inline LayerFigures less(const LayerFigures& a, const LayerFigures& b) {
  auto d = [](double x, double y) { return std::max(0.0, x - y); };
  return {d(a.forward, b.forward),
          d(a.backward_input, b.backward_input),
          d(a.backward_weight, b.backward_weight),
          d(a.recompute, b.recompute),
          d(a.activation_bytes, b.activation_bytes),
          d(a.wgrad_bytes, b.wgrad_bytes),
          d(a.boundary_bytes, b.boundary_bytes)};
}

}  // namespace detail::layer_profiling

//! Measures the layers of `model` (its shape: what the profile says it measured) over `grid`:
//!
//! - `make_stages(point)` returns the three stage models for a LayerPoint — the first-stage
//!   extras with one layer, one layer, one layer with the last-stage extras — built for its
//!   microbatch size and one shard of its tensor degree (a tensor-parallel stage needs a group
//!   to run: give it one whose all-reduce leaves the values, so that one shard's kernels are
//!   timed; TransformerCost prices the all-reduces from the links);
//! - `make_data(point)` returns the TrainingData of those stages: with a prefix, slice 0 of a
//!   microbatch holds the prefix's tokens and slice 1 the point's `tokens`; without, its one
//!   slice holds `tokens`.
//!
//! Returns the profile (see the file comment for how each figure is taken). Throws
//! invalid_problem for a grid LayerGrid::check refuses, options out of range, `make_stages`
//! giving other than three stage models, and what `profile` throws.
//!
//! `measure(stages, data, profile_options)` runs the three stages as one rank under
//! `profile_options.schedule` and returns `profile_steps`' figures; the overload without it
//! runs them on this thread's host (`profile`). Give one to time stages on another device (a
//! GPU's: toy::gpu::gpt_layer_profile runs them on cuda-local).
template <class MakeStages, class MakeData, class Measure>
LayerProfile profile_layers(const ModelShape& model, const LayerGrid& grid,
                            MakeStages&& make_stages, MakeData&& make_data,
                            const LayerProfileOptions& options, Measure&& measure) {
  namespace lp = detail::layer_profiling;
  grid.check();
  if (options.microbatches < 1 || options.repeats < 1 || options.warmup_steps < 0)
    throw invalid_problem("profile_layers: microbatches " + std::to_string(options.microbatches) +
                          ", repeats " + std::to_string(options.repeats) + ", warmup_steps " +
                          std::to_string(options.warmup_steps) +
                          "; give at least 1 microbatch and 1 repeat, and 0 or more warm-up steps");
  std::vector<LayerSample> samples;
  samples.reserve(grid.points() * 3);
  std::size_t done = 0;
  for (int t : grid.tensor)
    for (int b : grid.microbatch_sizes)
      for (int tokens : grid.tokens)
        for (int prefix : grid.prefixes) {
          const LayerPoint at{
              .tensor = t, .microbatch_size = b, .tokens = tokens, .prefix = prefix};
          auto stages = make_stages(at);
          if (stages.size() != 3)
            throw invalid_problem(
                "profile_layers: make_stages gave " + std::to_string(stages.size()) +
                " stage models; give three: the first-stage extras with one layer, one layer, "
                "and one layer with the last-stage extras");
          const auto data = make_data(at);
          const int slices = prefix > 0 ? 2 : 1;
          const ProfiledCost cost = measure(
              stages, data,
              ProfileOptions{.schedule = layer_profiling_schedule(slices, options.microbatches),
                             .warmup_steps = options.warmup_steps,
                             .repeats = options.repeats});
          auto fig = [&](int stage) {
            const auto s = static_cast<std::size_t>(stage);
            return lp::figures_of(slices == 1 ? cost.stages[s] : cost.slices[s][1]);
          };
          const LayerFigures layer = fig(1);
          samples.push_back({LayerPart::First, at, lp::less(fig(0), layer)});
          samples.push_back({LayerPart::Layer, at, layer});
          samples.push_back({LayerPart::Last, at, lp::less(fig(2), layer)});
          if (options.progress) options.progress(++done, grid.points());
        }
  return LayerProfile(model, options.device, std::move(samples));
}

//! `profile_layers` with the stages run on threads of this host (`profile`).
template <class MakeStages, class MakeData>
LayerProfile profile_layers(const ModelShape& model, const LayerGrid& grid,
                            MakeStages&& make_stages, MakeData&& make_data,
                            const LayerProfileOptions& options = {}) {
  return profile_layers(model, grid, std::forward<MakeStages>(make_stages),
                        std::forward<MakeData>(make_data), options,
                        [](auto& stages, const auto& data, const ProfileOptions& o) {
                          return profile(stages, data, o);
                        });
}

}  // namespace pipesched
