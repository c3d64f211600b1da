// Lowering the way PyTorch's runtime lowers a compute-only schedule (its add-send-recv pass,
// as its documentation and dumps show it): ranks take turns placing their next action once
// its cross-rank inputs have a receive; a producer's send follows it and the matching receive
// is appended to the receiving rank's list at once, so receives are posted well ahead of
// their consumers. For tests: it is what a PyTorch-lowered file looks like.
#pragma once

#include <set>
#include <stdexcept>
#include <tuple>

#include "pipesched/core/schedule.hpp"

namespace pipesched::testing {

inline Schedule pytorch_style_lowering(const Schedule& s) {
  Schedule out = s;
  const int R = s.rank_count(), S = s.problem.stages;
  for (auto& l : out.ranks)
    l.clear();
  using Key = std::tuple<int, int, int, int, int>;  // kind, stage, mb, slice
  std::vector<std::set<Key>> prev(R);
  auto key = [](OpKind k, int st, int mb, int sl) { return Key{int(k), st, mb, sl, 0}; };
  auto cross = [&](int a, int b) {
    return a >= 0 && b >= 0 && a < S && b < S && s.placement.rank_of(a) != s.placement.rank_of(b);
  };
  std::vector<std::size_t> pos(R, 0);
  auto ready = [&](int r, const Action& c) {
    if (c.kind == OpKind::F && cross(c.stage - 1, c.stage))
      return prev[r].count(key(OpKind::RecvF, c.stage, c.microbatch, c.slice)) > 0;
    if (is_input_backward(c.kind) && cross(c.stage + 1, c.stage))
      return prev[r].count(key(OpKind::RecvB, c.stage, c.microbatch, c.slice)) > 0;
    return true;
  };
  auto place = [&](int r, const Action& c) {
    if (c.kind == OpKind::F && cross(c.stage, c.stage + 1)) {
      out.ranks[r].push_back(Action::make(OpKind::SendF, c.stage, c.microbatch, c.slice));
      int d = s.placement.rank_of(c.stage + 1);
      out.ranks[d].push_back(Action::make(OpKind::RecvF, c.stage + 1, c.microbatch, c.slice));
      prev[d].insert(key(OpKind::RecvF, c.stage + 1, c.microbatch, c.slice));
    }
    if (is_input_backward(c.kind) && cross(c.stage, c.stage - 1)) {
      out.ranks[r].push_back(Action::make(OpKind::SendB, c.stage, c.microbatch, c.slice));
      int d = s.placement.rank_of(c.stage - 1);
      out.ranks[d].push_back(Action::make(OpKind::RecvB, c.stage - 1, c.microbatch, c.slice));
      prev[d].insert(key(OpKind::RecvB, c.stage - 1, c.microbatch, c.slice));
    }
  };
  for (;;) {
    bool left = false, progress = false;
    for (int r = 0; r < R; ++r) {
      if (pos[r] >= s.ranks[r].size()) continue;
      left = true;
      const Action& a = s.ranks[r][pos[r]];
      if (a.kind == OpKind::Idle) {
        ++pos[r];
        progress = true;
        continue;
      }
      bool ok = a.kind == OpKind::Overlap
                    ? ready(r, a.forward_half()) && ready(r, a.backward_half())
                    : ready(r, a);
      if (!ok) continue;
      out.ranks[r].push_back(a);
      if (a.kind == OpKind::Overlap) {
        place(r, a.forward_half());
        place(r, a.backward_half());
      } else
        place(r, a);
      ++pos[r];
      progress = true;
    }
    if (!left) break;
    if (!progress) throw std::runtime_error("pytorch lowering stuck");
  }
  return out;
}
}  // namespace pipesched::testing
