// How the toy models cut a sequence into slices: uniform lengths, the last slice taking the
// remainder. The data (stage 0's input, the targets) and the analytic byte counts both follow
// this one rule.
#pragma once

#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched::toy {

//! Where a slice lies in its sequence: tokens [start, start + length).
struct SliceBounds {
  int start = 0;
  int length = 0;
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

}  // namespace pipesched::toy
