// How the toy models cut a sequence into slices: uniform lengths, the last slice taking the
// remainder. The data (stage 0's input, the targets) and the analytic byte counts both follow
// this one rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"

namespace pipesched::toy {

//! Where a slice lies in its sequence: tokens [start, start + length).
struct SliceBounds {
  int start = 0;   //!< the slice's first token
  int length = 0;  //!< its token count
  friend constexpr bool operator==(SliceBounds, SliceBounds) = default;
};

//! Slice `slice` of a sequence of `sequence` tokens cut into `slices`: every slice has
//! sequence / slices tokens and the last one also takes the remainder (sequence 10 in 4
//! slices: 2, 2, 2, 4). Throws `invalid_problem` unless 1 <= slices <= sequence and
//! 0 <= slice < slices.
inline SliceBounds slice_bounds(int sequence, int slice, int slices) {
  if (slices < 1 || slices > sequence)
    throw invalid_problem("slice_bounds: slices is " + std::to_string(slices) +
                          " for a sequence of " + std::to_string(sequence) +
                          " tokens; use between 1 and " + std::to_string(sequence) +
                          " slices so that every slice holds a token");
  if (slice < 0 || slice >= slices)
    throw invalid_problem("slice_bounds: slice is " + std::to_string(slice) +
                          "; it must be between 0 and " + std::to_string(slices - 1));
  const int length = sequence / slices;
  const int start = slice * length;
  return {start, slice == slices - 1 ? sequence - start : length};
}

//! Where each slice of one microbatch is in its life on one stage, and how long it is: the
//! bookkeeping every slice-aware stage model (the host and the GPU toy GPT) needs to check
//! that slices run in a legal order and to know where a slice's tokens start. Forwards run
//! first to last (a slice attends to the slices before it), backwards last to first, and a
//! forward run again between a slice's forward and backward is a recompute of the same input.
class SliceLedger {
 public:
  //! A slice's life: its forward not run yet (Pending), run (Live), its backward run (Done).
  enum class State : std::uint8_t { Pending, Live, Done };

  //! Checks that the forward of `slice` with `tokens` tokens may run now and returns the
  //! position of its first token (the earlier slices' lengths); `who` prefixes the error.
  //! Throws invalid_schedule for a slice out of order, invalid_problem for a recompute of
  //! another length.
  int begin_forward(const std::string& who, int slice, int tokens) {
    const auto k = static_cast<std::size_t>(slice);
    if (state_.size() <= k) {
      state_.resize(k + 1, State::Pending);
      lengths_.resize(k + 1, 0);
    }
    for (std::size_t j = 0; j < k; ++j)
      if (state_[j] != State::Live)
        throw invalid_schedule(
            who + ": slice " + std::to_string(slice) + " attends to slice " + std::to_string(j) +
            ", whose " +
            (state_[j] == State::Pending ? "forward has not run" : "backward already ran") +
            "; a microbatch's slices run their forwards first to last and "
            "their backwards last to first");
    if (state_[k] == State::Done)
      throw invalid_schedule(who + ": the backward of slice " + std::to_string(slice) +
                             " already ran; a recompute runs between its forward and backward");
    if (state_[k] == State::Live && lengths_[k] != tokens)
      throw invalid_problem(who + ": slice " + std::to_string(slice) + " ran with " +
                            std::to_string(lengths_[k]) + " tokens and now with " +
                            std::to_string(tokens) + "; a recompute takes the same input");
    return offset(slice);
  }
  //! Records that the forward of `slice` ran with `tokens` tokens.
  void end_forward(int slice, int tokens) {
    lengths_[static_cast<std::size_t>(slice)] = tokens;
    state_[static_cast<std::size_t>(slice)] = State::Live;
  }
  //! Checks that the backward of `slice` may run now (forwarded, and every later forwarded
  //! slice's backward done) and returns the position of its first token.
  int begin_backward(const std::string& who, int slice) const {
    const auto k = static_cast<std::size_t>(slice);
    if (slice < 0 || k >= state_.size() || state_[k] != State::Live)
      throw invalid_schedule(who + ": slice " + std::to_string(slice) +
                             " is not forwarded in this slice context; pass the context its "
                             "forward used");
    for (std::size_t j = k + 1; j < state_.size(); ++j)
      if (state_[j] == State::Live)
        throw invalid_schedule(who + ": slice " + std::to_string(j) + " attended to slice " +
                               std::to_string(slice) +
                               " and its backward has not run; a microbatch's slices run their "
                               "backwards last to first");
    return offset(slice);
  }
  //! Records that the backward of `slice` ran.
  void end_backward(int slice) { state_[static_cast<std::size_t>(slice)] = State::Done; }

  //! The position of slice `slice`'s first token: the lengths of the slices before it.
  int offset(int slice) const {
    int o = 0;
    for (std::size_t j = 0; j < static_cast<std::size_t>(slice) && j < lengths_.size(); ++j)
      o += lengths_[j];
    return o;
  }

 private:
  std::vector<int> lengths_;  // tokens of each slice forwarded so far
  std::vector<State> state_;
};

}  // namespace pipesched::toy
