// Schedule: the problem, the placement, and each rank's ordered list of actions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

//! Per-rank ordered action lists for one training step. `problem.stages` always equals
//! `placement.stages()`. A list may hold explicit idle slots (`OpKind::Idle`).
struct Schedule {
  std::string name;     //!< where it came from: a generator name, a file name, ...
  Problem problem;      //!< ranks, stages, microbatches, slices
  Placement placement;  //!< stage → rank
  std::vector<std::vector<Action>> ranks;  //!< ranks[r] = rank r's actions in order
  //! True when the file it was read from (CSV or text form) ended its first line in `\r\n`
  //! (Python's csv module, and so PyTorch's `_dump_csv`, writes them): the CSV and text
  //! writers then write `\r\n` too, so that a file read and written again keeps its line
  //! ends. Not compared by `==`.
  bool crlf = false;

  //! Number of ranks (== problem.ranks).
  int rank_count() const noexcept { return static_cast<int>(ranks.size()); }

  //! Actions over all ranks, idle slots not counted.
  std::size_t action_count() const noexcept {
    std::size_t n = 0;
    for (const auto& list : ranks)
      for (const Action& a : list)
        n += a.kind != OpKind::Idle;
    return n;
  }

  //! Actions of `kind` over every rank (count(OpKind::R): the recomputes).
  std::size_t count(OpKind kind) const noexcept {
    std::size_t n = 0;
    for (const auto& list : ranks)
      for (const Action& a : list)
        n += a.kind == kind;
    return n;
  }

  //! True when some rank's list holds SendF/RecvF/SendB/RecvB.
  bool has_comm() const noexcept {
    for (const auto& list : ranks)
      for (const Action& a : list)
        if (is_comm(a.kind)) return true;
    return false;
  }

  //! True when some rank's list holds a REDUCE_GRAD (data-parallel gradient reduction as
  //! actions, `add_gradient_reduction`).
  bool has_gradient_reduction() const noexcept {
    for (const auto& list : ranks)
      for (const Action& a : list)
        if (a.kind == OpKind::ReduceGrad) return true;
    return false;
  }

  //! True when some rank's list holds a vocabulary pass (VOCAB_F, VOCAB_B, EMBED_F or
  //! EMBED_B): the output layer (and the input embedding) runs split by vocabulary over the
  //! ranks (pass/vocabulary.hpp).
  bool has_vocabulary() const noexcept {
    for (const auto& list : ranks)
      for (const Action& a : list)
        if (is_vocabulary(a.kind)) return true;
    return false;
  }

  //! True when some rank's list holds an input embedding pass (EMBED_F or EMBED_B): the input
  //! embedding's token table is split by vocabulary over the ranks too.
  bool has_input_vocabulary() const noexcept {
    for (const auto& list : ranks)
      for (const Action& a : list)
        if (is_input_vocabulary(a.kind)) return true;
    return false;
  }

  //! True when some action splits the backward (I or W).
  bool has_split_backward() const noexcept {
    for (const auto& list : ranks)
      for (const Action& a : list)
        if (a.kind == OpKind::I || a.kind == OpKind::W) return true;
    return false;
  }

  //! Same problem, placement and lists (the name is not compared).
  friend bool operator==(const Schedule& a, const Schedule& b) noexcept {
    return a.problem == b.problem && a.placement == b.placement && a.ranks == b.ranks;
  }
};

//! The warm-up of `rank`, in 1F1B's sense: the forwards its list runs before its first backward
//! (B, I or an overlap, whose forward half is not counted), less the one that opens its first
//! forward–backward pair when forwards follow that backward (a rank whose forwards all come
//! before its first backward has all of them as warm-up). 1F1B's rank r: p − r − 1; GPipe: M;
//! slice-pipe: its `--warmup` on rank 0. Throws invalid_problem for a rank the schedule lacks.
inline int warmup_of(const Schedule& s, int rank) {
  if (rank < 0 || rank >= s.rank_count())
    throw invalid_problem("warmup_of: rank = " + std::to_string(rank) + " but the schedule has " +
                          std::to_string(s.rank_count()) + " ranks (0.." +
                          std::to_string(s.rank_count() - 1) + ").");
  int before = 0, after = 0;
  bool backward = false;
  for (const Action& a : s.ranks[static_cast<std::size_t>(rank)]) {
    if (a.kind == OpKind::B || a.kind == OpKind::I || a.kind == OpKind::Overlap) backward = true;
    if (a.kind == OpKind::F) ++(backward ? after : before);
    if (backward && after > 0) break;
  }
  return after > 0 && before > 0 ? before - 1 : before;
}

}  // namespace pipesched
