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
//   OFFLOAD(s,m,k)  after F(s,m,k)             (its copy to host memory starts when F ends)
//   RELOAD(s,m,k)   after OFFLOAD(s,m,k)
//   B/I(s,m,k)  also after RELOAD(s,m,k) when the unit is offloaded (its copy back has ended)
//
// Vocabulary passes (vocabulary parallelism, one replica; pass/vocabulary.hpp): the output
// layer is split by vocabulary into one shard per rank, shard j on rank j, and L is the last
// stage:
//   VOCAB_F(j,m,k)  after F(L,m,k)                  (the last stage's output, broadcast)
//   VOCAB_B(j,m,k)  after VOCAB_F(i,m,k) of every shard i   (their reduction: the softmax
//                                                   statistics every shard's gradient needs)
//   B/I(L,m,k)      after VOCAB_F(i,m,k) of every shard i, in a schedule with vocabulary passes
//                   (its output gradient is that reduction's sum)
// With the input embedding split too (EMBED_F, EMBED_B; a schedule with VOCAB passes):
//   EMBED_F(j,m,k)  after nothing                   (a shard's lookups need only the tokens)
//   F(0,m,k)        after EMBED_F(i,m,k) of every shard i   (their reduction is its input)
//   EMBED_B(j,m,k)  after B/I(0,m,k)                (the first stage's input gradient, broadcast)
// These are collectives, not messages between neighbouring stages: they are never lowered to
// sends and receives, and the graph (analysis/detail/graph.hpp) adds them as direct edges.
//
// The rules that cross stages are also the messages between stages (for_each_message): F(s)
// sends its output to s+1, B or I(s) its input gradient to s-1, and every consumer of a rule on
// another stage receives it, a late recompute included (RL(s) needs the gradient of s+1 before
// its backward does, so where it runs first it is the gradient's first consumer). Lowering to
// sends and receives, its send budget, the validator's graph of a schedule with communication
// and the executor all read the messages from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>

#include "pipesched/core/action.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! The most ranks a schedule with vocabulary passes may have: every VOCAB_B and last-stage
//! backward waits for every rank's VOCAB_F, ranks² dependencies per microbatch and slice.
inline constexpr int max_vocabulary_ranks = 4096;

//! The part a compute action plays in the dependency rules.
enum class Role : std::uint8_t {
  Forward,        //!< F
  Backward,       //!< B, or I (the input gradient)
  WeightGrad,     //!< W (any part)
  Recompute,      //!< R that may run as soon as its forward has (RecomputeTiming::Early)
  LateRecompute,  //!< RL: R that waits for its backward's inputs too
  Offload,        //!< OFFLOAD: a forward's activations to host memory
  Reload,         //!< RELOAD: and back, before the backward
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
    {Role::Offload, Role::Forward, 0, 0},  // the forward whose activations it copies
    {Role::Reload, Role::Offload, 0, 0},   // its offload
    {Role::Backward, Role::Reload, 0, 0},  // its reload, when offloaded
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
    case OpKind::Offload:
      role = Role::Offload;
      return true;
    case OpKind::Reload:
      role = Role::Reload;
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
//! Overlap, an OFFLOAD or a RELOAD; nothing for others). A Recompute or Reload dependency is
//! named whether or not the unit has one: a reader that knows no R (RELOAD) for the unit skips
//! it.
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

//! Calls `f(half)` for each half of an Overlap (the forward half, then the backward half), or
//! `f(a)` once for any other action.
template <class F>
constexpr void for_each_half(const Action& a, F&& f) {
  if (a.kind == OpKind::Overlap) {
    f(a.forward_half());
    f(a.backward_half());
  } else {
    f(a);
  }
}

//! One message between neighbouring stages of a replica: what the producer of a unit (stage
//! `from`, microbatch, slice) hands to its consumers on stage `to`. A rule of
//! dependency_rules that crosses stages is one.
struct StageMessage {
  //! True for a forward's output (an activation, to the next stage), false for the input
  //! gradient of a B or I (to the previous stage).
  bool forward;
  int from;  //!< the producing stage
  int to;    //!< the consuming stage
  //! @{
  //! The unit the message carries (the producer's and the consumer's alike).
  int microbatch, slice;
  //! @}

  //! The action that sends it: SendF / SendB on `from`.
  constexpr Action send() const noexcept {
    return Action::make(forward ? OpKind::SendF : OpKind::SendB, from, microbatch, slice);
  }
  //! The action that receives it: RecvF / RecvB on `to`.
  constexpr Action receive() const noexcept {
    return Action::make(forward ? OpKind::RecvF : OpKind::RecvB, to, microbatch, slice);
  }
  //! The action that completes its send: WaitSendF / WaitSendB on `from`.
  constexpr Action wait_send() const noexcept {
    return Action::make(forward ? OpKind::WaitSendF : OpKind::WaitSendB, from, microbatch, slice);
  }

  //! Messages are equal when they move the same data between the same stages.
  friend constexpr bool operator==(const StageMessage&, const StageMessage&) = default;
};

namespace detail {

// The stage a message of the given direction goes to, relative to the one it comes from: the
// opposite of the stage step of the rules whose producer makes it.
constexpr int message_step(bool forward) {
  for (const DependencyRule& rule : dependency_rules)
    if (rule.stage_step != 0 && rule.producer == (forward ? Role::Forward : Role::Backward))
      return -rule.stage_step;
  return 0;
}

// Whether dependency_rules[i] names a message an earlier rule already named: the same producer
// and stage step, another consumer (RL beside B/I for the gradient).
constexpr bool repeats_message(std::size_t i) {
  for (std::size_t j = 0; j < i; ++j)
    if (dependency_rules[j].producer == dependency_rules[i].producer &&
        dependency_rules[j].stage_step == dependency_rules[i].stage_step)
      return true;
  return false;
}

constexpr bool messages_carry_one_unit() {
  for (const DependencyRule& rule : dependency_rules)
    if (rule.stage_step != 0 && (rule.slice_step != 0 || (rule.producer != Role::Forward &&
                                                          rule.producer != Role::Backward)))
      return false;
  return true;
}

static_assert(messages_carry_one_unit(),
              "a rule across stages is a message of a forward's output or an input gradient of the "
              "same unit");
static_assert(message_step(true) != 0 && message_step(false) != 0,
              "the rules name both messages: a forward's output and an input gradient");

}  // namespace detail

//! Which messages of a compute action for_each_message visits.
enum class MessageEnd : std::uint8_t {
  Sends,     //!< those it produces: F its output, B or I its input gradient
  Receives,  //!< those it needs: F the previous stage's output; B, I and RL the gradient
};

//! Calls `f(const StageMessage&)` for each message compute action `a` sends (`end` Sends) or
//! receives (`end` Receives), both halves of an Overlap, the forward half first, and nothing for
//! other actions: the rules of dependency_rules that cross stages, inside the action's replica,
//! whatever the ranks. F(s) sends its output to s+1 and receives that of s−1; B or I(s) sends
//! its input gradient to s−1 and receives that of s+1; a late recompute RL(s) receives the
//! gradient of s+1 too (where it runs before its backward, it is the gradient's first consumer);
//! W and an early R neither send nor receive.
template <class F>
void for_each_message(const Problem& p, const Action& a, MessageEnd end, F&& f) {
  auto inside = [&](int stage) { return stage >= 0 && stage < p.stages; };
  for_each_half(a, [&](const Action& c) {
    Role role{};
    if (!role_of(c, role) || !inside(c.stage)) return;
    for (std::size_t i = 0; i < std::size(dependency_rules); ++i) {
      const DependencyRule& rule = dependency_rules[i];
      if (rule.stage_step == 0) continue;
      const bool forward = rule.producer == Role::Forward;
      if (end == MessageEnd::Receives) {
        // `c` is the rule's consumer: the message comes from the producer's stage.
        const int from = c.stage + rule.stage_step;
        if (rule.consumer != role || !inside(from) ||
            !detail::rule_applies(p, rule, c.stage, c.slice))
          continue;
        f(StageMessage{forward, from, c.stage, c.microbatch, c.slice});
      } else {
        // `c` is the rule's producer: one message, however many consumers wait for it.
        const int to = c.stage - rule.stage_step;
        if (!detail::produces(rule.producer, role) || detail::repeats_message(i) || !inside(to) ||
            !detail::rule_applies(p, rule, to, c.slice))
          continue;
        f(StageMessage{forward, c.stage, to, c.microbatch, c.slice});
      }
    }
  });
}

//! The same for the messages between ranks under placement `pl`, the ones a schedule lowered
//! to communication sends and receives explicitly (see pass/lower_communication.hpp); a
//! message between stages of one rank stays in that rank's memory.
template <class F>
void for_each_message(const Problem& p, const Placement& pl, const Action& a, MessageEnd end,
                      F&& f) {
  for_each_message(p, a, end, [&](const StageMessage& msg) {
    if (pl.rank_of(msg.from) != pl.rank_of(msg.to)) f(msg);
  });
}

//! The message a dependency `d` of `consumer` across stages (d.crosses_stage) stands for: the
//! output or input gradient of the unit waited for, sent to the consumer's stage.
constexpr StageMessage message_of(const Dependency& d, const Action& consumer) noexcept {
  return StageMessage{d.role == Role::Forward, d.stage, consumer.stage, d.microbatch, d.slice};
}

//! The message communication action `a` moves: a SendF / SendB or its WaitSendF / WaitSendB
//! names the sending stage, a RecvF / RecvB the receiving one. Nothing for other actions. The
//! stages are not checked against a problem.
constexpr std::optional<StageMessage> message_of(const Action& a) noexcept {
  switch (a.kind) {
    case OpKind::SendF:
    case OpKind::SendB:
    case OpKind::WaitSendF:
    case OpKind::WaitSendB: {
      const bool forward = a.kind == OpKind::SendF || a.kind == OpKind::WaitSendF;
      return StageMessage{forward, a.stage, a.stage + detail::message_step(forward), a.microbatch,
                          a.slice};
    }
    case OpKind::RecvF:
    case OpKind::RecvB: {
      const bool forward = a.kind == OpKind::RecvF;
      return StageMessage{forward, a.stage - detail::message_step(forward), a.stage, a.microbatch,
                          a.slice};
    }
    default:
      return std::nullopt;
  }
}

}  // namespace pipesched
