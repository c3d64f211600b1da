// The cost-model concept: how long an action takes, how many bytes (or memory units) it
// adds or frees, and how long its output takes to reach another rank.
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>

#include "pipesched/core/action.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! What a cost model may look at besides the action: the problem and the placement.
struct CostContext {
  const Problem& problem;
  const Placement& placement;
  int wgrad_parts = 1;  //!< pieces each weight-gradient W is cut into (W parts 0..n-1)
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

//! Any cost model, by reference: a non-owning view that is itself a cost_model, for code that
//! takes a cost at run time (the registry's memory-bounded generators) without being a template
//! over its type. The model it refers to must outlive it. Each call is one indirect call.
class CostRef {
 public:
  template <cost_model C>
  requires(!std::same_as<std::remove_cvref_t<C>, CostRef>) CostRef(const C& cost)
  noexcept  // NOLINT(google-explicit-constructor): a view, like span
      : model_(std::addressof(cost)),
        duration_([](const void* m, const CostContext& ctx, const Action& a) {
          return static_cast<double>(static_cast<const C*>(m)->duration(ctx, a));
        }),
        memory_([](const void* m, const CostContext& ctx, const Action& a, bool ckpt) {
          return static_cast<double>(static_cast<const C*>(m)->memory_delta(ctx, a, ckpt));
        }),
        transfer_([](const void* m, const CostContext& ctx, const Action& a) {
          return static_cast<double>(static_cast<const C*>(m)->transfer_time(ctx, a));
        }) {}

  double duration(const CostContext& ctx, const Action& a) const {
    return duration_(model_, ctx, a);
  }
  double memory_delta(const CostContext& ctx, const Action& a, bool checkpointed) const {
    return memory_(model_, ctx, a, checkpointed);
  }
  double transfer_time(const CostContext& ctx, const Action& a) const {
    return transfer_(model_, ctx, a);
  }

 private:
  const void* model_;
  double (*duration_)(const void*, const CostContext&, const Action&);
  double (*memory_)(const void*, const CostContext&, const Action&, bool);
  double (*transfer_)(const void*, const CostContext&, const Action&);
};

}  // namespace pipesched
