// What a process transport (MPI's, NCCL's) knows of the pipeline and the checks it makes.
#pragma once

#include <algorithm>
#include <string>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/concepts.hpp"

namespace pipesched::detail::mpi {

// What a process transport knows of the pipeline: its problem's extents, the placement, this
// process's rank and the rank count; and the checks and lookups every such transport makes.
class RankGeometry {
 protected:
  RankGeometry(const char* who, const Schedule& schedule)
      : who_(who),
        stages_(schedule.problem.stages),
        microbatches_(schedule.problem.microbatches),
        slices_(std::max(1, schedule.problem.slices)),
        directions_(schedule.has_input_vocabulary() ? 6
                    : schedule.has_vocabulary()     ? 4
                                                    : 2),
        placement_(schedule.placement) {}

  void check_self(int r, const char* what) const {
    if (r != rank_)
      throw error(std::string(who_) + ": asked to " + what + " rank " + std::to_string(r) +
                  " in the process of rank " + std::to_string(rank_) +
                  "; each process runs only its own rank.");
  }
  void check_peer(int r, const char* what) const {
    if (r < 0 || r >= ranks_)
      throw error(std::string(who_) + ": " + what + " rank " + std::to_string(r) +
                  ", but ranks run from 0 to " + std::to_string(ranks_ - 1) + ".");
  }
  void check_key(const MessageKey& k) const {
    if (k.stage < 0 || k.stage >= stages_ || k.microbatch < 0 || k.microbatch >= microbatches_ ||
        k.slice < 0 || k.slice >= slices_)
      throw error(std::string(who_) + ": the " + describe_key(k) +
                  " is outside the schedule's problem (" + std::to_string(stages_) + " stages, " +
                  std::to_string(microbatches_) + " microbatches, " + std::to_string(slices_) +
                  " slices).");
    if (static_cast<int>(k.direction) >= directions_)
      throw error(std::string(who_) + ": the " + describe_key(k) +
                  " is a vocabulary message, but the schedule has no vocabulary passes.");
    if (directions_ >= 4 && static_cast<int>(k.direction) >= 2 && k.stage >= placement_.ranks())
      throw error(std::string(who_) + ": the " + describe_key(k) + " names shard " +
                  std::to_string(k.stage) + ", but shards run from 0 to " +
                  std::to_string(placement_.ranks() - 1) + " (one per rank).");
  }
  // The rank that sends the message `k`: the previous stage's for a forward activation, the
  // next stage's for an input gradient; the last stage's for a vocabulary input, the shard's
  // for a vocabulary partial.
  int source_of(const MessageKey& k) const {
    // The last stage's output comes from its rank; a shard's partial from the shard's rank.
    if (k.direction == Direction::VocabularyInput) return placement_.rank_of(stages_ - 1);
    if (k.direction == Direction::VocabularyPartial) return k.stage;
    // A shard's lookups come from the shard's rank; the first stage's input gradient from its.
    if (k.direction == Direction::EmbeddingPartial) return k.stage;
    if (k.direction == Direction::EmbeddingGradient) return placement_.rank_of(0);
    const int from = k.direction == Direction::Forward ? k.stage - 1 : k.stage + 1;
    if (from < 0 || from >= stages_)
      throw error(std::string(who_) + ": no stage sends the " + describe_key(k) + ".");
    return placement_.rank_of(from);
  }

  const char* who_;
  int stages_, microbatches_, slices_;
  int directions_;  // 2, 4 with vocabulary messages, 6 with the embedding's (sizes the tags)
  Placement placement_;
  int rank_ = 0;
  int ranks_ = 0;
};

}  // namespace pipesched::detail::mpi
