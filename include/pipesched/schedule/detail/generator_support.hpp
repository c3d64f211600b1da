// What every schedule generator shares: the helpers that resolve a Problem against a
// generator's placement and append backward actions.
#pragma once

#include <string>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/core/problem.hpp"

namespace pipesched {

namespace schedule::detail {

//! Problem::check with the generator's name in front of the message.
inline void check_problem(const Problem& p, const char* generator) {
  try {
    p.check();
  } catch (const invalid_problem& e) {
    e.rethrow_after(std::string(generator) + ": ");
  }
}

//! Checks `p` and fills in `p.stages` for a generator whose placement holds
//! `default_chunks` stages per rank when the caller left `stages` at 0. Throws
//! invalid_problem naming the generator and the field when the problem does not fit.
inline Problem resolve_problem(Problem p, int default_chunks, const char* generator) {
  check_problem(p, generator);
  if (p.stages == 0) p.stages = p.ranks * default_chunks;
  if (p.stages % p.ranks != 0)
    throw invalid_problem(std::string(generator) + ": stages = " + std::to_string(p.stages) +
                          " is not a multiple of ranks = " + std::to_string(p.ranks) +
                          "; every rank must hold the same number of stages (stages = ranks × "
                          "chunks).");
  return p;
}

//! Refuses problems with more than one slice for generators that schedule whole
//! microbatches.
inline void require_whole_sequences(const Problem& p, const char* generator) {
  if (p.slices != 1)
    throw invalid_problem(std::string(generator) +
                          " schedules whole microbatches: slices = " + std::to_string(p.slices) +
                          " is not accepted; use slices = 1, or a slice-level schedule.");
}

//! Appends the backward of (stage, microbatch, slice): B, or I then W.
inline void push_backward(std::vector<Action>& list, int stage, int microbatch, WGradMode mode,
                          int slice = 0) {
  if (mode == WGradMode::Fused) {
    list.push_back(Action::make(OpKind::B, stage, microbatch, slice));
  } else {
    list.push_back(Action::make(OpKind::I, stage, microbatch, slice));
    list.push_back(Action::make(OpKind::W, stage, microbatch, slice));
  }
}

}  // namespace schedule::detail
}  // namespace pipesched
