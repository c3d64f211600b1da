// Slicing policies: how each microbatch's sequence is cut into slices that the schedule
// runs as separate units. The slice count K is part of the policy; where the cuts fall
// (slice lengths) only matters to a cost model that knows tokens (TransformerCost), and
// plan<...>::sliced_cost applies them to one.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/analysis/slicing.hpp"
#include "pipesched/policy/family.hpp"

namespace pipesched {
//! Slicing policies: whether, and how, each microbatch's sequence is cut into slices.
namespace slicing {

//! Whole sequences: one slice per microbatch.
struct Whole : detail::SlicingTag {
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "whole";
  static constexpr int slices = 1;  //!< slices per microbatch the policy schedules
  static constexpr SlicingMode mode = SlicingMode::Uniform;  //!< how slice lengths are chosen
  //! Whether generate() needs a cost model to choose the slice lengths.
  static constexpr bool needs_cost = false;
};

//! K slices of sequence / K tokens each (the last takes the remainder): uniform_slices.
template <int K>
struct Uniform : detail::SlicingTag {
  static_assert(K >= 1,
                "pipesched::slicing::Uniform<K>: K is the number of slices per microbatch and "
                "must be at least 1; use Uniform<2> or more (or slicing::Whole for one)");
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "uniform";
  static constexpr int slices = K;  //!< slices per microbatch the policy schedules
  static constexpr SlicingMode mode = SlicingMode::Uniform;  //!< how slice lengths are chosen
  //! Whether generate() needs a cost model to choose the slice lengths.
  static constexpr bool needs_cost = false;
};

//! K slices of equal forward time under causal attention, where a later slice attends to a
//! longer prefix and so gets fewer tokens (balanced_slices). The lengths come from a cost
//! model: generate(problem, cost, budget), and simulate with plan<...>::sliced_cost(cost).
template <int K>
struct Balanced : detail::SlicingTag {
  static_assert(K >= 1,
                "pipesched::slicing::Balanced<K>: K is the number of slices per microbatch and "
                "must be at least 1; use Balanced<2> or more (or slicing::Whole for one)");
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "balanced";
  static constexpr int slices = K;  //!< slices per microbatch the policy schedules
  static constexpr SlicingMode mode = SlicingMode::Balanced;  //!< how slice lengths are chosen
  //! Whether generate() needs a cost model to choose the slice lengths.
  static constexpr bool needs_cost = true;
};

}  // namespace slicing

//! True when `T` is a slicing policy (slicing::Whole, Uniform<K>, Balanced<K>, ...).
template <class T>
struct is_slicing : std::bool_constant<detail::is_policy_of_v<detail::SlicingTag, T>> {};
//! True when `T` is a slicing policy.
template <class T>
inline constexpr bool is_slicing_v = is_slicing<T>::value;
//! A slicing policy.
template <class T>
concept slicing_policy = is_slicing_v<T>;

}  // namespace pipesched
