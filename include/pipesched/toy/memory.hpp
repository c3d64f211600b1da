// Analytic stash sizes of the toy layers, from shapes alone: what a stash holds right after
// forward and right after backward_input. The simulator predicts memory from these; the tests
// check them against the bytes of real stashes.
#pragma once

#include <array>
#include <cstddef>

#include "pipesched/toy/detail/ops.hpp"

namespace pipesched::toy {

//! Bytes one stash holds at the two points the executor cares about.
struct StashBytes {
  std::size_t activation = 0;  //!< right after forward
  std::size_t wgrad = 0;       //!< right after backward_input (what backward_weight needs)

  friend constexpr StashBytes operator+(StashBytes a, StashBytes b) noexcept {
    return {a.activation + b.activation, a.wgrad + b.wgrad};
  }
  friend constexpr bool operator==(StashBytes, StashBytes) = default;
};

//! What one slice of a microbatch holds on a slice-aware stage, at the points the executor
//! measures. The slice's keys/values live in the microbatch's slice context from its forward to
//! its backward_input (later slices read them); the gradients later slices send back to them
//! live in the context from the microbatch's first backward_input on the stage (its last
//! slice's) to this slice's.
struct SliceStashBytes {
  std::size_t activation = 0;           //!< stash right after forward (keys/values not counted)
  std::size_t wgrad = 0;                //!< stash right after backward_input
  std::size_t key_values = 0;           //!< keys/values the slice adds to the context
  std::size_t key_value_gradients = 0;  //!< gradient buffers for them (0 for the last slice),
                                        //!< in the wider sum type for float

  friend constexpr SliceStashBytes operator+(SliceStashBytes a, SliceStashBytes b) noexcept {
    return {a.activation + b.activation, a.wgrad + b.wgrad, a.key_values + b.key_values,
            a.key_value_gradients + b.key_value_gradients};
  }
  friend constexpr bool operator==(SliceStashBytes, SliceStashBytes) = default;
};

//! Residual MLP block on `rows` rows: forward keeps the input x [rows, hidden], the
//! pre-activation and the activation [rows, ffn]; backward_input keeps, for the two weight
//! gradients, each linear's input (x, the activation) and output gradient (dy, d pre-activation).
template <class T>
constexpr StashBytes mlp_block_stash_bytes(std::size_t rows, std::size_t hidden,
                                           std::size_t ffn) noexcept {
  return {rows * (hidden + 2 * ffn) * sizeof(T), rows * (2 * hidden + 2 * ffn) * sizeof(T)};
}

//! GPT token + position embedding on [batch, sequence] tokens: forward keeps the token ids;
//! backward_input adds the output gradient [batch, sequence, hidden].
template <class T>
constexpr StashBytes gpt_embedding_stash_bytes(std::size_t batch, std::size_t sequence,
                                               std::size_t hidden) noexcept {
  const std::size_t rows = batch * sequence;
  return {rows * sizeof(T), rows * (1 + hidden) * sizeof(T)};
}

//! GPT position embedding alone (the token table split off, GptConfig::split_input) on
//! [batch, sequence, hidden] token embeddings: forward keeps nothing; backward_input keeps the
//! output gradient [batch, sequence, hidden].
template <class T>
constexpr StashBytes gpt_position_embedding_stash_bytes(std::size_t batch, std::size_t sequence,
                                                        std::size_t hidden) noexcept {
  const std::size_t rows = batch * sequence;
  return {0, rows * hidden * sizeof(T)};
}

//! GPT transformer block on [batch, sequence, hidden]. Forward keeps per row: both
//! LayerNorms' normalized inputs (2·hidden) and inverse deviations (2), q, k and v (3·hidden),
//! the attention output (hidden), the MLP pre-activation and activation (2·ffn); plus the
//! attention probabilities [batch, heads, sequence, sequence]. backward_input keeps per row
//! what the weight gradients need: the normalized inputs (2·hidden), the gradients of the
//! q/k/v projection (3·hidden), the attention output and its residual gradient (2·hidden), the
//! MLP activation and pre-activation gradient (2·ffn) and the block's output gradient (hidden).
//! The LayerNorm outputs and the gradients into them are rebuilt in backward_weight rather
//! than kept.
template <class T>
constexpr StashBytes gpt_block_stash_bytes(std::size_t batch, std::size_t sequence,
                                           std::size_t hidden, std::size_t heads,
                                           std::size_t ffn) noexcept {
  const std::size_t rows = batch * sequence;
  const std::size_t probabilities = batch * heads * sequence * sequence;
  return {(rows * (6 * hidden + 2 + 2 * ffn) + probabilities) * sizeof(T),
          rows * (8 * hidden + 2 * ffn) * sizeof(T)};
}

//! One slice of a GPT transformer block: `batch` sequences of `tokens` query rows attending
//! to `keys` = (the slice's start + tokens) keys. The stash keeps per row what the whole-sequence
//! block keeps except the keys/values (2·hidden), which go to the slice context, and the
//! probabilities [batch, heads, tokens, keys]; after backward_input, the same as the whole
//! block per row. `last` says whether this is the microbatch's last slice (which receives no
//! key/value gradients from later ones). The key/value gradient buffers hold sums in
//! `detail::accumulator_t<T>` (double for float, see `GptBlock::Context`).
template <class T>
constexpr SliceStashBytes gpt_block_slice_bytes(std::size_t batch, std::size_t tokens,
                                                std::size_t keys, std::size_t hidden,
                                                std::size_t heads, std::size_t ffn,
                                                bool last) noexcept {
  const std::size_t rows = batch * tokens;
  const std::size_t probabilities = batch * heads * tokens * keys;
  return {(rows * (4 * hidden + 2 + 2 * ffn) + probabilities) * sizeof(T),
          rows * (8 * hidden + 2 * ffn) * sizeof(T), rows * 2 * hidden * sizeof(T),
          last ? 0 : rows * 2 * hidden * sizeof(detail::accumulator_t<T>)};
}

//! The weight-gradient pieces of a GPT transformer block on `rows` rows, in the order the
//! block runs them, as the bytes each frees: the second MLP linear (its output gradient and
//! input), the first MLP linear with LN2 (the pre-activation gradient and LN2's normalized
//! input), the attention output projection (its output gradient and input), the q/k/v
//! projection with LN1 (its output gradient and LN1's normalized input).
template <class T>
constexpr std::array<std::size_t, 4> gpt_block_weight_piece_bytes(std::size_t rows,
                                                                  std::size_t hidden,
                                                                  std::size_t ffn) noexcept {
  return {rows * (hidden + ffn) * sizeof(T), rows * (ffn + hidden) * sizeof(T),
          rows * 2 * hidden * sizeof(T), rows * 4 * hidden * sizeof(T)};
}

//! The weight-gradient pieces of a residual MLP block on `rows` rows, in the order the block
//! runs them, as the bytes each frees: the second linear (output gradient, activation), the
//! first (pre-activation gradient, input).
template <class T>
constexpr std::array<std::size_t, 2> mlp_block_weight_piece_bytes(std::size_t rows,
                                                                  std::size_t hidden,
                                                                  std::size_t ffn) noexcept {
  return {rows * (hidden + ffn) * sizeof(T), rows * (ffn + hidden) * sizeof(T)};
}

//! GPT final LayerNorm + LM head on [batch, sequence, hidden]: forward keeps the normalized
//! input and the inverse deviation; backward_input keeps the normalized input and the logits'
//! gradient [batch, sequence, vocabulary].
template <class T>
constexpr StashBytes gpt_head_stash_bytes(std::size_t batch, std::size_t sequence,
                                          std::size_t hidden, std::size_t vocabulary) noexcept {
  const std::size_t rows = batch * sequence;
  return {rows * (hidden + 1) * sizeof(T), rows * (hidden + vocabulary) * sizeof(T)};
}

}  // namespace pipesched::toy
