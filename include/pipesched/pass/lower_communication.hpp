// Communication lowering: a compute-only schedule becomes one with explicit SendF / RecvF /
// SendB / RecvB and a WaitSendF / WaitSendB for every send. Each send goes right after its
// producer. Receives keep every channel (sender rank -> receiver rank) first-in first-out: a
// receive goes right before its consumer, preceded by the receives of the messages the same
// sender sent to this rank earlier that are not yet posted. A send's wait goes after the
// backward of its unit (a forward output) or at the end of the list (an input gradient).
// Neither adds a wait the compute-only schedule did not have; see docs/design.md. With a
// budget of outstanding sends (PyTorch's `max_outstanding_sends`) the lists are built
// differently; see pass/detail/send_budget.hpp.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/detail/send_budget.hpp"

namespace pipesched {

//! How lower_communication writes its output.
struct LowerOptions {
  //! Add a WaitSendF / WaitSendB for every send (PyTorch 2.15 refuses sends without one).
  //! Without them every send completes at the end of the step.
  bool wait_sends = true;
  //! At most this many sends of a rank posted and not yet waited for (PyTorch's
  //! `max_outstanding_sends`, whose runtime otherwise moves waits itself or refuses the file);
  //! 0, the default, sets no limit. With a limit the ranks' lists are built together in the
  //! order the actions start on estimated durations (UniformCost's ratios), each receive is
  //! posted when its send is placed, so that no wait can block on a receive not yet posted,
  //! and before a send that would exceed the limit the wait of the open send whose receive is
  //! posted first is placed (see pass/detail/send_budget.hpp). Needs `wait_sends`; must be >= 0.
  int max_outstanding_sends = 0;
};

namespace detail {

//! A message of a lowered schedule: forward or not, producing stage, microbatch and slice.
using MessageId = std::tuple<bool, int, int, int>;

}  // namespace detail

//! Returns `s` with sends and receives for every cross-rank dependency, each channel's
//! receives in the order of its sends, and (with `options.wait_sends`) a wait for every
//! send, at most `options.max_outstanding_sends` of them open per rank when that is set. A
//! schedule that already has communication actions is returned unchanged. Throws
//! invalid_argument for a negative budget or one without `wait_sends`, and invalid_schedule
//! when a budget is set and the compute-only schedule deadlocks.
inline Schedule lower_communication(const Schedule& s, LowerOptions options = {}) {
  if (options.max_outstanding_sends < 0)
    throw invalid_argument(
        "LowerOptions.max_outstanding_sends = " + std::to_string(options.max_outstanding_sends) +
            " is negative; give 0 for no limit or the most sends a rank may "
            "have outstanding (1 or more)",
        "LowerOptions.max_outstanding_sends", std::to_string(options.max_outstanding_sends));
  if (options.max_outstanding_sends > 0 && !options.wait_sends)
    throw invalid_argument(
        "LowerOptions.max_outstanding_sends = " + std::to_string(options.max_outstanding_sends) +
            " limits sends without their wait, so it needs wait_sends = true",
        "LowerOptions.max_outstanding_sends", std::to_string(options.max_outstanding_sends));
  if (s.has_comm()) return s;
  Schedule out = s;
  const Placement& pl = s.placement;
  const int S = s.problem.stages;
  const int n = s.rank_count();
  const Problem& problem = s.problem;
  auto cross = [&](int from, int to) {  // neighbours of one replica on different ranks
    return from >= 0 && to >= 0 && from < S && to < S && pl.rank_of(from) != pl.rank_of(to) &&
           problem.replica_of_stage(from) == problem.replica_of_stage(to);
  };
  // The messages a compute action sends: (forward?, producing stage, receiving stage).
  struct Out {
    bool forward;
    int from, to;
  };
  auto sent_by = [&](const Action& c, auto&& emit) {
    if (c.kind == OpKind::F && cross(c.stage, c.stage + 1)) emit(Out{true, c.stage, c.stage + 1});
    if (is_input_backward(c.kind) && cross(c.stage, c.stage - 1))
      emit(Out{false, c.stage, c.stage - 1});
  };
  auto each_half = [](const Action& a, auto&& f) {
    if (a.kind == OpKind::Overlap) {
      f(a.forward_half());
      f(a.backward_half());
    } else {
      f(a);
    }
  };

  // Each channel's messages in send order, and each message's place in its channel.
  struct Msg {
    bool forward;
    int to_stage, microbatch, slice;
  };
  if (options.max_outstanding_sends > 0)
    return detail::lower_with_send_budget(s, options.max_outstanding_sends, cross);
  std::vector<std::unordered_map<int, std::vector<Msg>>> channel(static_cast<std::size_t>(n));
  struct Place {
    int from, to;       // sending and receiving rank
    std::size_t index;  // in the channel from -> to
  };
  std::map<detail::MessageId, Place> place;
  for (int r = 0; r < n; ++r)
    for (const Action& a : s.ranks[r])
      each_half(a, [&](const Action& c) {
        sent_by(c, [&](const Out& o) {
          const int to = pl.rank_of(o.to);
          auto& ch = channel[static_cast<std::size_t>(r)][to];
          place[detail::MessageId(o.forward, o.from, c.microbatch, c.slice)] = {r, to, ch.size()};
          ch.push_back({o.forward, o.to, c.microbatch, c.slice});
        });
      });

  for (int r = 0; r < n; ++r) {
    std::vector<Action>& list = out.ranks[r];
    list.clear();
    list.reserve(s.ranks[r].size() * 3);
    std::unordered_map<int, std::size_t> posted;     // sender rank -> receives posted so far
    std::vector<Action> gradient_waits;              // WaitSendB, in send order, for the end
    std::map<detail::MessageId, char> forward_sent;  // SendF not yet waited for
    // Receives for the message (forward?, producer, m, k): its channel's unposted messages up
    // to and including it, in send order.
    auto receive = [&](bool forward, int producer, const Action& c) {
      auto it = place.find(detail::MessageId(forward, producer, c.microbatch, c.slice));
      if (it == place.end()) return;  // a schedule that never produces it: validation says so
      // A consumer on another rank than its stage's (a schedule validation refuses) has no
      // channel here; it gets no receive.
      const Place& at = it->second;
      if (at.to != r) return;
      const auto& ch = channel[static_cast<std::size_t>(at.from)].at(r);
      std::size_t& next = posted[at.from];
      for (; next <= at.index; ++next) {
        const Msg& m = ch[next];
        list.push_back(Action::make(m.forward ? OpKind::RecvF : OpKind::RecvB, m.to_stage,
                                    m.microbatch, m.slice));
      }
    };
    for (const Action& a : s.ranks[r]) {
      each_half(a, [&](const Action& c) {
        if (c.kind == OpKind::F && cross(c.stage - 1, c.stage)) receive(true, c.stage - 1, c);
        // A late recompute (RL) is the gradient's first consumer when it comes before B.
        if ((is_input_backward(c.kind) || (c.kind == OpKind::R && c.late)) &&
            cross(c.stage + 1, c.stage))
          receive(false, c.stage + 1, c);
      });
      list.push_back(a);
      // A forward output's buffer is needed until the backward of its unit anyway.
      if (options.wait_sends)
        each_half(a, [&](const Action& c) {
          if (!is_input_backward(c.kind)) return;
          auto it = forward_sent.find(detail::MessageId(true, c.stage, c.microbatch, c.slice));
          if (it == forward_sent.end()) return;
          forward_sent.erase(it);
          list.push_back(Action::make(OpKind::WaitSendF, c.stage, c.microbatch, c.slice));
        });
      each_half(a, [&](const Action& c) {
        sent_by(c, [&](const Out& o) {
          list.push_back(Action::make(o.forward ? OpKind::SendF : OpKind::SendB, c.stage,
                                      c.microbatch, c.slice));
          if (!options.wait_sends) return;
          if (o.forward)
            forward_sent[detail::MessageId(true, c.stage, c.microbatch, c.slice)] = 1;
          else
            gradient_waits.push_back(
                Action::make(OpKind::WaitSendB, c.stage, c.microbatch, c.slice));
        });
      });
    }
    if (options.wait_sends) {
      // Forward sends whose unit has no backward here (a schedule validation will refuse)
      // still get their wait, in list order.
      for (const Action& a : std::vector<Action>(list))
        if (a.kind == OpKind::SendF &&
            forward_sent.count(detail::MessageId(true, a.stage, a.microbatch, a.slice)))
          list.push_back(Action::make(OpKind::WaitSendF, a.stage, a.microbatch, a.slice));
      list.insert(list.end(), gradient_waits.begin(), gradient_waits.end());
    }
  }
  return out;
}

}  // namespace pipesched
