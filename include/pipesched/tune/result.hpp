// What the tuner returns: the plans it found (tuning::Plan), why configurations were refused
// (tuning::Note), the best plan of each (base schedule, checkpoint mode) pair (tuning::Baseline),
// the whole result (tuning::Result), the progress callback, and describe(), a plan in a few words.
// Included by pipesched/tune/tune.hpp, the tuner's entry header.
#pragma once

#include <algorithm>
#include <any>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/core/format.hpp"
#include "pipesched/core/message.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/pass/checkpoint.hpp"

namespace pipesched {

namespace tuning {

//! One configuration the tuner found, with its simulated figures.
struct Plan {
  std::string base;         //!< generator name, e.g. "interleaved-1f1b"
  int chunks = 1;           //!< stages per rank
  int microbatch_size = 1;  //!< sequences per microbatch
  int microbatches = 1;     //!< microbatches per step and pipeline (its batch / microbatch size)
  CheckpointMode checkpoint = CheckpointMode::None;  //!< the built-in checkpointing
  //! The program's own checkpoint policy (tuning::Request::checkpoint_policies) that made the
  //! plan; empty for a built-in mode (`checkpoint`, which then means nothing).
  std::string checkpoint_policy;
  Schedule schedule;  //!< the schedule, recomputes included
  //! Simulated step time (cost model's time unit): the last rank's end, with the gradient
  //! synchronisation and optimizer step where the cost model counts them (step_tail).
  double makespan = 0;
  double throughput = 0;                //!< sequences per time unit: global batch / makespan
  double bubble_ratio = 0;              //!< simulated idle share of the step
  std::vector<double> peak_per_rank;    //!< simulated peak activation memory of each rank
  std::vector<double> budget_per_rank;  //!< the budget each rank was held to (inf: none)
  int recomputes = 0;                   //!< R actions in the schedule
  int offloads = 0;                     //!< OFFLOAD actions in the schedule
  //! The output layer split by vocabulary over the ranks: the schedule has vocabulary passes
  //! (VOCAB_F, VOCAB_B) and the cost model splits its head.
  bool vocabulary = false;
  int slices = 1;           //!< slices per microbatch
  bool fine_wgrad = false;  //!< weight gradients cut into parts, placed in waits
  //! The base schedule was fitted to the budget by its order's memory knob
  //! (GeneratorInfo::generate_within: Zero Bubble's capped weight-gradient deferral, slice-pipe's
  //! warm-up) before checkpointing; false: the order's own schedule.
  bool fitted = false;
  WGradMode wgrad = WGradMode::Fused;  //!< the backward's weight-gradient mode (fine: Split)
  int warmup = 0;                      //!< forwards before rank 0's first backward (warmup_of)
  // The cluster around the pipeline (a fixed-pipeline search: 1, 1, ranks GPUs).
  int data = 1;                    //!< data-parallel replicas d
  int tensor = 1;                  //!< tensor-parallel degree t
  int zero = 0;                    //!< ZeRO stage
  bool sequence_parallel = false;  //!< with tensor parallelism
  int gpus = 1;                    //!< GPUs in all: ranks · d · t
  int global_batch = 1;            //!< sequences per step over all replicas
  //! Layers of each model stage (TransformerCost; empty for other cost models).
  std::vector<int> layers_per_stage;
  //! Largest rank's memory: its static bytes (TransformerCost::static_bytes: weights,
  //! gradients, optimizer state, workspace) plus its simulated activation peak; for other
  //! cost models the largest activation peak.
  double peak_memory = 0;
  //! Model FLOPs utilisation: global_batch · ModelShape::training_flops_per_sequence over
  //! (gpus · peak FLOP/s · makespan), recomputes not counted as useful work; 0 for cost
  //! models without FLOPs.
  double mfu = 0;
  //! MFU in the usual convention (PaLM, Megatron-LM): attention counted in full, not causal,
  //! ModelShape::usual_training_flops_per_sequence in place of training_flops_per_sequence;
  //! 0 for cost models without FLOPs.
  double mfu_usual = 0;
  //! Position of its configuration in the search, ties between equal plans go to the first.
  std::size_t order = 0;
  //! The cost model the plan was simulated under: the search's for its microbatch size,
  //! parallelism, layer split and slice lengths (cost_of, io/plan_file.hpp, returns it), so
  //! that simulate(schedule, cost_of<Cost>(plan)) gives `makespan` again. A plan read
  //! from a file holds it where the file does (TransformerCost, UniformCost); empty otherwise.
  std::any cost;
  //! The unit of the memory figures (Bytes: bytes, and the times are seconds).
  MemoryUnit memory_unit = MemoryUnit::Units;

  //! Where each of the plan's GPUs sits: its pipeline ranks × data-parallel replicas ×
  //! tensor-parallel degree (a job runs grid().size() processes).
  ProcessGrid grid() const { return ProcessGrid{schedule.problem.ranks, data, tensor}; }
};

//! Why configurations were refused: one note per distinct reason, naming the first
//! configuration refused for it and counting all of them (a model too shallow for 64 stages
//! refuses every microbatch size of that chunk count for the same reason).
struct Note {
  //! The first configuration refused for this reason ("interleaved-1f1b with 4 chunks,
  //! microbatch size 2 (32 microbatches)").
  std::string configuration;
  std::string reason;  //!< the generator's, pass's or cost model's message
  int count = 1;       //!< configurations refused for this reason, the first included
  //! Position of that first configuration in the search's grid (notes are in this order,
  //! whichever thread met them first).
  std::size_t first = 0;
  //! The reason as parts (the fields and amounts it names), for a front end to word.
  Message message = {};

  //! "configuration: reason".
  std::string text() const { return configuration + ": " + reason; }
};

//! The best plan of one (base schedule, checkpoint mode) pair: what that scheme achieves
//! with its own full search.
struct Baseline {
  std::string base;                                  //!< the base schedule's generator name
  CheckpointMode checkpoint = CheckpointMode::None;  //!< the built-in checkpointing
  std::optional<Plan> plan;                          //!< empty: nothing of this pair fits
  std::string checkpoint_policy = {};  //!< as tuning::Plan's: a program's own policy, or empty
};
}  // namespace tuning

//! The name of a plan's checkpointing: its own policy's, or its built-in mode's ("mario").
inline std::string checkpoint_name(const tuning::Plan& p) {
  return p.checkpoint_policy.empty() ? std::string(to_string(p.checkpoint)) : p.checkpoint_policy;
}

namespace tuning {

//! One candidate the tuner evaluated (built and simulated), in figures only: what a report
//! plots of every plan considered without keeping every schedule.
struct Point {
  std::string base;            //!< generator name
  std::string checkpoint;      //!< checkpoint_name of the plan
  int ranks = 1;               //!< pipeline ranks
  int chunks = 1;              //!< stages per rank
  int microbatch_size = 1;     //!< sequences per microbatch
  int microbatches = 1;        //!< microbatches per step and pipeline
  int slices = 1;              //!< slices per microbatch
  bool fine_wgrad = false;     //!< as tuning::Plan's
  bool fitted = false;         //!< as tuning::Plan's
  int data = 1;                //!< data-parallel replicas
  int tensor = 1;              //!< tensor-parallel degree
  int recomputes = 0;          //!< R actions in the schedule
  int offloads = 0;            //!< OFFLOAD actions in the schedule
  bool vocabulary = false;     //!< as tuning::Plan's
  double makespan = 0;         //!< simulated step time (time unit)
  double peak_memory = 0;      //!< as tuning::Plan::peak_memory
  double activation_peak = 0;  //!< largest rank's activation peak
  bool fits = true;            //!< within the budget on every rank
  bool frontier = false;       //!< on the Pareto frontier of step time and peak_memory (fits only)
  std::size_t order = 0;       //!< grid position of its configuration
  int mode = 0;                //!< its CheckpointMode as a number (ordering with `order`)
};
}  // namespace tuning

//! The figures of plan `p` as a point, `fits` as given.
inline tuning::Point point_of(const tuning::Plan& p, bool fits = true) {
  tuning::Point t;
  t.base = p.base;
  t.checkpoint = checkpoint_name(p);
  t.ranks = p.schedule.problem.ranks;
  t.chunks = p.chunks;
  t.microbatch_size = p.microbatch_size;
  t.microbatches = p.microbatches;
  t.slices = p.slices;
  t.fine_wgrad = p.fine_wgrad;
  t.fitted = p.fitted;
  t.data = p.data;
  t.tensor = p.tensor;
  t.recomputes = p.recomputes;
  t.offloads = p.offloads;
  t.vocabulary = p.vocabulary;
  t.makespan = p.makespan;
  t.peak_memory = p.peak_memory;
  for (double v : p.peak_per_rank)
    t.activation_peak = std::max(t.activation_peak, v);
  t.fits = fits;
  t.order = p.order;
  t.mode = static_cast<int>(p.checkpoint);
  return t;
}

//! "interleaved-1f1b x2, 64 mb of 2, mario (12 recomputes)": the configuration in a few
//! words, every checkpointed plan with its recompute count ("mario (0 recomputes)" where the
//! base fits the budget as it is); a cluster plan starts with its degrees ("pp 4 x dp 2 x tp
//! 2, ").
inline std::string describe(const tuning::Point& p) {
  std::string s;
  if (p.data > 1 || p.tensor > 1)
    s += "pp " + std::to_string(p.ranks) + " x dp " + std::to_string(p.data) + " x tp " +
         std::to_string(p.tensor) + ", ";
  s += p.base;
  if (p.chunks > 1) s += " x" + std::to_string(p.chunks);
  s += ", " + std::to_string(p.microbatches) + " mb of " + std::to_string(p.microbatch_size);
  if (p.slices > 1) s += " in " + std::to_string(p.slices) + " slices";
  if (p.fine_wgrad) s += ", fine W";
  if (p.fitted) s += ", fitted";
  s += ", " + p.checkpoint;
  if (p.recomputes > 0 || p.checkpoint != "none")
    s += " (" + std::to_string(p.recomputes) + (p.recomputes == 1 ? " recompute)" : " recomputes)");
  if (p.offloads > 0)
    s += ", " + std::to_string(p.offloads) + (p.offloads == 1 ? " offload" : " offloads");
  if (p.vocabulary) s += ", vocabulary parallel";
  return s;
}

//! The same of a plan.
inline std::string describe(const tuning::Plan& p) {
  return describe(point_of(p));
}

namespace tuning {

//! What `tune` found. Plans are compared by step time (makespan) for the same global batch;
//! on equal step time the one with fewer recomputes, then the simpler checkpoint mode wins.
struct Result {
  std::optional<Plan> best;                     //!< fastest plan that fits
  std::optional<Plan> best_without_checkpoint;  //!< fastest with no recompute (mode none)
  std::optional<Plan> best_conventional;        //!< fastest selective or full plan
  std::optional<Plan> best_mario;               //!< fastest Mario plan
  //! Every (base, checkpoint mode) pair searched, in the order of the request's bases and
  //! checkpoints (full as a fallback is not a pair of its own), with its best plan.
  std::vector<Baseline> baselines;
  int candidates_tried = 0;        //!< (configuration, checkpoint mode) pairs settled, all kinds
  int candidates_refused = 0;      //!< of those, refused by a generator or the cost model
  int candidates_over_budget = 0;  //!< of those, over the budget on some rank
  int candidates_pruned = 0;       //!< of those, skipped: they could not beat a plan found
  int candidates_total = 0;        //!< candidates in the search (tried < total when cut)
  //! tuning::Request::time_limit or tuning::Request::stop_flag stopped the search: the plans are
  //! complete, but candidates were left unsearched.
  bool cut = false;
  bool interrupted = false;  //!< of those, tuning::Request::stop_flag stopped it
  int threads = 1;           //!< threads that searched
  double seconds = 0;        //!< wall-clock time of the search
  //! Why configurations were refused, one note per distinct reason, in the order first met.
  std::vector<Note> notes;
  //! The candidates evaluated (built and simulated; pruned ones are not), over the budget
  //! included, in grid order: the first tuning::Request::evaluated_limit of them, plus every
  //! point of the Pareto frontier (tuning::Point::frontier) of those that fit, which is kept over
  //! all of them whatever the limit. Which candidates are pruned depends on the order threads
  //! settle them, so with several threads the points (not the bests) may differ between runs.
  std::vector<Point> evaluated;
  int evaluated_count = 0;  //!< candidates evaluated in all (evaluated holds fewer past the limit)

  //! The baseline of (base, mode); nullptr when that pair was not searched.
  const Baseline* baseline(std::string_view base, CheckpointMode mode) const {
    for (const Baseline& b : baselines)
      if (b.base == base && b.checkpoint == mode && b.checkpoint_policy.empty()) return &b;
    return nullptr;
  }
  //! The baseline of (base, a program's own checkpoint policy); nullptr when not searched.
  const Baseline* baseline(std::string_view base, std::string_view policy) const {
    for (const Baseline& b : baselines)
      if (b.base == base && !b.checkpoint_policy.empty() && b.checkpoint_policy == policy)
        return &b;
    return nullptr;
  }
};

//! Called as the search goes: candidates settled so far, candidates in all, and the best plan
//! so far (nullptr while none fits). Calls never overlap (the search serialises them, from
//! whichever thread settles a candidate).
using ProgressFn = std::function<void(int done, int total, const Plan* best)>;
}  // namespace tuning

}  // namespace pipesched
