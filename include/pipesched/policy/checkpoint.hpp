// Activation-checkpoint policies: which forwards keep only their input and where their
// recomputes run. A policy is a tag with its facts and one customization point, `apply`, which
// takes the order's compute-only schedule and returns it with its recomputes:
//
//     struct MyCheckpoint : pipesched::checkpoint::Custom {
//       static constexpr std::string_view name = "every-other";     // the command-line name
//       static constexpr std::string_view summary = "recompute every other microbatch";
//       template <pipesched::cost_model Cost>
//       static pipesched::Schedule apply(const pipesched::Schedule& s, const Cost& cost,
//                                        const pipesched::MemoryBudget& budget);
//     };
//
// plan<order::..., MyCheckpoint> calls it, register_checkpoint<MyCheckpoint>() offers it by
// name to the command-line tools and the tuner (policy/checkpoint_registry.hpp), and the
// executor runs what it returns like any schedule with recomputes. with_recomputes (below)
// builds the result from the units chosen and where each R goes. The built-in policies apply
// their CheckpointMode (apply_checkpoint).
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/order.hpp"

namespace pipesched {
namespace checkpoint {

//! The base of a user's checkpoint policy: its defaults (no budget needed, every order
//! accepted). A policy derived from it gives `name`, `summary` and `apply`, and may override
//! `needs_budget` (true: generate() needs a cost model and a budget, which apply then gets)
//! and `runs_on<Order>`.
struct Custom : detail::CheckpointTag {
  static constexpr std::string_view name = "custom";  //!< the command-line name
  //! One line for `pipesched list`.
  static constexpr std::string_view summary = "a checkpoint policy of the program's own";
  //! Whether generate() needs a cost model and a memory budget to choose what to recompute.
  static constexpr bool needs_budget = false;
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = 0;
  //! Whether apply may add recomputes (false only for a policy that never checkpoints: an
  //! order with a memory knob then fits itself to the budget instead).
  static constexpr bool recomputes = true;
  //! Whether the policy can checkpoint a schedule of order `Order`.
  template <class Order>
  static constexpr bool runs_on = true;
};

}  // namespace checkpoint

namespace detail {

// A built-in policy: its CheckpointMode, applied by apply_checkpoint; its name and whether it
// needs a budget are the mode's facts (core/modes.hpp), its summary the tag's own.
template <CheckpointMode M>
struct CheckpointBuiltin : checkpoint::Custom {
  static constexpr CheckpointMode mode = M;
  static constexpr std::string_view name = to_string(M);  //!< the command-line name
  //! Whether the mode chooses what to recompute from a memory budget.
  static constexpr bool needs_budget = is_selective(M) || M == CheckpointMode::Mario;
  static constexpr bool recomputes = M != CheckpointMode::None;
  template <cost_model Cost>
  static Schedule apply(const Schedule& s, const Cost& cost, const MemoryBudget& budget) {
    return apply_checkpoint(s, M, cost, budget);
  }
};

}  // namespace detail

namespace checkpoint {

//! No checkpointing: every forward keeps its activations until its backward.
struct None : pipesched::detail::CheckpointBuiltin<CheckpointMode::None> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary = "keep every activation until its backward";
};

//! Full checkpointing: every forward keeps only its input; its recompute runs right before its
//! backward, once the gradient is there (RL), as in Megatron-LM.
struct Full : pipesched::detail::CheckpointBuiltin<CheckpointMode::Full> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary =
      "recompute every forward right before its backward, once its gradient is there "
      "(Megatron-LM)";
};

//! Selective checkpointing: just the forwards a per-rank memory budget requires, recomputed
//! right before the backward once the gradient is there (checkpoint_selective, RL).
struct Selective : pipesched::detail::CheckpointBuiltin<CheckpointMode::Selective> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary =
      "recompute what --memory-budget requires, right before its backward, the same way";
};

//! Full checkpointing with each recompute free to start before its gradient arrives (R).
struct FullEarly : pipesched::detail::CheckpointBuiltin<CheckpointMode::FullEarly> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary =
      "as full, each recompute free to run while its gradient is on its way";
};

//! Selective checkpointing with each recompute free to start before its gradient arrives (R).
struct SelectiveEarly : pipesched::detail::CheckpointBuiltin<CheckpointMode::SelectiveEarly> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary =
      "as selective, each recompute free to run while its gradient is on its way";
};

//! Mario: recomputes moved into bubbles and extra forwards preposed within a per-rank memory
//! budget (checkpoint_mario). It plans on the steady one-forward-one-backward rhythm, so it
//! runs on the orders whose `mario_applies` is true (and policies refining them).
struct Mario : pipesched::detail::CheckpointBuiltin<CheckpointMode::Mario> {
  //! One line for `pipesched list`.
  static constexpr std::string_view summary =
      "recompute in bubbles, prepose forwards, within --memory-budget";
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
  static constexpr bool needs_budget = false;  //!< the budget is in the policy
  //! Microbatches' activations a rank may hold (0: the budget comes from generate()).
  static constexpr int held_microbatches = Microbatches;
};

}  // namespace checkpoint

//! True when `T` is a checkpoint policy (checkpoint::None, Full, Selective, Mario, ...).
template <class T>
struct is_checkpoint : std::bool_constant<detail::is_policy_of_v<detail::CheckpointTag, T>> {};
//! True when `T` is a checkpoint policy.
template <class T>
inline constexpr bool is_checkpoint_v = is_checkpoint<T>::value;
//! A checkpoint policy.
template <class T>
concept checkpoint_policy = is_checkpoint_v<T>;

//! A checkpoint policy with its customization point for cost model `Cost`:
//! `static Schedule apply(const Schedule&, const Cost&, const MemoryBudget&)`.
template <class P, class Cost>
concept applicable_checkpoint = checkpoint_policy<P> &&
    requires(const Schedule& s, const Cost& c, const MemoryBudget& b) {
  { P::apply(s, c, b) } -> std::same_as<Schedule>;
};

}  // namespace pipesched
