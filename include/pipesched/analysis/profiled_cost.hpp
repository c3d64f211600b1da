// ProfiledCost: per-stage (or per stage and slice) durations and bytes taken from a real model
// (measured by the executor, or computed from the model's shapes), for simulations that
// predict a run.
#pragma once

#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! One stage's figures for one unit: a whole microbatch in `ProfiledCost::stages` (with K
//! slices each slice takes 1/K), or one slice in `ProfiledCost::slices`.
struct StageProfile {
  double forward = 0;           //!< seconds (or any time unit) of F
  double backward_input = 0;    //!< I (a full backward B takes backward_input + backward_weight)
  double backward_weight = 0;   //!< W
  double recompute = 0;         //!< R; 0 = same as forward
  double activation_bytes = 0;  //!< held from F until the backward
  double wgrad_bytes = 0;       //!< of those, held from I until W
  double boundary_bytes = 0;    //!< kept by a checkpointed F (its input)
  //! Slice-aware models: bytes the microbatch's slice context holds for gradients of this
  //! slice's keys/values, which the backwards of later slices produce. They are taken at the
  //! microbatch's first backward on the stage (that of its last slice, so 0 for the last slice)
  //! and freed at this slice's backward. (The keys/values themselves live from the slice's F
  //! to its backward, like its stash: count them in `activation_bytes`, and in
  //! `boundary_bytes` too, since a checkpointed slice keeps them.)
  double context_gradient_bytes = 0;
  //! Bytes each part of a weight gradient cut into parts frees (W part j frees
  //! `wgrad_part_bytes[j]`) when its size is the schedule's part count; otherwise each part
  //! frees an even share of `wgrad_bytes`.
  std::vector<double> wgrad_part_bytes = {};
  //! Seconds of the stage's data-parallel gradient reduction, from its REDUCE_GRAD until the
  //! reduced gradients are in (measured, e.g. one all-reduce of the stage's gradients timed
  //! alone): the time the simulator keeps the rank's data-parallel link busy. Read from the
  //! `ProfiledCost::stages` entry only (a reduction is of the whole stage); 0 = none.
  double gradient_reduction = 0;
};

//! One vocabulary shard's figures (vocabulary parallelism, pass/vocabulary.hpp), for a whole
//! microbatch; with K slices each slice takes 1/K.
struct VocabularyProfile {
  double forward = 0;   //!< seconds of the shard's VOCAB_F
  double backward = 0;  //!< seconds of its VOCAB_B
  double bytes = 0;     //!< held from its VOCAB_F until its VOCAB_B
  //! Seconds from the last stage's forward until its output is at the shard's rank (for the
  //! VOCAB_F), and from the last shard's VOCAB_F until the partials are merged (VOCAB_B).
  double transfer = 0;
  //! @{
  //! With the input embedding split (ProfiledCost::input_vocabulary): seconds of the shard's
  //! EMBED_F (its lookups) and EMBED_B (its rows' gradient), for a whole microbatch.
  double input_forward = 0, input_backward = 0;
  //! @}
  //! Seconds from the last shard's EMBED_F until the lookups are reduced into the first
  //! stage's input (EMBED_F), and from the first stage's backward until its input gradient is
  //! at the shard's rank (EMBED_B).
  double input_transfer = 0;
};

//! Per-stage profile table. Satisfies `cost_model`; with `vocabulary` figures it also prices
//! vocabulary passes (`has_vocabulary_cost`).
struct ProfiledCost {
  //! Memory is in bytes (messages print amounts as 24GB, 3.19GiB).
  static constexpr MemoryUnit memory_unit = MemoryUnit::Bytes;
  std::vector<StageProfile> stages;  //!< indexed by stage
  double transfer = 0;               //!< time for one message between ranks
  //! Bytes per second one copy of offloaded activations moves between device and host memory
  //! (one way); 0 = copies take no time.
  double host_link_bandwidth = 0;
  //! Optional per-slice figures: `slices[stage][k]` describes slice k of a microbatch on that
  //! stage, not divided by the slice count (a later slice's attention reads a longer prefix,
  //! so slices differ). Used for a stage when it holds one entry per slice of the problem;
  //! otherwise that stage's `stages` entry is divided evenly among the slices.
  std::vector<std::vector<StageProfile>> slices = {};
  //! Per vocabulary shard (= rank), for a schedule with vocabulary passes; empty: the table
  //! does not price them (the simulator and add_vocabulary_passes refuse such a schedule).
  std::vector<VocabularyProfile> vocabulary = {};
  //! The input embedding split by vocabulary too: the schedule holds EMBED_F and EMBED_B,
  //! priced by the shards' input figures.
  bool input_vocabulary = false;

  //! `input_vocabulary` (splits_input_vocabulary).
  bool input_vocabulary_parallel() const noexcept { return input_vocabulary; }

  //! True when the table prices vocabulary passes (it has `vocabulary` figures).
  bool prices_vocabulary() const noexcept { return !vocabulary.empty(); }
  //! A VOCAB_F's, VOCAB_B's, EMBED_F's or EMBED_B's seconds: its shard's figure, over the
  //! problem's slices.
  double vocabulary_seconds(const CostContext& ctx, const Action& a) const {
    const VocabularyProfile& v = shard(a.stage);
    const double whole = a.kind == OpKind::VocabF   ? v.forward
                         : a.kind == OpKind::VocabB ? v.backward
                         : a.kind == OpKind::EmbedF ? v.input_forward
                                                    : v.input_backward;
    return whole / ctx.problem.slices;
  }
  //! Bytes a VOCAB_F holds until its VOCAB_B: its shard's figure, over the problem's slices
  //! (none for the input embedding's passes).
  double vocabulary_bytes(const CostContext& ctx, const Action& a) const {
    if (is_input_vocabulary(a.kind)) return 0.0;
    return shard(a.stage).bytes / ctx.problem.slices;
  }
  //! The shard's `transfer` (`input_transfer` for the input embedding's passes).
  double vocabulary_transfer_seconds(const CostContext&, const Action& a) const {
    const VocabularyProfile& v = shard(a.stage);
    return is_input_vocabulary(a.kind) ? v.input_transfer : v.transfer;
  }

  //! The whole-microbatch figures of `stage`; throws invalid_problem when the table has none.
  const StageProfile& at(const CostContext& ctx, int stage) const {
    if (stage < 0 || stage >= static_cast<int>(stages.size()))
      throw invalid_problem("ProfiledCost has figures for " + std::to_string(stages.size()) +
                            " stages but was asked about stage " + std::to_string(stage) +
                            " of a problem with " + std::to_string(ctx.problem.stages) +
                            "; give one StageProfile per stage.");
    return stages[static_cast<std::size_t>(stage)];
  }

  //! True when `slices` has one entry per slice of the problem for `stage`.
  bool has_slice_figures(const CostContext& ctx, int stage) const {
    return stage >= 0 && stage < static_cast<int>(slices.size()) &&
           static_cast<int>(slices[static_cast<std::size_t>(stage)].size()) == ctx.problem.slices;
  }

  //! Time of compute action `a` from its stage's figures (a W part: its share of
  //! backward_weight); 0 for any other action.
  double duration(const CostContext& ctx, const Action& a) const {
    if (!is_compute(a.kind) || a.kind == OpKind::Overlap) return 0.0;
    double k = 1;
    const StageProfile& p = figures(ctx, a.stage, a.slice, k);
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

  //! Bytes compute action `a` adds (F, R) or frees (B, I, W), from its stage's figures; 0 for
  //! any other action.
  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    if (!is_compute(a.kind) || a.kind == OpKind::Overlap) return 0.0;
    double k = 1;
    const StageProfile& p = figures(ctx, a.stage, a.slice, k);
    switch (a.kind) {
      case OpKind::F:
        return (checkpointed ? p.boundary_bytes : p.activation_bytes) / k;
      case OpKind::R:
        return (p.activation_bytes - p.boundary_bytes) / k;
      case OpKind::B:
        return -p.activation_bytes / k + context_gradient_change(ctx, a);
      case OpKind::I:
        return -(p.activation_bytes - p.wgrad_bytes) / k + context_gradient_change(ctx, a);
      case OpKind::W: {
        const int parts = ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1;
        if (static_cast<int>(p.wgrad_part_bytes.size()) == parts && a.part >= 0 && a.part < parts)
          return -p.wgrad_part_bytes[static_cast<std::size_t>(a.part)] / k;
        return -p.wgrad_bytes / k / parts;
      }
      default:
        return 0.0;
    }
  }

  //! `transfer`, for every message.
  double transfer_time(const CostContext&, const Action&) const { return transfer; }

  //! An OFFLOAD's or RELOAD's copy: its unit's activation bytes over host_link_bandwidth (0
  //! without one); 0 for any other action.
  double host_copy_seconds(const CostContext& ctx, const Action& a) const {
    if (!is_offload_action(a.kind) || !(host_link_bandwidth > 0)) return 0.0;
    return memory_delta(ctx, Action::make(OpKind::F, a.stage, a.microbatch, a.slice), false) /
           host_link_bandwidth;
  }

  //! The stage's `gradient_reduction` seconds: how long the reduction its REDUCE_GRAD starts
  //! holds the rank's data-parallel link (`has_reduce_seconds`).
  double reduce_seconds(const CostContext& ctx, int /*rank*/, int stage) const {
    return at(ctx, stage).gradient_reduction;
  }

 private:
  const VocabularyProfile& shard(int j) const {
    if (j < 0 || j >= static_cast<int>(vocabulary.size()))
      throw invalid_problem("ProfiledCost has vocabulary figures for " +
                            std::to_string(vocabulary.size()) +
                            " shards but was asked about shard " + std::to_string(j) +
                            "; give one VocabularyProfile per rank.");
    return vocabulary[static_cast<std::size_t>(j)];
  }

  // The figures of (stage, slice) and the divisor that makes them one slice's.
  const StageProfile& figures(const CostContext& ctx, int stage, int slice, double& k) const {
    if (has_slice_figures(ctx, stage) && slice >= 0 && slice < ctx.problem.slices) {
      k = 1;
      return slices[static_cast<std::size_t>(stage)][static_cast<std::size_t>(slice)];
    }
    k = ctx.problem.slices;
    return at(ctx, stage);
  }

  // A backward of slice k: the first one of the microbatch (its last slice) takes the
  // gradient buffers of every slice, each slice's own backward frees its buffer.
  double context_gradient_change(const CostContext& ctx, const Action& a) const {
    const int count = ctx.problem.slices;
    double change = 0;
    if (a.slice == count - 1)
      for (int j = 0; j < count; ++j) {
        double k = 1;
        change += figures(ctx, a.stage, j, k).context_gradient_bytes / k;
      }
    double k = 1;
    change -= figures(ctx, a.stage, a.slice, k).context_gradient_bytes / k;
    return change;
  }
};

static_assert(cost_model<ProfiledCost> && has_reduce_seconds<ProfiledCost> &&
              has_vocabulary_cost<ProfiledCost>);

}  // namespace pipesched
