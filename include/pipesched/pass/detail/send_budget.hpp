// Communication lowering under a budget of outstanding sends (LowerOptions::
// max_outstanding_sends), as PyTorch's runtime asks with `max_outstanding_sends`: before a
// send that would leave more than N sends of a rank without their wait, the oldest one's wait
// is placed first. A wait returns once the receiver has posted the matching receive, so each
// receive must be posted before any wait can need it: the ranks' lists are built together in
// one global order (ranks take turns placing their next compute action once the messages it
// consumes have been sent), and a send's receive is appended to the receiving rank's list when
// the send is placed, as PyTorch's own lowering does. Every blocking action (a consumer, a
// wait) then depends only on actions placed before it, so the result cannot deadlock; each
// channel's receives are in the order of its sends by construction.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

//! The send-budget lowering of a compute-only `s` (see the file comment). `cross(from, to)`
//! says whether stage `from` sends to stage `to` across ranks. Throws invalid_schedule when
//! some rank waits for a message no rank can send (a compute-only schedule that deadlocks).
template <class Cross>
Schedule lower_with_send_budget(const Schedule& s, int budget, Cross&& cross) {
  using Key = std::tuple<bool, int, int, int>;  // forward?, producing stage, microbatch, slice
  const int n = s.rank_count();
  const Placement& pl = s.placement;
  Schedule out = s;
  for (auto& list : out.ranks)
    list.clear();
  auto each_half = [](const Action& a, auto&& f) {
    if (a.kind == OpKind::Overlap) {
      f(a.forward_half());
      f(a.backward_half());
    } else {
      f(a);
    }
  };
  auto wait_of = [](const Key& k) {
    return Action::make(std::get<0>(k) ? OpKind::WaitSendF : OpKind::WaitSendB, std::get<1>(k),
                        std::get<2>(k), std::get<3>(k));
  };
  std::map<Key, char> sent;  // messages whose send (and so receive) is placed
  std::vector<std::size_t> pos(static_cast<std::size_t>(n), 0);
  std::vector<std::deque<Key>> pending(static_cast<std::size_t>(n));  // sends without a wait
  // The messages compute action `c` consumes from other ranks.
  auto consumed = [&](const Action& c, auto&& f) {
    if (c.kind == OpKind::F && cross(c.stage - 1, c.stage))
      f(Key{true, c.stage - 1, c.microbatch, c.slice});
    if ((is_input_backward(c.kind) || (c.kind == OpKind::R && c.late)) &&
        cross(c.stage + 1, c.stage))
      f(Key{false, c.stage + 1, c.microbatch, c.slice});
  };
  auto ready = [&](const Action& a) {
    bool ok = true;
    each_half(a, [&](const Action& c) {
      consumed(c, [&](const Key& k) { ok = ok && sent.count(k) != 0; });
    });
    return ok;
  };
  auto place = [&](int r, const Action& a) {
    auto& list = out.ranks[static_cast<std::size_t>(r)];
    auto& mine = pending[static_cast<std::size_t>(r)];
    list.push_back(a);
    // A forward output's wait goes after the backward of its unit, as without a budget.
    each_half(a, [&](const Action& c) {
      if (!is_input_backward(c.kind)) return;
      for (auto it = mine.begin(); it != mine.end(); ++it)
        if (*it == Key{true, c.stage, c.microbatch, c.slice}) {
          list.push_back(wait_of(*it));
          mine.erase(it);
          break;
        }
    });
    each_half(a, [&](const Action& c) {
      auto send = [&](bool forward, int to_stage) {
        while (static_cast<int>(mine.size()) >= budget) {
          list.push_back(wait_of(mine.front()));
          mine.pop_front();
        }
        list.push_back(
            Action::make(forward ? OpKind::SendF : OpKind::SendB, c.stage, c.microbatch, c.slice));
        const Key k{forward, c.stage, c.microbatch, c.slice};
        mine.push_back(k);
        sent[k] = 1;
        out.ranks[static_cast<std::size_t>(pl.rank_of(to_stage))].push_back(
            Action::make(forward ? OpKind::RecvF : OpKind::RecvB, to_stage, c.microbatch, c.slice));
      };
      if (c.kind == OpKind::F && cross(c.stage, c.stage + 1)) send(true, c.stage + 1);
      if (is_input_backward(c.kind) && cross(c.stage, c.stage - 1)) send(false, c.stage - 1);
    });
  };
  for (;;) {
    bool left = false, progress = false;
    for (int r = 0; r < n; ++r) {
      const auto& in = s.ranks[static_cast<std::size_t>(r)];
      std::size_t& p = pos[static_cast<std::size_t>(r)];
      // A rank places every action it can before the next rank takes its turn.
      while (p < in.size() && ready(in[p])) {
        place(r, in[p]);
        ++p;
        progress = true;
      }
      left = left || p < in.size();
    }
    if (!left) break;
    if (!progress) {
      for (int r = 0; r < n; ++r)
        if (pos[static_cast<std::size_t>(r)] < s.ranks[static_cast<std::size_t>(r)].size())
          throw invalid_schedule(
              "cannot lower schedule '" + s.name + "' under a send budget: rank " +
              std::to_string(r) + "'s action " +
              to_string(s.ranks[static_cast<std::size_t>(r)][pos[static_cast<std::size_t>(r)]]) +
              " consumes a message no rank can send first, so the compute-only schedule "
              "deadlocks; pipesched validate says where.");
    }
  }
  // The waits still open (input gradients, forward outputs with no backward here) end the
  // list, in send order.
  for (int r = 0; r < n; ++r)
    for (const Key& k : pending[static_cast<std::size_t>(r)])
      out.ranks[static_cast<std::size_t>(r)].push_back(wait_of(k));
  return out;
}

}  // namespace pipesched::detail
