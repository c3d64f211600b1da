// Communication lowering: a compute-only schedule becomes one with explicit SendF / RecvF /
// SendB / RecvB. Each receive goes right before the action that consumes it (it adds no
// wait the compute-only schedule did not have) and each send right after its producer.
#pragma once

#include <vector>

#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! Returns `s` with sends and receives for every cross-rank dependency. A schedule that
//! already has communication actions is returned unchanged.
inline Schedule lower_communication(const Schedule& s) {
  if (s.has_comm()) return s;
  Schedule out = s;
  const Placement& pl = s.placement;
  const int S = s.problem.stages;
  auto cross = [&](int from, int to) {
    return from >= 0 && to >= 0 && from < S && to < S && pl.rank_of(from) != pl.rank_of(to);
  };
  for (int r = 0; r < s.rank_count(); ++r) {
    std::vector<Action>& list = out.ranks[r];
    list.clear();
    list.reserve(s.ranks[r].size() * 2);
    for (const Action& a : s.ranks[r]) {
      // Receives before the consumer.
      auto recvs = [&](const Action& c) {
        if (c.kind == OpKind::F && cross(c.stage - 1, c.stage))
          list.push_back(Action::make(OpKind::RecvF, c.stage, c.microbatch, c.slice));
        if (is_input_backward(c.kind) && cross(c.stage + 1, c.stage))
          list.push_back(Action::make(OpKind::RecvB, c.stage, c.microbatch, c.slice));
      };
      auto sends = [&](const Action& c) {
        if (c.kind == OpKind::F && cross(c.stage, c.stage + 1))
          list.push_back(Action::make(OpKind::SendF, c.stage, c.microbatch, c.slice));
        if (is_input_backward(c.kind) && cross(c.stage, c.stage - 1))
          list.push_back(Action::make(OpKind::SendB, c.stage, c.microbatch, c.slice));
      };
      if (a.kind == OpKind::Overlap) {
        recvs(a.forward_half());
        recvs(a.backward_half());
        list.push_back(a);
        sends(a.forward_half());
        sends(a.backward_half());
      } else {
        recvs(a);
        list.push_back(a);
        sends(a);
      }
    }
  }
  return out;
}

}  // namespace pipesched
