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
#include "pipesched/core/rules.hpp"
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
  if (options.max_outstanding_sends > 0)
    return detail::lower_with_send_budget(s, options.max_outstanding_sends);
  Schedule out = s;
  const Placement& pl = s.placement;
  const Problem& problem = s.problem;
  const int n = s.rank_count();
  // Each channel's messages in send order, and each message's place in its channel. The
  // messages between ranks are for_each_message's (core/rules.hpp).
  std::vector<std::unordered_map<int, std::vector<StageMessage>>> channel(
      static_cast<std::size_t>(n));
  struct Place {
    int from, to;       // sending and receiving rank
    std::size_t index;  // in the channel from -> to
  };
  std::map<detail::MessageId, Place> place;
  for (int r = 0; r < n; ++r)
    for (const Action& a : s.ranks[r])
      for_each_message(problem, pl, a, MessageEnd::Sends, [&](const StageMessage& msg) {
        const int to = pl.rank_of(msg.to);
        auto& ch = channel[static_cast<std::size_t>(r)][to];
        place[detail::message_id(msg)] = {r, to, ch.size()};
        ch.push_back(msg);
      });

  for (int r = 0; r < n; ++r) {
    std::vector<Action>& list = out.ranks[r];
    list.clear();
    list.reserve(s.ranks[r].size() * 3);
    std::unordered_map<int, std::size_t> posted;     // sender rank -> receives posted so far
    std::vector<Action> gradient_waits;              // WaitSendB, in send order, for the end
    std::map<detail::MessageId, char> forward_sent;  // SendF not yet waited for
    // Receives for message `msg`: its channel's unposted messages up to and including it, in
    // send order. A later consumer of a message already received (B after RL) posts nothing.
    auto receive = [&](const StageMessage& msg) {
      auto it = place.find(detail::message_id(msg));
      if (it == place.end()) return;  // a schedule that never produces it: validation says so
      // A consumer on another rank than its stage's (a schedule validation refuses) has no
      // channel here; it gets no receive.
      const Place& at = it->second;
      if (at.to != r) return;
      const auto& ch = channel[static_cast<std::size_t>(at.from)].at(r);
      std::size_t& next = posted[at.from];
      for (; next <= at.index; ++next)
        list.push_back(ch[next].receive());
    };
    for (const Action& a : s.ranks[r]) {
      for_each_message(problem, pl, a, MessageEnd::Receives, receive);
      list.push_back(a);
      // A forward output's buffer is needed until the backward of its unit anyway.
      if (options.wait_sends)
        for_each_half(a, [&](const Action& c) {
          if (!is_input_backward(c.kind)) return;
          auto it = forward_sent.find(detail::MessageId(true, c.stage, c.microbatch, c.slice));
          if (it == forward_sent.end()) return;
          forward_sent.erase(it);
          list.push_back(Action::make(OpKind::WaitSendF, c.stage, c.microbatch, c.slice));
        });
      for_each_message(problem, pl, a, MessageEnd::Sends, [&](const StageMessage& msg) {
        list.push_back(msg.send());
        if (!options.wait_sends) return;
        if (msg.forward)
          forward_sent[detail::message_id(msg)] = 1;
        else
          gradient_waits.push_back(msg.wait_send());
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
