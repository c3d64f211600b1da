// The cost-model concept: how long an action takes, how many bytes (or memory units) it
// adds or frees, and how long its output takes to reach another rank.
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>

#include "pipesched/core/action.hpp"
#include "pipesched/core/message.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! What a cost model may look at besides the action: the problem and the placement.
struct CostContext {
  const Problem& problem;      //!< the problem the schedule solves
  const Placement& placement;  //!< which rank holds each stage
  int wgrad_parts = 1;         //!< pieces each weight-gradient W is cut into (W parts 0..n-1)
  //! True when the schedule holds REDUCE_GRAD actions: the simulator then times each stage's
  //! data-parallel gradient reduction where its REDUCE_GRAD stands (`reduce_seconds`), so a
  //! cost whose `step_tail` charges that reduction after the rank's last action leaves it out
  //! (TransformerCost does). Set by `simulate`; false elsewhere (the tuner's schedules hold none).
  bool scheduled_reduction = false;
};

//! A cost model answers three questions about an action `a` (never an Overlap or Idle:
//! the simulator splits an Overlap into its halves and gives Idle no time):
//! - `duration(ctx, a)`: time it occupies its rank (SendX / RecvX: the rank's own share of
//!   the transfer, usually 0);
//! - `memory_delta(ctx, a, checkpointed)`: memory it adds (> 0) or frees (< 0);
//!   `checkpointed` is true when the schedule recomputes this unit (an R exists), so its
//!   F keeps only the boundary and its R adds the rest;
//! - `transfer_time(ctx, a)`: for a producer `a` (F or B/I), the time from its end until its
//!   output is usable on the neighbouring stage's rank.
template <class C>
concept cost_model = requires(const C& c, const CostContext& ctx, const Action& a, bool ckpt) {
  { c.duration(ctx, a) } -> std::convertible_to<double>;
  { c.memory_delta(ctx, a, ckpt) } -> std::convertible_to<double>;
  { c.transfer_time(ctx, a) } -> std::convertible_to<double>;
};

//! How a weight gradient W cut into parts (CostContext::wgrad_parts) shares its work.
enum class WGradSplit {
  Even,     //!< each part an even share of the unit's W (time and memory)
  PerGemm,  //!< parts are runs of the stage's weight GEMMs in backward order (the LM head,
            //!< then each layer from the last: MLP out, MLP in, projection, QKV), GEMM g of
            //!< G in part ⌊g·parts/G⌋; with parts = G one GEMM each, as MEPipe cuts W
};

//! A cost model that charges each rank some time after its last action (`step_tail(ctx,
//! rank)`: TransformerCost's gradient all-reduce over data-parallel replicas and optimizer
//! step). Optional; the simulator adds it to the rank's end.
template <class C>
concept has_step_tail = requires(const C& c, const CostContext& ctx, int rank) {
  { c.step_tail(ctx, rank) } -> std::convertible_to<double>;
};

//! A cost model that times a stage's data-parallel gradient reduction: `reduce_seconds(ctx,
//! rank, stage)` is how long the reduction that `stage`'s REDUCE_GRAD starts on `rank` holds
//! the rank's data-parallel link. Optional: without it a reduction takes no time.
template <class C>
concept has_reduce_seconds = requires(const C& c, const CostContext& ctx, int rank, int stage) {
  { c.reduce_seconds(ctx, rank, stage) } -> std::convertible_to<double>;
};

//! Seconds `cost` gives the reduction of `stage`'s gradients on `rank` (its
//! `reduce_seconds`), or 0 for a cost without the hook.
template <class C>
double reduce_seconds_of(const C& cost, const CostContext& ctx, int rank, int stage) {
  if constexpr (has_reduce_seconds<C>)
    return static_cast<double>(cost.reduce_seconds(ctx, rank, stage));
  else
    return 0.0;
}

//! A cost model that times the copies of activations between device and host memory:
//! `host_copy_seconds(ctx, a)` is how long the copy of OFFLOAD (to host memory) or RELOAD (back)
//! `a` holds the rank's host link in that direction. Optional: without it a copy takes no time.
template <class C>
concept has_host_copy = requires(const C& c, const CostContext& ctx, const Action& a) {
  { c.host_copy_seconds(ctx, a) } -> std::convertible_to<double>;
};

//! Seconds `cost` gives the host copy of OFFLOAD or RELOAD `a` (its `host_copy_seconds`), or 0
//! for a cost without the hook.
template <class C>
double host_copy_seconds_of(const C& cost, const CostContext& ctx, const Action& a) {
  if constexpr (has_host_copy<C>)
    return static_cast<double>(cost.host_copy_seconds(ctx, a));
  else
    return 0.0;
}

//! A cost model that prices the vocabulary passes of vocabulary parallelism (VOCAB_F,
//! VOCAB_B; pass/vocabulary.hpp):
//! - `vocabulary_seconds(ctx, a)`: the time pass `a` occupies its rank;
//! - `vocabulary_bytes(ctx, a)`: the bytes the shard's VOCAB_F of `a`'s microbatch and slice
//!   holds from its start until its VOCAB_B ends (the same figure for either kind);
//! - `vocabulary_transfer_seconds(ctx, a)`: for a VOCAB_F, the time from the end of the last
//!   stage's forward until that forward's output is on the shard's rank (the broadcast; 0 on
//!   the same rank); for a VOCAB_B, the time from the end of the last VOCAB_F of its
//!   microbatch and slice on any rank until their reduction is done, which every VOCAB_B and
//!   the last stage's backward of that microbatch and slice wait for.
//! With the input embedding split too (EMBED_F, EMBED_B), the same three answer for those:
//! `vocabulary_seconds` the shard's lookups (EMBED_F) or the gradient of its rows (EMBED_B);
//! `vocabulary_bytes` 0 (nothing is held between them); `vocabulary_transfer_seconds` for an
//! EMBED_F the time from the last EMBED_F of its microbatch and slice until their reduction is
//! the first stage's input, for an EMBED_B the time from the first stage's backward until its
//! input gradient is on the shard's rank. A model splits the input embedding when it has a
//! member `input_vocabulary_parallel()` that says so (splits_input_vocabulary).
//! Optional: the simulator refuses a schedule with vocabulary passes under a model without it.
template <class C>
concept has_vocabulary_cost = requires(const C& c, const CostContext& ctx, const Action& a) {
  { c.vocabulary_seconds(ctx, a) } -> std::convertible_to<double>;
  { c.vocabulary_bytes(ctx, a) } -> std::convertible_to<double>;
  { c.vocabulary_transfer_seconds(ctx, a) } -> std::convertible_to<double>;
};

//! True when `cost` splits the input embedding by vocabulary (its `input_vocabulary_parallel()`;
//! false for a model without the member): a schedule simulated under it must hold EMBED_F and
//! EMBED_B, and one with them needs it.
template <class C>
bool splits_input_vocabulary(const C& cost) {
  if constexpr (requires {
                  { cost.input_vocabulary_parallel() } -> std::convertible_to<bool>;
                })
    return static_cast<bool>(cost.input_vocabulary_parallel());
  else
    return false;
}

//! What an action does to its rank's memory: `grow` is held from its start, `shrink` (<= 0)
//! released at its end. The rule every replay of a schedule counts memory by (the simulator,
//! the checkpointing passes, the weight-gradient filler, the list-scheduling engine).
struct MemoryEffect {
  double grow = 0;    //!< memory taken at the action's start (>= 0)
  double shrink = 0;  //!< memory released at its end (<= 0)
  //! What the rank holds more once the action has ended.
  double net() const noexcept { return grow + shrink; }
};

//! The memory effect of `a` under `cost`: for a compute action its memory_delta (growth when
//! positive, release when negative), for an Overlap that of each half; an OFFLOAD releases what
//! its unit's forward took and a RELOAD takes it again (its start); a VOCAB_F takes its
//! `vocabulary_bytes` and its VOCAB_B releases them (its end; nothing under a model without
//! has_vocabulary_cost, which the simulator refuses); nothing for other actions
//! (communication, idle, whole-stage actions). `checkpointed(x)` says whether the unit of
//! compute action `x` is recomputed in the schedule (an R exists for it).
template <class Cost, class Checkpointed>
MemoryEffect memory_effect(const Cost& cost, const CostContext& ctx, const Action& a,
                           Checkpointed&& checkpointed) {
  MemoryEffect e;
  auto one = [&](const Action& x) {
    const double d = static_cast<double>(cost.memory_delta(ctx, x, checkpointed(x)));
    (d >= 0 ? e.grow : e.shrink) += d;
  };
  if (a.kind == OpKind::Overlap) {
    one(a.forward_half());
    one(a.backward_half());
  } else if (is_compute(a.kind)) {
    one(a);
  } else if (is_offload_action(a.kind)) {
    const Action f = Action::make(OpKind::F, a.stage, a.microbatch, a.slice);
    const double bytes = static_cast<double>(cost.memory_delta(ctx, f, checkpointed(f)));
    (a.kind == OpKind::Offload ? e.shrink : e.grow) += a.kind == OpKind::Offload ? -bytes : bytes;
  } else if (a.kind == OpKind::VocabF || a.kind == OpKind::VocabB) {
    if constexpr (has_vocabulary_cost<Cost>) {
      const double bytes = static_cast<double>(cost.vocabulary_bytes(ctx, a));
      (a.kind == OpKind::VocabF ? e.grow : e.shrink) += a.kind == OpKind::VocabF ? bytes : -bytes;
    }
  }
  return e;
}

//! The unit `cost` measures memory in: what its `memory_unit()` member returns, or its
//! `static constexpr MemoryUnit memory_unit`; MemoryUnit::Units for a model that says neither.
//! Messages about memory (a budget a schedule cannot meet) print amounts in it.
template <class C>
constexpr MemoryUnit memory_unit_of(const C& cost) noexcept {
  if constexpr (requires {
                  { cost.memory_unit() } -> std::convertible_to<MemoryUnit>;
                })
    return cost.memory_unit();
  else if constexpr (requires {
                       { C::memory_unit } -> std::convertible_to<MemoryUnit>;
                     })
    return C::memory_unit;
  else
    return MemoryUnit::Units;
}

//! Any cost model, by reference: a non-owning view that is itself a cost_model, for code that
//! takes a cost at run time (the registry's memory-bounded generators) without being a template
//! over its type. It has every optional hook the simulator asks for (has_host_copy,
//! has_vocabulary_cost), answering 0 where the model lacks one (`prices_vocabulary()` says
//! whether it prices vocabulary passes). The model it refers to must outlive it. Each call is one
//! indirect call.
class CostRef {
 public:
  //! A view of `cost`, which must outlive it.
  template <cost_model C>
  requires(!std::same_as<std::remove_cvref_t<C>, CostRef>) CostRef(const C& cost)
  noexcept  // NOLINT(google-explicit-constructor): a view, like span
      : model_(std::addressof(cost)),
        unit_(memory_unit_of(cost)),
        duration_([](const void* m, const CostContext& ctx, const Action& a) {
          return static_cast<double>(static_cast<const C*>(m)->duration(ctx, a));
        }),
        memory_([](const void* m, const CostContext& ctx, const Action& a, bool ckpt) {
          return static_cast<double>(static_cast<const C*>(m)->memory_delta(ctx, a, ckpt));
        }),
        transfer_([](const void* m, const CostContext& ctx, const Action& a) {
          return static_cast<double>(static_cast<const C*>(m)->transfer_time(ctx, a));
        }),
        copy_([](const void* m, const CostContext& ctx, const Action& a) {
          return host_copy_seconds_of(*static_cast<const C*>(m), ctx, a);
        }),
        vocabulary_([&cost] {
          if constexpr (requires { cost.prices_vocabulary(); })
            return has_vocabulary_cost<C> && static_cast<bool>(cost.prices_vocabulary());
          else
            return has_vocabulary_cost<C>;
        }()),
        input_vocabulary_(splits_input_vocabulary(cost)),
        vocab_([](const void* m, const CostContext& ctx, const Action& a, int what) -> double {
          if constexpr (has_vocabulary_cost<C>) {
            const C& c = *static_cast<const C*>(m);
            return static_cast<double>(what == 0   ? c.vocabulary_seconds(ctx, a)
                                       : what == 1 ? c.vocabulary_bytes(ctx, a)
                                                   : c.vocabulary_transfer_seconds(ctx, a));
          } else {
            (void)m, (void)ctx, (void)a, (void)what;
            return 0.0;
          }
        }),
        even_([](const void* m, void* fn, void (*call)(void*, const CostRef&)) {
          if constexpr (requires(const C& c) {
                          { c.evenly_layered() } -> std::convertible_to<C>;
                        }) {
            const C even = static_cast<const C*>(m)->evenly_layered();
            call(fn, CostRef(even));
          } else {
            call(fn, CostRef(*static_cast<const C*>(m)));
          }
        }) {}

  //! The model's `duration(ctx, a)`.
  double duration(const CostContext& ctx, const Action& a) const {
    return duration_(model_, ctx, a);
  }
  //! The model's `memory_delta(ctx, a, checkpointed)`.
  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    return memory_(model_, ctx, a, checkpointed);
  }
  //! The model's `transfer_time(ctx, a)`.
  double transfer_time(const CostContext& ctx, const Action& a) const {
    return transfer_(model_, ctx, a);
  }
  //! The model's `host_copy_seconds(ctx, a)` (0 for a model without it).
  double host_copy_seconds(const CostContext& ctx, const Action& a) const {
    return copy_(model_, ctx, a);
  }
  //! The unit the model it refers to measures memory in.
  MemoryUnit memory_unit() const noexcept { return unit_; }
  //! True when the model it refers to prices vocabulary passes (has_vocabulary_cost); the
  //! three calls below give 0 where it does not.
  bool prices_vocabulary() const noexcept { return vocabulary_; }
  //! True when the model it refers to splits the input embedding by vocabulary
  //! (splits_input_vocabulary).
  bool input_vocabulary_parallel() const noexcept { return input_vocabulary_; }
  //! The model's `vocabulary_seconds(ctx, a)`.
  double vocabulary_seconds(const CostContext& ctx, const Action& a) const {
    return vocab_(model_, ctx, a, 0);
  }
  //! The model's `vocabulary_bytes(ctx, a)`.
  double vocabulary_bytes(const CostContext& ctx, const Action& a) const {
    return vocab_(model_, ctx, a, 1);
  }
  //! The model's `vocabulary_transfer_seconds(ctx, a)`.
  double vocabulary_transfer_seconds(const CostContext& ctx, const Action& a) const {
    return vocab_(model_, ctx, a, 2);
  }

  //! Calls `f(even)` with a view of the model with its layers split evenly over whatever
  //! stages a problem has (its `evenly_layered()`, analysis/cost_capabilities.hpp: layered_cost),
  //! or of the model itself where it splits no layers; `even` lives for the call only. For
  //! what must not depend on one schedule's layer split (V-Half's memory target, 1F1B's peak).
  template <class F>
  void with_evenly_layered(F&& f) const {
    even_(model_, std::addressof(f), [](void* fn, const CostRef& even) {
      (*static_cast<std::remove_reference_t<F>*>(fn))(even);
    });
  }

 private:
  const void* model_;
  MemoryUnit unit_;
  double (*duration_)(const void*, const CostContext&, const Action&);
  double (*memory_)(const void*, const CostContext&, const Action&, bool);
  double (*transfer_)(const void*, const CostContext&, const Action&);
  double (*copy_)(const void*, const CostContext&, const Action&);
  bool vocabulary_;
  bool input_vocabulary_;
  double (*vocab_)(const void*, const CostContext&, const Action&, int);
  void (*even_)(const void*, void*, void (*)(void*, const CostRef&));
};

}  // namespace pipesched
