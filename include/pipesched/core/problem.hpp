// The size of a pipeline problem: ranks, stages, microbatches, slices, and the model replicas
// the stages belong to.
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
  //! Pipelines over the same ranks, each a whole copy of the model (2: Chimera). Stages
  //! 0..S/R−1 are replica 0's model stages in order, the next S/R replica 1's, and so on;
  //! microbatch m runs through replica m mod R only. The replicas start from equal weights and
  //! their gradients are summed. 1 (the default): one pipeline, every microbatch on every stage.
  int replicas = 1;

  //! Stages per rank (virtual stages, "chunks"); meaningful once `stages` is set.
  int chunks() const noexcept { return ranks > 0 && stages > 0 ? stages / ranks : 0; }

  //! Stages of one replica (the model's stages); meaningful once `stages` is set.
  int replica_stages() const noexcept { return replicas > 0 ? stages / replicas : stages; }
  //! The replica that holds `stage`.
  int replica_of_stage(int stage) const noexcept {
    return replicas > 1 && replica_stages() > 0 ? stage / replica_stages() : 0;
  }
  //! The replica microbatch `microbatch` runs through: microbatch m mod replicas, so with two
  //! replicas the even microbatches go down one pipeline and the odd ones up the other (an odd
  //! count gives replica 0 one more).
  int replica_of_microbatch(int microbatch) const noexcept {
    return replicas > 1 ? microbatch % replicas : 0;
  }
  //! The microbatches that run through `replica`.
  int microbatches_of_replica(int replica) const noexcept {
    return replicas > 1 ? microbatches / replicas + (replica < microbatches % replicas ? 1 : 0)
                        : microbatches;
  }
  //! The model stage `stage` computes (its index within its replica).
  int model_stage(int stage) const noexcept {
    return replicas > 1 && replica_stages() > 0 ? stage % replica_stages() : stage;
  }
  //! True when `stage` is the first of its replica (it reads the microbatch's input).
  bool first_stage(int stage) const noexcept { return model_stage(stage) == 0; }
  //! True when `stage` is the last of its replica (it computes the loss).
  bool last_stage(int stage) const noexcept { return model_stage(stage) == replica_stages() - 1; }
  //! True when (stage, microbatch) is a unit of the step: the microbatch runs through the
  //! stage's replica (always, with one replica).
  bool has_unit(int stage, int microbatch) const noexcept {
    return replicas <= 1 || replica_of_stage(stage) == replica_of_microbatch(microbatch);
  }

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [](const char* field, int value, const std::string& want) {
      const std::string name = std::string("Problem.") + field;
      throw invalid_argument(pipesched::field(name, value) + " is out of range; " + want + ".",
                             name, std::to_string(value));
    };
    if (ranks < 1) bad("ranks", ranks, "a pipeline needs at least 1 rank");
    if (stages < 0) bad("stages", stages, "use 0 (derived from the placement) or a positive count");
    if (stages > 0 && stages < ranks)
      bad("stages", stages, "every rank needs at least one stage, so stages must be >= ranks");
    if (microbatches < 1) bad("microbatches", microbatches, "a step needs at least 1 microbatch");
    if (slices < 1) bad("slices", slices, "use 1 for whole sequences or more to cut them");
    if (replicas < 1) bad("replicas", replicas, "use 1 for one pipeline, or 2 for two (Chimera)");
    if (replicas > 1 && stages > 0 && stages % (replicas * ranks) != 0)
      bad("stages", stages,
          "with replicas = " + std::to_string(replicas) +
              " every rank holds the same number of stages of each replica, so stages must be a "
              "multiple of replicas × ranks = " +
              std::to_string(replicas * ranks));
  }

  friend bool operator==(const Problem&, const Problem&) = default;
};

}  // namespace pipesched
