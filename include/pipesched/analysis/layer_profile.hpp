// LayerProfile: what a model's own layers measured, per layer and not per stage, over a grid
// of unit sizes, so that a cost model can compose any partition, layer split, chunk count and
// slice length from it (TransformerCost::measured). Three parts make any stage: the extras of
// the first stage (the embedding), one repeated layer, and the extras of the last stage (final
// norm, LM head, loss); a stage of n layers is n layers plus its ends' extras.
//
// Each sample times one unit (F, I, W, R) and counts its bytes at one grid point:
// (tensor degree, microbatch size b, slice length t, attention prefix o: the tokens of the
// sequence before the slice, which its causal attention reads). Between grid points a figure is
// interpolated linearly along each axis (b, t, o); a point outside the grid, or a tensor degree
// the profile has no samples of, is refused with a sentence that says which axis and what was
// measured: nothing is extrapolated.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! The three parts a stage is made of.
enum class LayerPart : std::uint8_t {
  First,  //!< what the first stage holds beyond its layers (the token embedding)
  Layer,  //!< one repeated layer (a transformer block)
  Last,   //!< what the last stage holds beyond its layers (final norm, LM head, loss)
};

//! "first", "layer", "last".
inline const char* to_string(LayerPart p) noexcept {
  switch (p) {
    case LayerPart::First:
      return "first";
    case LayerPart::Layer:
      return "layer";
    case LayerPart::Last:
      return "last";
  }
  return "?";
}

//! One unit's figures: seconds of its actions and the bytes it holds (the meanings of
//! StageProfile's fields, for one part at one grid point).
struct LayerFigures {
  double forward = 0;           //!< seconds of F
  double backward_input = 0;    //!< seconds of I
  double backward_weight = 0;   //!< seconds of W
  double recompute = 0;         //!< seconds of R
  double activation_bytes = 0;  //!< held from F until the backward
  double wgrad_bytes = 0;       //!< of those, held from I until W
  double boundary_bytes = 0;    //!< kept by a checkpointed F

  //! The sum, field by field.
  LayerFigures& operator+=(const LayerFigures& o) noexcept {
    forward += o.forward;
    backward_input += o.backward_input;
    backward_weight += o.backward_weight;
    recompute += o.recompute;
    activation_bytes += o.activation_bytes;
    wgrad_bytes += o.wgrad_bytes;
    boundary_bytes += o.boundary_bytes;
    return *this;
  }
  //! Every field times `k`.
  LayerFigures scaled(double k) const noexcept {
    return {forward * k,          backward_input * k, backward_weight * k, recompute * k,
            activation_bytes * k, wgrad_bytes * k,    boundary_bytes * k};
  }
  friend bool operator==(const LayerFigures&, const LayerFigures&) = default;
};

//! Where a sample was measured.
struct LayerPoint {
  int tensor = 1;           //!< tensor-parallel degree (the figures are one shard's)
  int microbatch_size = 1;  //!< sequences per microbatch, b
  int tokens = 0;           //!< the slice's tokens, t (the whole sequence for an unsliced unit)
  int prefix = 0;           //!< tokens before the slice, o (0 for the first slice)
  friend bool operator==(const LayerPoint&, const LayerPoint&) = default;
};

//! One measured unit: a part at a grid point.
struct LayerSample {
  LayerPart part = LayerPart::Layer;  //!< which part was measured
  LayerPoint at;                      //!< where
  LayerFigures figures;               //!< what it measured
};

//! A checked, indexed set of samples and the model they were measured on (see the file
//! comment). Construct it from samples; it refuses a set that is not one grid.
class LayerProfile {
 public:
  //! Largest number of samples a profile holds (4 tensor degrees x 3 parts x a grid of 16 x 16
  //! x 10 points is 30,720; its file is about 10 MB).
  static constexpr std::size_t max_samples = 1 << 15;

  LayerProfile() = default;

  //! Checks and indexes `samples` measured on `model` (`device`: free text saying where).
  //! Throws invalid_problem, naming the sample, when a figure is negative or not finite, a
  //! point has a size below 1 (prefix below 0), a (part, point) appears twice, a part of a
  //! tensor degree has no samples, or a part's samples of one degree do not fill the grid of
  //! the microbatch sizes, slice lengths and prefixes they name (each combination measured
  //! once).
  LayerProfile(ModelShape model, std::string device, std::vector<LayerSample> samples)
      : model_(std::move(model)), device_(std::move(device)), samples_(std::move(samples)) {
    index();
  }

  const ModelShape& model() const noexcept { return model_; }     //!< what was measured
  const std::string& device() const noexcept { return device_; }  //!< where
  const std::vector<LayerSample>& samples() const noexcept { return samples_; }  //!< as given

  //! The tensor degrees the profile has samples of, ascending.
  std::vector<int> tensor_degrees() const {
    std::vector<int> out;
    for (const auto& [key, grid] : grids_)
      if (std::find(out.begin(), out.end(), key.first) == out.end()) out.push_back(key.first);
    std::sort(out.begin(), out.end());
    return out;
  }
  //! Whether it has samples at tensor degree `t`.
  bool has_tensor(int t) const { return grids_.count({t, LayerPart::Layer}) > 0; }
  //! Throws invalid_problem, naming the degrees measured, unless it has samples at degree `t`.
  void check_tensor(int t) const {
    if (!has_tensor(t)) throw invalid_problem(no_degree(t));
  }

  //! The figures of `part` at tensor degree `tensor` for a unit of `b` sequences of `t` tokens
  //! after a prefix of `o`: the sample there, or the linear interpolation between the grid's
  //! neighbours along each axis. Throws invalid_problem when the degree has no samples or a
  //! coordinate lies outside what was measured (saying the range).
  LayerFigures at(LayerPart part, int tensor, double b, double t, double o) const {
    const auto it = grids_.find({tensor, part});
    if (it == grids_.end()) throw invalid_problem(no_degree(tensor));
    const Grid& g = it->second;
    const Cell cb = cell(g.b, b, "microbatch size", tensor);
    const Cell ct = cell(g.t, t, "slice length", tensor);
    const Cell co = cell(g.o, o, "attention prefix", tensor);
    LayerFigures sum;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < 2; ++k) {
          const double w = cb.w[i] * ct.w[j] * co.w[k];
          if (w == 0) continue;
          sum += g.values[g.offset(cb.i[i], ct.i[j], co.i[k])].scaled(w);
        }
    return sum;
  }

  //! The tokens a sequence may have for its units to lie inside the grid at tensor degree
  //! `tensor`: the largest slice length (an unsliced unit) — throws as `at` does without samples.
  int longest_sequence(int tensor) const {
    const auto it = grids_.find({tensor, LayerPart::Layer});
    if (it == grids_.end()) throw invalid_problem(no_degree(tensor));
    return it->second.t.back();
  }

  //! Throws invalid_problem unless `m` is the model this profile measured, as far as a layer's
  //! work goes: hidden, heads, key/value heads, MLP width and gating, vocabulary, bytes per
  //! value, attention kind and dropout (the layer count, sequence and microbatch size may
  //! differ: those are what a cost model composes).
  void check_model(const ModelShape& m) const {
    std::string diff;
    auto field = [&](const char* name, long long mine, long long theirs) {
      if (mine != theirs)
        diff += std::string(diff.empty() ? "" : ", ") + name + " " + std::to_string(theirs) +
                " (the profile's " + std::to_string(mine) + ")";
    };
    field("hidden", model_.hidden, m.hidden);
    field("heads", model_.heads, m.heads);
    field("kv_heads", model_.key_value_heads(), m.key_value_heads());
    field("ffn_hidden", model_.ffn(), m.ffn());
    field("gated_mlp", model_.gated_mlp, m.gated_mlp);
    field("vocabulary", model_.vocabulary, m.vocabulary);
    field("bytes_per_value", model_.bytes_per_value, m.bytes_per_value);
    field("flash_attention", model_.flash_attention, m.flash_attention);
    field("dropout", model_.dropout, m.dropout);
    if (!diff.empty())
      throw invalid_problem("the layer profile was measured on another model: this one has " +
                            diff +
                            "; profile this model's layers, or plan the model the profile "
                            "measured.");
  }

 private:
  struct Grid {
    std::vector<int> b, t, o;
    std::vector<LayerFigures> values;  // b-major, then t, then o
    std::size_t offset(std::size_t i, std::size_t j, std::size_t k) const {
      return (i * t.size() + j) * o.size() + k;
    }
  };
  struct Cell {
    std::array<std::size_t, 2> i{};
    std::array<double, 2> w{};
  };

  std::string no_degree(int tensor) const {
    std::string have;
    for (int t : tensor_degrees())
      have += (have.empty() ? "" : ", ") + std::to_string(t);
    return "the layer profile has no samples at tensor degree " + std::to_string(tensor) +
           " (it measured " + (have.empty() ? std::string("none") : have) +
           "); profile the layers at that degree, or plan with a measured one.";
  }

  // The two grid values around `x` on `axis` and their weights; throws outside.
  static Cell cell(const std::vector<int>& axis, double x, const char* name, int tensor) {
    Cell c;
    const double lo = axis.front(), hi = axis.back();
    if (!(x >= lo && x <= hi)) {
      std::string listed;
      for (int v : axis)
        listed += (listed.empty() ? "" : ", ") + std::to_string(v);
      throw invalid_problem("a unit's " + std::string(name) + " of " + format_value(x) +
                            " lies outside the layer profile's grid (at tensor degree " +
                            std::to_string(tensor) + " it measured " + listed +
                            "); profile a grid that covers it: a profile is interpolated, never "
                            "extrapolated.");
    }
    const auto up =
        std::lower_bound(axis.begin(), axis.end(), x, [](int v, double y) { return v < y; });
    const std::size_t j = static_cast<std::size_t>(up - axis.begin());
    if (*up == x) {
      c.i = {j, j};
      c.w = {1, 0};
      return c;
    }
    const double a = axis[j - 1], z = axis[j];
    c.i = {j - 1, j};
    c.w = {(z - x) / (z - a), (x - a) / (z - a)};
    return c;
  }

  static std::string format_value(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
    return std::to_string(x);
  }

  void index() {
    if (samples_.empty())
      throw invalid_problem(
          "a layer profile needs samples: at least one of each part (first, layer, last) at one "
          "grid point.");
    if (samples_.size() > max_samples)
      throw invalid_problem("a layer profile of " + std::to_string(samples_.size()) +
                            " samples is more than the " + std::to_string(max_samples) +
                            " it may hold; profile a coarser grid.");
    std::map<std::pair<int, LayerPart>, std::vector<std::size_t>> by;
    for (std::size_t n = 0; n < samples_.size(); ++n) {
      const LayerSample& s = samples_[n];
      check_sample(s, n);
      by[{s.at.tensor, s.part}].push_back(n);
    }
    for (const auto& [key, list] : by) {
      Grid g;
      for (std::size_t n : list) {
        const LayerPoint& p = samples_[n].at;
        g.b.push_back(p.microbatch_size);
        g.t.push_back(p.tokens);
        g.o.push_back(p.prefix);
      }
      for (auto* axis : {&g.b, &g.t, &g.o}) {
        std::sort(axis->begin(), axis->end());
        axis->erase(std::unique(axis->begin(), axis->end()), axis->end());
      }
      // Each point once, and every combination of the axes' values: checked before the grid is
      // laid out, so that scattered samples cannot ask for a grid of their axes' product.
      std::set<std::tuple<int, int, int>> points;
      for (std::size_t n : list) {
        const LayerPoint& p = samples_[n].at;
        if (!points.insert({p.microbatch_size, p.tokens, p.prefix}).second)
          throw invalid_problem("layer profile sample " + std::to_string(n) + " (" +
                                describe(samples_[n]) +
                                ") repeats an earlier sample's part and point; give each once.");
      }
      const double cells = double(g.b.size()) * double(g.t.size()) * double(g.o.size());
      if (cells != double(points.size())) {
        std::string missing;
        for (std::size_t i = 0; i < g.b.size() && missing.empty(); ++i)
          for (std::size_t j = 0; j < g.t.size() && missing.empty(); ++j)
            for (std::size_t k = 0; k < g.o.size() && missing.empty(); ++k)
              if (!points.count({g.b[i], g.t[j], g.o[k]}))
                missing = "microbatch size " + std::to_string(g.b[i]) + ", slice length " +
                          std::to_string(g.t[j]) + ", prefix " + std::to_string(g.o[k]);
        throw invalid_problem("the layer profile's \"" + std::string(to_string(key.second)) +
                              "\" samples at tensor degree " + std::to_string(key.first) +
                              " do not fill their grid: " + std::to_string(list.size()) + " of " +
                              format_value(cells) + " points, none at " + missing +
                              "; measure every combination of the sizes the samples name.");
      }
      g.values.resize(points.size());
      auto pos = [](const std::vector<int>& axis, int v) {
        return static_cast<std::size_t>(std::lower_bound(axis.begin(), axis.end(), v) -
                                        axis.begin());
      };
      for (std::size_t n : list) {
        const LayerPoint& p = samples_[n].at;
        g.values[g.offset(pos(g.b, p.microbatch_size), pos(g.t, p.tokens), pos(g.o, p.prefix))] =
            samples_[n].figures;
      }
      grids_.emplace(key, std::move(g));
    }
    for (const auto& [key, g] : grids_)
      for (LayerPart p : {LayerPart::First, LayerPart::Layer, LayerPart::Last})
        if (grids_.count({key.first, p}) == 0)
          throw invalid_problem("the layer profile has \"" + std::string(to_string(key.second)) +
                                "\" samples at tensor degree " + std::to_string(key.first) +
                                " but no \"" + to_string(p) +
                                "\" ones; every degree needs all three parts (a part with "
                                "nothing to do is measured as zeros).");
  }

  static std::string describe(const LayerSample& s) {
    return std::string(to_string(s.part)) + ", tensor " + std::to_string(s.at.tensor) +
           ", microbatch size " + std::to_string(s.at.microbatch_size) + ", tokens " +
           std::to_string(s.at.tokens) + ", prefix " + std::to_string(s.at.prefix);
  }

  static void check_sample(const LayerSample& s, std::size_t n) {
    const LayerPoint& p = s.at;
    auto bad = [&](const std::string& what) {
      throw invalid_problem("layer profile sample " + std::to_string(n) + " (" + describe(s) +
                            "): " + what);
    };
    if (s.part != LayerPart::First && s.part != LayerPart::Layer && s.part != LayerPart::Last)
      bad("its part is none of first, layer, last");
    if (p.tensor < 1 || p.tensor > (1 << 16)) bad("the tensor degree must be between 1 and 65536");
    if (p.microbatch_size < 1 || p.microbatch_size > ModelShape::max_microbatch_size)
      bad("the microbatch size must be between 1 and " +
          std::to_string(ModelShape::max_microbatch_size));
    if (p.tokens < 1 || p.tokens > ModelShape::max_sequence)
      bad("the slice length must be between 1 and " + std::to_string(ModelShape::max_sequence));
    if (p.prefix < 0 || p.prefix > ModelShape::max_sequence)
      bad("the prefix must be between 0 and " + std::to_string(ModelShape::max_sequence));
    const LayerFigures& f = s.figures;
    const std::pair<const char*, double> fields[] = {{"forward", f.forward},
                                                     {"backward_input", f.backward_input},
                                                     {"backward_weight", f.backward_weight},
                                                     {"recompute", f.recompute},
                                                     {"activation_bytes", f.activation_bytes},
                                                     {"wgrad_bytes", f.wgrad_bytes},
                                                     {"boundary_bytes", f.boundary_bytes}};
    for (const auto& [name, v] : fields)
      if (!(v >= 0 && v <= 1e15))
        bad(std::string(name) + " is " + std::to_string(v) +
            "; figures are seconds or bytes from 0 to 1e15");
  }

  ModelShape model_;
  std::string device_;
  std::vector<LayerSample> samples_;
  std::map<std::pair<int, LayerPart>, Grid> grids_;
};

}  // namespace pipesched
