// ProfiledCost: per-stage durations and bytes taken from a real model (measured by the
// executor, or computed from the model's shapes), for simulations that predict a run.
#pragma once

#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! One stage's figures for one (microbatch) unit; with K slices each slice takes 1/K.
struct StageProfile {
  double forward = 0;           //!< seconds (or any time unit) of F
  double backward_input = 0;    //!< I (a full backward B takes backward_input + backward_weight)
  double backward_weight = 0;   //!< W
  double recompute = 0;         //!< R; 0 = same as forward
  double activation_bytes = 0;  //!< held from F until the backward
  double wgrad_bytes = 0;       //!< of those, held from I until W
  double boundary_bytes = 0;    //!< kept by a checkpointed F (its input)
};

//! Per-stage profile table. Satisfies `cost_model`.
struct ProfiledCost {
  std::vector<StageProfile> stages;  //!< indexed by stage
  double transfer = 0;               //!< time for one message between ranks

  const StageProfile& at(const CostContext& ctx, int stage) const {
    if (stage < 0 || stage >= static_cast<int>(stages.size()))
      throw invalid_problem("ProfiledCost has figures for " + std::to_string(stages.size()) +
                            " stages but was asked about stage " + std::to_string(stage) +
                            " of a problem with " + std::to_string(ctx.problem.stages) +
                            "; give one StageProfile per stage.");
    return stages[static_cast<std::size_t>(stage)];
  }

  double duration(const CostContext& ctx, const Action& a) const {
    if (!is_compute(a.kind) || a.kind == OpKind::Overlap) return 0.0;
    const StageProfile& p = at(ctx, a.stage);
    const double k = ctx.problem.slices;
    const double parts = ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1;
    switch (a.kind) {
      case OpKind::F:
        return p.forward / k;
      case OpKind::B:
        return (p.backward_input + p.backward_weight) / k;
      case OpKind::I:
        return p.backward_input / k;
      case OpKind::W:
        return p.backward_weight / k / parts;
      case OpKind::R:
        return (p.recompute > 0 ? p.recompute : p.forward) / k;
      default:
        return 0.0;
    }
  }

  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    if (!is_compute(a.kind) || a.kind == OpKind::Overlap) return 0.0;
    const StageProfile& p = at(ctx, a.stage);
    const double k = ctx.problem.slices;
    const double parts = ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1;
    switch (a.kind) {
      case OpKind::F:
        return (checkpointed ? p.boundary_bytes : p.activation_bytes) / k;
      case OpKind::R:
        return (p.activation_bytes - p.boundary_bytes) / k;
      case OpKind::B:
        return -p.activation_bytes / k;
      case OpKind::I:
        return -(p.activation_bytes - p.wgrad_bytes) / k;
      case OpKind::W:
        return -p.wgrad_bytes / k / parts;
      default:
        return 0.0;
    }
  }

  double transfer_time(const CostContext&, const Action&) const { return transfer; }
};

static_assert(cost_model<ProfiledCost>);

}  // namespace pipesched
