// Run-time access to every checkpoint policy by its command-line name: the built-ins (their
// facts read from the tags in policy/checkpoint.hpp) and the policies a program registers,
// which the command-line tools built on the registry and the tuner then offer beside them.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/policy/checkpoint.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched {

//! A checkpoint policy as the command line and the tuner see it.
struct CheckpointInfo {
  std::string_view name;      //!< command-line name, e.g. "selective"
  std::string_view summary;   //!< one line for `pipesched list`
  bool needs_budget = false;  //!< chooses what to recompute from a memory budget
  bool recomputes = true;     //!< may add recomputes (false: checkpoint::None)
  //! The built-in mode it applies; empty for a program's own policy.
  std::optional<CheckpointMode> mode = std::nullopt;
  //! Whether it can checkpoint a schedule of the generator `g`.
  std::function<bool(const GeneratorInfo& g)> runs_on;
  //! The schedule with its recomputes, under a cost model and a per-rank budget.
  std::function<Schedule(const Schedule&, CostRef, const MemoryBudget&)> apply;
};

namespace detail {

// Whether `P` runs on the built-in order called `name` (true when none is: a registered
// generator, judged by its own facts below).
template <class P, class... Orders>
std::optional<bool> runs_on_builtin(std::string_view name, order_list<Orders...>) {
  std::optional<bool> out;
  (void)((name == Orders::name ? (out = P::template runs_on<Orders>, true) : false) || ...);
  return out;
}

}  // namespace detail

//! The CheckpointInfo of a checkpoint policy (a built-in tag or a program's own, derived from
//! checkpoint::Custom), read from its facts. On a generator registered at run time, a policy
//! that follows Mario's rule (runs_on reads mario_applies) asks the generator's `mario`
//! fact; any other runs on it when it runs on order::Custom.
template <class P>
requires applicable_checkpoint<P, CostRef> CheckpointInfo checkpoint_info() {
  CheckpointInfo c;
  c.name = P::name;
  c.summary = P::summary;
  c.needs_budget = P::needs_budget;
  c.recomputes = P::recomputes;
  if constexpr (requires { P::mode; }) c.mode = P::mode;
  c.runs_on = [](const GeneratorInfo& g) {
    if (std::optional<bool> b = detail::runs_on_builtin<P>(g.name, builtin_orders{})) return *b;
    if constexpr (requires { P::mode; })
      if (P::mode == CheckpointMode::Mario) return g.mario;
    return P::template runs_on<order::Custom>;
  };
  c.apply = [](const Schedule& s, CostRef cost, const MemoryBudget& b) {
    return P::apply(s, cost, b);
  };
  return c;
}

//! The built-in checkpoint policies, in the order `pipesched list` shows them.
inline std::span<const CheckpointInfo> builtin_checkpoints() {
  static const std::vector<CheckpointInfo> all = {
      checkpoint_info<checkpoint::None>(),      checkpoint_info<checkpoint::Full>(),
      checkpoint_info<checkpoint::Selective>(), checkpoint_info<checkpoint::Mario>(),
      checkpoint_info<checkpoint::FullEarly>(), checkpoint_info<checkpoint::SelectiveEarly>()};
  return all;
}

//! Every checkpoint policy: the built-ins, then those registered, in registration order. A
//! copy, safe to iterate while another thread registers.
inline std::vector<CheckpointInfo> checkpoint_policies() {
  return detail::NamedRegistry<CheckpointInfo>::instance().with(builtin_checkpoints());
}

//! Adds `info` to the registry, so find_checkpoint, checkpoint_policies() and the tuner know it
//! by `info.name`. The name and summary are copied. Throws invalid_problem when the name is not
//! a command-line word (lower-case letters, digits, '-', '_', '.'; at most 64), when a policy of
//! that name exists, or when `apply` or `runs_on` is empty.
inline void register_checkpoint(const CheckpointInfo& info) {
  const std::string name(info.name);
  if (!detail::valid_generator_name(name))
    throw invalid_problem("register_checkpoint: name '" + name +
                          "' is not a command-line word; use 1 to 64 lower-case letters, digits, "
                          "'-', '_' or '.', not starting with '-'.");
  if (!info.apply || !info.runs_on)
    throw invalid_problem("register_checkpoint: policy '" + name +
                          "' has no apply or no runs_on; give both (checkpoint_info<Policy>() "
                          "fills them from a policy's tag).");
  bool taken = false;
  for (const CheckpointInfo& c : builtin_checkpoints())
    taken = taken || c.name == name;
  if (taken || !detail::NamedRegistry<CheckpointInfo>::instance().add(info))
    throw invalid_problem("register_checkpoint: a checkpoint policy named '" + name +
                          "' exists already; give yours another name.");
}

//! Registers a checkpoint policy's tag (checkpoint_info<P>()).
template <class P>
void register_checkpoint() {
  register_checkpoint(checkpoint_info<P>());
}

//! The checkpoint policy called `name` (any case); throws parse_error listing the known ones.
inline const CheckpointInfo& find_checkpoint(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  for (const CheckpointInfo& c : builtin_checkpoints())
    if (c.name == lower) return c;
  if (const CheckpointInfo* c = detail::NamedRegistry<CheckpointInfo>::instance().find(lower))
    return *c;
  // The built-ins' own sentence (parse_checkpoint_mode), then the program's policies.
  try {
    (void)parse_checkpoint_mode(name);
  } catch (const parse_error& e) {
    std::string others;
    for (const auto& c : checkpoint_policies())
      if (!c.mode) others += (others.empty() ? "" : ", ") + std::string(c.name);
    if (others.empty()) throw;
    throw parse_error(e.message() + " This program also offers: " + others + ".", e.line(),
                      e.column());
  }
  throw parse_error("checkpoint policy '" + std::string(name) + "' is unknown.", 0, 1);
}

}  // namespace pipesched
