// The cost model a cluster plan (tune_cluster) was simulated under, rebuilt from the plan's
// fields, for the reports that simulate a plan again (bench/mario_cluster, bench/mepipe_cluster).
#pragma once

#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::bench {

//! TransformerCost for `model` on `device` with the plan's microbatch size, tensor, sequence
//! and data parallelism, ZeRO stage and layer split; `whole_step` and `slicing` as the search
//! that found it had them (ClusterRequest::whole_step, TuneRequest::slicing).
inline TransformerCost plan_cost(const TunePlan& p, ModelShape model, const DeviceSpec& device,
                                 bool whole_step = true,
                                 SlicingMode slicing = SlicingMode::Uniform) {
  model.microbatch_size = p.microbatch_size;
  TransformerCost c{model, device, {}};
  c.parallel.tensor = p.tensor;
  c.parallel.sequence_parallel = p.sequence_parallel;
  c.parallel.data = p.data;
  c.parallel.zero = p.zero;
  c.parallel.whole_step = whole_step;
  // Slice lengths follow the split the search cut them under (before the layers are listed).
  if (p.slices > 1) c = with_slicing(c, slicing, p.slices, p.schedule.problem.ranks);
  c.parallel.layers = p.layers_per_stage;
  return c;
}

}  // namespace pipesched::bench
