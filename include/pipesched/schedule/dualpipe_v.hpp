// DualPipeV (DeepSeek's DualPipe, V variant): a V-shape placement where forwards of one
// chunk run overlapped with backwards of the other, and weight gradients fill the tail.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"

namespace pipesched::schedule {
namespace detail {

//! Builds one rank's DualPipeV list in split form (I and W where the schedule splits the
//! backward); `dualpipe_v` turns it into the fused form when asked.
class DualPipeVRank {
 public:
  DualPipeVRank(int rank, int ranks, int microbatches)
      : rank_(rank),
        ranks_(ranks),
        microbatches_(microbatches),
        stage_{rank, 2 * ranks - 1 - rank} {}

  std::vector<Action> build() {
    const int i = rank_;
    const int p = ranks_;
    const bool last_rank = i == p - 1;
    // 1. Fill the pipe with chunk 0 until chunk 1's first input can arrive.
    for (int k = 0; k < (p - i - 1) * 2; ++k)
      forward(0);
    // 2. Both chunks' forwards alternate.
    for (int k = 0; k < i + 1; ++k) {
      forward(0);
      forward(1);
    }
    // 3. Chunk 1's backward starts, weight gradient right away (nothing to overlap with).
    for (int k = 0; k < p - i - 1; ++k) {
      input_backward(1);
      list_.push_back(Action::make(OpKind::W, stage_[1], b_next_[1] - 1));
      forward(1);
    }
    // 4. Steady state: each forward runs overlapped with the other chunk's backward. On the
    //    last rank (the V's turning point) DualPipe runs the first pair as two plain actions
    //    to shorten the bubble there; kept so that schedules match DeepSeek's.
    for (int k = 0; k < microbatches_ - 2 * p + i + 1; ++k) {
      if (k == 0 && last_rank) {
        forward(0);
        full_backward(1);
      } else {
        overlapped(0, 1);
      }
      overlapped(1, 0);
    }
    // 5. Chunk 0's forwards are done; chunk 1's keep overlapping chunk 0's backwards.
    for (int k = 0; k < p - i - 1; ++k) {
      full_backward(1);
      overlapped(1, 0);
    }
    // 6. Drain the backwards; from the middle on, defer weight gradients into the tail.
    const int switch_at = (i + 1) / 2;
    for (int k = 0; k < i + 1; ++k) {
      if (k == switch_at && i % 2 == 1) zero_bubble_ = true;
      backward(1);
      if (k == switch_at && i % 2 == 0) zero_bubble_ = true;
      backward(0);
    }
    // 7. Deferred weight gradients fill the wait for chunk 0's remaining input gradients.
    for (int k = 0; k < p - i - 1; ++k) {
      deferred_weight();
      backward(0);
    }
    // 8. What is left of the deferred weight gradients.
    for (int k = 0; k < i + 1; ++k)
      deferred_weight();
    return std::move(list_);
  }

 private:
  Action next_forward(int chunk) {
    return Action::make(OpKind::F, stage_[chunk], f_next_[chunk]++);
  }
  Action next_full_backward(int chunk) {
    return Action::make(OpKind::B, stage_[chunk], b_next_[chunk]++);
  }
  void forward(int chunk) { list_.push_back(next_forward(chunk)); }
  void full_backward(int chunk) { list_.push_back(next_full_backward(chunk)); }
  void input_backward(int chunk) {
    list_.push_back(Action::make(OpKind::I, stage_[chunk], b_next_[chunk]++));
  }
  void overlapped(int f_chunk, int b_chunk) {
    list_.push_back(Action::overlap(next_forward(f_chunk), next_full_backward(b_chunk)));
  }
  // A backward outside the steady state: whole before the switch, I with its W queued after.
  void backward(int chunk) {
    if (!zero_bubble_) {
      full_backward(chunk);
      return;
    }
    deferred_.push_back(Action::make(OpKind::W, stage_[chunk], b_next_[chunk]));
    input_backward(chunk);
  }
  void deferred_weight() {
    // Every pop is matched by an earlier push by construction (steps 6 to 8 push and pop
    // the same count); an empty queue would mean the step counts above are wrong.
    if (deferred_.empty())
      throw invalid_schedule("dualpipe-v: rank " + std::to_string(rank_) +
                             " has no deferred weight gradient to run; the generator's step "
                             "counts are inconsistent for this problem.");
    list_.push_back(deferred_.front());
    deferred_.pop_front();
  }

  int rank_;
  int ranks_;
  int microbatches_;
  std::array<int, 2> stage_;
  std::array<int, 2> f_next_{0, 0};
  std::array<int, 2> b_next_{0, 0};
  bool zero_bubble_ = false;
  std::deque<Action> deferred_;
  std::vector<Action> list_;
};

}  // namespace detail

//! DualPipeV on a V-shape placement with 2 chunks: rank i holds stage i (chunk 0) and
//! stage 2p − 1 − i (chunk 1). Follows DeepSeek's DualPipeV step order: chunk-0 warm-up
//! forwards, alternating forwards, chunk-1 backwards with their weight gradients, a steady
//! state of Overlap actions (a forward of one chunk run together with a full backward of
//! the other), then the backwards, with weight gradients of the second half deferred to
//! fill the tail. Each chunk takes microbatches in increasing order. With `wgrad` Split
//! (the default, as DualPipe) the tail uses I and W; with Fused every I is a B and no W is
//! emitted. Needs `stages == 2·ranks` (or 0), `microbatches >= 2·ranks` and `slices == 1`;
//! throws invalid_problem otherwise.
inline Schedule dualpipe_v(Problem p, WGradMode wgrad = WGradMode::Split) {
  constexpr const char* generator = "dualpipe-v";
  detail::check_problem(p, generator);
  p = detail::resolve_problem(p, 2, generator);
  detail::require_whole_sequences(p, generator);
  if (p.chunks() != 2)
    throw invalid_problem(std::string(generator) + ": stages = " + std::to_string(p.stages) +
                          " gives chunks = " + std::to_string(p.chunks()) +
                          " per rank with ranks = " + std::to_string(p.ranks) +
                          "; DualPipeV holds exactly 2 chunks per rank, so use stages = " +
                          std::to_string(2 * p.ranks) + " (2 × ranks) or 0.");
  // The step counts stay non-negative down to M = 2p − 1 (step 4 runs M − 2p + i + 1 times),
  // and that schedule would still be valid; DualPipe itself asks for M >= 2p, which gives
  // every rank at least one steady-state round, and so does this generator.
  if (p.microbatches < 2 * p.ranks)
    throw invalid_problem(
        std::string(generator) + ": microbatches = " + std::to_string(p.microbatches) +
        " is too few for ranks = " + std::to_string(p.ranks) +
        "; DualPipeV needs microbatches >= 2 × ranks = " + std::to_string(2 * p.ranks) + ".");

  Schedule s{generator, p, Placement::v_shape(p.ranks, 2), {}};
  s.ranks.resize(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r) {
    std::vector<Action> list = detail::DualPipeVRank(r, p.ranks, p.microbatches).build();
    if (wgrad == WGradMode::Fused) {
      std::vector<Action> fused;
      fused.reserve(list.size());
      for (Action a : list) {
        if (a.kind == OpKind::W) continue;
        if (a.kind == OpKind::I) a.kind = OpKind::B;
        fused.push_back(a);
      }
      list = std::move(fused);
    }
    s.ranks[static_cast<std::size_t>(r)] = std::move(list);
  }
  return s;
}

}  // namespace pipesched::schedule
