// The toy causal GPT's shape (`GptConfig`), the checks every GPT layer makes of it, and the random
// streams its layers draw their parameters from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"

namespace pipesched::toy {

//! Shape of the toy GPT. `blocks` counts the whole model; a stage holds a share of them, the
//! first stage also the embedding and the last the LM head.
struct GptConfig {
  int vocabulary = 16;      //!< token ids are 0 … vocabulary − 1
  int hidden = 8;           //!< model width; a multiple of `heads`
  int heads = 2;            //!< attention heads
  int ffn = 32;             //!< inner width of each block's MLP
  int sequence = 8;         //!< longest sequence (rows of the position embedding)
  int blocks = 4;           //!< transformer blocks over all stages
  int microbatch_size = 2;  //!< sequences per microbatch
  std::uint64_t seed = 1;   //!< block i draws from stream (seed, i); embedding and head own ones
  //! Blocks of each stage of a model cut into stages (one entry per stage, each at least 1,
  //! summing to `blocks`); empty: as even as possible, earlier stages taking the remainder.
  std::vector<int> stage_blocks = {};
  //! The LM head's weight split over the ranks by vocabulary (vocabulary parallelism): the last
  //! stage ends at the final LayerNorm, returning its output [batch, tokens, hidden], and
  //! `GptVocabularyShard`s hold the head's rows (toy::vocabulary_passes runs them).
  bool split_output = false;
  //! The input embedding's token table split over the ranks by vocabulary too: the first
  //! stage's embedding holds the position table only and takes the tokens' embeddings
  //! [batch, tokens, hidden] (the shards' lookups, summed), returning their gradient from its
  //! backward; `GptInputShard`s hold the table's rows (toy::vocabulary_passes runs them).
  bool split_input = false;
};

namespace detail {
// Random streams of the embedding and the head; block i uses stream i, far below these.
inline constexpr std::uint64_t gpt_embedding_stream = 0x454d424544000000ULL;
inline constexpr std::uint64_t gpt_head_stream = 0x4845414400000000ULL;

inline void check_gpt_config(const GptConfig& c, const char* who) {
  require_positive(c.vocabulary, who, "vocabulary");
  require_positive(c.hidden, who, "hidden");
  require_positive(c.heads, who, "heads");
  require_positive(c.ffn, who, "ffn");
  require_positive(c.sequence, who, "sequence");
  require_positive(c.microbatch_size, who, "microbatch_size");
  if (c.hidden % c.heads != 0)
    throw invalid_problem(std::string(who) + ": hidden is " + std::to_string(c.hidden) +
                          " and heads is " + std::to_string(c.heads) +
                          "; hidden must be a multiple of heads");
}
}  // namespace detail

}  // namespace pipesched::toy
