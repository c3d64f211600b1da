// What the toy layers and stage models check and count wherever their numbers live: the call
// order of a stash, the shapes each layer takes, the keys/values a block keeps per slice in a
// slice context, which weight-gradient pieces a layer has and which of them a stage's part
// covers, whose stash and context a stage is handed, the bytes a stash holds, and the block
// partition. The host models (toy/*.hpp) and their CUDA twins (toy/cuda/*.cuh) both call these,
// so the two refuse the same calls with the same sentences. Host code only: a tensor enters
// through what the host and the device tensor both have (its shape as a std::vector<int>,
// `dim`, `empty`, `bytes`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy::detail {

// ---- call order of a stash -------------------------------------------------------------------

// Where a stash is in its life: empty, holding a forward's activations, or holding what the
// weight gradient still needs after backward_input.
enum class StashPhase : std::uint8_t { Empty, Forwarded, InputDone };

inline void require_phase(StashPhase actual, StashPhase wanted, const char* who, const char* op) {
  if (actual == wanted) return;
  std::string what = std::string(who) + "::" + op + ": ";
  if (wanted == StashPhase::Forwarded)
    what += actual == StashPhase::Empty
                ? "the stash holds no forward; call forward for this microbatch first"
                : "backward_input already ran on this stash; call backward_weight next";
  else
    what += actual == StashPhase::Empty
                ? "the stash is empty; backward_weight needs backward_input to run first"
                : "backward_input has not run on this stash yet; call it before backward_weight";
  throw invalid_schedule(what);
}

// ---- shapes a layer takes ----------------------------------------------------------------------

// Activations [batch, sequence, hidden] (the GPT's blocks and head).
inline void check_activation_shape(const std::vector<int>& shape, int hidden, const char* who,
                                   const char* op) {
  if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] != hidden)
    throw invalid_problem(std::string(who) + "::" + op + ": tensor shape is " +
                          shape_string(shape) + "; expected [batch, sequence, " +
                          std::to_string(hidden) + "] with batch, sequence >= 1");
}

// Rows [rows, width] (the MLP's blocks).
inline void check_row_shape(const std::vector<int>& shape, int width, const char* who,
                            const char* op) {
  if (shape.size() != 2 || shape[1] != width || shape[0] < 1)
    throw invalid_problem(std::string(who) + "::" + op + ": input shape is " + shape_string(shape) +
                          "; expected [rows, " + std::to_string(width) + "] with rows >= 1");
}

// A gradient into a layer's output, whose shape the layer knows from its stash.
inline void check_gradient_shape(const std::vector<int>& shape, const std::vector<int>& expected,
                                 const char* who, const char* op) {
  if (shape != expected)
    throw invalid_problem(std::string(who) + "::" + op + ": gradient shape is " +
                          shape_string(shape) + "; expected " + shape_string(expected));
}

// A gradient into a layer's output, which has the shape of its forward's input (a residual
// layer: the MLP block, the GPT block).
inline void check_output_gradient_shape(const std::vector<int>& shape,
                                        const std::vector<int>& forward, const char* who,
                                        const char* op) {
  if (shape != forward)
    throw invalid_problem(std::string(who) + "::" + op + ": gradient shape is " +
                          shape_string(shape) + "; expected the forward output's shape " +
                          shape_string(forward));
}

// Token ids [batch, tokens] of a slice whose first token is at position `offset` of a sequence
// of at most `sequence` tokens (the GPT's embedding).
inline void check_token_shape(const std::vector<int>& shape, int offset, int sequence,
                              const char* who) {
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1 || shape[1] > sequence)
    throw invalid_problem(std::string(who) + "::forward: token tensor shape is " +
                          shape_string(shape) +
                          "; expected [batch, sequence] with batch >= 1 and 1 <= sequence <= " +
                          std::to_string(sequence));
  if (offset < 0 || offset + shape[1] > sequence)
    throw invalid_problem(std::string(who) + "::forward: a slice of " + std::to_string(shape[1]) +
                          " tokens starting at position " + std::to_string(offset) +
                          " passes the end of the " + std::to_string(sequence) +
                          "-token sequence; slices must lie within positions 0 to " +
                          std::to_string(sequence - 1));
}

// The input of a GPT stage: token ids [batch, tokens] or activations [batch, tokens, hidden].
inline void check_stage_input_rank(const std::vector<int>& shape, const char* who, const char* op) {
  if (shape.size() < 2)
    throw invalid_problem(std::string(who) + "::" + op + ": input shape is " + shape_string(shape) +
                          "; expected [batch, tokens] ids or [batch, tokens, hidden]");
}

// ---- slices
// --------------------------------------------------------------------------------------

// What a stash or a call is for: slice `slice`, or (-1) a whole sequence.
inline std::string unit_name(int slice) {
  return slice < 0 ? std::string("a whole sequence") : "slice " + std::to_string(slice);
}

inline void check_slice_number(int slice, const char* who, const char* op) {
  if (slice < 0)
    throw invalid_problem(std::string(who) + "::" + op + ": slice is " + std::to_string(slice) +
                          "; slices are numbered from 0");
}

// A layer's backward_input given the stash of another unit's forward.
inline void check_backward_unit(int stash_slice, int slice, const char* who) {
  if (stash_slice != slice)
    throw invalid_schedule(std::string(who) + "::backward_input: the stash holds the forward of " +
                           unit_name(stash_slice) + " but the backward is for " + unit_name(slice) +
                           "; pass each backward the stash of its own forward");
}

// A block's slice context (members `kv` and `dkv`, a tensor per slice each): the slot where
// slice `slice` puts its keys/values, made if the context has none yet.
template <class Context>
auto& key_value_slot(Context& context, int slice) {
  const auto k = static_cast<std::size_t>(slice);
  if (context.kv.size() <= k) {
    context.kv.resize(k + 1);
    context.dkv.resize(k + 1);
  }
  return context.kv[k];
}

// Checks that `context` holds the keys/values of slices 0 … slice (slice `slice` has just put
// its own there) for the same `batch` sequences, and that they add up to `offset` + `tokens`
// keys; returns that key count. `who` and `op` name the call in the errors.
template <class Context>
int check_key_value_prefix(const Context& context, int slice, int offset, int batch, int tokens,
                           const char* who, const char* op) {
  int count = 0;
  for (int j = 0; j <= slice; ++j) {
    const bool held = static_cast<std::size_t>(j) < context.kv.size() &&
                      !context.kv[static_cast<std::size_t>(j)].empty();
    if (!held)
      throw invalid_schedule(
          std::string(who) + "::" + op + ": slice " + std::to_string(slice) +
          " needs the keys/values of slice " + std::to_string(j) +
          ", which the slice context does not hold; a microbatch's slices run their forwards "
          "first to last and their backwards last to first");
    const auto& kj = context.kv[static_cast<std::size_t>(j)];
    if (kj.dim(0) != batch)
      throw invalid_problem(std::string(who) + "::" + op + ": slice " + std::to_string(slice) +
                            " has " + std::to_string(batch) + " sequences but slice " +
                            std::to_string(j) + " had " + std::to_string(kj.dim(0)) +
                            "; the slices of a microbatch cut the same sequences");
    count += kj.dim(1);
  }
  if (count != offset + tokens)
    throw invalid_problem(std::string(who) + "::" + op + ": slice " + std::to_string(slice) +
                          " starts at position " + std::to_string(offset) +
                          " but the slices before it hold " + std::to_string(count - tokens) +
                          " tokens; pass the sum of the earlier slices' lengths as the offset");
  return count;
}

// The gradients later slices have sent to slice `slice`'s keys/values, or null when none has
// (the last slice, or a whole sequence: no context).
template <class Context>
const auto* later_key_value_gradients(const Context* context, int slice) {
  const auto k = static_cast<std::size_t>(slice);
  return context != nullptr && !context->dkv[k].empty() ? &context->dkv[k] : nullptr;
}

// Calls add(keys/values of slice j, their gradient sums, start) for each slice j before `slice`,
// where `start` is the row of slice j's first key among the keys slice `slice` attended to. The
// gradient sums are an empty tensor until the first later slice's backward makes them.
template <class Context, class Add>
void for_each_earlier_slice(Context& context, int slice, Add&& add) {
  int start = 0;
  for (int j = 0; j < slice; ++j) {
    const auto& kj = context.kv[static_cast<std::size_t>(j)];
    add(kj, context.dkv[static_cast<std::size_t>(j)], start);
    start += kj.dim(1);
  }
}

// After slice `slice`'s backward its keys/values and their gradients leave the context.
template <class Context>
void release_slice(Context& context, int slice) {
  using KeyValues = typename decltype(context.kv)::value_type;
  using Gradients = typename decltype(context.dkv)::value_type;
  context.kv[static_cast<std::size_t>(slice)] = KeyValues{};
  context.dkv[static_cast<std::size_t>(slice)] = Gradients{};
}

// Bytes a block's slice context holds: every slice's keys/values and their gradient sums.
template <class Context>
std::size_t key_value_bytes(const Context& context) noexcept {
  std::size_t bytes = 0;
  for (const auto& t : context.kv)
    bytes += t.bytes();
  for (const auto& t : context.dkv)
    bytes += t.bytes();
  return bytes;
}

// ---- bytes a layer's stash holds ---------------------------------------------------------------
//
// The host and the device stashes name their tensors alike, so one sum counts both: a GPU stage
// reports the bytes its host twin reports, which is what lets the simulator predict it from the
// host figures.

template <class Stash>
std::size_t mlp_block_held_bytes(const Stash& st) noexcept {
  return st.x.bytes() + st.pre.bytes() + st.act.bytes() + st.dy.bytes() + st.dpre.bytes();
}

template <class Stash>
std::size_t gpt_embedding_held_bytes(const Stash& st) noexcept {
  return st.ids.bytes() + st.dy.bytes();
}

// What a tensor-parallel block's stash keeps besides (host only: the summed LayerNorm-output
// gradients).
template <class Stash>
std::size_t tensor_parallel_bytes(const Stash& st) noexcept {
  if constexpr (requires { st.dn1.bytes(); })
    return st.dn1.bytes() + st.dn2.bytes();
  else
    return 0;
}

template <class Stash>
std::size_t gpt_block_held_bytes(const Stash& st) noexcept {
  return st.xhat1.bytes() + st.rstd1.bytes() + st.q.bytes() + st.kv.bytes() + st.probs.bytes() +
         st.attn.bytes() + st.xhat2.bytes() + st.rstd2.bytes() + st.pre.bytes() + st.act.bytes() +
         st.dy.bytes() + st.dpre.bytes() + st.dy1.bytes() + st.dqkv.bytes() +
         tensor_parallel_bytes(st);
}

template <class Stash>
std::size_t gpt_head_held_bytes(const Stash& st) noexcept {
  return st.xhat.bytes() + st.rstd.bytes() + st.dlogits.bytes();
}

// ---- a layer's weight-gradient pieces ----------------------------------------------------------
//
// A layer with pieces keeps `int pieces_done` in its stash (bit i: piece i has run). Piece i of
// `pieces` exists for 0 <= i < pieces and runs once per stash; after the last the stash is empty.

inline void check_weight_piece(int done, int piece, int pieces, const char* who) {
  if (piece < 0 || piece >= pieces)
    throw invalid_problem(std::string(who) + "::backward_weight_piece: piece is " +
                          std::to_string(piece) + "; it must be between 0 and " +
                          std::to_string(pieces - 1));
  if ((done & (1 << piece)) != 0)
    throw invalid_schedule(std::string(who) + "::backward_weight_piece: piece " +
                           std::to_string(piece) +
                           " already ran on this stash; each piece runs once");
}

// backward_weight_piece: `run(piece)` does the piece's work once the checks pass.
template <class Stash, class Run>
void run_weight_piece(Stash& stash, int piece, int pieces, const char* who, Run&& run) {
  require_phase(stash.phase, StashPhase::InputDone, who, "backward_weight_piece");
  check_weight_piece(stash.pieces_done, piece, pieces, who);
  run(piece);
  stash.pieces_done |= 1 << piece;
  if (stash.pieces_done == (1 << pieces) - 1) stash = Stash{};
}

// backward_weight: every piece that has not run yet, in order, then the stash is empty.
template <class Stash, class Run>
void run_remaining_weight_pieces(Stash& stash, int pieces, const char* who, Run&& run) {
  require_phase(stash.phase, StashPhase::InputDone, who, "backward_weight");
  for (int piece = 0; piece < pieces; ++piece)
    if ((stash.pieces_done & (1 << piece)) == 0) {
      run(piece);
      stash.pieces_done |= 1 << piece;
    }
  stash = Stash{};
}

// ---- a stage's weight-gradient parts -----------------------------------------------------------

// A stage's weight-gradient work is a list of `pieces` (one per weight GEMM, say); part `part`
// of `parts` runs pieces [part·pieces/parts, (part+1)·pieces/parts), so any part count covers
// every piece once (parts beyond the piece count are empty). Records the part in `done` (one
// flag per part, sized at the first part) and returns its pieces; throws when the part is out
// of range, already ran, or the unit was cut another way before.
inline std::pair<int, int> begin_weight_part(std::vector<char>& done, int part, int parts,
                                             int pieces, const char* who) {
  if (parts < 1 || part < 0 || part >= parts)
    throw invalid_problem(std::string(who) + "::backward_weight: part " + std::to_string(part) +
                          " of " + std::to_string(parts) +
                          " parts is out of range; parts must be at least 1 and part between 0 "
                          "and parts - 1");
  if (done.empty()) {
    done.assign(static_cast<std::size_t>(parts), 0);
  } else if (done.size() != static_cast<std::size_t>(parts)) {
    throw invalid_schedule(std::string(who) +
                           "::backward_weight: this stash's weight gradient "
                           "was cut into " +
                           std::to_string(done.size()) + " parts, now into " +
                           std::to_string(parts) + "; cut every part of one unit the same way");
  }
  if (done[static_cast<std::size_t>(part)] != 0)
    throw invalid_schedule(std::string(who) + "::backward_weight: part " + std::to_string(part) +
                           " of " + std::to_string(parts) +
                           " already ran on this stash; each part runs once");
  done[static_cast<std::size_t>(part)] = 1;
  const auto first = static_cast<long long>(part) * pieces / parts;
  const auto last = static_cast<long long>(part + 1) * pieces / parts;
  return {static_cast<int>(first), static_cast<int>(last)};
}

inline bool all_parts_done(const std::vector<char>& done) {
  return std::all_of(done.begin(), done.end(), [](char d) { return d != 0; });
}

// backward_weight(stash, part, parts) of a stage whose stash keeps `parts_done`: `run(piece)`
// runs each piece of the part; once every part has run the stash is empty.
template <class Stash, class Run>
void run_weight_part(Stash& stash, int part, int parts, int pieces, const char* who, Run&& run) {
  const auto [first, last] = begin_weight_part(stash.parts_done, part, parts, pieces, who);
  for (int piece = first; piece < last; ++piece)
    run(piece);
  if (all_parts_done(stash.parts_done)) stash = Stash{};
}

// The whole backward_weight after some part of it ran.
inline void require_no_weight_parts(const std::vector<char>& parts_done, const char* who) {
  if (!parts_done.empty())
    throw invalid_schedule(
        std::string(who) +
        "::backward_weight: part of this stash's weight gradient already ran; run the "
        "remaining parts with backward_weight(stash, part, parts)");
}

// Sums `pieces` (bytes each weight-gradient piece frees, in order) into what each of `parts`
// parts frees, by the split begin_weight_part uses.
inline std::vector<std::size_t> part_bytes(const std::vector<std::size_t>& pieces, int parts,
                                           const char* who) {
  if (parts < 1)
    throw invalid_problem(std::string(who) + "::weight_part_bytes: parts is " +
                          std::to_string(parts) + "; it must be at least 1");
  const auto n = static_cast<long long>(pieces.size());
  std::vector<std::size_t> out(static_cast<std::size_t>(parts), 0);
  for (int p = 0; p < parts; ++p)
    for (long long i = p * n / parts; i < (p + 1) * n / parts; ++i)
      out[static_cast<std::size_t>(p)] += pieces[static_cast<std::size_t>(i)];
  return out;
}

// Where piece `piece` of a stage's weight gradient lies. A stage runs its pieces in this order:
// the head's one (if it holds the head), `per_block` per block from the last block to the
// first, the embedding's one (if it holds the embedding).
struct StagePiece {
  enum class Layer : std::uint8_t { Head, Block, Embedding, None };
  Layer layer = Layer::None;
  std::size_t block = 0;  // for Layer::Block: the block's index in the stage
  int piece = 0;          // for Layer::Block: the block's own piece
};

inline int stage_weight_pieces(bool head, std::size_t blocks, int per_block,
                               bool embedding) noexcept {
  return (head ? 1 : 0) + per_block * static_cast<int>(blocks) + (embedding ? 1 : 0);
}

inline StagePiece stage_weight_piece(int piece, bool head, std::size_t blocks, int per_block,
                                     bool embedding) noexcept {
  if (head) {
    if (piece == 0) return {.layer = StagePiece::Layer::Head};
    --piece;
  }
  if (piece < per_block * static_cast<int>(blocks))
    return {.layer = StagePiece::Layer::Block,
            .block = blocks - 1 - static_cast<std::size_t>(piece / per_block),
            .piece = piece % per_block};
  return {.layer = embedding ? StagePiece::Layer::Embedding : StagePiece::Layer::None};
}

// ---- whose stash and context a stage is given
// ----------------------------------------------------

// A stash filled by another stage would be read against the wrong weights (or out of bounds).
inline void check_stash_stage(int stash_first, std::size_t stash_blocks, int first,
                              std::size_t blocks, const char* who, const char* op) {
  if (stash_first != first || stash_blocks != blocks)
    throw invalid_schedule(std::string(who) + "::" + op +
                           ": the stash was filled by the stage starting at block " +
                           std::to_string(stash_first) + ", not by this one (block " +
                           std::to_string(first) + "); pass each stage its own stashes");
}

// A stash filled by the forward of another slice (or of the whole sequence).
inline void check_stash_unit(int stash_slice, int slice, const char* who, const char* op) {
  if (stash_slice != slice)
    throw invalid_schedule(
        std::string(who) + "::" + op + ": the stash holds the forward of " +
        unit_name(stash_slice) + " but the call is for " + unit_name(slice) +
        "; a sliced forward goes with the sliced backward_input of the same slice");
}

// A fresh stage context (members `first_block` and `blocks`, one block context each) is taken
// by the stage starting at block `first` with `blocks` blocks; one of another stage is refused.
template <class Context>
void bind_context(Context& context, int first, std::size_t blocks, const char* who,
                  const char* op) {
  if (context.first_block < 0) {
    context.first_block = first;
    context.blocks.resize(blocks);
  } else if (context.first_block != first || context.blocks.size() != blocks) {
    throw invalid_schedule(std::string(who) + "::" + op +
                           ": the slice context belongs to the stage starting at block " +
                           std::to_string(context.first_block) + ", not to this one (block " +
                           std::to_string(first) + "); give each stage its own contexts");
  }
}

// ---- partition of the global block list over stages ------------------------------------------

// Blocks [first, last) of stage `stage` when `blocks` blocks are split over `stages` stages as
// evenly as possible, earlier stages taking the remainder. Throws when the split is impossible.
inline std::pair<int, int> block_range(int blocks, int stage, int stages, const char* model,
                                       const std::vector<int>& split = {}) {
  if (blocks < 1)
    throw invalid_problem(std::string(model) + ": blocks is " + std::to_string(blocks) +
                          "; a model needs at least 1 block");
  if (stages < 1 || (split.empty() && stages > blocks))
    throw invalid_problem(std::string(model) + ": stages is " + std::to_string(stages) + "; with " +
                          std::to_string(blocks) + " blocks it must be between 1 and " +
                          std::to_string(blocks) +
                          " (every stage needs a block; raise blocks for more stages, or give "
                          "stage_blocks with no block on the first or last stage)");
  if (stage < 0 || stage >= stages)
    throw invalid_problem(std::string(model) + ": stage is " + std::to_string(stage) +
                          "; it must be between 0 and " + std::to_string(stages - 1));
  if (!split.empty()) {
    long long sum = 0;
    bool empty_middle = false;  // only the ends (embedding, head) may hold no block
    for (std::size_t i = 0; i < split.size(); ++i) {
      sum += split[i];
      const bool end = split.size() > 1 && (i == 0 || i + 1 == split.size());
      empty_middle = empty_middle || split[i] < (end ? 0 : 1);
    }
    if (static_cast<int>(split.size()) != stages || sum != blocks || empty_middle)
      throw invalid_problem(std::string(model) + ": stage_blocks has " +
                            std::to_string(split.size()) + " entries summing to " +
                            std::to_string(sum) + "; give one entry per stage (" +
                            std::to_string(stages) +
                            "), each at least 1 (0 allowed on the first and the last), summing "
                            "to blocks (" +
                            std::to_string(blocks) + ")");
    int first = 0;
    for (int s = 0; s < stage; ++s)
      first += split[static_cast<std::size_t>(s)];
    return {first, first + split[static_cast<std::size_t>(stage)]};
  }
  const int base = blocks / stages;
  const int extra = blocks % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

inline void require_positive(int value, const char* model, const char* name) {
  if (value < 1)
    throw invalid_problem(std::string(model) + ": " + name + " is " + std::to_string(value) +
                          "; it must be at least 1");
}

}  // namespace pipesched::toy::detail
