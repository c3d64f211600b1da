// From an order policy to its schedule: the order's own `generate` (its customization point,
// see order::Custom) called with the backward mode of a weight-gradient policy.
#pragma once

#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/wgrad.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

namespace pipesched::detail {

//! The generators' backward mode for a weight-gradient policy (Fine cuts a split backward).
template <class WGrad>
inline constexpr WGradMode wgrad_mode_v = WGrad::splits ? WGradMode::Split : WGradMode::Fused;

//! True when `Order` has `generate(Problem, WGradMode, const Cost&)`.
template <class Order, class Cost>
concept cost_generating_order = requires(Problem p, WGradMode w, const Cost& c) {
  { Order::generate(p, w, c) } -> std::same_as<Schedule>;
};

//! True when `Order` has `generate(Problem, WGradMode, const Cost&, const MemoryBudget&)`
//! (a memory-bounded generator; the built-ins take a CostRef, which any cost model converts to).
template <class Order, class Cost>
concept budget_generating_order = requires(Problem p, WGradMode w, const Cost& c,
                                           const MemoryBudget& b) {
  { Order::generate(p, w, c, b) } -> std::same_as<Schedule>;
};

//! `Order`'s schedule for `p`; with a cost model, its cost-aware generator when it has one;
//! with a budget too, its memory-bounded generator when it has one.
template <class Order>
Schedule generate_order(const Problem& p, WGradMode w) {
  static_assert(generating_order<Order>,
                "pipesched::plan: this order policy has no generator; give it "
                "`static pipesched::Schedule generate(pipesched::Problem, pipesched::WGradMode)` "
                "(see pipesched::order::Custom), or derive it from a built-in order such as "
                "order::OneFOneB to inherit that order's generator");
  return Order::generate(p, w);
}
template <class Order, class Cost>
Schedule generate_order(const Problem& p, WGradMode w, const Cost& cost) {
  if constexpr (cost_generating_order<Order, Cost>)
    return Order::generate(p, w, cost);
  else
    return generate_order<Order>(p, w);
}
template <class Order, class Cost>
Schedule generate_order(const Problem& p, WGradMode w, const Cost& cost,
                        const MemoryBudget& budget) {
  if constexpr (budget_generating_order<Order, Cost>)
    return Order::generate(p, w, cost, budget);
  else
    return generate_order<Order>(p, w, cost);
}

}  // namespace pipesched::detail
