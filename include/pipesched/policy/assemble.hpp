// assemble_plan: from an order, a problem, a cost model and a budget to a plan's schedule, in
// one fixed order of steps. plan<>, the tuner and the command line all build their schedules
// here, so the same knobs give the same schedule whichever of them a user calls.
//
//   1. generate the order's schedule: its cost-aware generator when it has one (planned under
//      the cost it will be simulated with), its warm-up generator when a warm-up is set, and
//      its memory-bounded generator (GeneratorInfo::generate_within) when the recipe fits it
//      to the budget;
//   2. place the weight-gradient parts in the waits (MEPipe's fine W) within the budget, or
//      for speed alone when no placement fits it (checkpointing brings the memory down);
//   3. offload, when the recipe asks: move to host memory what the budget requires, the copies
//      on the host link while the rank computes (pass/offload.hpp);
//   4. checkpoint: recompute what the budget still requires (the checkpoint policy; a unit it
//      recomputes is not offloaded). With offloading, steps 3 and 4 are kept only where they
//      give a shorter simulated step than step 4 alone (offload_where_faster);
//   5. with vocabulary parallelism, add the vocabulary passes (pass/vocabulary.hpp) within the
//      budget; where they take a rank over it, steps 1-4 run again under a budget smaller by
//      what they took there (twice at most). Under a budget each lag of the passes (0, 1, 2
//      more microbatches held) is planned so, and the shortest step kept.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched {

//! Whether assemble_plan fits an order's memory knob (GeneratorInfo::generate_within: Zero
//! Bubble's capped weight-gradient deferral, slice-pipe's warm-up) to the budget.
enum class FitOrder {
  //! Without checkpointing, fit; with it, checkpoint the order's own schedule, and the fitted
  //! one only where the own one cannot meet the budget (fitting first could trade more step
  //! time than the recomputes it saves). What plan<> and the command do unless told.
  Auto,
  Own,     //!< never fit: checkpointing alone brings the order's own schedule within budget
  Fitted,  //!< fit first, then checkpoint what is still over
};

//! What assemble_plan does to an order's schedule besides checkpointing it.
struct PlanRecipe {
  WGradMode wgrad = WGradMode::Fused;  //!< the backward the order generates (Split for fine W)
  //! Place each weight gradient in `wgrad_parts` parts in the waits (MEPipe's fine W; needs
  //! `wgrad` = Split).
  bool fine_wgrad = false;
  //! Parts of each weight gradient with fine_wgrad; 0 = one per weight GEMM of the stage with
  //! the most, each part one GEMM (a per_gemm_wgrad_cost, whose split it sets to PerGemm).
  int wgrad_parts = 4;
  FitOrder fit = FitOrder::Auto;  //!< whether the order's memory knob is fitted to the budget
  //! Rank 0's warm-up for an order with that knob (GeneratorInfo::generate_with_warmup); 0 =
  //! the order's own. A warm-up set by hand is kept, never fitted.
  int warmup = 0;
  //! With a positive count, each rank's budget is also at most that many microbatches'
  //! activations (checkpoint::SelectiveWithin<N>).
  int held_microbatches = 0;
  //! Offload activations to host memory where the budget asks, before checkpointing
  //! (apply_offload with `offload_options`), where that gives a shorter simulated step than
  //! checkpointing alone (offload_where_faster); the cost model times the copies
  //! (has_host_copy).
  bool offload = false;
  OffloadOptions offload_options = {};  //!< how, with `offload`
  //! Split the output layer by vocabulary over the ranks and add the vocabulary passes last
  //! (add_vocabulary_passes with `vocabulary_options`, within the plan's budget). The cost
  //! model prices them and splits its head too (has_vocabulary_cost; TransformerCost with
  //! Parallelism::vocabulary).
  bool vocabulary = false;
  VocabularyOptions vocabulary_options = {};  //!< how, with `vocabulary` (its budget: the plan's)
};

//! A plan's schedule with the cost model and per-rank budget it was assembled under.
template <cost_model Cost>
struct AssembledPlan {
  Schedule schedule;    //!< the schedule, every step of the recipe applied
  Cost cost;            //!< the cost model (its W split set to PerGemm where the recipe asked)
  MemoryBudget budget;  //!< the per-rank budget it was planned within
  bool fitted = false;  //!< whether the order's memory knob was fitted to the budget
};

namespace detail {

//! A per-rank budget of `n` microbatches' activations of `s` under `cost` (what the forwards of
//! one microbatch take on every stage of the rank), each within `given`.
template <class Cost>
MemoryBudget held_microbatches_budget(const Schedule& s, const Cost& cost, int n,
                                      const MemoryBudget& given) {
  const CostContext ctx{s.problem, s.placement, 1};
  std::vector<double> one(static_cast<std::size_t>(s.rank_count()), 0.0);
  for (int stage = 0; stage < s.problem.stages; ++stage)
    for (int k = 0; k < s.problem.slices; ++k)
      one[static_cast<std::size_t>(s.placement.rank_of(stage))] +=
          cost.memory_delta(ctx, Action::make(OpKind::F, stage, 0, k), false);
  MemoryBudget out;
  out.per_rank.resize(one.size());
  for (std::size_t r = 0; r < one.size(); ++r)
    out.per_rank[r] = std::min(given.of(static_cast<int>(r)), n * one[r]);
  return out;
}

//! Whether `order` is fitted to `budget` in the first build of assemble_plan.
inline bool fits_order_first(const GeneratorInfo& order, const MemoryBudget& budget,
                             const PlanRecipe& recipe, bool recomputes) {
  if (!order.generate_within || !budget.limited() || recipe.warmup > 0) return false;
  return recipe.fit == FitOrder::Fitted || (recipe.fit == FitOrder::Auto && !recomputes);
}

//! Refuses a recipe that cannot be carried out on `order`, naming the field.
inline void check_recipe(const GeneratorInfo& order, const MemoryBudget& budget,
                         const PlanRecipe& recipe) {
  const std::string who = "assemble_plan: order '" + std::string(order.name) + "': ";
  if (recipe.fine_wgrad && recipe.wgrad != WGradMode::Split)
    throw invalid_problem(who + field("PlanRecipe.fine_wgrad") +
                          " places the weight gradients of a split backward; set " +
                          field("PlanRecipe.wgrad") + " to " +
                          enumerator("WGradMode", "Split", "split") + ".");
  if (recipe.fine_wgrad && recipe.wgrad_parts < 0)
    throw invalid_problem(who + field("PlanRecipe.wgrad_parts", recipe.wgrad_parts) +
                          " is out of range; give 1 or more parts, or 0 for one per weight GEMM.");
  if (recipe.warmup < 0)
    throw invalid_problem(who + field("PlanRecipe.warmup", recipe.warmup) +
                          " is out of range; give a positive warm-up, or 0 for the order's own.");
  if (recipe.warmup > 0 && !order.generate_with_warmup)
    throw invalid_problem(who + field("PlanRecipe.warmup", recipe.warmup) +
                          " sets a warm-up this order does not have; give 0.");
  if (recipe.offload) recipe.offload_options.check();
  if (recipe.vocabulary) recipe.vocabulary_options.check();
  if (recipe.held_microbatches < 0)
    throw invalid_problem(who + field("PlanRecipe.held_microbatches", recipe.held_microbatches) +
                          " is out of range; give 1 or more microbatches, or 0 for no bound.");
  if (recipe.fit == FitOrder::Fitted) {
    if (!order.generate_within)
      throw invalid_problem(who +
                            "FitOrder::Fitted fits an order's memory knob, and this order "
                            "has none; use FitOrder::Own or Auto.");
    if (recipe.warmup > 0)
      throw invalid_problem(who + "FitOrder::Fitted fits the warm-up to the budget, and " +
                            field("PlanRecipe.warmup", recipe.warmup) +
                            " sets it by hand; give one or the other.");
    if (!budget.limited())
      throw invalid_problem(who +
                            "FitOrder::Fitted fits the order to a memory budget, and the "
                            "budget has no limit; give a limited budget, or FitOrder::Own.");
  }
}

}  // namespace detail

//! Step 1 of assemble_plan: the order's own schedule for `p` (never fitted): its warm-up
//! generator when `recipe.warmup` is set, else its cost-aware generator under `cost` when it
//! has one, else its plain generator.
template <cost_model Cost>
Schedule generate_own(const GeneratorInfo& order, const Problem& p, const PlanRecipe& recipe,
                      const Cost& cost) {
  if (recipe.warmup > 0) return order.generate_with_warmup(p, recipe.wgrad, recipe.warmup);
  if (order.generate_with_cost) return order.generate_with_cost(p, recipe.wgrad, CostRef(cost));
  return order.generate(p, recipe.wgrad);
}

//! Steps 1 and 2 of assemble_plan: the order's schedule for `p` (fitted to `budget` by its
//! memory knob when `fit` is true) with its weight-gradient parts placed as `recipe` asks.
//! `own`, when given, is the order's own schedule as generate_own builds it, used rather than
//! built again. Throws what the generators and fill_weight_gradients throw.
template <cost_model Cost>
AssembledPlan<Cost> assemble_base(const GeneratorInfo& order, const Problem& p, const Cost& cost,
                                  const MemoryBudget& budget, const PlanRecipe& recipe, bool fit,
                                  const Schedule* own = nullptr) {
  AssembledPlan<Cost> out{{}, cost, budget, fit};
  if (fit)
    out.schedule = order.generate_within(p, recipe.wgrad, CostRef(cost), budget);
  else
    out.schedule = own ? *own : generate_own(order, p, recipe, cost);
  if (!recipe.fine_wgrad) return out;
  int parts = recipe.wgrad_parts;
  if (parts == 0) {  // one part per weight GEMM of the stage with the most
    if constexpr (per_gemm_wgrad_cost<Cost>) {
      out.cost.wgrad_split = WGradSplit::PerGemm;
      const CostContext ctx{out.schedule.problem, out.schedule.placement, 1};
      for (int st = 0; st < out.schedule.problem.stages; ++st)
        parts = std::max(parts, static_cast<int>(out.cost.weight_gemms(ctx, st)));
    } else {
      throw invalid_problem(
          "assemble_plan: " + field("PlanRecipe.wgrad_parts", 0) +
          " cuts each weight gradient per weight GEMM, and this cost model does not count "
          "weight GEMMs (per_gemm_wgrad_cost: weight_gemms and wgrad_split); give a number of "
          "parts");
    }
  }
  try {
    out.schedule = fill_weight_gradients(out.schedule, out.cost, budget, parts);
  } catch (const invalid_problem&) {
    // Over the budget whatever the W placement: place the W's for speed and let
    // checkpointing bring the memory down.
    if (!budget.limited()) throw;
    out.schedule = fill_weight_gradients(out.schedule, out.cost, MemoryBudget{}, parts);
  }
  return out;
}

namespace detail {

// Step 5 of assemble_plan (the top of this header) for one lag of the passes: `build(b)`
// assembles steps 1-4 under budget b; the passes go in within `budget`, and where they take a
// rank over it the plan is built again under a budget smaller by that excess, twice at most.
template <cost_model Cost, class Build>
AssembledPlan<Cost> assemble_vocabulary_lag(const GeneratorInfo& order, const Problem& p,
                                            const MemoryBudget& budget,
                                            const VocabularyOptions& options, Build& build) {
  MemoryBudget within = budget;
  for (int round = 0;; ++round) {
    std::optional<AssembledPlan<Cost>> built;
    try {
      built.emplace(build(within));
    } catch (const invalid_problem& e) {
      if (round == 0) throw;
      throw invalid_problem(
          "with its vocabulary passes, which hold memory of their own, the plan "
          "of order '" +
          std::string(order.name) + "' does not fit the budget: " + e.message());
    }
    AssembledPlan<Cost>& a = *built;
    VocabularyOptions placed = options;
    placed.budget = budget;
    a.schedule = add_vocabulary_passes(a.schedule, a.cost, placed);
    if (round > 0) a.budget = budget;  // the budget asked for, not the one planned within
    if (!budget.limited()) return std::move(a);
    const SimulationResult r = simulate(a.schedule, a.cost);
    bool over = false;
    MemoryBudget next;
    next.per_rank.resize(static_cast<std::size_t>(p.ranks));
    for (int i = 0; i < p.ranks; ++i) {
      const double excess = r.ranks[static_cast<std::size_t>(i)].peak_memory - budget.of(i);
      over = over || excess > 0;
      next.per_rank[static_cast<std::size_t>(i)] = within.of(i) - std::max(0.0, excess);
    }
    if (!over) return std::move(a);
    if (round == 2)
      throw invalid_problem("with its vocabulary passes the plan of order '" +
                            std::string(order.name) +
                            "' stays over its budget after two tries under a budget reduced by "
                            "what they hold; give a larger budget, or checkpoint.");
    within = std::move(next);
  }
}

// Step 5 of assemble_plan: the passes at the recipe's lag, or (lag -1) at each of lags 0, 1
// and 2, the plan made room for within the budget, keeping the shortest simulated step.
template <cost_model Cost, class Build>
AssembledPlan<Cost> assemble_with_vocabulary(const GeneratorInfo& order, const Problem& p,
                                             const Cost& cost, const MemoryBudget& budget,
                                             const PlanRecipe& recipe, Build&& build) {
  if constexpr (requires { cost.vocabulary_parallel(); }) {
    if (!cost.vocabulary_parallel())
      throw invalid_problem("assemble_plan: order '" + std::string(order.name) +
                            "': " + field("PlanRecipe.vocabulary", true) +
                            " adds vocabulary passes, but the cost model keeps the output "
                            "layer on the last stage; split it there too (TransformerCost: "
                            "Parallelism::vocabulary = true).");
  }
  recipe.vocabulary_options.check();
  if (recipe.vocabulary_options.lag >= 0 || !budget.limited())
    return assemble_vocabulary_lag<Cost>(order, p, budget, recipe.vocabulary_options, build);
  // Under a budget a lag holds more: each is planned to make its own room.
  std::optional<AssembledPlan<Cost>> best;
  double best_step = 0;
  std::optional<invalid_problem> first_refusal;
  for (int lag = 0; lag <= 2; ++lag) {
    VocabularyOptions options = recipe.vocabulary_options;
    options.lag = lag;
    try {
      AssembledPlan<Cost> a = assemble_vocabulary_lag<Cost>(order, p, budget, options, build);
      const double step = simulate(a.schedule, a.cost).makespan;
      if (!best || step < best_step) {
        best.emplace(std::move(a));
        best_step = step;
      }
    } catch (const invalid_problem& e) {
      if (!first_refusal) first_refusal = e;
    }
  }
  if (!best) throw *first_refusal;
  return std::move(*best);
}

}  // namespace detail

//! The plan of `order` for `p` under `cost` and a per-rank `budget`, in the one fixed order
//! (generate, place W parts, checkpoint; see the top of this header): `checkpoint(schedule,
//! cost, budget)` is the checkpoint step and `recomputes` whether it may recompute (FitOrder::Auto
//! fits the order first only when it does not). Under FitOrder::Auto a checkpointed own schedule
//! that cannot meet the budget is tried fitted before its reason is thrown. `own`, when given, is
//! the order's own schedule as generate_own builds it. Throws invalid_problem for a recipe the
//! order cannot carry out, and what the generators and passes throw (invalid_problem where the
//! budget cannot be met).
template <cost_model Cost, class Checkpoint>
requires std::is_invocable_r_v<Schedule, Checkpoint&, const Schedule&, const Cost&,
                               const MemoryBudget&>
    AssembledPlan<Cost> assemble_plan(const GeneratorInfo& order, const Problem& p,
                                      const Cost& cost, MemoryBudget budget,
                                      const PlanRecipe& recipe, bool recomputes,
                                      Checkpoint&& checkpoint, const Schedule* own = nullptr) {
  if (recipe.vocabulary) {
    if constexpr (has_vocabulary_cost<Cost>) {
      return detail::assemble_with_vocabulary(
          order, p, cost, budget, recipe, [&](const MemoryBudget& b) {
            PlanRecipe without = recipe;
            without.vocabulary = false;
            return assemble_plan(order, p, cost, b, without, recomputes, checkpoint, own);
          });
    } else {
      throw invalid_problem("assemble_plan: " + field("PlanRecipe.vocabulary", true) +
                            " needs a cost model that prices vocabulary passes "
                            "(has_vocabulary_cost: UniformCost, TransformerCost).");
    }
  }
  detail::check_recipe(order, budget, recipe);
  Schedule built_own;
  if (!own && (recipe.held_microbatches > 0 || recipe.fit != FitOrder::Fitted)) {
    built_own = generate_own(order, p, recipe, cost);
    own = &built_own;
  }
  if (recipe.held_microbatches > 0)
    budget = detail::held_microbatches_budget(*own, cost, recipe.held_microbatches, budget);
  auto build = [&](bool fit) {
    AssembledPlan<Cost> a = assemble_base(order, p, cost, budget, recipe, fit, own);
    if (!recipe.offload) {
      a.schedule =
          checkpoint(std::as_const(a.schedule), std::as_const(a.cost), std::as_const(a.budget));
      return a;
    }
    a.schedule = offload_where_faster(
        a.schedule, a.cost, a.budget, recipe.offload_options, [&](const Schedule& s) {
          return checkpoint(s, std::as_const(a.cost), std::as_const(a.budget));
        });
    return a;
  };
  if (detail::fits_order_first(order, budget, recipe, recomputes)) return build(true);
  try {
    return build(false);
  } catch (const invalid_problem&) {
    if (recipe.fit != FitOrder::Auto || !order.generate_within || !budget.limited() ||
        recipe.warmup > 0)
      throw;
    try {
      return build(true);
    } catch (const invalid_problem&) {
    }
    throw;  // the order's own schedule's reason
  }
}

//! assemble_plan with a checkpoint policy of the registry (policy/checkpoint_registry.hpp): a
//! built-in mode through apply_checkpoint under `cost` itself, a program's own policy through
//! its CheckpointInfo::apply.
template <cost_model Cost>
AssembledPlan<Cost> assemble_plan(const GeneratorInfo& order, const Problem& p, const Cost& cost,
                                  const MemoryBudget& budget, const PlanRecipe& recipe,
                                  const CheckpointInfo& policy, const Schedule* own = nullptr) {
  if (recipe.offload && policy.mode == CheckpointMode::Mario)
    throw invalid_problem(
        "assemble_plan: " + field("PlanRecipe.offload", true) +
        " offloads before checkpointing, and the mario policy reorders forwards around its "
        "recomputes without placing offloads; offload with the none, full or selective policy, "
        "or use mario without offloading.");
  return assemble_plan(
      order, p, cost, budget, recipe, policy.recomputes,
      [&](const Schedule& s, const Cost& c, const MemoryBudget& b) {
        if (policy.mode) return apply_checkpoint(s, *policy.mode, c, b);
        return policy.apply(s, CostRef(c), b);
      },
      own);
}

}  // namespace pipesched
