// The toy causal GPT's layers on the host, float or double: token + position embedding,
// pre-LayerNorm transformer blocks (causal multi-head attention, GELU MLP), final LayerNorm
// + LM head — each a `layer` with a hand-written backward, slice-aware through a context of
// keys and values — and their shape, `GptConfig`. One header per layer; this one includes them
// all. The pipeline stages made of them are in toy/gpt.hpp.
#pragma once

#include "pipesched/toy/gpt_block.hpp"
#include "pipesched/toy/gpt_config.hpp"
#include "pipesched/toy/gpt_embedding.hpp"
#include "pipesched/toy/gpt_head.hpp"
