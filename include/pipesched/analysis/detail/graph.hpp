// The dependency graph of a schedule and the in-order replay that validation (dry run,
// deadlock detection) and simulation (timing, memory) share.
//
// Every non-idle action gets a flat index. A compute action's dependencies are the rules of
// core/rules.hpp (the one place they are written), and so are the messages between stages
// (for_each_message, message_of). In a compute-only schedule a dependency on another rank is a
// direct edge (the data is sent when produced and waited for when needed: exactly the dry run of
// the schedule lowered to sends and receives, with buffered sends). In a schedule with
// communication actions a cross-rank dependency must go through a receive earlier in the consumer's
// list. A receive is *posted* where it stands (PyTorch's irecv, pipesched's MPI transport):
// it waits for nothing, and the consumer waits for the data, so the consumer depends on its
// receive (same rank, earlier) and on the matching send, and the send on its producer.
// A WAIT_SEND completes its send: it depends on the send (same rank, earlier) and on the
// peer having posted the matching receive (a send completes only once it can be delivered).
// Actions on a whole stage (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD) depend on
// nothing but their place in their rank's list. The vocabulary passes' collectives (the
// broadcast of the last stage's output to every VOCAB_F, the reduction every VOCAB_B and the
// last stage's backward wait for) are direct edges, with or without communication actions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

//! Where an action sits: rank and position in that rank's list.
struct ActionRef {
  int rank = -1;
  int position = -1;
};

//! A rule broken while building the graph (the graph drops the offending edge).
struct GraphIssue {
  ActionRef at;
  std::string rule;
  std::string message;
};

//! Flat-indexed actions with dependency and dependent lists (CSR).
class DependencyGraph {
 public:
  static constexpr int none = -1;

  explicit DependencyGraph(const Schedule& s) : schedule_(&s) { build(); }

  const Schedule& schedule() const noexcept { return *schedule_; }
  int size() const noexcept { return static_cast<int>(refs_.size()); }
  const ActionRef& ref(int a) const { return refs_[a]; }
  const Action& action(int a) const { return schedule_->ranks[refs_[a].rank][refs_[a].position]; }
  //! Flat index of the action at (rank, position), or none for an idle slot.
  int index(int rank, int position) const { return flat_of_[rank][position]; }
  //! Flat indices of the rank's non-idle actions, in list order.
  const std::vector<int>& rank_actions(int rank) const { return rank_order_[rank]; }
  //! Dependencies of a (flat indices).
  std::span<const int> deps(int a) const {
    return {dep_list_.data() + dep_begin_[a], dep_list_.data() + dep_begin_[a + 1]};
  }
  std::span<const int> dependents(int a) const {
    return {out_list_.data() + out_begin_[a], out_list_.data() + out_begin_[a + 1]};
  }
  //! Problems met while building (out-of-range index, dependency later on the same rank,
  //! missing receive, ...). Validation reports them; simulation refuses a graph with any.
  //! At most max_issues are kept; issues_omitted() counts the rest.
  const std::vector<GraphIssue>& issues() const noexcept { return issues_; }
  std::uint64_t issues_omitted() const noexcept { return issues_omitted_; }
  static constexpr std::size_t max_issues = 1000;

  //! Producer lookups (flat index or none) by unit key.
  int forward_of(int s, int m, int k) const { return lookup(f_, s, m, k); }
  int input_backward_of(int s, int m, int k) const { return lookup(bi_, s, m, k); }
  int recompute_of(int s, int m, int k) const { return lookup(r_, s, m, k); }
  int offload_of(int s, int m, int k) const { return lookup(o_, s, m, k); }
  int reload_of(int s, int m, int k) const { return lookup(rl_, s, m, k); }
  //! VOCAB_F / VOCAB_B of shard `j` (flat index or none).
  int vocabulary_forward_of(int j, int m, int k) const { return lookup(vf_, j, m, k); }
  int vocabulary_backward_of(int j, int m, int k) const { return lookup(vb_, j, m, k); }
  //! EMBED_F / EMBED_B of shard `j` (flat index or none).
  int embedding_forward_of(int j, int m, int k) const { return lookup(ef_, j, m, k); }
  int embedding_backward_of(int j, int m, int k) const { return lookup(eb_, j, m, k); }
  //! True when the schedule holds vocabulary passes.
  bool vocabulary() const noexcept { return vocabulary_; }

  //! True when (s, m, k) is inside the problem.
  bool in_range(int s, int m, int k) const {
    const Problem& p = schedule_->problem;
    return s >= 0 && s < p.stages && m >= 0 && m < p.microbatches && k >= 0 && k < p.slices;
  }

 private:
  int lookup(const UnitTable<int>& table, int s, int m, int k) const {
    return in_range(s, m, k) ? table.get(s, m, k) : none;
  }

  void build() {
    const Schedule& s = *schedule_;
    const Problem& p = s.problem;
    const int nranks = s.rank_count();
    // Sized by the actions, not by stages × microbatches × slices (see unit_table.hpp).
    const std::size_t actions = s.action_count();
    for (UnitTable<int>* t : {&f_, &bi_, &r_, &o_, &rl_, &vf_, &vb_, &ef_, &eb_, &send_f_, &recv_f_,
                              &send_b_, &recv_b_})
      *t = UnitTable<int>(p, actions, none);
    flat_of_.assign(nranks, {});
    rank_order_.assign(nranks, {});

    // Pass 1: flat indices and producer tables (first occurrence wins; duplicates are the
    // validator's business, not the graph's).
    for (int r = 0; r < nranks; ++r) {
      flat_of_[r].assign(s.ranks[r].size(), none);
      for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
        const Action& a = s.ranks[r][i];
        if (a.kind == OpKind::Idle) continue;
        int id = static_cast<int>(refs_.size());
        refs_.push_back({r, i});
        flat_of_[r][i] = id;
        rank_order_[r].push_back(id);
        auto record = [&](UnitTable<int>& table, int st, int mb, int sl) {
          if (!in_range(st, mb, sl)) return;
          int& slot = table.at(st, mb, sl);
          if (slot == none) slot = id;
        };
        switch (a.kind) {
          case OpKind::F:
            record(f_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::B:
          case OpKind::I:
            record(bi_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::R:
            record(r_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::Offload:
            record(o_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::Reload:
            record(rl_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::VocabF:
            record(vf_, a.stage, a.microbatch, a.slice);
            vocabulary_ = true;
            break;
          case OpKind::VocabB:
            record(vb_, a.stage, a.microbatch, a.slice);
            vocabulary_ = true;
            break;
          case OpKind::EmbedF:
            record(ef_, a.stage, a.microbatch, a.slice);
            vocabulary_ = input_vocabulary_ = true;
            break;
          case OpKind::EmbedB:
            record(eb_, a.stage, a.microbatch, a.slice);
            vocabulary_ = input_vocabulary_ = true;
            break;
          case OpKind::SendF:
            record(send_f_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::RecvF:
            record(recv_f_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::SendB:
            record(send_b_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::RecvB:
            record(recv_b_, a.stage, a.microbatch, a.slice);
            break;
          case OpKind::Overlap:
            record(f_, a.stage, a.microbatch, a.slice);
            record(bi_, a.b_stage, a.b_microbatch, a.b_slice);
            break;
          default:
            break;
        }
      }
    }

    // Pass 2: dependency edges.
    const bool explicit_comm = s.has_comm();
    vocabulary_edges_ = vocabulary_ && p.replicas == 1 && p.ranks <= max_vocabulary_ranks;
    if (vocabulary_ && !vocabulary_edges_)
      add_issue({{},
                 "vocabulary",
                 p.replicas != 1
                     ? "the schedule has vocabulary passes (VOCAB_F, VOCAB_B) over " +
                           std::to_string(p.replicas) +
                           " replicas; vocabulary parallelism splits the output layer of one "
                           "pipeline over its ranks, so use one replica."
                     : "the schedule has vocabulary passes over " + std::to_string(p.ranks) +
                           " ranks; vocabulary parallelism is supported up to " +
                           std::to_string(max_vocabulary_ranks) + " ranks."});
    dep_begin_.assign(refs_.size() + 1, 0);
    std::vector<int> deps;
    for (int id = 0; id < size(); ++id) {
      dep_begin_[id] = static_cast<int>(dep_list_.size());
      const Action& a = action(id);
      deps.clear();
      if (a.kind == OpKind::Overlap) {
        add_compute_deps(id, a.forward_half(), explicit_comm, deps);
        add_compute_deps(id, a.backward_half(), explicit_comm, deps);
        add_vocabulary_deps(id, a.forward_half(), deps);
        add_vocabulary_deps(id, a.backward_half(), deps);
      } else if (is_comm(a.kind) || is_wait_send(a.kind)) {
        add_comm_deps(id, a, deps);
      } else {
        add_compute_deps(id, a, explicit_comm, deps);
        add_vocabulary_deps(id, a, deps);
      }
      for (int d : deps) {
        bool seen = false;
        for (int j = dep_begin_[id]; j < static_cast<int>(dep_list_.size()); ++j)
          seen = seen || dep_list_[j] == d;
        if (!seen) dep_list_.push_back(d);
      }
    }
    dep_begin_[refs_.size()] = static_cast<int>(dep_list_.size());

    // Reverse edges.
    out_begin_.assign(refs_.size() + 1, 0);
    for (int d : dep_list_)
      ++out_begin_[d + 1];
    for (std::size_t i = 1; i < out_begin_.size(); ++i)
      out_begin_[i] += out_begin_[i - 1];
    out_list_.assign(dep_list_.size(), 0);
    std::vector<int> fill(out_begin_.begin(), out_begin_.end() - 1);
    for (int id = 0; id < size(); ++id)
      for (int d : deps_of_raw(id))
        out_list_[fill[d]++] = id;
  }

  std::span<const int> deps_of_raw(int a) const {
    return {dep_list_.data() + dep_begin_[a], dep_list_.data() + dep_begin_[a + 1]};
  }

  // A dependency of `id` on the producer `dep` (flat index or none). Same rank: the
  // producer must be earlier in the list. Other rank: direct edge, or (`through`, in a schedule
  // with communication) through the receive of that message on this rank.
  void need(int id, int dep, const Action& consumer, const Action& wanted,
            const std::optional<StageMessage>& through, std::vector<int>& out) {
    if (dep == none || dep == id) return;  // missing producers are reported by the validator
    const ActionRef& me = refs_[id];
    const ActionRef& them = refs_[dep];
    if (them.rank == me.rank) {
      if (them.position > me.position)
        add_issue({me, "order",
                   to_string(consumer) + " at rank " + std::to_string(me.rank) + " position " +
                       std::to_string(me.position) + " needs " + to_string(wanted) +
                       ", which comes later on the same rank (position " +
                       std::to_string(them.position) + "); " +
                       rule_text(consumer.kind, wanted.kind)});
      else
        out.push_back(dep);
      return;
    }
    if (!through) {
      out.push_back(dep);
      return;
    }
    const StageMessage& msg = *through;
    int recv = lookup(receive_table(msg), msg.to, msg.microbatch, msg.slice);
    if (recv == none || refs_[recv].rank != me.rank || refs_[recv].position > me.position) {
      const Action r = msg.receive();
      add_issue({me, "missing-receive",
                 to_string(consumer) + " at rank " + std::to_string(me.rank) + " position " +
                     std::to_string(me.position) + " needs " + to_string(wanted) + " from rank " +
                     std::to_string(them.rank) + ", but no " + to_string(r) +
                     " comes before it on rank " + std::to_string(me.rank) +
                     "; a schedule with communication must receive cross-rank inputs "
                     "before using them."});
      return;
    }
    out.push_back(recv);
    // The data itself: the send the receive matches (a missing one is reported at the receive).
    const int send = lookup(send_table(msg), msg.from, msg.microbatch, msg.slice);
    if (send != none) out.push_back(send);
  }

  // The sends and the receives of messages like `msg` (forward outputs or input gradients).
  const UnitTable<int>& send_table(const StageMessage& msg) const {
    return msg.forward ? send_f_ : send_b_;
  }
  const UnitTable<int>& receive_table(const StageMessage& msg) const {
    return msg.forward ? recv_f_ : recv_b_;
  }

  void add_issue(GraphIssue issue) {
    if (issues_.size() < max_issues)
      issues_.push_back(std::move(issue));
    else
      ++issues_omitted_;
  }

  static std::string rule_text(OpKind k, OpKind wanted = OpKind::Idle) {
    if (wanted == OpKind::EmbedF || is_input_vocabulary(k))
      return "the first stage's forward runs after the EMBED_F of every shard of its microbatch, "
             "and an EMBED_B after the first stage's backward of its microbatch.";
    if (wanted == OpKind::VocabF || is_vocabulary(k))
      return "a VOCAB_F runs after the last stage's forward of its microbatch, and every VOCAB_B "
             "and the last stage's backward after the VOCAB_F of every shard.";
    switch (k) {
      case OpKind::F:
        return "a forward runs after the previous stage's and the previous slice's forward.";
      case OpKind::B:
      case OpKind::I:
        return "a backward runs after its forward (and its recompute), the next stage's backward "
               "and the next slice's backward.";
      case OpKind::W:
        return "a weight-gradient W runs after its input-gradient I.";
      case OpKind::R:
        return "a recompute R runs after its forward and before its backward; a late one (RL) "
               "also after its backward's inputs (the next stage's and the next slice's backward).";
      case OpKind::Offload:
      case OpKind::Reload:
        return "an OFFLOAD runs after its forward, its RELOAD after it, and its backward after "
               "the RELOAD.";
      default:
        return "a send runs after the action that produces what it sends.";
    }
  }

  // The dependencies of a compute action, from the rules (core/rules.hpp). One on another
  // stage may come from another rank: directly, or through the receive of it on this rank.
  void add_compute_deps(int id, const Action& a, bool explicit_comm, std::vector<int>& out) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    if (!in_range(s, m, k)) return;
    for_each_dependency(schedule_->problem, a, [&](const Dependency& d) {
      const bool backward = d.role == Role::Backward;
      const UnitTable<int>& table = d.role == Role::Forward   ? f_
                                    : backward                ? bi_
                                    : d.role == Role::Offload ? o_
                                    : d.role == Role::Reload  ? rl_
                                                              : r_;
      // The producer as messages name it: B for an input gradient (B or I), I for a W's.
      const OpKind named = d.role == Role::Forward     ? OpKind::F
                           : d.role == Role::Recompute ? OpKind::R
                           : d.role == Role::Offload   ? OpKind::Offload
                           : d.role == Role::Reload    ? OpKind::Reload
                           : a.kind == OpKind::W       ? OpKind::I
                                                       : OpKind::B;
      std::optional<StageMessage> through;  // the message a receive on this rank must bring
      if (explicit_comm && d.crosses_stage) through = message_of(d, a);
      need(id, lookup(table, d.stage, d.microbatch, d.slice), a,
           Action::make(named, d.stage, d.microbatch, d.slice), through, out);
    });
  }

  // The vocabulary rules (core/rules.hpp): a VOCAB_F waits for the last stage's forward, a
  // VOCAB_B and the last stage's B or I for every shard's VOCAB_F; with the input embedding
  // split, the first stage's forward for every shard's EMBED_F and an EMBED_B for the first
  // stage's B or I. Direct edges (collectives).
  void add_vocabulary_deps(int id, const Action& a, std::vector<int>& out) {
    if (!vocabulary_edges_) return;
    const Problem& p = schedule_->problem;
    const int m = a.microbatch, k = a.slice;
    if (a.kind == OpKind::EmbedB) {
      if (!in_range(a.stage, m, k) || a.stage >= p.ranks) return;
      need(id, lookup(bi_, 0, m, k), a, Action::make(OpKind::B, 0, m, k), std::nullopt, out);
      return;
    }
    if (a.kind == OpKind::EmbedF) return;  // needs only the tokens
    if (input_vocabulary_ && a.kind == OpKind::F && a.stage == 0 && in_range(0, m, k))
      for (int j = 0; j < p.ranks; ++j)
        need(id, lookup(ef_, j, m, k), a, Action::make(OpKind::EmbedF, j, m, k), std::nullopt, out);
    if (a.kind == OpKind::VocabF) {
      if (!in_range(a.stage, m, k) || a.stage >= p.ranks) return;
      const int last = p.stages - 1;
      need(id, lookup(f_, last, m, k), a, Action::make(OpKind::F, last, m, k), std::nullopt, out);
      return;
    }
    const bool waits =
        a.kind == OpKind::VocabB || (is_input_backward(a.kind) && a.stage == p.stages - 1);
    if (!waits || !in_range(a.stage, m, k)) return;
    if (a.kind == OpKind::VocabB && a.stage >= p.ranks) return;
    for (int j = 0; j < p.ranks; ++j)
      need(id, lookup(vf_, j, m, k), a, Action::make(OpKind::VocabF, j, m, k), std::nullopt, out);
  }

  // Sends depend on their producer (same rank, earlier); receives on the matching send.
  void add_comm_deps(int id, const Action& a, std::vector<int>& out) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    if (!in_range(s, m, k)) return;
    const ActionRef& me = refs_[id];
    switch (a.kind) {
      case OpKind::SendF:
        need(id, lookup(f_, s, m, k), a, Action::make(OpKind::F, s, m, k), std::nullopt, out);
        break;
      case OpKind::SendB:
        need(id, lookup(bi_, s, m, k), a, Action::make(OpKind::B, s, m, k), std::nullopt, out);
        break;
      case OpKind::RecvF:
      case OpKind::RecvB: {
        const StageMessage msg = *message_of(a);
        int send = lookup(send_table(msg), msg.from, m, k);
        if (send == none) {
          const Action want = msg.send();
          add_issue({me, "unmatched-comm",
                     to_string(a) + " at rank " + std::to_string(me.rank) + " position " +
                         std::to_string(me.position) + " has no matching " + to_string(want) +
                         " on any rank; every receive needs the send "
                         "of the neighbouring stage."});
          return;
        }
        (void)send;  // posted: the consumer waits for the send, not the receive
        break;
      }
      case OpKind::WaitSendF:
      case OpKind::WaitSendB: {
        const StageMessage msg = *message_of(a);
        const Action send_action = msg.send();
        const int send = lookup(send_table(msg), msg.from, m, k);
        if (send == none) {
          add_issue({me, "unmatched-comm",
                     to_string(a) + " at rank " + std::to_string(me.rank) + " position " +
                         std::to_string(me.position) + " waits for " + to_string(send_action) +
                         ", which no rank runs; a WAIT_SEND completes an earlier send of the "
                         "same stage, microbatch and slice on its rank."});
          return;
        }
        const ActionRef& sref = refs_[send];
        if (sref.rank != me.rank || sref.position > me.position) {
          add_issue({me, "order",
                     to_string(a) + " at rank " + std::to_string(me.rank) + " position " +
                         std::to_string(me.position) + " waits for " + to_string(send_action) +
                         (sref.rank != me.rank ? ", which runs on rank " + std::to_string(sref.rank)
                                               : ", which comes later (position " +
                                                     std::to_string(sref.position) + ")") +
                         "; a WAIT_SEND comes after its send on the same rank."});
          return;
        }
        out.push_back(send);
        if (const int recv = lookup(receive_table(msg), msg.to, m, k); recv != none)
          out.push_back(recv);  // an unreceived send is the validator's to report
        break;
      }
      default:
        break;
    }
  }

  const Schedule* schedule_;
  std::vector<ActionRef> refs_;
  std::vector<std::vector<int>> flat_of_;
  std::vector<std::vector<int>> rank_order_;
  UnitTable<int> f_, bi_, r_, o_, rl_, vf_, vb_, ef_, eb_, send_f_, recv_f_, send_b_, recv_b_;
  bool vocabulary_ = false;        // the schedule holds a vocabulary pass
  bool input_vocabulary_ = false;  // the schedule holds EMBED_F or EMBED_B
  bool vocabulary_edges_ = false;  // and their rules apply (one replica, few enough ranks)
  std::vector<int> dep_begin_, dep_list_, out_begin_, out_list_;
  std::vector<GraphIssue> issues_;
  std::uint64_t issues_omitted_ = 0;
};

//! Outcome of replaying every rank's list in order.
struct ReplayResult {
  bool complete = true;
  //! For each rank, the position in its list where it stopped (list size when done).
  std::vector<int> stuck_at;
};

//! Runs every rank's list in order: a rank's next action runs once all its dependencies
//! have run. Calls `on_run(flat index)` for each action in an order consistent with both
//! the rank orders and the dependencies (a topological order). Linear in actions + edges.
template <class OnRun>
ReplayResult replay(const DependencyGraph& g, OnRun&& on_run) {
  const Schedule& s = g.schedule();
  const int nranks = s.rank_count();
  std::vector<int> remaining(g.size());
  for (int a = 0; a < g.size(); ++a)
    remaining[a] = static_cast<int>(g.deps(a).size());
  std::vector<int> next(nranks, 0);  // index into rank_actions(r)
  std::vector<int> work;
  work.reserve(nranks);
  for (int r = 0; r < nranks; ++r)
    work.push_back(r);
  std::vector<char> queued(nranks, 1);
  while (!work.empty()) {
    int r = work.back();
    work.pop_back();
    queued[r] = 0;
    const auto& order = g.rank_actions(r);
    while (next[r] < static_cast<int>(order.size()) && remaining[order[next[r]]] == 0) {
      int a = order[next[r]++];
      on_run(a);
      for (int d : g.dependents(a)) {
        if (--remaining[d] == 0) {
          int dr = g.ref(d).rank;
          if (dr != r && !queued[dr] && g.rank_actions(dr)[next[dr]] == d) {
            queued[dr] = 1;
            work.push_back(dr);
          }
        }
      }
    }
  }
  ReplayResult res;
  res.stuck_at.resize(nranks);
  for (int r = 0; r < nranks; ++r) {
    const auto& order = g.rank_actions(r);
    if (next[r] < static_cast<int>(order.size())) {
      res.complete = false;
      res.stuck_at[r] = g.ref(order[next[r]]).position;
    } else {
      res.stuck_at[r] = static_cast<int>(s.ranks[r].size());
    }
  }
  return res;
}

//! "deadlock: ..." with, for every rank that cannot finish, where it is stuck and which
//! unfinished actions (on which rank and position) it waits for.
inline std::string describe_deadlock(const DependencyGraph& g, const ReplayResult& res) {
  const Schedule& s = g.schedule();
  std::string detail;
  constexpr int max_ranks_shown = 16;  // a schedule of a million ranks gets a short report
  int shown = 0, stuck = 0;
  for (int r = 0; r < s.rank_count(); ++r) {
    int pos = res.stuck_at[r];
    if (pos >= static_cast<int>(s.ranks[r].size())) continue;
    if (++stuck > max_ranks_shown) continue;
    ++shown;
    int a = g.index(r, pos);
    std::string waits;
    for (int d : g.deps(a)) {
      const ActionRef& dr = g.ref(d);
      if (res.stuck_at[dr.rank] <= dr.position) {  // d has not run
        if (!waits.empty()) waits += " and ";
        waits += to_string(g.action(d)) + " (rank " + std::to_string(dr.rank) + " position " +
                 std::to_string(dr.position) + ")";
      }
    }
    detail += "\n  rank " + std::to_string(r) + " is stuck at position " + std::to_string(pos) +
              " (" + to_string(s.ranks[r][pos]) + "), waiting for " +
              (waits.empty() ? std::string("nothing it can name") : waits);
  }
  if (stuck > shown) detail += "\n  and " + std::to_string(stuck - shown) + " more ranks are stuck";
  return "deadlock: no rank can make progress while actions remain; each rank runs its list in "
         "order and waits for what it needs:" +
         detail;
}

}  // namespace pipesched::detail
