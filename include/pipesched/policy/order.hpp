// Order policies: which schedule family arranges each rank's forwards and backwards. Each
// tag carries what plan<...> needs to complete and check a combination: the placements it
// runs on, its natural placement and weight-gradient mode, whether it must split W, and
// whether it schedules sequences cut into several slices.
#pragma once

#include <string_view>
#include <type_traits>

#include "pipesched/policy/family.hpp"
#include "pipesched/policy/placement.hpp"
#include "pipesched/policy/wgrad.hpp"

namespace pipesched {
namespace order {

//! The placements an order can run on.
enum class PlacementRule {
  Linear,   //!< one stage per rank (placement::Linear, or Interleaved<1>)
  Looped,   //!< any looped placement (Linear or Interleaved<V>), never a V-shape
  VShape2,  //!< exactly two chunks per rank in a V-shape (placement::VShape<2>)
};

//! GPipe: all forwards, then all backwards. Over K > 1 slices this is TeraPipe's order.
struct GPipe : detail::OrderTag {
  static constexpr std::string_view name = "gpipe";
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;        //!< whether it schedules K > 1 slices
};

//! 1F1B (PipeDream-Flush): warm-up forwards, then one forward and one backward in turn.
struct OneFOneB : detail::OrderTag {
  static constexpr std::string_view name = "1f1b";
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
};

//! Interleaved 1F1B (Megatron-LM): 1F1B over several looped chunks per rank.
struct Interleaved1F1B : detail::OrderTag {
  static constexpr std::string_view name = "interleaved-1f1b";
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
};

//! Looped BFS: every microbatch through one chunk before the next chunk (breadth first).
struct LoopedBFS : detail::OrderTag {
  static constexpr std::string_view name = "looped-bfs";
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
};

//! Zero Bubble H1: 1F1B's memory with weight gradients deferred into the bubbles.
struct ZeroBubbleH1 : detail::OrderTag {
  static constexpr std::string_view name = "zb-h1";
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;
  using default_wgrad = wgrad::Split;
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
};

//! Zero Bubble H2: more warm-up forwards than H1, trading memory for (near) no bubble.
struct ZeroBubbleH2 : detail::OrderTag {
  static constexpr std::string_view name = "zb-h2";
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;
  using default_wgrad = wgrad::Split;
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
};

//! Zero Bubble V (ZB-V): two chunks per rank in a V-shape, weight gradients deferred.
struct ZeroBubbleV : detail::OrderTag {
  static constexpr std::string_view name = "zb-v";
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;
  using default_wgrad = wgrad::Split;
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
};

//! DualPipeV (DeepSeek): DualPipe folded onto a V-shape, overlapping a forward and a
//! backward of different microbatches.
struct DualPipeV : detail::OrderTag {
  static constexpr std::string_view name = "dualpipe-v";
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;
  using default_wgrad = wgrad::Split;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
};

//! seq-1f1b: 1F1B over (microbatch, slice) units on one stage per rank, so a rank holds the
//! activations of a few slices rather than of whole microbatches (MEPipe's sequence
//! pipeline). Give it K > 1 slices with slicing::Uniform<K> or Balanced<K>.
struct SeqOneFOneB : detail::OrderTag {
  static constexpr std::string_view name = "seq-1f1b";
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;        //!< whether it schedules K > 1 slices
};

//! slice-pipe: MEPipe's sequence × virtual pipeline (SVPP), (microbatch, slice) units over
//! looped chunks, with the default warm-up (schedule::slice_pipe). SlicePipeWarmup<N> sets
//! the warm-up.
struct SlicePipe : detail::OrderTag {
  static constexpr std::string_view name = "slice-pipe";
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;
  using default_wgrad = wgrad::Fused;
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;        //!< whether it schedules K > 1 slices
  //! Forwards rank 0 runs before its first backward; -1: slice_pipe's default.
  static constexpr int warmup = -1;
};

//! slice-pipe with `N` forwards on rank 0 before its first backward (rank r runs N − r, at
//! least one): fewer hold fewer slices' activations, at some cost in bubbles. A warm-up too
//! small to run is refused by generate() (invalid_problem).
template <int N>
struct SlicePipeWarmup : SlicePipe {
  static_assert(N >= 1,
                "pipesched::order::SlicePipeWarmup<N>: N is the number of forwards rank 0 runs "
                "before its first backward and must be at least 1; use order::SlicePipe for the "
                "default");
  static constexpr int warmup = N;
};

}  // namespace order

//! True when `T` is an order policy (order::GPipe, order::OneFOneB, ...).
template <class T>
struct is_order : std::bool_constant<detail::is_policy_of_v<detail::OrderTag, T>> {};
template <class T>
inline constexpr bool is_order_v = is_order<T>::value;
//! An order policy.
template <class T>
concept order_policy = is_order_v<T>;

}  // namespace pipesched
