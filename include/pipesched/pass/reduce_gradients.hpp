// Data-parallel gradient reduction as scheduled actions: each stage's REDUCE_GRAD goes right
// after its last weight-gradient action on its rank, so the reduction of a stage that finished
// its backward overlaps the rest of the rank's list (other stages' backwards, the cooldown),
// as Megatron-LM's overlapped gradient reduction and PyTorch 2.15's lowered schedules do; its
// WAIT_REDUCE_GRAD goes right before the rank's next REDUCE_GRAD, the last at the end of the
// list, so the optimizer after the list sees every gradient reduced.
#pragma once

#include <cstddef>
#include <vector>

#include "pipesched/core/schedule.hpp"

namespace pipesched {

namespace detail {

//! True when `a` adds to stage `stage`'s weight gradients: its B, a W (or W part), or the
//! backward half of an Overlap.
constexpr bool adds_weight_gradient(const Action& a, int stage) noexcept {
  if (a.kind == OpKind::Overlap) return a.b_stage == stage;
  return (a.kind == OpKind::B || a.kind == OpKind::W) && a.stage == stage;
}

}  // namespace detail

//! Returns `s` with each stage's gradient reduction as actions. On every rank, stage s's
//! `sREDUCE_GRAD` goes right after the last action that adds to its weight gradients (and the
//! sends that follow it), and its `sWAIT_REDUCE_GRAD` right before the rank's next
//! REDUCE_GRAD, the last one at the end of the list: one reduction is open at a time per rank
//! (as PyTorch 2.15 runs them and `check` requires), and each overlaps the work between its
//! start and its wait. Works on compute-only and lowered schedules. A schedule that already
//! has REDUCE_GRAD actions is returned unchanged.
inline Schedule add_gradient_reduction(const Schedule& s) {
  if (s.has_gradient_reduction()) return s;
  Schedule out = s;
  for (int r = 0; r < s.rank_count(); ++r) {
    const std::vector<Action>& in = s.ranks[static_cast<std::size_t>(r)];
    // Where each of the rank's stages starts its reduction: after its last weight gradient
    // and the sends right after it (a send is latency-critical; the reduction is not).
    std::vector<std::vector<int>> starts(in.size());
    for (int stage : s.placement.stages_of(r)) {
      std::size_t last = in.size();
      for (std::size_t i = 0; i < in.size(); ++i)
        if (detail::adds_weight_gradient(in[i], stage)) last = i;
      if (last == in.size()) continue;  // no weight gradient here: nothing to reduce
      while (last + 1 < in.size() &&
             (in[last + 1].kind == OpKind::SendF || in[last + 1].kind == OpKind::SendB))
        ++last;
      starts[last].push_back(stage);
    }
    std::vector<Action> list;
    list.reserve(in.size() + 2 * starts.size());
    int open = -1;
    for (std::size_t i = 0; i < in.size(); ++i) {
      list.push_back(in[i]);
      for (int stage : starts[i]) {
        if (open >= 0) list.push_back(Action::make(OpKind::WaitReduceGrad, open, 0));
        list.push_back(Action::make(OpKind::ReduceGrad, stage, 0));
        open = stage;
      }
    }
    if (open >= 0) list.push_back(Action::make(OpKind::WaitReduceGrad, open, 0));
    out.ranks[static_cast<std::size_t>(r)] = std::move(list);
  }
  return out;
}

}  // namespace pipesched
