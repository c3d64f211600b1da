// Profile, then plan: a ProfiledCost built from what one executed step measured on the user's
// own stage models (per-stage times of F, I and W or B, R; the bytes each stage's units held;
// the latency of a message between ranks), and `profile`, which runs a few steps of those
// stage models on threads and returns it, ready for simulate() and the tuner.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace pipesched {

//! How `profiled_cost` turns a measured step into figures.
struct ProfiledCostOptions {
  //! For a stage whose backward ran only fused (B), never as I then W: the share of the
  //! measured B given to `backward_weight`, the rest to `backward_input`. In [0, 1]; the
  //! default halves it (UniformCost's b = 2, w = 1).
  double weight_share = 0.5;
  //! The time of one message between ranks (seconds) to use instead of the estimate.
  std::optional<double> transfer = std::nullopt;
};

namespace detail::profiling {

// A running mean.
struct Mean {
  double sum = 0;
  int count = 0;
  void add(double v) {
    sum += v;
    ++count;
  }
  bool seen() const { return count > 0; }
  double value() const { return count > 0 ? sum / count : 0.0; }
};

// What one step measured of one (stage, slice): seconds per kind, bytes per kind of change.
struct UnitStats {
  Mean forward, backward, backward_input, backward_weight, recompute;
  Mean full_forward_bytes;          // change of an F that keeps its activations
  Mean checkpointed_forward_bytes;  // change of an F that keeps only its input (it has an R)
  Mean recompute_bytes;             // change of an R
  Mean wgrad_bytes;                 // what a unit's W (all its parts) freed
  std::vector<Mean> part_bytes;     // what W part j freed, when every unit had the same parts
  int parts = 0;                    // the units' part count (-1: units differ)
  bool overlapped = false;          // some of its work ran inside an Overlap (not timed apart)
};

// One unit's weight gradient: its W, or all its W parts.
struct WeightUnit {
  int stage = 0, slice = 0;
  double seconds = 0;
  double bytes = 0;                // freed
  std::vector<double> part_bytes;  // freed by part j
};

inline std::string where(int stage, int slice, int slices) {
  return "stage " + std::to_string(stage) +
         (slices > 1 ? " slice " + std::to_string(slice) : std::string());
}

// The change in held bytes each action of rank `r` made, by list position. The executor
// records a memory point after each action that changed them, at that action's end time (the
// same double as its timing's end), so walking the compute actions in the order they ran
// (by start time; a wait-filling action ran before the receive it filled) pairs each point
// with its action. Only compute actions change held bytes.
inline std::vector<double> byte_changes(const StepResult& step, std::size_t r) {
  const std::vector<Action>& list = step.executed.ranks[r];
  const RankRun& run = step.ranks[r];
  std::vector<std::size_t> order(list.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return run.timing[a].start < run.timing[b].start;
  });
  std::vector<double> change(list.size(), 0.0);
  std::size_t k = 0;
  double held = 0;
  for (std::size_t p : order) {
    if (!is_compute(list[p].kind)) continue;
    if (k < run.memory.size() && run.memory[k].time == run.timing[p].end) {
      change[p] = run.memory[k].value - held;
      held = run.memory[k].value;
      ++k;
    }
  }
  if (k != run.memory.size())
    throw invalid_problem(
        "profiled_cost: rank " + std::to_string(r) + " has " + std::to_string(run.memory.size()) +
        " memory points, but only " + std::to_string(k) +
        " line up with the end of one of its compute actions; the memory curve and the timings "
        "must come from the same step, as the executor records them (pass the StepResult "
        "unchanged).");
  return change;
}

// The time from a send starting to its receive returning, for each message whose receive was
// already waiting when the send started (any other receive returns at once and says nothing of
// the latency). Assumes the ranks' timelines share their origin (threads of one process do; MPI
// processes start after a barrier).
inline std::vector<double> waiting_latencies(const StepResult& step) {
  std::unordered_map<std::uint64_t, std::pair<std::size_t, std::size_t>> receives;
  for (std::size_t r = 0; r < step.executed.ranks.size(); ++r) {
    const std::vector<Action>& list = step.executed.ranks[r];
    for (std::size_t p = 0; p < list.size(); ++p) {
      const Action& a = list[p];
      if (a.kind == OpKind::RecvF || a.kind == OpKind::RecvB)
        receives[pack_key({a.stage, a.microbatch, a.slice,
                           a.kind == OpKind::RecvF ? Direction::Forward : Direction::Backward})] = {
            r, p};
    }
  }
  std::vector<double> seen;
  for (std::size_t r = 0; r < step.executed.ranks.size(); ++r) {
    const std::vector<Action>& list = step.executed.ranks[r];
    for (std::size_t p = 0; p < list.size(); ++p) {
      const Action& a = list[p];
      if (a.kind != OpKind::SendF && a.kind != OpKind::SendB) continue;
      const bool fwd = a.kind == OpKind::SendF;
      auto it = receives.find(pack_key({fwd ? a.stage + 1 : a.stage - 1, a.microbatch, a.slice,
                                        fwd ? Direction::Forward : Direction::Backward}));
      if (it == receives.end()) continue;
      const ActionTiming& send = step.ranks[r].timing[p];
      const ActionTiming& recv = step.ranks[it->second.first].timing[it->second.second];
      if (recv.start <= send.start) seen.push_back(std::max(0.0, recv.end - send.start));
    }
  }
  return seen;
}

// The least of waiting_latencies; 0 when no receive waited.
inline double transfer_estimate(const StepResult& step) {
  const std::vector<double> seen = waiting_latencies(step);
  return seen.empty() ? 0.0 : *std::min_element(seen.begin(), seen.end());
}

// Checks that `step` is what a pipeline's step() returned: one run per rank of the executed
// schedule, one timing per action of its list.
inline void check_step(const StepResult& step) {
  if (step.ranks.empty())
    throw invalid_problem(
        "profiled_cost: the StepResult holds no rank runs; run one step of a pipeline "
        "(inproc::Pipeline::step, mpi::Pipeline::step, ...) and pass what it returned.");
  if (step.executed.ranks.size() != step.ranks.size())
    throw invalid_problem("profiled_cost: the StepResult has " + std::to_string(step.ranks.size()) +
                          " rank runs but its executed schedule has " +
                          std::to_string(step.executed.ranks.size()) +
                          " ranks; pass every rank's run, in rank order, as step() returns them.");
  if (step.executed.problem.stages < 1)
    throw invalid_problem("profiled_cost: the executed schedule has " +
                          std::to_string(step.executed.problem.stages) +
                          " stages; pass the StepResult of a step that ran a schedule.");
  for (std::size_t r = 0; r < step.ranks.size(); ++r)
    if (step.ranks[r].timing.size() != step.executed.ranks[r].size())
      throw invalid_problem("profiled_cost: rank " + std::to_string(r) + " measured " +
                            std::to_string(step.ranks[r].timing.size()) +
                            " action timings but its executed list has " +
                            std::to_string(step.executed.ranks[r].size()) +
                            " actions; pass the StepResult unchanged.");
}

// The figures of one (stage, slice) from what the step measured of it.
inline StageProfile figures_of(const UnitStats& st, int stage, int slice, int slices,
                               const ProfiledCostOptions& options) {
  const std::string unit = where(stage, slice, slices);
  const std::string fix =
      "; profile with a schedule that runs each stage's forwards and backwards as actions of "
      "their own, such as 1F1B (schedule::one_f_one_b, profile()'s default).";
  if (!st.forward.seen())
    throw invalid_problem("profiled_cost: " + unit + " ran no forward F of its own in the step" +
                          (st.overlapped ? " (its forwards ran inside OVERLAP actions, whose "
                                           "halves are timed together)"
                                         : "") +
                          fix);
  StageProfile p;
  p.forward = st.forward.value();
  if (st.backward_input.seen()) {
    p.backward_input = st.backward_input.value();
    p.backward_weight = st.backward_weight.value();
  } else if (st.backward.seen()) {
    const double b = st.backward.value();
    p.backward_weight = options.weight_share * b;
    p.backward_input = b - p.backward_weight;
  } else {
    throw invalid_problem("profiled_cost: " + unit + " ran no backward (B, or I and W) of its own" +
                          (st.overlapped ? " (its backwards ran inside OVERLAP actions)" : "") +
                          fix);
  }
  p.recompute = st.recompute.value();  // 0 when no R ran: ProfiledCost then takes the forward's
  if (st.full_forward_bytes.seen())
    p.activation_bytes = st.full_forward_bytes.value();
  else  // every forward was checkpointed: the kept input plus what its recompute added back
    p.activation_bytes = st.checkpointed_forward_bytes.value() + st.recompute_bytes.value();
  // Not measured: no bytes kept by a checkpointed forward (none ran) or held from I to W (the
  // backward was fused). Figures that err high, so a plan made with them fits: checkpointing
  // saves nothing, an I frees nothing.
  p.boundary_bytes = st.checkpointed_forward_bytes.seen() ? st.checkpointed_forward_bytes.value()
                                                          : p.activation_bytes;
  p.wgrad_bytes = st.wgrad_bytes.seen() ? st.wgrad_bytes.value() : p.activation_bytes;
  if (st.parts > 1)
    for (const Mean& m : st.part_bytes)
      p.wgrad_part_bytes.push_back(m.value());
  return p;
}

// A whole microbatch on a stage from its slices' figures: the sums.
inline StageProfile sum_of(const std::vector<StageProfile>& slices) {
  StageProfile s;
  bool recomputed = false;
  for (const StageProfile& k : slices)
    recomputed = recomputed || k.recompute > 0;
  bool parts_agree = !slices.empty() && !slices.front().wgrad_part_bytes.empty();
  for (const StageProfile& k : slices)
    parts_agree =
        parts_agree && k.wgrad_part_bytes.size() == slices.front().wgrad_part_bytes.size();
  if (parts_agree) s.wgrad_part_bytes.assign(slices.front().wgrad_part_bytes.size(), 0.0);
  for (const StageProfile& k : slices) {
    s.forward += k.forward;
    s.backward_input += k.backward_input;
    s.backward_weight += k.backward_weight;
    if (recomputed) s.recompute += k.recompute > 0 ? k.recompute : k.forward;
    s.activation_bytes += k.activation_bytes;
    s.wgrad_bytes += k.wgrad_bytes;
    s.boundary_bytes += k.boundary_bytes;
    s.context_gradient_bytes += k.context_gradient_bytes;
    if (parts_agree)
      for (std::size_t j = 0; j < k.wgrad_part_bytes.size(); ++j)
        s.wgrad_part_bytes[j] += k.wgrad_part_bytes[j];
  }
  return s;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Each figure of `costs` (same shape: made from steps of one schedule) as its median.
inline StageProfile median_profile(const std::vector<const StageProfile*>& ps) {
  static constexpr double StageProfile::*fields[] = {
      &StageProfile::forward,          &StageProfile::backward_input,
      &StageProfile::backward_weight,  &StageProfile::recompute,
      &StageProfile::activation_bytes, &StageProfile::wgrad_bytes,
      &StageProfile::boundary_bytes,   &StageProfile::context_gradient_bytes};
  StageProfile out = *ps.front();
  std::vector<double> v(ps.size());
  for (auto field : fields) {
    for (std::size_t i = 0; i < ps.size(); ++i)
      v[i] = ps[i]->*field;
    out.*field = median(v);
  }
  for (std::size_t j = 0; j < out.wgrad_part_bytes.size(); ++j) {
    for (std::size_t i = 0; i < ps.size(); ++i)
      v[i] = ps[i]->wgrad_part_bytes.at(j);
    out.wgrad_part_bytes[j] = median(v);
  }
  return out;
}

inline ProfiledCost median_cost(const std::vector<ProfiledCost>& costs) {
  ProfiledCost out = costs.front();
  std::vector<const StageProfile*> ps(costs.size());
  for (std::size_t s = 0; s < out.stages.size(); ++s) {
    for (std::size_t i = 0; i < costs.size(); ++i)
      ps[i] = &costs[i].stages.at(s);
    out.stages[s] = median_profile(ps);
  }
  for (std::size_t s = 0; s < out.slices.size(); ++s)
    for (std::size_t k = 0; k < out.slices[s].size(); ++k) {
      for (std::size_t i = 0; i < costs.size(); ++i)
        ps[i] = &costs[i].slices.at(s).at(k);
      out.slices[s][k] = median_profile(ps);
    }
  std::vector<double> t(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i)
    t[i] = costs[i].transfer;
  out.transfer = median(t);
  return out;
}

}  // namespace detail::profiling

//! The cost model of the stage models that ran `step` (what a pipeline's `step()` returned:
//! `inproc::Pipeline`, `mpi::Pipeline` and the GPU pipelines alike), for `simulate` and the tuner.
//! One `StageProfile` per stage of the executed schedule, each figure the mean over the step's
//! units of that stage:
//!
//! - **Times** (seconds): `forward` from the F actions, `backward_input` and `backward_weight`
//!   from I and W (a W cut into parts: the sum of a unit's parts); a stage whose backward ran
//!   only fused gets its B split by `options.weight_share`; `recompute` from R, or 0 when no R
//!   ran (ProfiledCost then takes the forward's time, which is what an R runs). An F on the
//!   first and last stage includes the TrainingData's input and loss calls. Work inside an
//!   OVERLAP action is not used (its two halves are timed together).
//! - **Bytes**, exactly as the executor counted them (each action's change to the rank's held
//!   bytes, read off `RankRun::memory`): `activation_bytes` what an F that keeps its
//!   activations added (the stash after forward, plus what a slice adds to its context);
//!   `boundary_bytes` what a checkpointed F added (the stage input it keeps); `wgrad_bytes`
//!   what a unit's W freed (the stash after backward_input); `wgrad_part_bytes[j]` what part j
//!   freed, when every unit of the stage was cut into the same parts. Not measured, so set
//!   high: `boundary_bytes` = `activation_bytes` when no forward of the stage was checkpointed,
//!   `wgrad_bytes` = `activation_bytes` when its backward never ran split —
//!   run a schedule with an R and with I/W for them (profile()'s default does).
//!   `context_gradient_bytes` is left 0: set it by hand for a slice-aware model.
//! - **Slices**: when the executed schedule cuts microbatches into K > 1 slices, `slices[s][k]`
//!   holds the figures of slice k of stage s and `stages[s]` their sums (a whole microbatch).
//! - **`transfer`**: `options.transfer` when given; else the least time from a send starting
//!   to its receive returning, over the messages whose receiver was already waiting — a lower
//!   bound of the latency a message adds, taken with the ranks' clocks compared (exact on
//!   threads; on MPI processes only as good as their start barrier). On threads it is the
//!   wake-up of a waiting thread, not a copy; 0 when no receive ever waited.
//!
//! Throws invalid_problem, saying what to pass or run instead, for a StepResult with no rank
//! runs, one whose runs do not match its executed schedule (rank count, timings per list, a
//! memory curve not lined up with the timings), a stage that ran no forward or no backward of
//! its own, and a `weight_share` outside [0, 1] or a negative `transfer`.
inline ProfiledCost profiled_cost(const StepResult& step, const ProfiledCostOptions& options = {}) {
  namespace prof = detail::profiling;
  prof::check_step(step);
  if (!(options.weight_share >= 0 && options.weight_share <= 1))
    throw invalid_problem(
        "profiled_cost: weight_share is " + std::to_string(options.weight_share) +
        "; give the share of a fused backward that is weight gradient, in [0, 1].");
  if (options.transfer && !(*options.transfer >= 0 && std::isfinite(*options.transfer)))
    throw invalid_problem("profiled_cost: transfer is " + std::to_string(*options.transfer) +
                          "; give a time of 0 seconds or more, or leave it empty to estimate it.");
  const Schedule& executed = step.executed;
  const int stages = executed.problem.stages;
  const int slices = std::max(1, executed.problem.slices);
  std::vector<prof::UnitStats> stats(static_cast<std::size_t>(stages) * slices);
  auto in_range = [&](const Action& a, std::size_t r) {
    if (a.stage < 0 || a.stage >= stages || a.slice < 0 || a.slice >= slices)
      throw invalid_problem("profiled_cost: rank " + std::to_string(r) + " ran " + to_string(a) +
                            ", outside the executed schedule's " + std::to_string(stages) +
                            " stages and " + std::to_string(slices) +
                            " slices; pass the StepResult unchanged.");
  };
  auto at = [&](int stage, int slice) -> prof::UnitStats& {
    return stats[static_cast<std::size_t>(stage) * slices + static_cast<std::size_t>(slice)];
  };

  // A unit is checkpointed exactly when the schedule recomputes it (as in the executor).
  std::unordered_set<std::uint64_t> checkpointed;
  for (const auto& list : executed.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::R)
        checkpointed.insert(detail::pack_key({a.stage, a.microbatch, a.slice, Direction::Forward}));

  std::map<std::tuple<int, int, int>, prof::WeightUnit> weights;  // by (stage, microbatch, slice)
  for (std::size_t r = 0; r < executed.ranks.size(); ++r) {
    const std::vector<Action>& list = executed.ranks[r];
    const std::vector<double> change = prof::byte_changes(step, r);
    for (std::size_t p = 0; p < list.size(); ++p) {
      const Action& a = list[p];
      if (a.kind == OpKind::Overlap) {
        in_range(a.forward_half(), r);
        in_range(a.backward_half(), r);
        at(a.stage, a.slice).overlapped = true;
        at(a.b_stage, a.b_slice).overlapped = true;
        continue;
      }
      if (!is_compute(a.kind)) continue;
      in_range(a, r);
      const ActionTiming& t = step.ranks[r].timing[p];
      const double seconds = std::max(0.0, t.end - t.start);
      prof::UnitStats& st = at(a.stage, a.slice);
      switch (a.kind) {
        case OpKind::F:
          st.forward.add(seconds);
          (checkpointed.contains(
               detail::pack_key({a.stage, a.microbatch, a.slice, Direction::Forward}))
               ? st.checkpointed_forward_bytes
               : st.full_forward_bytes)
              .add(change[p]);
          break;
        case OpKind::B:
          st.backward.add(seconds);
          break;
        case OpKind::I:
          st.backward_input.add(seconds);
          break;
        case OpKind::R:
          st.recompute.add(seconds);
          st.recompute_bytes.add(change[p]);
          break;
        case OpKind::W: {
          prof::WeightUnit& w = weights[{a.stage, a.microbatch, a.slice}];
          w.stage = a.stage;
          w.slice = a.slice;
          w.seconds += seconds;
          w.bytes -= change[p];
          const std::size_t part = static_cast<std::size_t>(std::max(0, a.part));
          if (w.part_bytes.size() <= part) w.part_bytes.resize(part + 1, 0.0);
          w.part_bytes[part] -= change[p];
          break;
        }
        default:
          break;
      }
    }
  }
  for (const auto& [key, w] : weights) {
    prof::UnitStats& st = at(w.stage, w.slice);
    st.backward_weight.add(w.seconds);
    st.wgrad_bytes.add(w.bytes);
    const int parts = static_cast<int>(w.part_bytes.size());
    if (st.parts == 0) {
      st.parts = parts;
      st.part_bytes.assign(w.part_bytes.size(), {});
    } else if (st.parts != parts) {
      st.parts = -1;  // units cut differently: no per-part figures
    }
    if (st.parts == parts)
      for (std::size_t j = 0; j < w.part_bytes.size(); ++j)
        st.part_bytes[j].add(w.part_bytes[j]);
  }

  ProfiledCost cost;
  cost.transfer = options.transfer ? *options.transfer : prof::transfer_estimate(step);
  for (int s = 0; s < stages; ++s) {
    std::vector<StageProfile> per_slice;
    for (int k = 0; k < slices; ++k)
      per_slice.push_back(prof::figures_of(at(s, k), s, k, slices, options));
    if (slices == 1) {
      cost.stages.push_back(std::move(per_slice.front()));
    } else {
      cost.stages.push_back(prof::sum_of(per_slice));
      cost.slices.push_back(std::move(per_slice));
    }
  }
  return cost;
}

//! How `profile` runs the user's stage models.
struct ProfileOptions {
  //! The schedule to run (one stage model per stage of it). Empty: `profiling_schedule`, with
  //! `microbatches` and, when `recompute` and the stage model can checkpoint (it has
  //! `input_bytes(x)` or its tensor `bytes()`), one checkpointed microbatch per stage.
  std::optional<Schedule> schedule = std::nullopt;
  int microbatches = 0;  //!< of the default schedule; 0 = max(4, 2 × stages)
  //! The default schedule checkpoints microbatch 0 on every stage, so R and the bytes a
  //! checkpointed forward keeps are measured too.
  bool recompute = true;
  int warmup_steps = 1;  //!< steps run first and not measured (first touches, allocations)
  int repeats = 3;       //!< steps measured; each figure is the median of their figures
  //! How the measured steps become figures (see profiled_cost).
  ProfiledCostOptions cost = {};
  //! The pipeline's options (receive timeout, ...). With an optimizer the steps train the
  //! stage models; without one (the default) their parameters do not change.
  ExecutorOptions executor = {};
  //! When not null, receives the measured steps (e.g. to compare the simulated makespan with
  //! the measured `seconds`, or to render a timeline).
  std::vector<StepResult>* measured = nullptr;
};

//! The schedule `profile` runs by default for `stages` stage models: 1F1B on one rank per
//! stage with `microbatches` microbatches (0: max(4, 2 × stages), so each rank reaches its
//! steady state), every backward split into I then W so both are timed, and, with
//! `recompute`, microbatch 0 of every stage checkpointed (its R right before its I).
inline Schedule profiling_schedule(int stages, int microbatches = 0, bool recompute = true) {
  if (stages < 1)
    throw invalid_problem("profiling_schedule: stages is " + std::to_string(stages) +
                          "; give the number of stage models, 1 or more.");
  if (microbatches < 0)
    throw invalid_problem("profiling_schedule: microbatches is " + std::to_string(microbatches) +
                          "; give 1 or more, or 0 for max(4, 2 x stages).");
  const int m = microbatches > 0 ? microbatches : std::max(4, 2 * stages);
  Schedule s = schedule::one_f_one_b(Problem{.ranks = stages, .stages = stages, .microbatches = m},
                                     WGradMode::Split);
  if (!recompute) return s;
  for (auto& list : s.ranks) {
    auto it = std::find_if(list.begin(), list.end(), [](const Action& a) {
      return is_input_backward(a.kind) && a.microbatch == 0;
    });
    if (it != list.end()) list.insert(it, Action::make(OpKind::R, it->stage, 0));
  }
  return s;
}

namespace detail::profiling {
// Throws invalid_problem, naming `who`, for fewer than 1 measured step or a negative number of
// warm-up steps.
inline void check_steps(const ProfileOptions& options, const char* who) {
  if (options.repeats < 1)
    throw invalid_problem(std::string(who) + ": repeats is " + std::to_string(options.repeats) +
                          "; measure 1 step or more.");
  if (options.warmup_steps < 0)
    throw invalid_problem(std::string(who) + ": warmup_steps is " +
                          std::to_string(options.warmup_steps) +
                          "; run 0 or more unmeasured steps first.");
}
}  // namespace detail::profiling

//! The figures of a pipeline already built, on any transport (`inproc::Pipeline`,
//! `cuda_local::Pipeline`, ...: anything whose `step(data)` returns a StepResult):
//! `options.warmup_steps` steps, then `options.repeats` measured steps, and their
//! `profiled_cost` figures under `options.cost`, each the median over the repeats; the
//! measured steps go to `options.measured` when it is set. `options.schedule`,
//! `microbatches`, `recompute` and `executor` are the pipeline's business and not read here.
//! Throws invalid_problem for `repeats` < 1 or `warmup_steps` < 0, and what the pipeline and
//! `profiled_cost` throw.
template <class Pipe, class Data>
ProfiledCost profile_steps(Pipe& pipe, const Data& data, const ProfileOptions& options) {
  detail::profiling::check_steps(options, "profile_steps");
  for (int i = 0; i < options.warmup_steps; ++i)
    (void)pipe.step(data);
  std::vector<ProfiledCost> costs;
  for (int i = 0; i < options.repeats; ++i) {
    StepResult step = pipe.step(data);
    costs.push_back(profiled_cost(step, options.cost));
    if (options.measured) options.measured->push_back(std::move(step));
  }
  return detail::profiling::median_cost(costs);
}

//! Runs `stages` (one stage model per pipeline stage, indexed by stage) on threads, one per
//! rank of `options.schedule` (default `profiling_schedule`): `warmup_steps` steps, then
//! `repeats` measured steps, and returns their `profiled_cost` figures, each the median over
//! the repeats. Works for every `stage_model`. A slice-aware model runs whole microbatches
//! under the default schedule, so ProfiledCost gives each slice an even share of its stage;
//! give a sliced schedule (`schedule::seq_1f1b`, `slice_pipe`) to measure slices apart.
//! Throws invalid_problem for no stage models, a schedule with another stage count,
//! `repeats` < 1, `warmup_steps` < 0, or TrainingData without input or loss; and what the
//! pipeline and `profiled_cost` throw.
template <class Stage>
ProfiledCost profile(std::span<Stage> stages, const TrainingData<typename Stage::tensor_type>& data,
                     const ProfileOptions& options = {}) {
  static_assert(check_stage_model<Stage>());
  if (stages.empty())
    throw invalid_problem("profile: no stage models were given; pass one per pipeline stage.");
  detail::profiling::check_steps(options, "profile");
  if (!data.input || !data.loss)
    throw invalid_problem(std::string("profile: the TrainingData has no ") +
                          (!data.input ? "input" : "loss") +
                          " function; give both input(microbatch, slice) and loss(output, "
                          "microbatch, slice, loss).");
  const int n = static_cast<int>(stages.size());
  constexpr bool can_checkpoint =
      detail::reports_input_bytes<Stage> || detail::reports_bytes<typename Stage::tensor_type>;
  const Schedule schedule =
      options.schedule
          ? *options.schedule
          : profiling_schedule(n, options.microbatches, options.recompute && can_checkpoint);
  if (schedule.problem.stages != n)
    throw invalid_problem("profile: schedule '" + schedule.name + "' has " +
                          std::to_string(schedule.problem.stages) + " stages but " +
                          std::to_string(n) +
                          " stage models were given; pass one stage model per stage of the "
                          "schedule, or leave ProfileOptions::schedule empty for the default.");
  inproc::Pipeline<Stage> pipe(schedule, stages, options.executor);
  return profile_steps(pipe, data, options);
}

//! `profile` of a vector of stage models.
template <class Stage>
ProfiledCost profile(std::vector<Stage>& stages,
                     const TrainingData<typename Stage::tensor_type>& data,
                     const ProfileOptions& options = {}) {
  return profile(std::span<Stage>(stages), data, options);
}

}  // namespace pipesched
