// Weight-gradient policies: whether a backward runs as one action or as an input-gradient
// action followed by a weight-gradient action that may move, possibly cut into parts.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/policy/family.hpp"

namespace pipesched {
//! Weight-gradient policies: whether the backward computes the weight gradient with the
//! input gradient or as separate W actions, and in how many parts.
namespace wgrad {

//! One full backward action (B) per stage and microbatch.
struct Fused : detail::WGradTag {
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "fused";
  static constexpr bool splits = false;  //!< whether backwards are emitted as I then W
  static constexpr int parts = 1;        //!< W actions per weight gradient
  static constexpr bool fills = false;   //!< whether W parts are placed by the cost model
};

//! Backward split into I (input gradient) and W (weight gradient), as in Zero Bubble.
struct Split : detail::WGradTag {
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "split";
  static constexpr bool splits = true;  //!< whether backwards are emitted as I then W
  static constexpr int parts = 1;       //!< W actions per weight gradient
  static constexpr bool fills = false;  //!< whether W parts are placed by the cost model
};

//! Split backward with every weight gradient cut into `Parts` W actions placed in the waits
//! the cost model predicts (fill_weight_gradients; the command line's --wgrad fine
//! --wgrad-parts N). Placing them needs a cost model: plan<>::generate(problem, cost, budget).
template <int Parts>
struct Fine : Split {
  static_assert(Parts >= 1 && Parts <= 1024,
                "pipesched::wgrad::Fine<Parts>: Parts is how many W actions each weight gradient "
                "is cut into and must be 1 to 1024; 4 is a common choice");
  //! The policy's name in plan<>::describe().
  static constexpr std::string_view name = "fine";
  static constexpr int parts = Parts;  //!< W actions per weight gradient
  static constexpr bool fills = true;  //!< whether W parts are placed by the cost model
};

}  // namespace wgrad

//! True when `T` is a weight-gradient policy (wgrad::Fused, wgrad::Split, Fine<N>, ...).
template <class T>
struct is_wgrad : std::bool_constant<detail::is_policy_of_v<detail::WGradTag, T>> {};
//! True when `T` is a weight-gradient policy.
template <class T>
inline constexpr bool is_wgrad_v = is_wgrad<T>::value;
//! A weight-gradient policy.
template <class T>
concept wgrad_policy = is_wgrad_v<T>;

}  // namespace pipesched
