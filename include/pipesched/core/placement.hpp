// Placement: which rank holds which pipeline stage.
#pragma once

#include <string>
#include <vector>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! The shapes of stage → rank maps the library knows by name.
enum class PlacementKind {
  Linear,       //!< one stage per rank: stage s on rank s
  Interleaved,  //!< looped: rank r holds stages r, r + p, r + 2p, ...
  VShape,  //!< zig-zag: chunk c on rank r is stage c·p + r (c even) or c·p + p − 1 − r (c odd)
  Custom,  //!< any other map
};

//! The kind's name: "linear", "interleaved", "v-shape" or "custom".
constexpr const char* to_string(PlacementKind k) noexcept {
  switch (k) {
    case PlacementKind::Linear:
      return "linear";
    case PlacementKind::Interleaved:
      return "interleaved";
    case PlacementKind::VShape:
      return "v-shape";
    case PlacementKind::Custom:
      return "custom";
  }
  return "?";
}

//! A stage → rank map, with each rank's stages in increasing order.
class Placement {
 public:
  Placement() = default;

  //! One stage per rank.
  static Placement linear(int ranks) { return interleaved(ranks, 1); }

  //! Looped placement with `chunks` stages per rank; `chunks == 1` is linear.
  static Placement interleaved(int ranks, int chunks) {
    check_counts(ranks, chunks, "interleaved");
    std::vector<int> map(static_cast<std::size_t>(ranks) * chunks);
    for (int s = 0; s < static_cast<int>(map.size()); ++s)
      map[s] = s % ranks;
    return Placement(std::move(map), ranks,
                     chunks == 1 ? PlacementKind::Linear : PlacementKind::Interleaved);
  }

  //! V-shape (zig-zag) placement; needs an even number of chunks per rank.
  static Placement v_shape(int ranks, int chunks = 2) {
    check_counts(ranks, chunks, "v-shape");
    if (chunks % 2 != 0)
      throw invalid_problem("chunks = " + std::to_string(chunks) +
                            " does not fit a v-shape placement; it needs an even number of "
                            "chunks per rank (2, 4, ...).");
    std::vector<int> map(static_cast<std::size_t>(ranks) * chunks);
    for (int c = 0; c < chunks; ++c)
      for (int r = 0; r < ranks; ++r)
        map[c * ranks + (c % 2 == 0 ? r : ranks - 1 - r)] = r;
    return Placement(std::move(map), ranks, PlacementKind::VShape);
  }

  //! Any map: `rank_of_stage[s]` is the rank of stage s. Recognised shapes get their kind
  //! (a map equal to the v-shape one is reported as VShape, and so on).
  static Placement from_map(std::vector<int> rank_of_stage, int ranks) {
    if (ranks < 1)
      throw invalid_problem("ranks = " + std::to_string(ranks) + " is out of range; need >= 1.");
    std::vector<int> count(ranks, 0);
    for (std::size_t s = 0; s < rank_of_stage.size(); ++s) {
      int r = rank_of_stage[s];
      if (r < 0 || r >= ranks)
        throw invalid_problem("stage " + std::to_string(s) + " is mapped to rank " +
                              std::to_string(r) + "; ranks run from 0 to " +
                              std::to_string(ranks - 1) + ".");
      ++count[r];
    }
    int chunks = ranks > 0 && !rank_of_stage.empty() ? count[0] : 0;
    bool uniform = true;
    for (int c : count)
      uniform = uniform && c == chunks && c > 0;
    if (uniform && rank_of_stage.size() == static_cast<std::size_t>(ranks) * chunks) {
      for (PlacementKind k :
           {PlacementKind::Linear, PlacementKind::Interleaved, PlacementKind::VShape}) {
        if (k == PlacementKind::Linear && chunks != 1) continue;
        if (k == PlacementKind::Interleaved && chunks == 1) continue;
        if (k == PlacementKind::VShape && chunks % 2 != 0) continue;
        Placement known =
            k == PlacementKind::VShape ? v_shape(ranks, chunks) : interleaved(ranks, chunks);
        if (known.rank_of_stage_ == rank_of_stage) return known;
      }
    }
    return Placement(std::move(rank_of_stage), ranks, PlacementKind::Custom);
  }

  //! The map's shape, Custom when it is none of the named ones.
  PlacementKind kind() const noexcept { return kind_; }
  //! The ranks the stages are placed on.
  int ranks() const noexcept { return ranks_; }
  //! The number of stages placed.
  int stages() const noexcept { return static_cast<int>(rank_of_stage_.size()); }
  //! Stages per rank when every rank holds the same number, else 0.
  int chunks() const noexcept { return chunks_; }
  //! The rank that holds `stage` (precondition: 0 <= stage < stages()).
  int rank_of(int stage) const { return rank_of_stage_[static_cast<std::size_t>(stage)]; }
  //! The stages `rank` holds, in increasing order.
  const std::vector<int>& stages_of(int rank) const {
    return stages_of_rank_[static_cast<std::size_t>(rank)];
  }
  //! Position of `stage` among its rank's stages (its chunk index).
  int chunk_of(int stage) const { return chunk_of_stage_[static_cast<std::size_t>(stage)]; }
  //! The whole map, indexed by stage.
  const std::vector<int>& rank_of_stage() const noexcept { return rank_of_stage_; }

  //! "linear", "interleaved (2 chunks)", "v-shape (2 chunks)" or "custom".
  std::string describe() const {
    std::string s = to_string(kind_);
    if (kind_ == PlacementKind::Interleaved || kind_ == PlacementKind::VShape)
      s += " (" + std::to_string(chunks_) + " chunks)";
    return s;
  }

  friend bool operator==(const Placement& a, const Placement& b) noexcept {
    return a.ranks_ == b.ranks_ && a.rank_of_stage_ == b.rank_of_stage_;
  }

 private:
  Placement(std::vector<int> map, int ranks, PlacementKind kind)
      : kind_(kind), ranks_(ranks), rank_of_stage_(std::move(map)) {
    stages_of_rank_.assign(ranks_, {});
    chunk_of_stage_.assign(rank_of_stage_.size(), 0);
    for (int s = 0; s < stages(); ++s) {
      auto& list = stages_of_rank_[rank_of_stage_[s]];
      chunk_of_stage_[s] = static_cast<int>(list.size());
      list.push_back(s);
    }
    chunks_ = ranks_ > 0 ? static_cast<int>(stages_of_rank_[0].size()) : 0;
    for (const auto& l : stages_of_rank_)
      if (static_cast<int>(l.size()) != chunks_) chunks_ = 0;
  }

  static void check_counts(int ranks, int chunks, const char* what) {
    if (ranks < 1)
      throw invalid_problem("ranks = " + std::to_string(ranks) + " is out of range for a " + what +
                            " placement; it needs at least 1 rank.");
    if (chunks < 1)
      throw invalid_problem("chunks = " + std::to_string(chunks) + " is out of range for a " +
                            what + " placement; it needs at least 1 chunk per rank.");
  }

  PlacementKind kind_ = PlacementKind::Linear;
  int ranks_ = 0;
  int chunks_ = 0;
  std::vector<int> rank_of_stage_;
  std::vector<std::vector<int>> stages_of_rank_;
  std::vector<int> chunk_of_stage_;
};

}  // namespace pipesched
