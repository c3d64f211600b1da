// The cluster search: every way to run a cluster's GPUs as pipeline x data x tensor
// parallelism, each layer split a scenario of the one search engine (detail/run_tune.hpp).
// Included by pipesched/tune/tune.hpp, the tuner's entry header.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/tune/detail/run_tune.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

namespace detail {

//! Why the pipeline sizes and tensor degrees `request` lists leave no factorization of its
//! GPUs on nodes of `G`: pp · dp · tp is the GPU count and tp divides the node, so a size
//! that does not divide them is named with the divisors that would.
inline Message unmet_degrees(const ClusterRequest& request, int G) {
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
    why += field("ClusterRequest.pipeline", listed(request.pipeline)) + " does not divide the " +
           std::to_string(N) + " GPUs (pipeline x data x tensor degrees multiply to the GPU " +
           "count; pipeline sizes that divide it: " + divisors(N) + ")";
  else if (!request.tensor.empty() && std::none_of(request.tensor.begin(), request.tensor.end(),
                                                   [&](int t) { return N % t == 0 && G % t == 0; }))
    why += field("ClusterRequest.tensor", listed(request.tensor)) + " does not divide both the " +
           std::to_string(N) + " GPUs and the " + std::to_string(G) +
           " GPUs of a node (a tensor group stays inside one node; degrees that divide both: " +
           divisors(std::gcd(N, G)) + ")";
  else
    why += field("ClusterRequest.pipeline") + " and " + field("ClusterRequest.tensor") +
           " leave no pipeline size p and tensor degree t with p x t dividing the " +
           std::to_string(N) + " GPUs and t dividing the node's " + std::to_string(G);
  return why;
}

//! The scenarios of a cluster search: each factorization N = pp · d · t (t inside a node and
//! dividing the model's heads, key/value heads and MLP width; d dividing the global batch;
//! pp at most the layers) and layer split, tensor degrees outermost. What is left out and why
//! goes into `notes`, one per reason. Throws invalid_problem when nothing is left.
inline std::vector<TuneScenario<TransformerCost>> cluster_scenarios(const ClusterRequest& request,
                                                                    const ModelShape& model,
                                                                    const DeviceSpec& device,
                                                                    std::vector<TuneNote>& notes) {
  const int N = request.gpus, G = device.ranks_per_node;
  auto note = [&](const std::string& configuration, const Message& reason) {
    const std::string text = reason.text();
    auto same = std::find_if(notes.begin(), notes.end(),
                             [&](const TuneNote& n) { return n.reason == text; });
    if (same != notes.end())
      ++same->count;
    else
      notes.push_back(TuneNote{configuration, text, 1, 0, reason});
  };
  auto wanted = [](const std::vector<int>& list, int v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<TuneScenario<TransformerCost>> scenarios;
  for (int t = 1; t <= std::min(N, G); ++t) {
    if (N % t != 0 || G % t != 0 || !wanted(request.tensor, t)) continue;
    if (model.heads % t != 0 || model.key_value_heads() % t != 0 || model.ffn() % t != 0) {
      if (!request.tensor.empty())
        note("tensor " + std::to_string(t),
             "tensor parallelism of " + std::to_string(t) +
                 " does not divide the model's heads, key/value heads and MLP width");
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
      if (pp > model.layers) {
        note(label, "a pipeline of " + std::to_string(pp) +
                        " ranks needs at least as many layers (the model has " +
                        std::to_string(model.layers) + ")");
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
        TuneScenario<TransformerCost> sc;
        sc.ranks = pp;
        sc.global_batch = request.global_batch / d;
        sc.data = d;
        sc.tensor = t;
        sc.zero = par.zero;
        sc.sequence_parallel = par.sequence_parallel;
        sc.cluster = true;
        sc.make_cost = [model, device, par](int b) {
          TransformerCost c{model, device, {}, par};
          c.model.microbatch_size = b;
          c.check();
          return c;
        };
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

//! Searches `request` for `model` on GPUs of `device`: each factorization N = pp · d · t
//! (t inside a node; d dividing the global batch) and layer split is a pipeline of pp ranks
//! with the global batch / d sequences, searched as `tune` searches a fixed pipeline, all of
//! them in one parallel search with one set of baselines. Plans carry their degrees, step
//! time with the gradient all-reduce and optimizer step, largest GPU's memory and MFU.
inline TuneResult tune_cluster(const ClusterRequest& request, const ModelShape& model,
                               DeviceSpec device, const ProgressFn& progress = {}) {
  request.check();
  model.check();
  if (request.gpus_per_node > 0) device.ranks_per_node = request.gpus_per_node;
  device.check();
  detail::check_whole_nodes(request.gpus, device.ranks_per_node);
  std::vector<TuneNote> notes;
  const std::vector<detail::TuneScenario<TransformerCost>> scenarios =
      detail::cluster_scenarios(request, model, device, notes);
  TuneRequest search = request.search;
  search.global_batch = request.global_batch;
  TuneResult r = detail::run_tune<TransformerCost>(search, scenarios, progress);
  r.notes.insert(r.notes.begin(), notes.begin(), notes.end());
  return r;
}

}  // namespace pipesched
