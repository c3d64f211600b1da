// The communication checks of validation (validate.hpp): sends and receives in matched
// pairs, WAIT_SENDs, first-in first-out channels between ranks, gradient reductions one at a
// time, and the dry run that finds deadlocks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/analysis/validation_report.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

// Communication must come in matched pairs (each send has exactly one receive). Messages to
// or from a stage that does not exist are check_units' to report.
inline void check_comm_pairs(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  struct Count {
    int send = 0, recv = 0;
    int send_rank = -1, send_pos = -1, recv_rank = -1, recv_pos = -1;
    bool operator==(const Count&) const = default;
  };
  // Keyed by the stage that produced the data: SendF(s) / RecvF(s+1) carry F(s); SendB(s) /
  // RecvB(s-1) carry B(s).
  UnitTable<Count> fwd(p, s.action_count()), bwd(p, s.action_count());
  auto ok = [&](long long st, int mb, int sl) {
    return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_comm(a.kind)) continue;
      const bool forward = a.kind == OpKind::SendF || a.kind == OpKind::RecvF;
      const bool send = a.kind == OpKind::SendF || a.kind == OpKind::SendB;
      const long long producer = send ? a.stage : a.stage + (forward ? -1LL : 1LL);
      const long long consumer = forward ? producer + 1 : producer - 1;
      if (!ok(producer, a.microbatch, a.slice) || !ok(consumer, a.microbatch, a.slice)) continue;
      if (p.replica_of_stage(static_cast<int>(producer)) !=
          p.replica_of_stage(static_cast<int>(consumer)))
        continue;  // check_units reports a message between replicas
      Count& c = (forward ? fwd : bwd).at(static_cast<int>(producer), a.microbatch, a.slice);
      if (send) {
        ++c.send;
        c.send_rank = r;
        c.send_pos = i;
      } else {
        ++c.recv;
        c.recv_rank = r;
        c.recv_pos = i;
      }
    }
  for (int dir = 0; dir < 2; ++dir)
    (dir == 0 ? fwd : bwd).for_each_stored([&](UnitKey k, const Count& c) {
      const int st = k.stage, mb = k.microbatch, sl = k.slice;
      Action send = Action::make(dir == 0 ? OpKind::SendF : OpKind::SendB, st, mb, sl);
      Action recv = Action::make(dir == 0 ? OpKind::RecvF : OpKind::RecvB,
                                 dir == 0 ? st + 1 : st - 1, mb, sl);
      if (rep.full()) {
        if (c.send > 1 || c.recv > 1 || (c.send == 1 && c.recv == 0)) rep.add({});
        return;
      }
      if (c.send > 1 || c.recv > 1)
        rep.add({c.send > 1 ? c.send_rank : c.recv_rank, c.send > 1 ? c.send_pos : c.recv_pos,
                 c.send > 1 ? send : recv, "duplicate",
                 to_string(c.send > 1 ? send : recv) + " appears " +
                     std::to_string(c.send > 1 ? c.send : c.recv) +
                     " times; each message is sent once and received once."});
      else if (c.send == 1 && c.recv == 0)
        rep.add({c.send_rank, c.send_pos, send, "unmatched-comm",
                 to_string(send) + " at " + where(c.send_rank, c.send_pos) +
                     " is never received; add " + to_string(recv) + " on rank " +
                     std::to_string(s.placement.rank_of(recv.stage)) + "."});
    });
}

// When a schedule has WAIT_SENDs (PyTorch 2.15 requires one per send), every send needs
// exactly one, later on its rank, and every WAIT_SEND needs its send (the graph reports a
// WAIT_SEND without a send or before it). A schedule with no WAIT_SEND at all completes its
// sends at the end of the step, as pipesched's transports do and its files before waits had.
inline void check_send_waits(const Schedule& s, ValidationReport& rep) {
  bool any = false;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      any = any || is_wait_send(a.kind);
  if (!any) return;
  const Problem& p = s.problem;
  struct Seen {
    int waits = 0, wait_rank = -1, wait_pos = -1;
    bool operator==(const Seen&) const = default;
  };
  UnitTable<Seen> fwd(p, s.action_count()), bwd(p, s.action_count());
  auto ok = [&](const Action& a) {
    return a.stage >= 0 && a.stage < p.stages && a.microbatch >= 0 &&
           a.microbatch < p.microbatches && a.slice >= 0 && a.slice < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_wait_send(a.kind) || !ok(a)) continue;
      Seen& w = (a.kind == OpKind::WaitSendF ? fwd : bwd).at(a.stage, a.microbatch, a.slice);
      if (++w.waits == 1) {
        w.wait_rank = r;
        w.wait_pos = i;
      }
    }
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if ((a.kind != OpKind::SendF && a.kind != OpKind::SendB) || !ok(a)) continue;
      const Seen& w = (a.kind == OpKind::SendF ? fwd : bwd).get(a.stage, a.microbatch, a.slice);
      const Action wait = Action::make(wait_of_send(a.kind), a.stage, a.microbatch, a.slice);
      if (w.waits == 0) {
        if (rep.full()) {
          rep.add({});
          continue;
        }
        rep.add({r, i, a, "missing-wait",
                 to_string(a) + " at " + where(r, i) + " has no " + to_string(wait) +
                     ": the schedule completes its sends with WAIT_SEND actions (PyTorch 2.15 "
                     "runs a send's buffer until its wait), so every send needs one; add " +
                     to_string(wait) + " after it on rank " + std::to_string(r) +
                     ", or remove every WAIT_SEND to complete all sends at the end of the "
                     "step."});
      } else if (w.waits > 1) {
        if (rep.full()) {
          rep.add({});
          continue;
        }
        rep.add({w.wait_rank, w.wait_pos, wait, "duplicate",
                 to_string(wait) + " appears " + std::to_string(w.waits) +
                     " times; each send is waited for once."});
      }
    }
}

// Every channel (sender rank → receiver rank) must deliver in order: the receiver's receives
// from a rank come in the order of that rank's sends to it. PyTorch (and MPI or NCCL without
// tags) match the messages between two ranks in the order they are posted, so a receive out
// of that order takes another message's data, and the step computes wrong gradients without
// failing. Reports the first out-of-order message of each channel.
inline void check_channels(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  const int n = s.rank_count();
  // A message: its direction and the stage that produced it, microbatch and slice.
  struct Message {
    bool forward;
    int producer, microbatch, slice;
    int rank, position;  // where the send (or receive) stands
    bool same(const Message& o) const {
      return forward == o.forward && producer == o.producer && microbatch == o.microbatch &&
             slice == o.slice;
    }
  };
  auto peer_rank = [&](int stage) -> int {
    return stage >= 0 && stage < p.stages ? s.placement.rank_of(stage) : -1;
  };
  // Per channel (from, to): the sends in the sender's list order, the receives in the
  // receiver's. Channels are kept sparse: a schedule has about 2 per rank.
  struct Channel {
    int from, to;
    std::vector<Message> sends, recvs;
  };
  std::vector<Channel> channels;
  std::vector<std::vector<std::pair<int, std::size_t>>> by_from(static_cast<std::size_t>(n));
  auto channel = [&](int from, int to) -> Channel& {
    for (const auto& [t, idx] : by_from[static_cast<std::size_t>(from)])
      if (t == to) return channels[idx];
    by_from[static_cast<std::size_t>(from)].push_back({to, channels.size()});
    channels.push_back({from, to, {}, {}});
    return channels.back();
  };
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_comm(a.kind)) continue;
      const bool forward = a.kind == OpKind::SendF || a.kind == OpKind::RecvF;
      const bool send = a.kind == OpKind::SendF || a.kind == OpKind::SendB;
      const long long other = a.stage + (forward == send ? 1LL : -1LL);
      if (other < 0 || other >= p.stages) continue;  // check_units reports it
      const int peer = peer_rank(static_cast<int>(other));
      if (peer < 0 || peer >= n || peer == r) continue;
      const int producer = send ? a.stage : static_cast<int>(other);
      Message m{forward, producer, a.microbatch, a.slice, r, i};
      if (send)
        channel(r, peer).sends.push_back(m);
      else
        channel(peer, r).recvs.push_back(m);
    }
  for (const Channel& c : channels) {
    const std::size_t common = std::min(c.sends.size(), c.recvs.size());
    for (std::size_t j = 0; j < common; ++j) {
      if (c.sends[j].same(c.recvs[j])) continue;
      if (rep.full()) {
        rep.add({});
        break;
      }
      const Message& sm = c.sends[j];
      const Message& rm = c.recvs[j];
      auto send_text = [](const Message& m) {
        return to_string(Action::make(m.forward ? OpKind::SendF : OpKind::SendB, m.producer,
                                      m.microbatch, m.slice));
      };
      const Action recv = s.ranks[rm.rank][rm.position];
      std::string expected;
      for (std::size_t q = j; q < c.recvs.size(); ++q)
        if (c.recvs[q].same(sm)) {
          expected = " (it comes later, at position " + std::to_string(c.recvs[q].position) + ")";
          break;
        }
      const std::string nth = std::to_string(j + 1);
      rep.add({rm.rank, rm.position, recv, "channel-order",
               "channel rank " + std::to_string(c.from) + " -> rank " + std::to_string(c.to) +
                   " is not first-in first-out: its message " + nth + " is " + send_text(sm) +
                   " (rank " + std::to_string(c.from) + " position " + std::to_string(sm.position) +
                   "), but receive " + nth + " from rank " + std::to_string(c.from) + " on rank " +
                   std::to_string(c.to) + " is " + to_string(recv) + " at " +
                   where(rm.rank, rm.position) +
                   "; PyTorch and MPI match the messages between two ranks in the order they are "
                   "posted, so the receive for " +
                   send_text(sm) + expected +
                   " must come first: post receives in the order of "
                   "the sends."});
      break;
    }
  }
}

// PyTorch 2.15 runs one gradient reduction at a time per rank: each REDUCE_GRAD is completed by
// the WAIT_REDUCE_GRAD of the same stage before the next REDUCE_GRAD, and none is left open.
inline void check_gradient_reductions(const Schedule& s, ValidationReport& rep) {
  for (int r = 0; r < s.rank_count(); ++r) {
    int pending = -1, pending_pos = -1;  // the stage whose reduction is open, and where
    const auto& list = s.ranks[r];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (a.kind == OpKind::ReduceGrad) {
        if (pending >= 0)
          rep.add({r, i, a, "reduce-grad",
                   to_string(a) + " at " + where(r, i) + " starts a reduction while stage " +
                       std::to_string(pending) + "'s (position " + std::to_string(pending_pos) +
                       ") is open; a rank runs one gradient reduction at a time, so put " +
                       std::to_string(pending) + "WAIT_REDUCE_GRAD before it."});
        pending = a.stage;
        pending_pos = i;
      } else if (a.kind == OpKind::WaitReduceGrad) {
        if (pending != a.stage)
          rep.add({r, i, a, "reduce-grad",
                   to_string(a) + " at " + where(r, i) + " waits for a reduction of stage " +
                       std::to_string(a.stage) + ", but " +
                       (pending < 0 ? std::string("none is open")
                                    : "the open one is stage " + std::to_string(pending) + "'s") +
                       "; each WAIT_REDUCE_GRAD follows the REDUCE_GRAD of its stage."});
        pending = -1;
      }
    }
    if (pending >= 0)
      rep.add({r, pending_pos, list[static_cast<std::size_t>(pending_pos)], "reduce-grad",
               to_string(list[static_cast<std::size_t>(pending_pos)]) + " at " +
                   where(r, pending_pos) + " is never waited for; add " + std::to_string(pending) +
                   "WAIT_REDUCE_GRAD after it on rank " + std::to_string(r) + "."});
  }
}

// Dry run: every rank runs its list in order; report ranks that can never finish.
inline void check_deadlock(const DependencyGraph& g, ValidationReport& rep) {
  ReplayResult res = replay(g, [](int) {});
  if (!res.complete) rep.add({-1, -1, Action{}, "deadlock", describe_deadlock(g, res)});
}

}  // namespace pipesched::detail
