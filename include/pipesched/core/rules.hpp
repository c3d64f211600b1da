// The dependency rules of the vocabulary, written once: which actions a compute action waits
// for. The validator's and the simulator's graph (analysis/detail/graph.hpp), the list-
// scheduling engine (schedule/list_schedule.hpp) and the passes that replay a schedule
// (pass/detail/filler.hpp) all read them from here; what an action adds to and frees from
// memory is the other rule, memory_effect in analysis/cost_model.hpp.
//
// For a unit (stage s, microbatch m, slice k), within the replica of s (a replica's first stage
// reads its input, its last computes the loss):
//   F(s,m,k)    after F(s-1,m,k) and F(s,m,k-1)
//   B/I(s,m,k)  after F(s,m,k), R(s,m,k) when the unit is checkpointed, B/I(s+1,m,k) and
//               B/I(s,m,k+1)
//   W(s,m,k)    after I(s,m,k)                     (every part of it)
//   R(s,m,k)    after F(s,m,k); a late one (RL) also after B/I(s+1,m,k) and B/I(s,m,k+1),
//               the inputs of its backward
#pragma once

#include <cstdint>

#include "pipesched/core/action.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! The part a compute action plays in the dependency rules.
enum class Role : std::uint8_t {
  Forward,        //!< F
  Backward,       //!< B, or I (the input gradient)
  WeightGrad,     //!< W (any part)
  Recompute,      //!< R that may run as soon as its forward has (RecomputeTiming::Early)
  LateRecompute,  //!< RL: R that waits for its backward's inputs too
};

//! One rule: an action of role `consumer` on (s, m, k) waits for the action of role `producer`
//! on (s + stage_step, m, k + slice_step). A producer role Recompute stands for any R (late or
//! not); a rule with a stage step crosses stages (and so, perhaps, ranks).
struct DependencyRule {
  //! @{
  //! The role of the waiting action and of the action it waits for.
  Role consumer, producer;
  //! @}
  //! @{
  //! The producer's stage and slice relative to the consumer's: −1 the previous, +1 the next.
  int stage_step, slice_step;
  //! @}
};

//! The rules, in the order the engine releases dependents (which fixes its ties).
inline constexpr DependencyRule dependency_rules[] = {
    {Role::Forward, Role::Forward, -1, 0},         // the previous stage's forward
    {Role::Forward, Role::Forward, 0, -1},         // the previous slice's forward
    {Role::Backward, Role::Forward, 0, 0},         // its own forward
    {Role::Backward, Role::Recompute, 0, 0},       // its recompute, when checkpointed
    {Role::Backward, Role::Backward, +1, 0},       // the next stage's backward (the gradient)
    {Role::Backward, Role::Backward, 0, +1},       // the next slice's backward
    {Role::WeightGrad, Role::Backward, 0, 0},      // its input gradient
    {Role::Recompute, Role::Forward, 0, 0},        // its forward's input
    {Role::LateRecompute, Role::Forward, 0, 0},    // the same
    {Role::LateRecompute, Role::Backward, +1, 0},  // and the inputs of its backward
    {Role::LateRecompute, Role::Backward, 0, +1},
};

//! The role of a compute action that is not an Overlap (whose halves have roles of their own);
//! false for any other action.
constexpr bool role_of(const Action& a, Role& role) noexcept {
  switch (a.kind) {
    case OpKind::F:
      role = Role::Forward;
      return true;
    case OpKind::B:
    case OpKind::I:
      role = Role::Backward;
      return true;
    case OpKind::W:
      role = Role::WeightGrad;
      return true;
    case OpKind::R:
      role = a.late ? Role::LateRecompute : Role::Recompute;
      return true;
    default:
      return false;
  }
}

//! One action an action waits for: its role and unit, and whether it is on another stage.
struct Dependency {
  Role role;  //!< the role of the action waited for
  //! @{
  //! The unit of the action waited for.
  int stage, microbatch, slice;
  //! @}
  bool crosses_stage;  //!< true when it is on another stage than the waiting action
};

namespace detail {

// Whether `rule` applies to a consumer on (stage, slice): its producer lies inside the
// consumer's replica and the problem's slices.
inline bool rule_applies(const Problem& p, const DependencyRule& rule, int stage, int slice) {
  if (rule.stage_step < 0 && p.first_stage(stage)) return false;
  if (rule.stage_step > 0 && p.last_stage(stage)) return false;
  if (rule.slice_step < 0 && slice == 0) return false;
  if (rule.slice_step > 0 && slice + 1 >= p.slices) return false;
  return true;
}

constexpr bool produces(Role producer_role, Role actual) {
  return producer_role == actual ||
         (producer_role == Role::Recompute && actual == Role::LateRecompute);
}

}  // namespace detail

//! Calls `f(Dependency)` for every action `a` waits for (a compute action other than an
//! Overlap; nothing for others). A Recompute dependency is named whether or not the unit has
//! one: a reader that knows no R for the unit skips it.
template <class F>
void for_each_dependency(const Problem& p, const Action& a, F&& f) {
  Role role{};
  if (!role_of(a, role)) return;
  for (const DependencyRule& rule : dependency_rules) {
    if (rule.consumer != role || !detail::rule_applies(p, rule, a.stage, a.slice)) continue;
    f(Dependency{rule.producer, a.stage + rule.stage_step, a.microbatch, a.slice + rule.slice_step,
                 rule.stage_step != 0});
  }
}

//! Calls `f(Dependency)` for every action that waits for `a`, the dependency naming the
//! waiting action's role and unit (the inverse of for_each_dependency).
template <class F>
void for_each_dependent(const Problem& p, const Action& a, F&& f) {
  Role role{};
  if (!role_of(a, role)) return;
  for (const DependencyRule& rule : dependency_rules) {
    if (!detail::produces(rule.producer, role)) continue;
    const int stage = a.stage - rule.stage_step, slice = a.slice - rule.slice_step;
    if (stage < 0 || stage >= p.stages || slice < 0 || slice >= p.slices) continue;
    if (!detail::rule_applies(p, rule, stage, slice)) continue;
    f(Dependency{rule.consumer, stage, a.microbatch, slice, rule.stage_step != 0});
  }
}

}  // namespace pipesched
