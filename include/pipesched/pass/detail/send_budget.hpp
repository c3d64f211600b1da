// Communication lowering under a budget of outstanding sends (LowerOptions::
// max_outstanding_sends), as PyTorch's runtime asks with `max_outstanding_sends`: before a
// send that would leave more than N sends of a rank without their wait, one open send's wait is
// placed first. A wait returns once the receiver has posted the matching receive, so each
// receive must be posted before any wait can need it, and a receive must follow its send in
// one order of all the ranks' actions (PyTorch's runtime refuses a file where sends, receives
// and waits form a cycle). So the ranks' lists are built together in one global order, and a
// send's receive is appended to the receiving rank's list when the send is placed. Every
// blocking action (a consumer, a wait) then depends only on actions placed before it, so the
// result cannot deadlock; each channel's receives are in the order of its sends by
// construction.
//
// What the budget costs is how long a wait stands: until the receiving rank reaches the
// receive in its list. A rank that places actions far ahead of the others in the global order
// (or one action per turn, whatever it takes) reaches its receives late. So the global order
// follows an estimate of time: every rank's lists are run in step on estimated durations (a
// forward 1, a full backward 2, an input or weight gradient or a recompute 1, the ratios of
// UniformCost's defaults) and the next action placed is always the one that starts first. A
// receive is then appended at about the time its send runs, and a wait needs the receiving
// rank to finish at most the action it is running. Where the budget forces a wait, the open
// send whose receive is posted first is waited for (the oldest on a tie).
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

//! A message of a lowered schedule: forward or not, producing stage, microbatch and slice.
using MessageId = std::tuple<bool, int, int, int>;

//! The MessageId of `msg`.
inline MessageId message_id(const StageMessage& msg) {
  return {msg.forward, msg.from, msg.microbatch, msg.slice};
}

//! The estimated duration of compute action `a` in the send-budget lowering: the ratios of
//! UniformCost's defaults (F 1, B 2, I 1, W 1, R 1, an overlap its two halves), 0 for the rest.
inline double send_budget_estimate(const Action& a) {
  switch (a.kind) {
    case OpKind::F:
    case OpKind::I:
    case OpKind::W:
    case OpKind::R:
      return 1.0;
    case OpKind::B:
      return 2.0;
    case OpKind::Overlap:
      return 3.0;
    default:
      return 0.0;
  }
}

//! The send-budget lowering of a compute-only `s` (see the file comment): its messages between
//! ranks are for_each_message's (core/rules.hpp). Throws invalid_schedule when some rank waits
//! for a message no rank can send (a compute-only schedule that deadlocks).
inline Schedule lower_with_send_budget(const Schedule& s, int budget) {
  using Key = MessageId;
  const int n = s.rank_count();
  const Placement& pl = s.placement;
  Schedule out = s;
  for (auto& list : out.ranks)
    list.clear();
  auto wait_of = [](const Key& k) {
    return Action::make(std::get<0>(k) ? OpKind::WaitSendF : OpKind::WaitSendB, std::get<1>(k),
                        std::get<2>(k), std::get<3>(k));
  };
  std::map<Key, double> sent_at;    // placed sends: when each runs (estimated)
  std::map<Key, double> posted_at;  // their receives: when the receiving rank reaches each
  std::vector<double> free_at(static_cast<std::size_t>(n), 0.0);
  std::vector<std::size_t> pos(static_cast<std::size_t>(n), 0);
  std::vector<std::deque<Key>> pending(static_cast<std::size_t>(n));  // sends without a wait
  // When rank r's action `a` could start, or -1 when a message it consumes is not sent yet.
  auto start_of = [&](int r, const Action& a) {
    double t = free_at[static_cast<std::size_t>(r)];
    for_each_message(s.problem, pl, a, MessageEnd::Receives, [&](const StageMessage& msg) {
      auto it = sent_at.find(message_id(msg));
      t = (it == sent_at.end() || t < 0) ? -1.0 : std::max(t, it->second);
    });
    return t;
  };
  auto place = [&](int r, const Action& a, double t) {
    auto& list = out.ranks[static_cast<std::size_t>(r)];
    auto& mine = pending[static_cast<std::size_t>(r)];
    list.push_back(a);
    for_each_half(a, [&](const Action& c) { t += send_budget_estimate(c); });
    auto wait = [&](std::deque<Key>::iterator it) {
      list.push_back(wait_of(*it));
      t = std::max(t, posted_at[*it]);
      mine.erase(it);
    };
    // A forward output's wait goes after the backward of its unit, as without a budget.
    for_each_half(a, [&](const Action& c) {
      if (!is_input_backward(c.kind)) return;
      auto it = std::find(mine.begin(), mine.end(), Key{true, c.stage, c.microbatch, c.slice});
      if (it != mine.end()) wait(it);
    });
    for_each_message(s.problem, pl, a, MessageEnd::Sends, [&](const StageMessage& msg) {
      while (static_cast<int>(mine.size()) >= budget) {
        // The open send whose receive is posted first ends its wait first.
        auto first = mine.begin();
        for (auto it = mine.begin(); it != mine.end(); ++it)
          if (posted_at[*it] < posted_at[*first]) first = it;
        wait(first);
      }
      list.push_back(msg.send());
      const Key k = message_id(msg);
      const int to = pl.rank_of(msg.to);
      mine.push_back(k);
      sent_at[k] = t;
      posted_at[k] = free_at[static_cast<std::size_t>(to)];
      out.ranks[static_cast<std::size_t>(to)].push_back(msg.receive());
    });
    free_at[static_cast<std::size_t>(r)] = t;
  };
  for (;;) {
    // The rank whose next action starts first (the lowest rank on a tie) places it.
    int next = -1;
    double best = std::numeric_limits<double>::infinity();
    bool left = false;
    for (int r = 0; r < n; ++r) {
      const auto& in = s.ranks[static_cast<std::size_t>(r)];
      const std::size_t p = pos[static_cast<std::size_t>(r)];
      if (p >= in.size()) continue;
      left = true;
      const double t = start_of(r, in[p]);
      if (t >= 0 && t < best) {
        best = t;
        next = r;
      }
    }
    if (!left) break;
    if (next < 0) {
      for (int r = 0; r < n; ++r)
        if (pos[static_cast<std::size_t>(r)] < s.ranks[static_cast<std::size_t>(r)].size())
          throw invalid_schedule(
              "cannot lower schedule '" + s.name + "' under a send budget: rank " +
              std::to_string(r) + "'s action " +
              to_string(s.ranks[static_cast<std::size_t>(r)][pos[static_cast<std::size_t>(r)]]) +
              " consumes a message no rank can send first, so the compute-only schedule "
              "deadlocks; pipesched validate says where.");
    }
    place(next, s.ranks[static_cast<std::size_t>(next)][pos[static_cast<std::size_t>(next)]], best);
    ++pos[static_cast<std::size_t>(next)];
  }
  // The waits still open (input gradients, forward outputs with no backward here) end the
  // list, in send order.
  for (int r = 0; r < n; ++r)
    for (const Key& k : pending[static_cast<std::size_t>(r)])
      out.ranks[static_cast<std::size_t>(r)].push_back(wait_of(k));
  return out;
}

}  // namespace pipesched::detail
