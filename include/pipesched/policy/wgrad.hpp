// Weight-gradient policies: whether a backward runs as one action or as an input-gradient
// action followed by a weight-gradient action that may move.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/policy/family.hpp"

namespace pipesched {
namespace wgrad {

//! One full backward action (B) per stage and microbatch.
struct Fused : detail::WGradTag {
  static constexpr std::string_view name = "fused";
  static constexpr bool splits = false;  //!< whether backwards are emitted as I then W
};

//! Backward split into I (input gradient) and W (weight gradient), as in Zero Bubble.
struct Split : detail::WGradTag {
  static constexpr std::string_view name = "split";
  static constexpr bool splits = true;  //!< whether backwards are emitted as I then W
};

}  // namespace wgrad

//! True when `T` is a weight-gradient policy (wgrad::Fused, wgrad::Split, ...).
template <class T>
struct is_wgrad : std::bool_constant<detail::is_policy_of_v<detail::WGradTag, T>> {};
template <class T>
inline constexpr bool is_wgrad_v = is_wgrad<T>::value;
//! A weight-gradient policy.
template <class T>
concept wgrad_policy = is_wgrad_v<T>;

}  // namespace pipesched
