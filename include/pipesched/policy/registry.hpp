// Run-time access to every schedule generator by its command-line name: the built-in orders
// (their facts read from the order tags in policy/order.hpp, the one place that holds them)
// and the generators a program registers at run time, which the tuner and any tool built on
// the registry then offer beside the built-ins.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/policy/detail/named_registry.hpp"
#include "pipesched/policy/generate.hpp"
#include "pipesched/policy/order.hpp"

namespace pipesched {

//! A generator as the command line and the tuner see it.
struct GeneratorInfo {
  std::string_view name;     //!< command-line name, e.g. "1f1b"
  std::string_view summary;  //!< one line for `pipesched list`
  PlacementKind placement;   //!< the placement it builds
  int default_chunks;        //!< stages per rank when Problem.stages is 0
  bool chunks_vary;          //!< accepts chunks other than the default
  bool fused;                //!< accepts WGradMode::Fused
  bool split;                //!< accepts WGradMode::Split
  WGradMode default_wgrad;   //!< what it uses when not told
  std::function<Schedule(Problem, WGradMode)> generate;  //!< the generator
  bool slices = false;  //!< accepts Problem.slices > 1 (slice-level schedules)
  //! Generates with a given warm-up (forwards before rank 0's first backward); empty for
  //! generators without that knob.
  std::function<Schedule(Problem, WGradMode, int)> generate_with_warmup = {};
  //! Whether Mario checkpointing applies (checkpoint::Mario::runs_on for its order).
  bool mario = false;
  //! Generates fitted to a per-rank memory budget under a cost model (the order's
  //! memory-bounded generator: Zero Bubble's capped weight-gradient deferral, slice-pipe's
  //! warm-up); empty for orders without one, which are fitted by checkpointing alone.
  std::function<Schedule(Problem, WGradMode, CostRef, const MemoryBudget&)> generate_within = {};
  //! Generates planned under the cost model it will be simulated with (the order's cost-aware
  //! generator: V-Half's and V-Min's memory targets, Chimera's); empty for orders whose
  //! schedule does not depend on the cost.
  std::function<Schedule(Problem, WGradMode, CostRef)> generate_with_cost = {};
};

namespace detail {

//! `s` named after the generator `name` that built it: kept when it is `name` or `name` then
//! "+..." (what a pass appends), else renamed to `name`. Every generator in the registry names
//! its schedules so, as the built-ins do, because the tuner names a plan after its schedule and
//! a plan file is read back only when the two agree: a user's order that names its schedules
//! otherwise (a refinement registered under a new name, a rule whose list_schedule call keeps
//! an older name) would write plans that its own reader refuses.
inline Schedule named_after(Schedule s, std::string_view name) {
  const bool derived =
      s.name.size() > name.size() && s.name.starts_with(name) && s.name[name.size()] == '+';
  if (s.name != name && !derived) s.name = std::string(name);
  return s;
}

//! `info` with each of its generators wrapped to name what it builds after `info.name`.
inline GeneratorInfo naming_its_schedules(GeneratorInfo info) {
  const std::string name(info.name);
  if (info.generate)
    info.generate = [f = std::move(info.generate), name](Problem p, WGradMode w) {
      return named_after(f(p, w), name);
    };
  if (info.generate_with_warmup)
    info.generate_with_warmup = [f = std::move(info.generate_with_warmup), name](
                                    Problem p, WGradMode w, int n) {
      return named_after(f(p, w, n), name);
    };
  if (info.generate_within)
    info.generate_within = [f = std::move(info.generate_within), name](
                               Problem p, WGradMode w, CostRef c, const MemoryBudget& b) {
      return named_after(f(p, w, c, b), name);
    };
  if (info.generate_with_cost)
    info.generate_with_cost = [f = std::move(info.generate_with_cost), name](Problem p, WGradMode w,
                                                                             CostRef c) {
      return named_after(f(p, w, c), name);
    };
  return info;
}

template <class Order>
concept warmup_generating_order = requires(Problem p, WGradMode w, int n) {
  { Order::generate_with_warmup(p, w, n) } -> std::same_as<Schedule>;
};

}  // namespace detail

//! The GeneratorInfo of an order policy with a generator (a built-in tag, a tag derived from
//! one, or a user's order on order::Custom), read from the tag's facts. An order with
//! PlacementRule::Any is listed with its default placement; only a looped order varies chunks.
//! Its generators name their schedules after `Order::name` (see register_generator).
template <generating_order Order>
GeneratorInfo generator_info() {
  using P = typename Order::default_placement;
  using Rule = order::PlacementRule;
  GeneratorInfo g{
      .name = Order::name,
      .summary = Order::summary,
      .placement = P::kind,
      .default_chunks = P::chunks,
      .chunks_vary = Order::placement_rule == Rule::Looped,
      .fused = !Order::needs_split_wgrad,
      .split = true,
      .default_wgrad = Order::default_wgrad::splits ? WGradMode::Split : WGradMode::Fused,
      .generate = [](Problem p, WGradMode w) { return Order::generate(p, w); },
      .slices = Order::takes_slices,
      .mario = Order::mario_applies,
  };
  if constexpr (detail::budget_generating_order<Order, CostRef>)
    g.generate_within = [](Problem p, WGradMode w, CostRef c, const MemoryBudget& b) {
      return Order::generate(p, w, c, b);
    };
  if constexpr (detail::cost_generating_order<Order, CostRef>)
    g.generate_with_cost = [](Problem p, WGradMode w, CostRef c) {
      return Order::generate(p, w, c);
    };
  if constexpr (detail::warmup_generating_order<Order>)
    g.generate_with_warmup = [](Problem p, WGradMode w, int n) {
      return Order::generate_with_warmup(p, w, n);
    };
  return detail::naming_its_schedules(std::move(g));
}

namespace detail {

template <class... Orders>
std::vector<GeneratorInfo> infos_of(order_list<Orders...>) {
  return {generator_info<Orders>()...};
}

}  // namespace detail

//! The built-in generators, in the order `pipesched list` shows them.
inline std::span<const GeneratorInfo> builtin_generators() {
  static const std::vector<GeneratorInfo> all = detail::infos_of(builtin_orders{});
  return all;
}

//! The names of the built-in generators for which `has(info)` holds, in `pipesched list`
//! order, joined by ", " with `last` before the final one ("zb-h1, zb-h2 and zb-v"): how a
//! message or a help text lists the orders that share a fact, read from the facts themselves.
template <class Has>
std::string builtin_names(Has&& has, std::string_view last = " and ") {
  std::vector<std::string_view> names;
  for (const GeneratorInfo& g : builtin_generators())
    if (has(g)) names.push_back(g.name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? std::string(last) : std::string(", ");
    out += names[i];
  }
  return out;
}

//! Every generator: the built-ins, then those registered with register_generator, in
//! registration order. A copy, safe to iterate while another thread registers.
inline std::vector<GeneratorInfo> generators() {
  return detail::NamedRegistry<GeneratorInfo>::instance().with(builtin_generators());
}

//! Adds `info` to the registry, so find_generator, generators() and the tuner (tuning::Request
//! bases) know it by `info.name`. The name and summary are copied. The registered generators
//! name every schedule they build after `info.name`, as the built-ins do: a schedule named
//! otherwise is renamed (one named `info.name` + "+..." is kept), so that the plans the tuner
//! makes of it read back. Throws invalid_problem when
//! the name is empty, longer than 64 characters or not lower-case letters, digits, '-', '_'
//! and '.' (it must be usable as a command-line word), when a generator of that name already
//! exists, when `generate` is empty, when it accepts neither backward mode, when its default
//! mode is one it refuses, or when default_chunks < 1.
inline void register_generator(const GeneratorInfo& info) {
  const std::string name(info.name);
  auto refuse = [&](const std::string& why) {
    throw invalid_problem("register_generator('" + name + "'): " + why + ".");
  };
  if (!detail::valid_generator_name(info.name))
    refuse(
        "a generator's name is 1 to 64 characters of lower-case letters, digits, '-', '_' "
        "and '.', not starting with '-' (e.g. \"my-1f1b\")");
  if (!info.generate) refuse("generate is empty; give the function that builds the schedule");
  if (!info.fused && !info.split) refuse("it accepts neither fused nor split backward");
  if ((info.default_wgrad == WGradMode::Fused && !info.fused) ||
      (info.default_wgrad == WGradMode::Split && !info.split))
    refuse(std::string("its default backward mode, ") + to_string(info.default_wgrad) +
           ", is one it does not accept");
  if (info.default_chunks < 1)
    refuse("default_chunks = " + std::to_string(info.default_chunks) +
           "; a rank holds at least 1 stage");
  for (const GeneratorInfo& g : builtin_generators())
    if (g.name == info.name) refuse("a built-in generator has that name; choose another");
  if (!detail::NamedRegistry<GeneratorInfo>::instance().add(detail::naming_its_schedules(info)))
    refuse("a generator of that name is already registered");
}

//! Registers the generator of an order policy (generator_info<Order>()).
template <generating_order Order>
void register_order() {
  register_generator(generator_info<Order>());
}

//! The generator called `name`; throws invalid_problem listing the known names.
inline const GeneratorInfo& find_generator(std::string_view name) {
  for (const GeneratorInfo& g : builtin_generators())
    if (g.name == name) return g;
  if (const GeneratorInfo* g = detail::NamedRegistry<GeneratorInfo>::instance().find(name))
    return *g;
  std::string known;
  for (const GeneratorInfo& g : generators())
    known += (known.empty() ? "" : ", ") + std::string(g.name);
  throw invalid_problem("unknown schedule '" + std::string(name) + "'; known schedules: " + known +
                        ".");
}

}  // namespace pipesched
