// Activation-checkpoint policies: which forwards keep only their input and are recomputed
// before their backward. Each tag names its run-time CheckpointMode, whether it chooses
// from a memory budget (and so needs a cost model and a budget to generate), and the
// orders it can run on.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/order.hpp"

namespace pipesched {
namespace checkpoint {

//! No checkpointing: every forward keeps its activations until its backward.
struct None : detail::CheckpointTag {
  static constexpr std::string_view name = "none";
  static constexpr CheckpointMode mode = CheckpointMode::None;
  //! Whether generate() needs a cost model and a memory budget to choose what to recompute.
  static constexpr bool needs_budget = false;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = 0;
  //! Whether the policy can checkpoint a schedule of order `Order`.
  template <class Order>
  static constexpr bool runs_on = true;
};

//! Full checkpointing: every forward keeps only its input; its recompute runs right before its
//! backward, once the gradient is there (RL), as in Megatron-LM.
struct Full : detail::CheckpointTag {
  static constexpr std::string_view name = "full";
  static constexpr CheckpointMode mode = CheckpointMode::Full;
  //! Whether generate() needs a cost model and a memory budget to choose what to recompute.
  static constexpr bool needs_budget = false;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = 0;
  //! Whether the policy can checkpoint a schedule of order `Order`.
  template <class Order>
  static constexpr bool runs_on = true;
};

//! Selective checkpointing: just the forwards a per-rank memory budget requires, recomputed
//! right before the backward once the gradient is there (checkpoint_selective, RL).
struct Selective : detail::CheckpointTag {
  static constexpr std::string_view name = "selective";
  static constexpr CheckpointMode mode = CheckpointMode::Selective;
  //! Whether generate() needs a cost model and a memory budget to choose what to recompute.
  static constexpr bool needs_budget = true;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = 0;
  //! Whether the policy can checkpoint a schedule of order `Order`.
  template <class Order>
  static constexpr bool runs_on = true;
};

//! Full checkpointing with each recompute free to start before its gradient arrives (R).
struct FullEarly : Full {
  static constexpr std::string_view name = "full-early";
  static constexpr CheckpointMode mode = CheckpointMode::FullEarly;
};

//! Selective checkpointing with each recompute free to start before its gradient arrives (R).
struct SelectiveEarly : Selective {
  static constexpr std::string_view name = "selective-early";
  static constexpr CheckpointMode mode = CheckpointMode::SelectiveEarly;
};

//! Mario: recomputes moved into bubbles and extra forwards preposed within a per-rank memory
//! budget (checkpoint_mario). It plans on the steady one-forward-one-backward rhythm, so it
//! runs on the orders whose `mario_applies` is true (and policies refining them).
struct Mario : detail::CheckpointTag {
  static constexpr std::string_view name = "mario";
  static constexpr CheckpointMode mode = CheckpointMode::Mario;
  //! Whether generate() needs a cost model and a memory budget to choose what to recompute.
  static constexpr bool needs_budget = true;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = 0;
  //! Whether the policy can checkpoint a schedule of order `Order`.
  //! (The order's own fact, `Order::mario_applies`, which a refined order inherits.)
  template <class Order>
  static constexpr bool runs_on = Order::mario_applies;
};

//! Selective checkpointing with the budget in the policy: each rank recomputes what it takes
//! to hold at most `Microbatches` microbatches' activations at once (one microbatch's
//! activations on a rank: the memory its forwards of one microbatch take on every stage the
//! rank holds, under the plan's cost model). generate(problem) plans under UniformCost;
//! generate(problem, cost, budget) under `cost`, within the tighter of the two budgets.
template <int Microbatches>
struct SelectiveWithin : Selective {
  static_assert(Microbatches >= 1,
                "pipesched::checkpoint::SelectiveWithin<N>: N is how many microbatches' "
                "activations a rank may hold and must be at least 1 (1 holds about what full "
                "checkpointing needs; the pipeline depth holds what 1F1B holds without it)");
  static constexpr bool needs_budget = false;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = Microbatches;
};

}  // namespace checkpoint

//! True when `T` is a checkpoint policy (checkpoint::None, Full, Selective, Mario, ...).
template <class T>
struct is_checkpoint : std::bool_constant<detail::is_policy_of_v<detail::CheckpointTag, T>> {};
template <class T>
inline constexpr bool is_checkpoint_v = is_checkpoint<T>::value;
//! A checkpoint policy.
template <class T>
concept checkpoint_policy = is_checkpoint_v<T>;

}  // namespace pipesched
