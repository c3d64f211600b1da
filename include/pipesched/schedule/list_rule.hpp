// What a list-scheduling rule sees and answers: the problem it schedules, a ready action, a
// free rank's state, the rule concepts and their checks, and the plan the engine returns
// (schedule/list_schedule.hpp runs it).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

namespace pipesched {

//! What the engine schedules: every (stage, microbatch, slice) of `problem` on `placement`,
//! each a forward and a backward — one B, or I then W when `wgrad` is Split. With
//! `problem.replicas` > 1, only the units Problem::has_unit names, each microbatch through its
//! own replica's stages.
struct ListProblem {
  Problem problem;      //!< ranks, microbatches, slices; stages 0 = the placement's
  Placement placement;  //!< stage → rank (its rank count must equal problem.ranks)
  //! One B per unit (Fused), or I then W (Split).
  WGradMode wgrad = WGradMode::Fused;
  std::string name = "list";  //!< the schedule's name, and the prefix of error messages
};

//! An action whose inputs have arrived, as a rule sees it.
struct ReadyAction {
  Action action;            //!< F, B, I or W (part 0)
  double ready_at = 0;      //!< when its last input arrived (transfer time included)
  double duration = 0;      //!< how long it runs, under the cost model
  double memory = 0;        //!< what it adds to (> 0) or frees from (< 0) the rank's memory
  std::uint64_t order = 0;  //!< when it became ready, as a sequence number: ties go FIFO
};

//! A free rank at a decision point.
struct RankState {
  int rank = 0;              //!< the rank that is free
  double now = 0;            //!< the simulated time
  double memory = 0;         //!< activations the rank holds now (the simulator's unit)
  double peak_memory = 0;    //!< the most it has held so far
  int forwards = 0;          //!< F started on this rank
  int backwards = 0;         //!< B or I started
  int weight_gradients = 0;  //!< W started (split backward only)
  //! Every ready action of the rank, admitted or not — for rules ordering by `priority`; a
  //! rule ordering by `key` sees it empty (the engine keeps them sorted elsewhere) and counts
  //! them with ready_count.
  std::span<const ReadyAction> ready;
  std::span<const Action> started;  //!< the rank's list so far, in start order
  //! What is being scheduled.
  const ListProblem* problem = nullptr;

  //! Forwards started whose backward (B or I) has not.
  int in_flight() const noexcept { return forwards - backwards; }
  //! Ready actions of kind `k` (F, B, I or W); constant time.
  int ready_count(OpKind k) const noexcept {
    return k == OpKind::F                     ? ready_by_kind[0]
           : k == OpKind::B || k == OpKind::I ? ready_by_kind[1]
           : k == OpKind::W                   ? ready_by_kind[2]
                                              : 0;
  }
  int ready_by_kind[3] = {0, 0, 0};  //!< ready forwards, backwards (B or I), weight gradients
};

//! A list-scheduling rule orders the ready actions of a free rank, smallest first, ties in
//! the order they became ready, by one of:
//! - `priority(const RankState&, const ReadyAction&) const` — any totally ordered value (a
//!   number, a pair, a tuple), free to depend on the rank's state; the engine asks it for every
//!   ready action at every decision;
//! - `key(const ReadyAction&) const` — a totally ordered value that depends on the action
//!   alone; the engine then keeps each rank's ready actions sorted by it, per kind, and a
//!   decision costs a logarithm instead of a pass over everything ready (use it when a rank
//!   may hold hundreds of ready actions, e.g. deferred weight gradients).
//! It may also refuse, for now: `bool admit(const RankState&, const ReadyAction&) const` one
//! action, `bool admit_kind(const RankState&, OpKind) const` every ready action of a kind (F,
//! B, I or W) at once — the cheap way to say "no forward while four are in flight".
template <class R>
concept prioritized_rule = requires(const R& rule, const RankState& st, const ReadyAction& a) {
  { rule.priority(st, a) } -> std::totally_ordered;
};
//! A list-scheduling rule that orders by `key(action)`, a value of the action alone (see
//! prioritized_rule).
template <class R>
concept keyed_rule = requires(const R& rule, const ReadyAction& a) {
  { rule.key(a) } -> std::totally_ordered;
};
//! A list-scheduling rule: one that orders by `priority` or by `key` (see prioritized_rule).
template <class R>
concept list_rule = prioritized_rule<R> || keyed_rule<R>;

//! True when rule `R` has an `admit` member for single actions.
template <class R>
concept admitting_rule = requires(const R& rule, const RankState& st, const ReadyAction& a) {
  { rule.admit(st, a) } -> std::convertible_to<bool>;
};
//! True when rule `R` has an `admit_kind` member.
template <class R>
concept kind_admitting_rule = requires(const R& rule, const RankState& st, OpKind k) {
  { rule.admit_kind(st, k) } -> std::convertible_to<bool>;
};

//! Where the engine found every rank refusing: the rank, its state and what it refused.
struct RankStall {
  int rank = 0;     //!< the rank
  double time = 0;  //!< when it was free
  //! @{
  //! F, B or I, and W it had started by then.
  int forwards = 0, backwards = 0, weight_gradients = 0;
  //! @}
  double memory = 0;            //!< what it held then
  std::vector<Action> refused;  //!< its ready actions, most preferred first
};

//! A rule refused every ready action on every rank while nothing ran: the schedule cannot go
//! on. `stalls()` gives each rank that had ready actions.
class schedule_stalled : public invalid_problem {
 public:
  //! An exception whose message is `what`, with each stalled rank's state.
  schedule_stalled(const Message& what, std::vector<RankStall> stalls)
      : invalid_problem(what), stalls_(std::move(stalls)) {}
  //! Each rank that had ready actions, and what it refused.
  const std::vector<RankStall>& stalls() const noexcept { return stalls_; }
  void throw_after(const Message& prefix) const override {
    throw schedule_stalled(prefix + message(), stalls_);
  }

 private:
  std::vector<RankStall> stalls_;
};

//! A list schedule and what the engine measured while building it.
struct ListPlan {
  Schedule schedule;                //!< the rank lists, in start order
  double makespan = 0;              //!< end of the last action, under the cost model
  std::vector<double> peak_memory;  //!< per rank
  std::vector<int> peak_in_flight;  //!< per rank: most forwards whose B/I had not started
};

//! Checks `R` against `list_rule`, with a message per missing requirement (list_schedule
//! calls it, so a rule that does not fit is named in one readable error).
template <class R>
constexpr bool check_list_rule() {
  static_assert(
      requires(const R& rule, const RankState& st, const ReadyAction& a) {
        rule.priority(st, a);
      } || requires(const R& rule, const ReadyAction& a) { rule.key(a); },
      "pipesched: a list-scheduling rule needs `priority(const RankState&, const ReadyAction&) "
      "const` or `key(const ReadyAction&) const`, returning a totally ordered value (smaller "
      "runs first)");
  if constexpr (requires(const R& rule, const RankState& st, const ReadyAction& a) {
                  rule.priority(st, a);
                }) {
    static_assert(prioritized_rule<R>,
                  "pipesched: a list-scheduling rule's priority must return a totally ordered "
                  "value (a number, a std::pair or a std::tuple of numbers), smaller first");
  }
  if constexpr (requires(const R& rule, const ReadyAction& a) { rule.key(a); }) {
    static_assert(keyed_rule<R>,
                  "pipesched: a list-scheduling rule's key must return a totally ordered value "
                  "(a number, a std::pair or a std::tuple of numbers), smaller first");
  }
  if constexpr (requires { &R::admit; }) {
    static_assert(admitting_rule<R>,
                  "pipesched: a list-scheduling rule's admit must be `bool admit(const "
                  "RankState&, const ReadyAction&) const`");
  }
  if constexpr (requires { &R::admit_kind; }) {
    static_assert(kind_admitting_rule<R>,
                  "pipesched: a list-scheduling rule's admit_kind must be `bool admit_kind(const "
                  "RankState&, OpKind) const`");
  }
  return list_rule<R>;
}

}  // namespace pipesched
