// The cluster search: every way to run a cluster's GPUs as pipeline x data x tensor
// parallelism, each layer split a scenario of the one search engine (detail/run_tune.hpp).
// Included by pipesched/tune/tune.hpp, the tuner's entry header.
#pragma once

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/tune/detail/run_tune.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

//! What the cluster search asks of the model it plans:
//! - `f(microbatch_size, parallelism)`: the cost model of microbatches of that many sequences
//!   on a pipeline whose ranks are `parallelism`'s data- and tensor-parallel groups (a
//!   parallel_cost, so that its step includes the data-parallel reduction; it may throw
//!   invalid_problem for a size or parallelism it cannot model, which the search then skips);
//! - `f.layer_count()`: the model's layers (a pipeline has at most as many ranks);
//! - `f.tensor_fits(t)`: whether the model splits over `t` tensor-parallel GPUs (its heads,
//!   key/value heads and MLP width divide);
//! - `f.gpus_per_node()`: the GPUs of one node (a tensor group stays inside one).
//! tuning::TransformerClusterFactory is one; a program's own cost model of its layers and links
//! takes part in the cluster search through a factory of its own.
template <class F>
concept cluster_cost_factory = requires(const F& f, int b, const Parallelism& par, int t) {
  { f(b, par) } -> parallel_cost;
  { f.layer_count() } -> std::convertible_to<int>;
  { f.tensor_fits(t) } -> std::convertible_to<bool>;
  { f.gpus_per_node() } -> std::convertible_to<int>;
};

namespace tuning {

//! TransformerCost as a cluster cost factory: `model` (its microbatch size replaced) on
//! `device` (its ranks_per_node the node size) under each parallelism; with `measured`, its
//! layers timed and sized from that profile (TransformerCost::measured), whose tensor degrees
//! are then the only ones it fits.
struct TransformerClusterFactory {
  ModelShape model;   //!< the model
  DeviceSpec device;  //!< every GPU of the cluster
  //! The model's own layers as measured; null: the formulas.
  std::shared_ptr<const LayerProfile> measured = nullptr;

  //! The cost model of microbatches of `microbatch_size` sequences under `parallelism`.
  TransformerCost operator()(int microbatch_size, const Parallelism& parallelism) const {
    TransformerCost c{model, device, {}, parallelism};
    c.model.microbatch_size = microbatch_size;
    c.measured = measured;
    c.check();
    return c;
  }
  //! Why `t` does not fit (see tensor_fits), as a note's message.
  std::string tensor_refusal(int t) const {
    if (measured && measured->has_tensor(t) == false && model.heads % t == 0 &&
        model.key_value_heads() % t == 0 && model.ffn() % t == 0) {
      std::string have;
      for (int d : measured->tensor_degrees())
        have += (have.empty() ? "" : ", ") + std::to_string(d);
      return "the layer profile has no samples at tensor degree " + std::to_string(t) +
             " (it measured " + have + ")";
    }
    return "tensor parallelism of " + std::to_string(t) +
           " does not divide the model's heads, key/value heads and MLP width";
  }
  //! The model's layers.
  int layer_count() const noexcept { return model.layers; }
  //! Whether the heads, key/value heads and MLP width divide by `t` (and, with `measured`,
  //! the profile has samples at degree `t`).
  bool tensor_fits(int t) const {
    return t >= 1 && model.heads % t == 0 && model.key_value_heads() % t == 0 &&
           model.ffn() % t == 0 && (!measured || measured->has_tensor(t));
  }
  //! GPUs of a node (DeviceSpec::ranks_per_node).
  int gpus_per_node() const noexcept { return device.ranks_per_node; }
};
}  // namespace tuning

static_assert(cluster_cost_factory<tuning::TransformerClusterFactory>);

namespace detail {

//! Why the pipeline sizes and tensor degrees `request` lists leave no factorization of its
//! GPUs on nodes of `G`: pp · dp · tp is the GPU count and tp divides the node, so a size
//! that does not divide them is named with the divisors that would.
inline Message unmet_degrees(const tuning::ClusterRequest& request, int G) {
  const int N = request.gpus;
  auto divisors = [](int n) {
    std::string out;
    for (int d = 1; d <= n; ++d)
      if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
    return out;
  };
  auto listed = [](const std::vector<int>& v) {
    std::string out;
    for (int x : v)
      out += (out.empty() ? "" : ",") + std::to_string(x);
    return out;
  };
  Message why;
  if (!request.pipeline.empty() && std::none_of(request.pipeline.begin(), request.pipeline.end(),
                                                [&](int pp) { return N % pp == 0; }))
    why += field("tuning::ClusterRequest.pipeline", listed(request.pipeline)) +
           " does not divide the " + std::to_string(N) +
           " GPUs (pipeline x data x tensor degrees multiply to the GPU " +
           "count; pipeline sizes that divide it: " + divisors(N) + ")";
  else if (!request.tensor.empty() && std::none_of(request.tensor.begin(), request.tensor.end(),
                                                   [&](int t) { return N % t == 0 && G % t == 0; }))
    why += field("tuning::ClusterRequest.tensor", listed(request.tensor)) +
           " does not divide both the " + std::to_string(N) + " GPUs and the " + std::to_string(G) +
           " GPUs of a node (a tensor group stays inside one node; degrees that divide both: " +
           divisors(std::gcd(N, G)) + ")";
  else
    why += field("tuning::ClusterRequest.pipeline") + " and " +
           field("tuning::ClusterRequest.tensor") +
           " leave no pipeline size p and tensor degree t with p x t dividing the " +
           std::to_string(N) + " GPUs and t dividing the node's " + std::to_string(G);
  return why;
}

//! The scenarios of a cluster search: each factorization N = pp · d · t (t inside a node and
//! dividing the model's heads, key/value heads and MLP width; d dividing the global batch;
//! pp at most the layers) and layer split, tensor degrees outermost. What is left out and why
//! goes into `notes`, one per reason. Throws invalid_problem when nothing is left.
template <cluster_cost_factory Factory, class Cost = decltype(std::declval<const Factory&>()(
                                            1, std::declval<const Parallelism&>()))>
std::vector<TuneScenario<Cost>> cluster_scenarios(const tuning::ClusterRequest& request,
                                                  const Factory& factory, int G,
                                                  std::vector<tuning::Note>& notes) {
  const int N = request.gpus;
  const int layers = factory.layer_count();
  auto note = [&](const std::string& configuration, const Message& reason) {
    const std::string text = reason.text();
    auto same = std::find_if(notes.begin(), notes.end(),
                             [&](const tuning::Note& n) { return n.reason == text; });
    if (same != notes.end())
      ++same->count;
    else
      notes.push_back(tuning::Note{configuration, text, 1, 0, reason});
  };
  auto wanted = [](const std::vector<int>& list, int v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<TuneScenario<Cost>> scenarios;
  for (int t = 1; t <= std::min(N, G); ++t) {
    if (N % t != 0 || G % t != 0 || !wanted(request.tensor, t)) continue;
    if (!factory.tensor_fits(t)) {
      if (!request.tensor.empty()) {
        std::string why = "tensor parallelism of " + std::to_string(t) +
                          " does not divide the model's heads, key/value heads and MLP width";
        if constexpr (requires { factory.tensor_refusal(t); }) why = factory.tensor_refusal(t);
        note("tensor " + std::to_string(t), why);
      }
      continue;
    }
    for (int pp = 1; pp <= N / t; ++pp) {
      if ((N / t) % pp != 0 || !wanted(request.pipeline, pp)) continue;
      const int d = N / t / pp;
      const std::string label =
          "pp " + std::to_string(pp) + " x dp " + std::to_string(d) + " x tp " + std::to_string(t);
      if (request.global_batch % d != 0) {
        note(label, "the global batch of " + std::to_string(request.global_batch) +
                        " sequences does not split over " + std::to_string(d) +
                        " data-parallel replicas");
        continue;
      }
      if (pp > layers) {
        note(label, "a pipeline of " + std::to_string(pp) +
                        " ranks needs at least as many layers (the model has " +
                        std::to_string(layers) + ")");
        continue;
      }
      for (LayerSplit split : request.splits) {
        if (pp == 1 && split != request.splits.front()) continue;  // one stage: one split
        Parallelism par;
        par.tensor = t;
        par.sequence_parallel = request.sequence_parallel && t > 1;
        par.data = d;
        par.zero = d > 1 ? request.zero : 0;
        par.split = split;
        par.whole_step = request.whole_step;
        TuneScenario<Cost> sc;
        sc.ranks = pp;
        sc.global_batch = request.global_batch / d;
        sc.data = d;
        sc.tensor = t;
        sc.zero = par.zero;
        sc.sequence_parallel = par.sequence_parallel;
        sc.cluster = true;
        sc.make_cost = [factory, par](int b) { return factory(b, par); };
        scenarios.push_back(std::move(sc));
      }
    }
  }
  if (scenarios.empty())
    throw invalid_problem("no way to run " + std::to_string(N) + " GPUs (" + std::to_string(G) +
                          " per node) as pipeline x data x tensor parallelism fits the request: " +
                          (notes.empty()
                               ? unmet_degrees(request, G)
                               : notes.front().configuration + ": " + notes.front().message) +
                          ".");
  return scenarios;
}

}  // namespace detail

//! Searches `request` for the model `factory` prices (cluster_cost_factory): each
//! factorization N = pp · d · t (t inside a node and fitting the model; d dividing the global
//! batch; pp at most the layers) and layer split is a pipeline of pp ranks with the global
//! batch / d sequences, searched as `tune` searches a fixed pipeline, all of them in one
//! parallel search with one set of baselines. The node size is request.gpus_per_node, or the
//! factory's when that is 0. Plans carry their degrees and step time with the data-parallel
//! reduction, and the figures the cost model's capabilities give (largest GPU's memory, layers
//! per stage, MFU).
template <cluster_cost_factory Factory>
tuning::Result tune_cluster(const tuning::ClusterRequest& request, const Factory& factory,
                            const tuning::ProgressFn& progress = {}) {
  using Cost = decltype(factory(1, std::declval<const Parallelism&>()));
  request.check();
  const int G = request.gpus_per_node > 0 ? request.gpus_per_node : factory.gpus_per_node();
  if (G < 1)
    throw invalid_problem("tune_cluster: the cost factory gives " + std::to_string(G) +
                          " GPUs per node; a node has at least one (set "
                          "tuning::ClusterRequest.gpus_per_node).");
  detail::check_whole_nodes(request.gpus, G);
  std::vector<tuning::Note> notes;
  const std::vector<detail::TuneScenario<Cost>> scenarios =
      detail::cluster_scenarios(request, factory, G, notes);
  tuning::Request search = request.search;
  search.global_batch = request.global_batch;
  tuning::Result r = detail::run_tune<Cost>(search, scenarios, progress);
  r.notes.insert(r.notes.begin(), notes.begin(), notes.end());
  return r;
}

//! Searches `request` for `model` on GPUs of `device` (tune_cluster over a
//! tuning::TransformerClusterFactory): plans carry their degrees, step time with the gradient
//! all-reduce and optimizer step, largest GPU's memory and MFU.
inline tuning::Result tune_cluster(const tuning::ClusterRequest& request, const ModelShape& model,
                                   DeviceSpec device, const tuning::ProgressFn& progress = {}) {
  request.check();
  model.check();
  if (request.gpus_per_node > 0) device.ranks_per_node = request.gpus_per_node;
  device.check();
  return tune_cluster(request, tuning::TransformerClusterFactory{model, device}, progress);
}

}  // namespace pipesched
