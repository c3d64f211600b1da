// Placement policies: how many stages (chunks) each rank holds and in what shape.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/core/placement.hpp"
#include "pipesched/policy/family.hpp"

namespace pipesched {
//! Placement policies: which rank holds which stage.
namespace placement {

//! One stage per rank: stage s on rank s.
struct Linear : detail::PlacementTag {
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "linear";
  //! The map's shape.
  static constexpr PlacementKind kind = PlacementKind::Linear;
  static constexpr int chunks = 1;  //!< stages per rank
  //! The stage → rank map for `ranks` ranks.
  static Placement build(int ranks) { return Placement::linear(ranks); }
};

//! Looped placement with V chunks per rank: rank r holds stages r, r + p, ..., r + (V − 1)p.
template <int V>
struct Interleaved : detail::PlacementTag {
  static_assert(V >= 1,
                "pipesched::placement::Interleaved<V>: V is the number of chunks per rank and must "
                "be at least 1; use Interleaved<2> or more (or placement::Linear for one stage per "
                "rank)");
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "interleaved";
  //! The map's shape: one chunk per rank is the linear map, so Interleaved<1> says Linear, as
  //! Placement::interleaved(ranks, 1) does.
  static constexpr PlacementKind kind = V == 1 ? PlacementKind::Linear : PlacementKind::Interleaved;
  static constexpr int chunks = V;  //!< stages per rank
  //! The stage → rank map for `ranks` ranks.
  static Placement build(int ranks) { return Placement::interleaved(ranks, V); }
};

//! V-shape (zig-zag) placement with V chunks per rank: chunk c on rank r is stage c·p + r for
//! even c and c·p + p − 1 − r for odd c, so the first and last stages share rank 0.
template <int V = 2>
struct VShape : detail::PlacementTag {
  static_assert(V >= 2 && V % 2 == 0,
                "pipesched::placement::VShape<V>: a V-shape needs an even number of chunks per "
                "rank; use VShape<2> (or VShape<4>, ...)");
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "v-shape";
  //! The map's shape.
  static constexpr PlacementKind kind = PlacementKind::VShape;
  static constexpr int chunks = V;  //!< stages per rank
  //! The stage → rank map for `ranks` ranks.
  static Placement build(int ranks) { return Placement::v_shape(ranks, V); }
};

}  // namespace placement

//! True when `T` is a placement policy (placement::Linear, Interleaved<V>, VShape<V>, ...).
template <class T>
struct is_placement : std::bool_constant<detail::is_policy_of_v<detail::PlacementTag, T>> {};
//! True when `T` is a placement policy.
template <class T>
inline constexpr bool is_placement_v = is_placement<T>::value;
//! A placement policy.
template <class T>
concept placement_policy = is_placement_v<T>;

}  // namespace pipesched
