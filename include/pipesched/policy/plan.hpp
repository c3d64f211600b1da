// plan<Knobs...>: policies from the five families, in any order, completed with defaults,
// checked at compile time, and turned into a Schedule by the order's generator and the
// checkpoint policy's pass; the slicing policy also sets the slice lengths of a cost model.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/checkpoint.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/generate.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/placement.hpp"
#include "pipesched/policy/slicing.hpp"
#include "pipesched/policy/wgrad.hpp"

namespace pipesched {

//! True when `T` is a policy of any family.
template <class T>
inline constexpr bool is_policy_v =
    is_order_v<T> || is_placement_v<T> || is_checkpoint_v<T> || is_slicing_v<T> || is_wgrad_v<T>;
//! A policy of any family: what plan<...> accepts as a knob.
template <class T>
concept policy = is_policy_v<T>;

namespace detail {

//! The first of `Knobs` for which `Is<K>::value` holds, else `Default`.
template <template <class> class Is, class Default, class... Knobs>
struct FirstKnob {
  using type = Default;
};
template <template <class> class Is, class Default, class First, class... Rest>
struct FirstKnob<Is, Default, First, Rest...> {
  using type = typename std::conditional_t<Is<First>::value, std::type_identity<First>,
                                           FirstKnob<Is, Default, Rest...>>::type;
};

//! How many of `Knobs` satisfy `Is`.
template <template <class> class Is, class... Knobs>
inline constexpr int knob_count_v = (0 + ... + (Is<Knobs>::value ? 1 : 0));

//! The knobs of a plan sorted into families, with defaults for the missing ones. The
//! placement and weight-gradient defaults depend on the order, so the order comes first.
template <class... Knobs>
struct PlanKnobs {
  static constexpr bool all_policies = (true && ... && is_policy_v<Knobs>);
  static constexpr int orders = knob_count_v<is_order, Knobs...>;
  static constexpr int placements = knob_count_v<is_placement, Knobs...>;
  static constexpr int checkpoints = knob_count_v<is_checkpoint, Knobs...>;
  static constexpr int slicings = knob_count_v<is_slicing, Knobs...>;
  static constexpr int wgrads = knob_count_v<is_wgrad, Knobs...>;
  static constexpr bool well_formed = all_policies && orders <= 1 && placements <= 1 &&
                                      checkpoints <= 1 && slicings <= 1 && wgrads <= 1;

  using order_t = typename FirstKnob<is_order, pipesched::order::OneFOneB, Knobs...>::type;
  using placement_t =
      typename FirstKnob<is_placement, typename order_t::default_placement, Knobs...>::type;
  using checkpoint_t =
      typename FirstKnob<is_checkpoint, pipesched::checkpoint::None, Knobs...>::type;
  using slicing_t = typename FirstKnob<is_slicing, pipesched::slicing::Whole, Knobs...>::type;
  using wgrad_t = typename FirstKnob<is_wgrad, typename order_t::default_wgrad, Knobs...>::type;

  using Rule = pipesched::order::PlacementRule;
  static constexpr Rule rule = order_t::placement_rule;
  static constexpr bool linear_ok =
      rule != Rule::Linear ||
      (placement_t::chunks == 1 && placement_t::kind != PlacementKind::VShape);
  static constexpr bool looped_ok =
      rule != Rule::Looped || placement_t::kind != PlacementKind::VShape;
  static constexpr bool v_shape_ok =
      rule != Rule::VShape2 ||
      (placement_t::kind == PlacementKind::VShape && placement_t::chunks == 2);
  static constexpr bool wgrad_ok = !order_t::needs_split_wgrad || wgrad_t::splits;
  static constexpr bool checkpoint_ok = checkpoint_t::template runs_on<order_t>;
  static constexpr bool slicing_ok = slicing_t::slices == 1 || order_t::takes_slices;
};

}  // namespace detail

//! A schedule described by policies. `Knobs` holds at most one policy from each of the
//! families order::, placement::, checkpoint::, slicing:: and wgrad::, in any order; a
//! missing family takes its default: order::OneFOneB; the order's natural placement
//! (Linear, Interleaved<2> for Interleaved1F1B and LoopedBFS, VShape<2> for ZeroBubbleV
//! and DualPipeV, SlicePipe); checkpoint::None; slicing::Whole; wgrad::Split for the Zero
//! Bubble orders and DualPipeV, wgrad::Fused otherwise. A knob that is no policy, two knobs
//! of one family, or a combination the order cannot run (e.g. K > 1 slices on an order that
//! schedules whole microbatches) fail to compile with a message that says how to fix them.
//!
//! Slicing: the schedule runs slicing::slices slices per microbatch. Where the cuts fall
//! matters to a cost model that counts tokens: sliced_cost(cost) is `cost` with the policy's
//! slice lengths (a sliceable_cost such as TransformerCost gets uniform or balanced lengths;
//! other cost models split a microbatch evenly and come back unchanged). generate(problem, cost,
//! budget) plans with that cost; simulate the schedule with it too:
//!
//!     using P = plan<order::SlicePipe, slicing::Balanced<4>>;
//!     const TransformerCost cost = P::sliced_cost(base);   // base: model and device
//!     const Schedule s = P::generate(problem, cost, MemoryBudget{});
//!     const SimulationResult r = simulate(s, cost);
template <class... Knobs>
struct plan {
 private:
  using Knobs_ = detail::PlanKnobs<Knobs...>;

  static_assert(Knobs_::all_policies,
                "pipesched::plan: every knob must be a policy from order::, placement::, "
                "checkpoint::, slicing:: or wgrad::; run-time numbers such as microbatches "
                "belong in the Problem passed to generate()");
  static_assert(Knobs_::orders <= 1,
                "pipesched::plan: two order:: policies given; pass at most one");
  static_assert(Knobs_::placements <= 1,
                "pipesched::plan: two placement:: policies given; pass at most one");
  static_assert(Knobs_::checkpoints <= 1,
                "pipesched::plan: two checkpoint:: policies given; pass at most one");
  static_assert(Knobs_::slicings <= 1,
                "pipesched::plan: two slicing:: policies given; pass at most one");
  static_assert(Knobs_::wgrads <= 1,
                "pipesched::plan: two wgrad:: policies given; pass at most one");

  // The combination checks are only meaningful once every knob is a single policy; they
  // stay quiet otherwise so that a bad knob produces one message, not several.
  static_assert(!Knobs_::well_formed || Knobs_::wgrad_ok,
                "pipesched::plan: an order whose needs_split_wgrad is true (a Zero Bubble or "
                "V-shape order) fills its bubbles with deferred weight gradients and cannot use "
                "wgrad::Fused; pass wgrad::Split or leave wgrad out");
  static_assert(
      !Knobs_::well_formed || Knobs_::v_shape_ok,
      "pipesched::plan: an order whose placement_rule is VShape2 runs on two chunks per rank "
      "in a V-shape: orders of that rule need placement::VShape<2>; pass it or leave placement "
      "out");
  static_assert(
      !Knobs_::well_formed || Knobs_::linear_ok,
      "pipesched::plan: this order (its placement_rule is Linear) runs one stage per rank and "
      "needs placement::Linear; pass it or leave placement out, or use an order whose "
      "placement_rule is Looped for several chunks per rank");
  static_assert(!Knobs_::well_formed || Knobs_::looped_ok,
                "pipesched::plan: an order whose placement_rule is Looped loops over chunks and "
                "cannot run on a V-shape placement; pass placement::Interleaved<V> or leave "
                "placement out, or use an order whose placement_rule is VShape for a V-shape");
  static_assert(!Knobs_::well_formed || Knobs_::checkpoint_ok,
                "pipesched::plan: checkpoint::Mario hides recomputes in the bubbles of a "
                "one-forward-one-backward rhythm and runs only on an order whose mario_applies is "
                "true (see `pipesched list`: the orders marked mario); pass such an order, or use "
                "checkpoint::Selective or Full with this one");
  static_assert(!Knobs_::well_formed || Knobs_::slicing_ok,
                "pipesched::plan: this order schedules whole microbatches and cannot take more "
                "than one slice per microbatch (its takes_slices is false); use a slice-level "
                "order, whose takes_slices is true, or slicing::Whole");

 public:
  using order = typename Knobs_::order_t;            //!< which schedule family
  using placement = typename Knobs_::placement_t;    //!< stages per rank and their shape
  using checkpoint = typename Knobs_::checkpoint_t;  //!< which forwards are recomputed
  using slicing = typename Knobs_::slicing_t;        //!< how sequences are cut
  using wgrad = typename Knobs_::wgrad_t;            //!< fused or split backward

  //! "1f1b, linear (1 chunk per rank), checkpoint none, slicing whole, wgrad fused"; a
  //! slicing other than whole shows its slice count: "slicing balanced (4 slices)".
  static std::string describe() {
    std::string slices, held, parts;
    if constexpr (checkpoint::held_microbatches > 0)
      held = " (at most " + std::to_string(checkpoint::held_microbatches) + " microbatches held)";
    if constexpr (wgrad::fills)
      parts = " (" + std::to_string(wgrad::parts) + (wgrad::parts == 1 ? " part)" : " parts)");
    if (slicing::name != pipesched::slicing::Whole::name)
      slices =
          " (" + std::to_string(slicing::slices) + (slicing::slices == 1 ? " slice)" : " slices)");
    return std::string(order::name) + ", " + std::string(placement::name) + " (" +
           std::to_string(placement::chunks) + (placement::chunks == 1 ? " chunk" : " chunks") +
           " per rank), checkpoint " + std::string(checkpoint::name) + held + ", slicing " +
           std::string(slicing::name) + slices + ", wgrad " + std::string(wgrad::name) + parts;
  }

  //! The slice lengths the plan gives a cost model whose slices may differ in length
  //! (sliceable_cost, as TransformerCost): slice_lengths(cost, slicing::mode,
  //! slicing::slices), e.g. balanced_slices(cost, K) for slicing::Balanced<K>. Throws
  //! invalid_problem naming the plan when the model's sequence has fewer tokens than slices.
  template <sliceable_cost Cost>
  static std::vector<int> slice_lengths(const Cost& cost) {
    try {
      return pipesched::slice_lengths(cost, slicing::mode, slicing::slices);
    } catch (const invalid_problem& e) {
      e.rethrow_after("plan<" + describe() + ">: ");
    }
  }

  //! `cost` as the plan's slicing cuts the sequence: a sliceable cost model (as
  //! TransformerCost) with slice_lengths set to slice_lengths(cost), replacing any it had; any
  //! other cost model unchanged (it splits a microbatch evenly over its slices). Simulate the
  //! plan's schedules with this cost.
  template <cost_model Cost>
  static Cost sliced_cost(const Cost& cost) {
    if constexpr (sliceable_cost<Cost>) {
      Cost sliced = cost;
      sliced.slice_lengths = slice_lengths(cost);
      return sliced;
    } else {
      return cost;
    }
  }

  //! The schedule for `p`. `p.stages` = 0 becomes ranks × the placement's chunks per rank;
  //! any other value must equal that. Throws invalid_problem naming the field, its value
  //! and the accepted one when `p` does not fit the plan, and whatever the order's
  //! generator throws (e.g. too few microbatches). checkpoint::Full adds a late recompute RL
  //! right before every backward (checkpoint::FullEarly an R). checkpoint::Selective and Mario
  //! choose what to recompute from a memory budget: they need generate(problem, cost, budget), and
  //! calling this overload with them does not compile, nor with slicing::Balanced, whose slice
  //! lengths come from a cost model.
  static Schedule generate(Problem p) {
    static_assert(!checkpoint::needs_budget,
                  "pipesched::plan: this checkpoint policy (its needs_budget is true, as for "
                  "checkpoint::Selective and Mario) chooses what to recompute from a memory "
                  "budget and a cost model: call generate(problem, cost, budget), or use "
                  "checkpoint::SelectiveWithin<N> (at most N microbatches' activations per rank)");
    static_assert(applicable_checkpoint<checkpoint, UniformCost>,
                  "pipesched::plan: a checkpoint policy needs `template <cost_model Cost> static "
                  "Schedule apply(const Schedule&, const Cost&, const MemoryBudget&)` (derive it "
                  "from checkpoint::Custom and give it one)");
    static_assert(!slicing::needs_cost,
                  "pipesched::plan: slicing::Balanced chooses slice lengths with a cost model: "
                  "call generate(problem, cost, budget) and simulate with sliced_cost(cost)");
    static_assert(!wgrad::fills,
                  "pipesched::plan: wgrad::Fine<Parts> places weight-gradient parts in the waits a "
                  "cost model predicts: call generate(problem, cost, budget)");
    if constexpr (checkpoint::held_microbatches > 0) {
      return generate(p, UniformCost{}, MemoryBudget{});
    } else {
      const Schedule s = generate_compute(p);
      try {
        return checkpoint::apply(s, UniformCost{}, MemoryBudget{});
      } catch (const invalid_problem& e) {
        e.rethrow_after("plan<" + describe() + ">: ");
      }
    }
  }

  //! The schedule for `p` under sliced_cost(cost) and a per-rank memory `budget` in the cost
  //! model's memory unit, built by assemble_plan in its fixed order of steps:
  //!  1. the order's schedule, planned under the cost when the order has a cost-aware generator
  //!     (`generate(Problem, WGradMode, const Cost&)`); an order with a memory-bounded one (the
  //!     Zero Bubble orders, slice-pipe) is fitted to a limited budget first when the
  //!     checkpoint policy recomputes nothing, and otherwise only where its own schedule cannot
  //!     meet the budget checkpointed (FitOrder::Auto);
  //!  2. wgrad::Fine<Parts> cuts every weight gradient into Parts W actions placed in the waits
  //!     `cost` predicts, within `budget` (fill_weight_gradients; for speed alone where no
  //!     placement fits it, the checkpointing then bringing the memory down);
  //!  3. the checkpoint policy: None and Full throw invalid_problem when a rank's peak exceeds a
  //!     limited budget; Selective and Mario recompute what the budget requires and throw when
  //!     even recomputing everything does not fit; checkpoint::SelectiveWithin<N> plans within
  //!     the tighter of `budget` and N microbatches' activations per rank.
  //! Problems that do not fit the plan are refused as by generate(p). The tuner and the
  //! `pipesched` command build the same schedule for the same knobs.
  template <cost_model Cost>
  static Schedule generate(Problem p, const Cost& cost, const MemoryBudget& budget) {
    static_assert(applicable_checkpoint<checkpoint, Cost>,
                  "pipesched::plan: a checkpoint policy needs `template <cost_model Cost> static "
                  "Schedule apply(const Schedule&, const Cost&, const MemoryBudget&)` (derive it "
                  "from checkpoint::Custom and give it one)");
    const Cost sliced = sliced_cost(cost);
    p = resolved(p);
    // The order's generators under the plan's own cost type (a program's order may take its
    // own cost model rather than any): the own schedule is built here, a fitted one through
    // the memory-bounded generator with `sliced` itself.
    GeneratorInfo info = generator_info<order>();
    if constexpr (pipesched::detail::budget_generating_order<order, Cost>)
      info.generate_within = [&sliced](Problem q, WGradMode w, CostRef, const MemoryBudget& b) {
        return order::generate(q, w, sliced, b);
      };
    const PlanRecipe recipe{.wgrad = pipesched::detail::wgrad_mode_v<wgrad>,
                            .fine_wgrad = wgrad::fills,
                            .wgrad_parts = wgrad::parts,
                            .fit = FitOrder::Auto,
                            .held_microbatches = checkpoint::held_microbatches};
    try {
      const Schedule own =
          checked_placement(detail::generate_order<order>(p, recipe.wgrad, sliced));
      AssembledPlan<Cost> a = assemble_plan(
          info, p, sliced, budget, recipe, checkpoint::recomputes,
          [](const Schedule& s, const Cost& c, const MemoryBudget& b) {
            return checkpoint::apply(s, c, b);
          },
          &own);
      return checked_placement(std::move(a.schedule));
    } catch (const invalid_problem& e) {
      e.rethrow_after("plan<" + describe() + ">: ");
    }
  }

 private:
  // `p` with its stages and slices resolved as the plan's placement and slicing give them;
  // throws invalid_problem naming the plan and the field where `p` does not fit the plan.
  static Problem resolved(Problem p) {
    const std::string who = "plan<" + describe() + ">";
    try {
      p.check();
    } catch (const invalid_problem& e) {
      e.rethrow_after(who + ": ");
    }
    if (p.ranks > INT_MAX / placement::chunks)
      throw invalid_problem(who + ": ranks = " + std::to_string(p.ranks) + " times " +
                            std::to_string(placement::chunks) +
                            " chunks per rank overflows the stage count; use fewer ranks.");
    const int stages = p.ranks * placement::chunks;
    if (p.stages == 0) {
      p.stages = stages;
    } else if (p.stages != stages) {
      throw invalid_problem(who + ": stages = " + std::to_string(p.stages) +
                            " does not fit the placement on ranks = " + std::to_string(p.ranks) +
                            "; expected stages = " + std::to_string(stages) + " (ranks × " +
                            std::to_string(placement::chunks) +
                            " chunks per rank), or 0 to derive it.");
    }
    // Problem.slices defaults to 1, so 1 means "not given": the policy's count is used.
    if (p.slices != 1 && p.slices != slicing::slices)
      throw invalid_problem(
          who + ": slices = " + std::to_string(p.slices) + " does not fit slicing " +
          std::string(slicing::name) + ", which schedules " + std::to_string(slicing::slices) +
          " slice(s) per microbatch; use slices = " + std::to_string(slicing::slices) +
          (slicing::slices > 1 ? ", or leave it at 1 and the plan sets it." : "."));
    p.slices = slicing::slices;
    return p;
  }

  // `s` as the order's generator built it, refused where its placement is not the plan's: a
  // generator that built another map would make every later pass, simulation and execution
  // silently wrong.
  static Schedule checked_placement(Schedule s) {
    if (!(s.placement == placement::build(s.problem.ranks)))
      throw invalid_schedule("plan<" + describe() + ">: generator returned placement " +
                             s.placement.describe() + " instead of " +
                             placement::build(s.problem.ranks).describe() + ".");
    return s;
  }

  // The order's compute-only schedule for `p`, before any checkpointing.
  static Schedule generate_compute(Problem p) {
    p = resolved(p);
    return checked_placement(detail::generate_order<order>(p, detail::wgrad_mode_v<wgrad>));
  }
};

}  // namespace pipesched
