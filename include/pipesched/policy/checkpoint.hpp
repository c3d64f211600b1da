// Activation-checkpoint policies: which forwards keep only their input and are recomputed
// before their backward.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/policy/family.hpp"

namespace pipesched {
namespace checkpoint {

//! No checkpointing: every forward keeps its activations until its backward.
struct None : detail::CheckpointTag {
  static constexpr std::string_view name = "none";
};

}  // namespace checkpoint

//! True when `T` is a checkpoint policy (checkpoint::None, ...).
template <class T>
struct is_checkpoint : std::bool_constant<detail::is_policy_of_v<detail::CheckpointTag, T>> {};
template <class T>
inline constexpr bool is_checkpoint_v = is_checkpoint<T>::value;
//! A checkpoint policy.
template <class T>
concept checkpoint_policy = is_checkpoint_v<T>;

}  // namespace pipesched
