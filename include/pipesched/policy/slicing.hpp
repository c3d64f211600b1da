// Slicing policies: how each microbatch's sequence is cut into slices that the schedule
// runs as separate units.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/policy/family.hpp"

namespace pipesched {
namespace slicing {

//! Whole sequences: one slice per microbatch.
struct Whole : detail::SlicingTag {
  static constexpr std::string_view name = "whole";
  static constexpr int slices = 1;  //!< slices per microbatch the policy schedules
};

}  // namespace slicing

//! True when `T` is a slicing policy (slicing::Whole, ...).
template <class T>
struct is_slicing : std::bool_constant<detail::is_policy_of_v<detail::SlicingTag, T>> {};
template <class T>
inline constexpr bool is_slicing_v = is_slicing<T>::value;
//! A slicing policy.
template <class T>
concept slicing_policy = is_slicing_v<T>;

}  // namespace pipesched
