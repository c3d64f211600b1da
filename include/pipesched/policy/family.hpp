// The five policy families and the test for membership in one. A policy is an empty tag
// type derived from its family's tag; a refined policy may derive from another policy.
#pragma once

#include <type_traits>

namespace pipesched::detail {

//! Base of every order policy.
struct OrderTag {};
//! Base of every placement policy.
struct PlacementTag {};
//! Base of every checkpoint policy.
struct CheckpointTag {};
//! Base of every slicing policy.
struct SlicingTag {};
//! Base of every weight-gradient policy.
struct WGradTag {};

//! True for a plain (not cv-qualified, not reference) class type derived from the family
//! tag `Tag`. Qualified types are refused so that `plan<const order::GPipe>` cannot slip
//! past the dispatch on exact policy types.
template <class Tag, class T>
inline constexpr bool is_policy_of_v =
    std::is_class_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T> &&
    !std::is_same_v<T, Tag> && std::is_base_of_v<Tag, T>;

//! Lets a static_assert in a template that must never be instantiated depend on its
//! parameter.
template <class...>
inline constexpr bool dependent_false_v = false;

}  // namespace pipesched::detail
