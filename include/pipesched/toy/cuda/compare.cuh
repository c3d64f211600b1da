// Trains a plan on GPU toy stages through cuda_local::Pipeline beside a host reference run
// sequentially, and reports per step how far the GPU's loss, gradients and parameters are from
// the reference's, whether each rank's measured peak equals the simulator's, and the step time
// — what the GPU tests assert and the GPU report prints.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/toy/cuda/data.cuh"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"

namespace pipesched::toy::gpu {

//! One step of a GPU run beside the reference (relative errors by toy::max_relative_error).
struct StepComparison {
  double loss = 0;          //!< |loss − reference| / |reference|
  double gradients = 0;     //!< every gradient value
  double parameters = 0;    //!< every parameter value after the SGD update
  bool peaks_match = true;  //!< every rank's measured peak == the simulated peak
  double seconds = 0;       //!< the step's GPU time
  double simulated = 0;     //!< the plan's simulated makespan under `cost`
};

//! Every parameter (or gradient) of GPU `stages`, in toy::flat_parameters order, as double.
template <class Stage>
std::vector<double> flat_values(const std::vector<Stage>& stages, bool gradients) {
  std::vector<double> out;
  for (const Stage& s : stages)
    for (const auto& t : gradients ? s.host_gradients() : s.host_parameters())
      out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

//! Sets `options`' optimizer to plain SGD on the GPU stages (of `stages`, indexed by stage,
//! kept by reference) that rank r holds under `placement`, its snapshot to keep a device copy
//! of their parameters and its rollback to put it back: the GPU twin of toy::use_sgd.
template <class Gpu>
void use_sgd(ExecutorOptions& options, const Placement& placement, std::vector<Gpu>& stages,
             double learning_rate) {
  auto each = [placement, &stages](int rank, auto&& fn) {
    for (int s : placement.stages_of(rank))
      fn(stages[static_cast<std::size_t>(s)]);
  };
  options.optimizer = [each, learning_rate](int rank) {
    each(rank, [&](Gpu& g) { g.sgd_step(learning_rate); });
  };
  options.snapshot = [each](int rank) { each(rank, [](Gpu& g) { g.snapshot_parameters(); }); };
  options.rollback = [each](int rank) { each(rank, [](Gpu& g) { g.restore_parameters(); }); };
}

//! Trains `schedule` for `steps` steps on GPU stages `Gpu` (built from `config`, one
//! CudaDevice per rank on GPU 0) with SGD at `learning_rate` from each rank's optimizer hook
//! (`use_sgd`, with its rollback),
//! beside host stages `Reference` run sequentially on `ref_data` (unsliced); `cost` predicts
//! the peaks. Returns one comparison per step.
template <class Gpu, class Reference, class Config, class Data, class RefData>
std::vector<StepComparison> compare_with_reference(const Schedule& schedule, const Config& config,
                                                   const Data& data, const RefData& ref_data,
                                                   const ProfiledCost& cost, int steps = 2,
                                                   double learning_rate = 0.05) {
  const int stages = schedule.problem.stages;
  auto devices = cuda_local::Pipeline<Gpu>::devices_for(schedule);
  std::vector<Reference> ref;
  std::vector<Gpu> piped;
  piped.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    ref.emplace_back(config, s, stages);
    piped.emplace_back(config, s, stages,
                       devices[static_cast<std::size_t>(schedule.placement.rank_of(s))]);
  }
  ExecutorOptions options;
  use_sgd(options, schedule.placement, piped, learning_rate);
  cuda_local::Pipeline<Gpu> pipe(schedule, devices, piped, options);
  const SimulationResult predicted = simulate(schedule, cost);
  const auto training =
      training_data(data, devices[static_cast<std::size_t>(schedule.placement.rank_of(0))],
                    devices[static_cast<std::size_t>(schedule.placement.rank_of(stages - 1))],
                    schedule.problem.slices);
  std::vector<StepComparison> out;
  for (int step = 0; step < steps; ++step) {
    const double ref_loss = sequential_step(ref, ref_data);
    const auto ref_grads = flat_gradients(ref);
    sgd_update(ref, learning_rate);
    const StepResult r = pipe.step(training);
    StepComparison c;
    c.loss = std::abs(r.loss - ref_loss) / std::max(std::abs(ref_loss), 1e-300);
    c.gradients = max_relative_error(flat_values(piped, true),
                                     std::vector<double>(ref_grads.begin(), ref_grads.end()));
    const auto ref_params = flat_parameters(ref);
    c.parameters = max_relative_error(flat_values(piped, false),
                                      std::vector<double>(ref_params.begin(), ref_params.end()));
    for (int rank = 0; rank < schedule.rank_count(); ++rank)
      c.peaks_match = c.peaks_match &&
                      r.ranks[static_cast<std::size_t>(rank)].peak_bytes ==
                          predicted.ranks[static_cast<std::size_t>(rank)].peak_memory &&
                      r.ranks[static_cast<std::size_t>(rank)].peak_host_bytes ==
                          predicted.ranks[static_cast<std::size_t>(rank)].peak_host_memory;
    c.seconds = r.seconds;
    c.simulated = predicted.makespan;
    out.push_back(c);
  }
  return out;
}

}  // namespace pipesched::toy::gpu
