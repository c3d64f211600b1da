// The list-scheduling engine (list_schedule_plan's): simulated time, the dependency rules,
// each rank's ready actions ordered by its rule.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/list_rule.hpp"

namespace pipesched {

namespace detail::list {

//! What orders a rule's ready actions: its key when it has one, else its priority.
template <class Rule>
auto rank_value(const Rule& rule, const RankState& st, const ReadyAction& a) {
  if constexpr (keyed_rule<Rule>) {
    (void)st;
    return rule.key(a);
  } else {
    return rule.priority(st, a);
  }
}

//! The ready actions of one kind on one rank, in (key, order) order. A rule that admits
//! action by action needs them all in order (a std::set); one that admits at most by kind
//! always takes the first, so a binary heap does.
template <class Entry, bool scan>
class Ordered;
template <class Entry>
class Ordered<Entry, true> {
 public:
  void insert(const Entry& e) { set_.insert(e); }
  void erase(const Entry& e) { set_.erase(e); }
  bool empty() const { return set_.empty(); }
  auto begin() const { return set_.begin(); }
  auto end() const { return set_.end(); }
  const std::set<Entry>& all() const { return set_; }

 private:
  std::set<Entry> set_;
};
template <class Entry>
class Ordered<Entry, false> {
 public:
  // Entries usually arrive in order (weight gradients FIFO, a stage's microbatches in turn):
  // while they do, a queue in a vector serves them at constant cost; the first one out of
  // order turns what is left into a binary heap, until it empties.
  void insert(const Entry& e) {
    if (!heap_) {
      if (head_ == buf_.size() || !(e < buf_.back())) {
        buf_.push_back(e);
        return;
      }
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
      std::make_heap(buf_.begin(), buf_.end(), Later{});
      heap_ = true;
    }
    buf_.push_back(e);
    std::push_heap(buf_.begin(), buf_.end(), Later{});
  }
  void erase(const Entry&) {  // only ever the first
    if (heap_) {
      std::pop_heap(buf_.begin(), buf_.end(), Later{});
      buf_.pop_back();
      heap_ = !buf_.empty();
    } else if (++head_ == buf_.size()) {
      buf_.clear();
      head_ = 0;
    } else if (head_ >= 4096 && 2 * head_ >= buf_.size()) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  bool empty() const { return head_ == buf_.size(); }
  const Entry* begin() const { return buf_.data() + head_; }
  const Entry* end() const { return empty() ? begin() : begin() + 1; }
  std::span<const Entry> all() const { return {buf_.data() + head_, buf_.size() - head_}; }

 private:
  struct Later {  // a function object, so that the heap's comparisons inline
    bool operator()(const Entry& a, const Entry& b) const { return b < a; }
  };
  std::vector<Entry> buf_;
  std::size_t head_ = 0;  //!< queue mode: entries before it have been taken
  bool heap_ = false;
};

//! Every entry of an Ordered, in no particular order.
template <class O>
decltype(auto) all_entries(const O& o) {
  return o.all();
}

//! The entry of a keyed rule's ordered ready set: its key and the ready action.
template <class Rule, bool = keyed_rule<Rule>>
struct KeyOf {
  struct entry {
    int key;
    std::uint64_t order;
    std::uint32_t slot;
    bool operator<(const entry& o) const { return key < o.key; }
  };
};
template <class Rule>
struct KeyOf<Rule, true> {
  using key_type =
      std::decay_t<decltype(std::declval<const Rule&>().key(std::declval<const ReadyAction&>()))>;
  struct entry {
    key_type key;
    std::uint64_t order;
    std::uint32_t slot;  //!< where the ready action lies in its rank's slab
    bool operator<(const entry& o) const {
      if (key < o.key) return true;
      if (o.key < key) return false;
      return order < o.order;
    }
  };
};

}  // namespace detail::list

namespace detail::list {

// The engine of list_schedule_plan: the problem resolved against its placement, each action's
// inputs still to come (by the rules), the events (an action ending, an input arriving), each
// rank's ready actions, and the plan being built. run() lands every event due, lets each free
// rank start its preferred admitted action, and advances to the next event.
template <class Rule, class Cost>
class Engine {
 public:
  Engine(const ListProblem& lp, const Rule& rule, const Cost& cost)
      : lp_(lp), rule_(rule), cost_(cost), p_(resolved(lp)), ctx_{p_, lp.placement, 1} {
    sizes();
    count_inputs();
    start_plan();
  }

  ListPlan run() {
    for (int m = 0; m < M_; ++m) {
      const int first = p_.replica_of_microbatch(m) * p_.replica_stages();  // replica's stage 0
      become_ready(id_of(0, first, m, 0), Action::make(OpKind::F, first, m, 0));
    }
    while (left_ > 0) {
      // Everything that has happened by `now` lands before any rank chooses, so the choices
      // at one instant do not depend on the order the ranks are visited in.
      while (!events_.empty() && events_.top().time <= now_) {
        const Event e = events_.top();
        events_.pop();
        if (e.finish()) {  // id is the rank that ran it
          finish(running_[e.id()], e.time);
          changed_[e.id()] = 1;
        } else {
          make_ready(e.id(), action_of(e.id()));
        }
      }
      for (int r = 0; r < R_; ++r) {
        const auto ru = static_cast<std::size_t>(r);
        const RankState& rs = state_[ru];
        if (!changed_[ru] || free_at_[ru] > now_ ||
            rs.ready_by_kind[0] + rs.ready_by_kind[1] + rs.ready_by_kind[2] == 0)
          continue;
        changed_[ru] = 0;
        choose_and_start(r);
      }
      if (left_ == 0) break;
      // Nothing runs and nothing will arrive: the rule refused every ready action.
      if (events_.empty()) stalled();
      now_ = std::max(now_, events_.top().time);
    }
    return std::move(plan_);
  }

 private:
  // Events: an action finishing, or becoming ready (its last input arriving); earliest first,
  // ties in the order they were created. Packed in 16 bytes (the heap is the engine's hottest
  // structure): the sequence number in the high half of `tag`, then the id, then the kind.
  // Ids stay below 2^29 and sequence numbers below 2^30 (at most 2^28 actions, each one
  // finishing and at most one arrival event).
  struct Event {
    double time;
    std::uint64_t tag;
    std::size_t id() const { return static_cast<std::size_t>((tag & 0xffffffffu) >> 1); }
    bool finish() const { return (tag & 1u) != 0; }
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : tag > o.tag; }
  };
  static Event event(double time, std::uint64_t n, std::size_t id, bool finish) {
    return Event{time, (n << 32) | (static_cast<std::uint64_t>(id) << 1) | (finish ? 1u : 0u)};
  }
  // Keyed rules keep each rank's ready actions ordered by (key, order), per kind, and not in
  // `ready_` (RankState::ready is then empty; ready_count still counts them). The ready actions
  // themselves lie in a slab per rank (small heap entries, reused slots).
  using Entry = typename KeyOf<Rule>::entry;
  struct KeyedRank {
    std::array<Ordered<Entry, admitting_rule<Rule>>, 3> sorted;
    std::vector<ReadyAction> slab;
    std::vector<std::uint32_t> free_slots;
  };

  // The problem with its stages from the placement, checked against it.
  static Problem resolved(const ListProblem& lp) {
    const std::string& gen = lp.name;
    Problem p = lp.problem;
    const Placement& pl = lp.placement;
    if (p.stages == 0) p.stages = pl.stages();
    if (pl.ranks() != p.ranks || pl.stages() != p.stages)
      throw invalid_problem(gen + ": the placement maps " + std::to_string(pl.stages()) +
                            " stages onto " + std::to_string(pl.ranks()) +
                            " ranks, but the problem has ranks = " + std::to_string(p.ranks) +
                            " and stages = " + std::to_string(p.stages) + "; they must agree.");
    try {
      p.check();
    } catch (const invalid_problem& e) {
      e.rethrow_after(gen + ": ");
    }
    return p;
  }

  void sizes() {
    S_ = p_.stages;
    M_ = p_.microbatches;
    K_ = p_.slices;
    R_ = p_.ranks;
    split_ = lp_.wgrad == WGradMode::Split;
    kinds_ = split_ ? 3 : 2;  // 0 F, 1 B or I, 2 W
    back_ = split_ ? OpKind::I : OpKind::B;
    const std::uint64_t units64 = static_cast<std::uint64_t>(S_) * static_cast<std::uint64_t>(M_) *
                                  static_cast<std::uint64_t>(K_);
    constexpr std::uint64_t max_actions = std::uint64_t{1} << 28;
    if (units64 * static_cast<std::uint64_t>(kinds_) > max_actions)
      throw invalid_problem(lp_.name +
                            ": stages × microbatches × slices = " + std::to_string(units64) +
                            " units is more than a list schedule builds (" +
                            std::to_string(max_actions / static_cast<std::uint64_t>(kinds_)) +
                            "); use fewer microbatches or slices.");
    units_ = static_cast<std::size_t>(units64);
  }

  std::size_t id_of(int kind, int s, int m, int k) const {
    return static_cast<std::size_t>(kind) * units_ +
           (static_cast<std::size_t>(s) * static_cast<std::size_t>(M_) +
            static_cast<std::size_t>(m)) *
               static_cast<std::size_t>(K_) +
           static_cast<std::size_t>(k);
  }
  Action action_of(std::size_t id) const {
    const int kind = static_cast<int>(id / units_);
    std::size_t u = id % units_;
    const int k = static_cast<int>(u % static_cast<std::size_t>(K_));
    u /= static_cast<std::size_t>(K_);
    const int m = static_cast<int>(u % static_cast<std::size_t>(M_));
    const int s = static_cast<int>(u / static_cast<std::size_t>(M_));
    return Action::make(kind == 0 ? OpKind::F : kind == 1 ? back_ : OpKind::W, s, m, k);
  }
  static int kind_slot(OpKind k) { return k == OpKind::F ? 0 : k == OpKind::W ? 2 : 1; }

  // Each action's inputs still to come, by the rules (core/rules.hpp; the engine plans no
  // recomputes). With several replicas a microbatch has units on its replica's stages only;
  // the others wait for an input that never comes and are not counted as work.
  void count_inputs() {
    waiting_.assign(static_cast<std::size_t>(kinds_) * units_, 0);
    arrives_.assign(waiting_.size(), 0.0);
    std::size_t absent = 0;
    for (int s = 0; s < S_; ++s)
      for (int m = 0; m < M_; ++m)
        for (int k = 0; k < K_; ++k) {
          if (!p_.has_unit(s, m)) {
            for (int kind = 0; kind < kinds_; ++kind)
              waiting_[id_of(kind, s, m, k)] = 1;
            ++absent;
            continue;
          }
          for (int kind = 0; kind < kinds_; ++kind) {
            std::uint8_t inputs = 0;
            for_each_dependency(p_, action_of(id_of(kind, s, m, k)), [&](const Dependency& d) {
              if (d.role != Role::Recompute && d.role != Role::Reload) ++inputs;
            });
            waiting_[id_of(kind, s, m, k)] = inputs;
          }
        }
    left_ = static_cast<std::size_t>(kinds_) * (units_ - absent);
  }

  void start_plan() {
    const auto R = static_cast<std::size_t>(R_);
    std::vector<Event> storage;
    storage.reserve(R + 64);
    events_ = decltype(events_)(std::greater<>{}, std::move(storage));
    ready_.resize(R);
    plan_.schedule = Schedule{lp_.name, p_, lp_.placement, {}};
    plan_.schedule.ranks.assign(R, {});
    plan_.peak_memory.assign(R, 0.0);
    plan_.peak_in_flight.assign(R, 0);
    for (int r = 0; r < R_; ++r)
      plan_.schedule.ranks[static_cast<std::size_t>(r)].reserve(
          static_cast<std::size_t>(kinds_) * lp_.placement.stages_of(r).size() *
          static_cast<std::size_t>(M_) * static_cast<std::size_t>(K_));
    state_.resize(R);
    for (int r = 0; r < R_; ++r) {
      state_[static_cast<std::size_t>(r)].rank = r;
      state_[static_cast<std::size_t>(r)].problem = &lp_;
    }
    free_at_.assign(R, 0.0);
    running_.resize(R);
    changed_.assign(R, 1);
    if constexpr (keyed_rule<Rule>) keyed_.resize(R);
  }

  [[noreturn]] void bad_cost(const Action& a, const char* what, double v) const {
    throw invalid_problem(lp_.name + ": the cost model gives " + to_string(a) + " a " + what +
                          " of " + std::to_string(v) + "; it must be finite" +
                          (what[0] == 'd' ? " and not negative." : "."));
  }

  // Action `id` (= `a`) has all its inputs: into its rank's ready set.
  void make_ready(std::size_t id, const Action& a) {
    ReadyAction ra;
    ra.action = a;
    ra.ready_at = arrives_[id];
    ra.duration = static_cast<double>(cost_.duration(ctx_, a));
    ra.memory = memory_effect(cost_, ctx_, a, [](const Action&) { return false; }).net();
    if (!(ra.duration >= 0 && ra.duration <= std::numeric_limits<double>::max()))
      bad_cost(a, "duration", ra.duration);
    if (!(std::abs(ra.memory) <= std::numeric_limits<double>::max()))
      bad_cost(a, "memory delta", ra.memory);
    ra.order = ready_seq_++;
    const auto ru = static_cast<std::size_t>(lp_.placement.rank_of(a.stage));
    if constexpr (keyed_rule<Rule>) {
      KeyedRank& kr = keyed_[ru];
      std::uint32_t slot;
      if (kr.free_slots.empty()) {
        slot = static_cast<std::uint32_t>(kr.slab.size());
        kr.slab.push_back(ra);
      } else {
        slot = kr.free_slots.back();
        kr.free_slots.pop_back();
        kr.slab[slot] = ra;
      }
      kr.sorted[static_cast<std::size_t>(kind_slot(a.kind))].insert(
          Entry{rule_.key(ra), ra.order, slot});
    } else {
      ready_[ru].push_back(ra);
    }
    ++state_[ru].ready_by_kind[kind_slot(a.kind)];
    changed_[ru] = 1;
  }

  // An action whose last input arrives at or before `now` is ready at once (in the order the
  // finishing actions release it); a later arrival (a transfer in flight) is an event.
  void become_ready(std::size_t id, const Action& a) {
    if (arrives_[id] <= now_)
      make_ready(id, a);
    else
      events_.push(event(arrives_[id], seq_++, id, false));
  }

  // A dependency of `a` (action `id`) on `producer` ended at `end`.
  void release(std::size_t id, const Action& a, const Action& producer, double end) {
    double at = end;
    if (lp_.placement.rank_of(a.stage) != lp_.placement.rank_of(producer.stage))
      at += static_cast<double>(cost_.transfer_time(ctx_, producer));
    arrives_[id] = std::max(arrives_[id], at);
    if (--waiting_[id] == 0) become_ready(id, a);
  }

  // `a` ended: each action waiting for it (by the rules) has one input fewer to wait for.
  void finish(const Action& a, double end) {
    for_each_dependent(p_, a, [&](const Dependency& d) {
      int kind = 0;
      if (d.role == Role::Backward)
        kind = 1;
      else if (d.role == Role::WeightGrad && split_)
        kind = 2;
      else if (d.role != Role::Forward)
        return;  // a recompute (the engine plans none), or W of a fused backward
      const std::size_t id = id_of(kind, d.stage, d.microbatch, d.slice);
      release(id, action_of(id), a, end);
    });
  }

  // May the rank start anything of this kind now (admit_kind), and this action (admit)?
  bool kind_open(const RankState& rs, int slot) const {
    if constexpr (kind_admitting_rule<Rule>) {
      constexpr OpKind slot_kind[3] = {OpKind::F, OpKind::B, OpKind::W};
      const OpKind k = slot == 1 ? back_ : slot_kind[slot];
      return static_cast<bool>(rule_.admit_kind(rs, k));
    } else {
      (void)rs;
      (void)slot;
      return true;
    }
  }
  bool admitted(const RankState& rs, const ReadyAction& ra) const {
    if constexpr (admitting_rule<Rule>) {
      return static_cast<bool>(rule_.admit(rs, ra));
    } else {
      (void)rs;
      (void)ra;
      return true;
    }
  }

  // The rank's preferred admitted ready action, taken out of its ready set; false when it
  // admits none.
  bool take_preferred(std::size_t ru, RankState& rs, ReadyAction& out) {
    bool open[3];
    for (int k = 0; k < 3; ++k)
      open[k] = rs.ready_by_kind[k] > 0 && kind_open(rs, k);
    if constexpr (keyed_rule<Rule>) {
      KeyedRank& kr = keyed_[ru];
      const Entry* best = nullptr;
      int best_kind = -1;
      for (int k = 0; k < 3; ++k) {
        if (!open[k]) continue;
        for (const Entry& e : kr.sorted[static_cast<std::size_t>(k)]) {
          if (!admitted(rs, kr.slab[e.slot])) continue;
          if (best == nullptr || e < *best) {
            best = &e;
            best_kind = k;
          }
          break;
        }
      }
      if (best == nullptr) return false;
      out = kr.slab[best->slot];
      kr.free_slots.push_back(best->slot);
      kr.sorted[static_cast<std::size_t>(best_kind)].erase(*best);
    } else {
      auto& cand = ready_[ru];
      long best = -1;
      using P = decltype(rule_.priority(rs, cand.front()));
      std::optional<P> best_priority;
      for (std::size_t i = 0; i < cand.size(); ++i) {
        if (!open[kind_slot(cand[i].action.kind)] || !admitted(rs, cand[i])) continue;
        P pr = rule_.priority(rs, cand[i]);
        if (best < 0 || pr < *best_priority ||
            (!(*best_priority < pr) &&
             cand[i].order < cand[static_cast<std::size_t>(best)].order)) {
          best = static_cast<long>(i);
          best_priority.emplace(std::move(pr));
        }
      }
      if (best < 0) return false;
      out = cand[static_cast<std::size_t>(best)];
      cand[static_cast<std::size_t>(best)] = cand.back();  // ties use ReadyAction::order
      cand.pop_back();
    }
    return true;
  }

  // Starts the rank's preferred admitted action; false when it admits none.
  bool choose_and_start(int r) {
    const auto ru = static_cast<std::size_t>(r);
    RankState& rs = state_[ru];
    auto& list = plan_.schedule.ranks[ru];
    const auto& cand = ready_[ru];
    rs.now = now_;
    rs.ready = std::span<const ReadyAction>(cand.data(), cand.size());
    rs.started = std::span<const Action>(list.data(), list.size());
    ReadyAction ra;
    if (!take_preferred(ru, rs, ra)) return false;
    --rs.ready_by_kind[kind_slot(ra.action.kind)];
    list.push_back(ra.action);
    if (ra.action.kind == OpKind::F) ++rs.forwards;
    if (ra.action.kind == OpKind::B || ra.action.kind == OpKind::I) ++rs.backwards;
    if (ra.action.kind == OpKind::W) ++rs.weight_gradients;
    plan_.peak_in_flight[ru] = std::max(plan_.peak_in_flight[ru], rs.in_flight());
    rs.memory += ra.memory;
    rs.peak_memory = std::max(rs.peak_memory, rs.memory);
    plan_.peak_memory[ru] = rs.peak_memory;
    free_at_[ru] = now_ + ra.duration;
    plan_.makespan = std::max(plan_.makespan, free_at_[ru]);
    running_[ru] = ra.action;
    events_.push(event(free_at_[ru], seq_++, ru, true));
    --left_;
    return true;
  }

  // Nothing runs and nothing will arrive: every rank's refusals, in its rule's order.
  [[noreturn]] void stalled() const {
    std::vector<RankStall> stalls;
    std::string detail;
    for (int r = 0; r < R_; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      const RankState& rs = state_[ru];
      std::vector<ReadyAction> refused = ready_[ru];
      if constexpr (keyed_rule<Rule>)
        for (const auto& kind_set : keyed_[ru].sorted)
          for (const Entry& e : all_entries(kind_set))
            refused.push_back(keyed_[ru].slab[e.slot]);
      if (refused.empty()) continue;
      RankStall st{r, now_, rs.forwards, rs.backwards, rs.weight_gradients, rs.memory, {}};
      std::sort(refused.begin(), refused.end(), [&](const ReadyAction& a, const ReadyAction& b) {
        auto pa = rank_value(rule_, rs, a), pb = rank_value(rule_, rs, b);
        return pa < pb || (!(pb < pa) && a.order < b.order);
      });
      std::string names;
      for (std::size_t i = 0; i < refused.size(); ++i) {
        st.refused.push_back(refused[i].action);
        if (i < 8) names += (i ? ", " : "") + to_string(refused[i].action);
      }
      if (refused.size() > 8) names += " and " + std::to_string(refused.size() - 8) + " more";
      detail += "\n  rank " + std::to_string(r) + " (" + std::to_string(rs.forwards) +
                " forwards, " + std::to_string(rs.backwards) + " backwards, " +
                std::to_string(rs.in_flight()) + " in flight, memory " +
                pipesched::detail::format_general(rs.memory) + ") refused " + names;
      stalls.push_back(std::move(st));
    }
    throw schedule_stalled(lp_.name + ": the rule refuses every ready action at time " +
                               pipesched::detail::format_general(now_) +
                               " with nothing running and " + std::to_string(left_) +
                               " actions left, so no rank can go on:" + detail +
                               "\nAdmit at least one of them (a limit that holds back "
                               "forwards must let the backwards they feed run first).",
                           std::move(stalls));
  }

  const ListProblem& lp_;
  const Rule& rule_;
  const Cost& cost_;
  const Problem p_;
  const CostContext ctx_;
  int S_ = 0, M_ = 0, K_ = 0, R_ = 0, kinds_ = 2;
  bool split_ = false;
  OpKind back_ = OpKind::B;
  std::size_t units_ = 0;
  std::vector<std::uint8_t> waiting_;  // inputs still to come, per action id
  std::vector<double> arrives_;        // latest input arrival so far, per action id
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0, ready_seq_ = 0;
  std::vector<std::vector<ReadyAction>> ready_;
  std::vector<KeyedRank> keyed_;
  ListPlan plan_;
  std::vector<RankState> state_;
  std::vector<double> free_at_;
  std::vector<Action> running_;  // each rank's current action
  // A rank is asked again only when something it can see changed: an action of its own
  // ended, or one became ready on it. (Rules see the rank's state and ready set; between those
  // events neither changes, so asking again would give the same answer.)
  std::vector<char> changed_;
  std::size_t left_ = 0;
  double now_ = 0.0;
};

template <class Rule, class Cost>
ListPlan run(const ListProblem& lp, const Rule& rule, const Cost& cost) {
  return Engine<Rule, Cost>(lp, rule, cost).run();
}

}  // namespace detail::list

}  // namespace pipesched
