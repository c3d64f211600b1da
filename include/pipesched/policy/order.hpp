// Order policies: which schedule family arranges each rank's forwards and backwards. Each
// tag is the one place that holds its schedule's facts: its command-line name and summary,
// the placements it runs on, its natural placement and weight-gradient mode, whether it must
// split W, whether it schedules sequences cut into several slices, whether Mario applies, and
// its generator (`static Schedule generate(Problem, WGradMode)`). plan<>, the run-time
// registry (policy/registry.hpp), the tuner and the command line all read them from here.
//
// A user's order is a type derived from order::Custom (or from a built-in tag, whose facts
// and generator it inherits) that defines `generate`; see docs/custom_schedules.md.
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/placement.hpp"
#include "pipesched/policy/wgrad.hpp"
#include "pipesched/schedule/chimera.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/dualpipe_v.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/interleaved_zero_bubble.hpp"
#include "pipesched/schedule/looped_bfs.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/v_shape_memory.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/schedule/zero_bubble_h2.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace pipesched {
//! Order policies: which schedule a plan generates (GPipe, 1F1B, Zero Bubble, ...).
namespace order {

//! The placements an order can run on.
enum class PlacementRule {
  Linear,   //!< one stage per rank (placement::Linear, or Interleaved<1>)
  Looped,   //!< any looped placement (Linear or Interleaved<V>), never a V-shape
  VShape2,  //!< exactly two chunks per rank in a V-shape (placement::VShape<2>)
  Any,      //!< any placement policy (a user's order; plan<> still checks what it returns)
};

//! The base of a user's order policy: derive from it, give your order a `name` (and a
//! `summary` for `pipesched list`-style listings), override the facts that differ, and define
//!
//!     static Schedule generate(Problem p, WGradMode w);
//!
//! which plan<> calls with `p.stages` and `p.slices` already resolved against the plan's
//! placement and slicing policies. Optionally also
//!
//!     template <cost_model Cost> static Schedule generate(Problem p, WGradMode w, const Cost&);
//!
//! which plan<>::generate(problem, cost, budget) calls instead, so a list-scheduling rule can
//! plan with the cost it will be simulated under, or
//!
//!     static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget&);
//!
//! (preferred over both when present) to fit the order to the per-rank memory budget, as the
//! Zero Bubble orders do; the registry, the tuner and the command line's --memory-budget then
//! use it too. The defaults: any placement (Linear when
//! none is given), fused backward, whole microbatches, Mario not applied.
struct Custom : detail::OrderTag {
  //! The order's name in messages and listings; a user's order gives its own.
  static constexpr std::string_view name = "custom";
  //! What the order does, in one line for listings; a user's order gives its own.
  static constexpr std::string_view summary = "a user's order";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Any;
  using default_placement = placement::Linear;      //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;      //!< whether checkpoint::Mario runs on it
};

//! GPipe: all forwards, then all backwards. Over K > 1 slices this is TeraPipe's order.
struct GPipe : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "gpipe";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "all forwards, then all backwards (Huang et al. 2019; over slices: TeraPipe)";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;      //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;        //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;      //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::gpipe(p, w); }
};

//! 1F1B (PipeDream-Flush): warm-up forwards, then one forward and one backward in turn.
struct OneFOneB : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "1f1b";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "one forward, one backward after a warm-up (PipeDream-Flush)";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;      //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = true;       //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::one_f_one_b(p, w); }
};

//! Interleaved 1F1B (Megatron-LM): 1F1B over several looped chunks per rank.
struct Interleaved1F1B : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "interleaved-1f1b";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "1F1B over looped virtual stages, Megatron-LM's order";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;                   //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;      //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;           //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = true;           //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::interleaved_1f1b(p, w); }
};

//! Looped BFS: every microbatch through one chunk before the next chunk (breadth first).
struct LoopedBFS : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "looped-bfs";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "breadth-first over looped virtual stages (all chunk-0 forwards first)";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;                   //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;      //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;           //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;          //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::looped_bfs(p, w); }
};

//! Zero Bubble H1: 1F1B's memory with weight gradients deferred into the bubbles.
struct ZeroBubbleH1 : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "zb-h1";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "Zero Bubble H1: 1F1B memory, weight gradients fill the cooldown";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;     //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;              //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = true;      //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::zero_bubble_h1(p, w); }
  //! Memory-bounded: weight gradients deferred only while the next forward fits `budget`.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::zero_bubble_h1_within(p, w, cost, budget);
  }
};

//! Zero Bubble H2: more warm-up forwards than H1, trading memory for (near) no bubble.
struct ZeroBubbleH2 : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "zb-h2";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "Zero Bubble H2: more warm-up forwards, weight gradients deferred";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;     //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;              //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;     //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::zero_bubble_h2(p, w); }
  //! Memory-bounded: weight gradients deferred only while the next forward fits `budget`.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::zero_bubble_h2_within(p, w, cost, budget);
  }
};

//! Interleaved Zero Bubble: the Zero Bubble rule over looped chunks (PyTorch's
//! ScheduleInterleavedZeroBubble; the Zero Bubble paper's ZB-1P on an interleaved placement).
struct InterleavedZeroBubble : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "interleaved-zb";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "Zero Bubble over looped virtual stages: weight gradients fill the bubbles";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;                   //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = true;       //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;           //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;          //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) {
    return schedule::interleaved_zero_bubble(p, w);
  }
  //! Memory-bounded: weight gradients deferred only while the next forward fits `budget`.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::interleaved_zero_bubble_within(p, w, cost, budget);
  }
};

//! Zero Bubble V (ZB-V): two chunks per rank in a V-shape, weight gradients deferred.
struct ZeroBubbleV : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "zb-v";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "Zero Bubble V: two chunks per rank in a V, 1F1B's peak memory";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;              //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;     //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::zero_bubble_v(p, w); }
  //! Memory-bounded: weight gradients deferred only while the next forward fits `budget`.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::zero_bubble_v_within(p, w, cost, budget);
  }
};

//! V-Half (Qi et al. 2024): a V-shape schedule holding about half of 1F1B's activations.
struct VHalf : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "v-half";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "V-shape, about half of 1F1B's activation memory (Qi et al. 2024)";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;              //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = true;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;      //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;     //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>), memory measured uniformly.
  static Schedule generate(Problem p, WGradMode w) { return schedule::v_half(p, w); }
  //! With the memory of the cost it will be simulated under.
  template <cost_model Cost>
  static Schedule generate(Problem p, WGradMode w, const Cost& cost) {
    return schedule::v_half(p, w, cost);
  }
  //! Within `budget` too.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::v_half_within(p, w, cost, budget);
  }
};

//! V-Min (Qi et al. 2024): a V-shape schedule holding about a third of 1F1B's activations.
struct VMin : VHalf {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "v-min";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "V-shape, about a third of 1F1B's activation memory (Qi et al. 2024)";
  //! The schedule for `p` (stages and slices resolved by plan<>), memory measured uniformly.
  static Schedule generate(Problem p, WGradMode w) { return schedule::v_min(p, w); }
  //! With the memory of the cost it will be simulated under.
  template <cost_model Cost>
  static Schedule generate(Problem p, WGradMode w, const Cost& cost) {
    return schedule::v_min(p, w, cost);
  }
  //! Within `budget` too.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    return schedule::v_min_within(p, w, cost, budget);
  }
};

//! DualPipeV (DeepSeek): DualPipe folded onto a V-shape, overlapping a forward and a
//! backward of different microbatches.
struct DualPipeV : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "dualpipe-v";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "DualPipeV: V placement, forward and backward overlapped in pairs";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;   //!< the placement when a plan names none
  using default_wgrad = wgrad::Split;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;      //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::dualpipe_v(p, w); }
};

//! Chimera (Li & Hoefler, SC '21): two pipelines in opposite directions over the same ranks,
//! each rank holding one stage of each model replica (the V-shape map, Problem::replicas = 2),
//! the even microbatches down and the odd ones up; the replicas' gradients are summed.
struct Chimera : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "chimera";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "Chimera: two model replicas piped in opposite directions over the same ranks";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::VShape2;
  using default_placement = placement::VShape<2>;   //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = false;       //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = true;       //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::chimera(p, w); }
  //! Planned under the cost it will be simulated with.
  template <cost_model Cost>
  static Schedule generate(Problem p, WGradMode w, const Cost& cost) {
    return schedule::chimera(p, w, cost);
  }
};

//! seq-1f1b: 1F1B over (microbatch, slice) units on one stage per rank, so a rank holds the
//! activations of a few slices rather than of whole microbatches (MEPipe's sequence
//! pipeline). Give it K > 1 slices with slicing::Uniform<K> or Balanced<K>.
struct SeqOneFOneB : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "seq-1f1b";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "1F1B over (microbatch, slice) units: a rank holds slices, not microbatches";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Linear;
  using default_placement = placement::Linear;      //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;               //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;  //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;        //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;      //!< whether checkpoint::Mario runs on it
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::seq_1f1b(p, w); }
};

//! slice-pipe: MEPipe's sequence × virtual pipeline (SVPP), (microbatch, slice) units over
//! looped chunks, with the default warm-up (schedule::slice_pipe). SlicePipeWarmup<N> sets
//! the warm-up.
struct SlicePipe : detail::OrderTag {
  //! The name the registry and the command line know the order by.
  static constexpr std::string_view name = "slice-pipe";
  //! What the order does, in one line (`pipesched list`).
  static constexpr std::string_view summary =
      "MEPipe's sequence x virtual pipeline: slices over looped chunks, tunable warm-up";
  //! The placements the order runs on.
  static constexpr PlacementRule placement_rule = PlacementRule::Looped;
  using default_placement = placement::Interleaved<2>;  //!< the placement when a plan names none
  using default_wgrad = wgrad::Fused;                   //!< the W policy when a plan names none
  static constexpr bool needs_split_wgrad = false;      //!< whether wgrad::Fused is refused
  static constexpr bool takes_slices = true;            //!< whether it schedules K > 1 slices
  static constexpr bool mario_applies = false;          //!< whether checkpoint::Mario runs on it
  //! Forwards rank 0 runs before its first backward; -1: slice_pipe's default.
  static constexpr int warmup = -1;
  //! The schedule for `p` (stages and slices resolved by plan<>).
  static Schedule generate(Problem p, WGradMode w) { return schedule::slice_pipe(p, w); }
  //! Fitted to `budget`: the largest warm-up whose peak fits (schedule::slice_pipe_within),
  //! the default when the budget is not limited or no warm-up fits.
  static Schedule generate(Problem p, WGradMode w, CostRef cost, const MemoryBudget& budget) {
    if (!budget.limited()) return schedule::slice_pipe(p, w);
    std::vector<double> per_rank;
    for (int r = 0; r < p.ranks; ++r)
      per_rank.push_back(budget.of(r));
    try {
      return schedule::slice_pipe_within(p, w, cost, per_rank);
    } catch (const invalid_problem&) {
      return schedule::slice_pipe(p, w);  // nothing fits: checkpointing chooses what to drop
    }
  }
  //! The schedule for `p` with `forwards` warm-up forwards on rank 0.
  static Schedule generate_with_warmup(Problem p, WGradMode w, int forwards) {
    return schedule::slice_pipe(p, w, {.warmup = forwards});
  }
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
  static constexpr int warmup = N;  //!< forwards rank 0 runs before its first backward
  //! The schedule for `p` with N warm-up forwards on rank 0.
  static Schedule generate(Problem p, WGradMode w) {
    return schedule::slice_pipe(p, w, {.warmup = N});
  }
};

}  // namespace order

//! True when `T` is an order policy (order::GPipe, order::OneFOneB, ...).
template <class T>
struct is_order : std::bool_constant<detail::is_policy_of_v<detail::OrderTag, T>> {};
//! True when `T` is an order policy.
template <class T>
inline constexpr bool is_order_v = is_order<T>::value;
//! An order policy.
template <class T>
concept order_policy = is_order_v<T>;

//! An order policy with a generator: `O::generate(Problem, WGradMode)` returns a Schedule.
//! This is the customization point through which plan<> reaches a user's order.
template <class O>
concept generating_order = order_policy<O> && requires(Problem p, WGradMode w) {
  { O::generate(p, w) } -> std::same_as<Schedule>;
};

//! A list of order policies, as a type.
template <class... Orders>
struct order_list {};
//! Every built-in order, in the order `pipesched list` shows them.
using builtin_orders =
    order_list<order::GPipe, order::OneFOneB, order::Interleaved1F1B, order::LoopedBFS,
               order::ZeroBubbleH1, order::ZeroBubbleH2, order::ZeroBubbleV,
               order::InterleavedZeroBubble, order::VHalf, order::VMin, order::DualPipeV,
               order::SeqOneFOneB, order::SlicePipe, order::Chimera>;

}  // namespace pipesched
