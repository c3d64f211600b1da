// The size of a pipeline problem: ranks, stages, microbatches, slices.
#pragma once

#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! What a schedule is built for. Numbers are run-time values (designated initializers:
//! `Problem{.ranks = 8, .microbatches = 32}`).
struct Problem {
  int ranks = 1;         //!< devices / processes in the pipeline
  int stages = 0;        //!< pipeline stages; 0 = ranks × the placement's chunks per rank
  int microbatches = 1;  //!< microbatches per training step
  int slices = 1;        //!< sequence slices per microbatch (1 = whole sequences)

  //! Stages per rank (virtual stages, "chunks"); meaningful once `stages` is set.
  int chunks() const noexcept { return ranks > 0 && stages > 0 ? stages / ranks : 0; }

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, int value, const char* want) {
      throw invalid_problem(std::string("Problem.") + field + " = " + std::to_string(value) +
                            " is out of range; " + want + ".");
    };
    if (ranks < 1) bad("ranks", ranks, "a pipeline needs at least 1 rank");
    if (stages < 0) bad("stages", stages, "use 0 (derived from the placement) or a positive count");
    if (stages > 0 && stages < ranks)
      bad("stages", stages, "every rank needs at least one stage, so stages must be >= ranks");
    if (microbatches < 1) bad("microbatches", microbatches, "a step needs at least 1 microbatch");
    if (slices < 1) bad("slices", slices, "use 1 for whole sequences or more to cut them");
  }

  friend bool operator==(const Problem&, const Problem&) = default;
};

}  // namespace pipesched
