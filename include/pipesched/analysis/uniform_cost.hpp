// UniformCost: every microbatch costs the same; time and memory in abstract units.
#pragma once

#include <string>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

//! Durations for one microbatch through one rank's whole share of the model, split evenly
//! over its V chunks and K slices (each (chunk, slice) unit takes 1/(V·K) of them). Memory
//! in units of one microbatch's activations of one rank's whole share (= 1.0). With several
//! replicas (Chimera) a rank holds a share of each; a microbatch runs through one of them, so
//! V counts the chunks of one replica.
struct UniformCost {
  double f = 1.0;          //!< forward
  double b = 2.0;          //!< full backward (I takes b − w, W takes w)
  double w = 1.0;          //!< weight-gradient part of the backward
  double r = 1.0;          //!< recompute (usually = f)
  double comm = 0.0;       //!< time for one message between ranks
  double boundary = 0.05;  //!< share of a unit's activations a checkpointed forward keeps
  double w_memory = 0.0;   //!< share of a unit's activations kept from I until its W
  //! Time to copy one microbatch's activations of one rank's share between device and host
  //! memory, one way (an OFFLOAD's or RELOAD's copy takes its unit's share).
  double copy = 1.0;
  //! @{
  //! Vocabulary passes (vocabulary parallelism, pass/vocabulary.hpp), for one shard and one
  //! microbatch, each slice taking 1/K: the time of a VOCAB_F (`vf`) and of a VOCAB_B (`vb`),
  //! and the memory a VOCAB_F holds until its VOCAB_B (`vmem`, in the same units as the
  //! activations). The broadcast and the reduction take `comm` each.
  double vf = 0.25, vb = 0.25, vmem = 0.25;
  //! @}
  //! The input embedding split by vocabulary too (EMBED_F and EMBED_B passes,
  //! add_vocabulary_passes): an EMBED_F takes `ef`, an EMBED_B `eb` (one shard, one
  //! microbatch, each slice 1/K); the reduction of a unit's lookups and the broadcast of the
  //! first stage's input gradient take `comm` each.
  bool input_vocabulary = false;
  //! @{
  //! Times of an EMBED_F (`ef`) and of an EMBED_B (`eb`), with `input_vocabulary`.
  double ef = 0.05, eb = 0.05;
  //! @}

  //! Throws invalid_problem naming the first parameter out of range.
  void check() const {
    auto bad = [](const char* name, double v, const char* want) {
      throw invalid_problem(std::string("cost parameter ") + name + " = " + std::to_string(v) +
                            " is out of range; " + want + ".");
    };
    if (!(f >= 0)) bad("f", f, "need f >= 0");
    if (!(b >= 0)) bad("b", b, "need b >= 0");
    if (!(w >= 0 && w <= b)) bad("w", w, "need 0 <= w <= b (I takes b - w)");
    if (!(r >= 0)) bad("r", r, "need r >= 0");
    if (!(comm >= 0)) bad("comm", comm, "need comm >= 0");
    if (!(boundary >= 0 && boundary <= 1)) bad("boundary", boundary, "need 0 <= boundary <= 1");
    if (!(w_memory >= 0 && w_memory <= 1)) bad("w_memory", w_memory, "need 0 <= w_memory <= 1");
    if (!(copy >= 0)) bad("copy", copy, "need copy >= 0");
    if (!(vf >= 0)) bad("vf", vf, "need vf >= 0");
    if (!(vb >= 0)) bad("vb", vb, "need vb >= 0");
    if (!(vmem >= 0)) bad("vmem", vmem, "need vmem >= 0");
    if (!(ef >= 0)) bad("ef", ef, "need ef >= 0");
    if (!(eb >= 0)) bad("eb", eb, "need eb >= 0");
  }

  //! `input_vocabulary`: the input embedding is split by vocabulary (splits_input_vocabulary).
  bool input_vocabulary_parallel() const noexcept { return input_vocabulary; }

  //! Share of a rank's work one (stage, slice) unit carries: 1 / (chunks · slices), counting
  //! the chunks of one replica (a Chimera stage is a whole 1/p of the model, as 1F1B's).
  static double unit_share(const CostContext& ctx) {
    const int stages = ctx.placement.stages() > 0 ? ctx.placement.stages() : ctx.problem.stages;
    const int replicas = ctx.problem.replicas > 0 ? ctx.problem.replicas : 1;
    const double chunks = static_cast<double>(stages) / ctx.problem.ranks / replicas;
    return 1.0 / (chunks * ctx.problem.slices);
  }

  //! `f`, `b`, `b − w`, `w` or `r` times the unit's share (a W part: its share of `w`); 0 for
  //! any other action.
  double duration(const CostContext& ctx, const Action& a) const {
    const double u = unit_share(ctx);
    switch (a.kind) {
      case OpKind::F:
        return f * u;
      case OpKind::B:
        return b * u;
      case OpKind::I:
        return (b - w) * u;
      case OpKind::W:
        return w * u / parts(ctx);
      case OpKind::R:
        return r * u;
      default:
        return 0.0;
    }
  }

  //! The unit's share of one microbatch's activations: F adds it (`boundary` of it when
  //! checkpointed, R the rest), B frees it, I all but `w_memory` of it and W the rest.
  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    const double u = unit_share(ctx);
    switch (a.kind) {
      case OpKind::F:
        return (checkpointed ? boundary : 1.0) * u;
      case OpKind::R:
        return (1.0 - boundary) * u;
      case OpKind::B:
        return -u;
      case OpKind::I:
        return -(1.0 - w_memory) * u;
      case OpKind::W:
        return -w_memory * u / parts(ctx);
      default:
        return 0.0;
    }
  }

  //! `comm`, for every message.
  double transfer_time(const CostContext&, const Action&) const { return comm; }

  //! `vf`, `vb`, `ef` or `eb` over the slices for a VOCAB_F, VOCAB_B, EMBED_F or EMBED_B; 0
  //! for any other action.
  double vocabulary_seconds(const CostContext& ctx, const Action& a) const {
    const double k = ctx.problem.slices > 0 ? ctx.problem.slices : 1;
    switch (a.kind) {
      case OpKind::VocabF:
        return vf / k;
      case OpKind::VocabB:
        return vb / k;
      case OpKind::EmbedF:
        return ef / k;
      case OpKind::EmbedB:
        return eb / k;
      default:
        return 0.0;
    }
  }
  //! `vmem` over the slices for the output layer's passes; 0 for the input embedding's.
  double vocabulary_bytes(const CostContext& ctx, const Action& a) const {
    if (is_input_vocabulary(a.kind)) return 0.0;
    return vmem / (ctx.problem.slices > 0 ? ctx.problem.slices : 1);
  }
  //! `comm` for the broadcast to a VOCAB_F on another rank than the last stage's (to an
  //! EMBED_B on another rank than the first stage's), and for a reduction over more than one
  //! rank (VOCAB_B, EMBED_F); 0 otherwise.
  double vocabulary_transfer_seconds(const CostContext& ctx, const Action& a) const {
    if (a.kind == OpKind::VocabF || a.kind == OpKind::EmbedB) {
      const int stage = a.kind == OpKind::EmbedB     ? 0
                        : ctx.placement.stages() > 0 ? ctx.placement.stages() - 1
                                                     : -1;
      return stage >= 0 && ctx.placement.stages() > 0 && ctx.placement.rank_of(stage) == a.stage
                 ? 0.0
                 : comm;
    }
    return ctx.problem.ranks > 1 ? comm : 0.0;
  }

  //! `copy` times the unit's share for an OFFLOAD's or RELOAD's copy; 0 for any other action.
  double host_copy_seconds(const CostContext& ctx, const Action& a) const {
    return is_offload_action(a.kind) ? copy * unit_share(ctx) : 0.0;
  }

 private:
  static double parts(const CostContext& ctx) { return ctx.wgrad_parts > 0 ? ctx.wgrad_parts : 1; }
};

static_assert(cost_model<UniformCost>);
static_assert(has_vocabulary_cost<UniformCost>);

}  // namespace pipesched
