// The two mode choices of the vocabulary: how a backward is emitted (WGradMode) and which
// built-in checkpointing a schedule gets (CheckpointMode), with their command-line names.
#pragma once

namespace pipesched {

//! How a generator emits the backward pass of a (stage, microbatch, slice).
enum class WGradMode {
  Fused,  //!< one B action
  Split,  //!< I (input gradient) then W (weight gradient), as in Zero Bubble
};

//! The mode's command-line name: "fused" or "split".
constexpr const char* to_string(WGradMode m) noexcept {
  return m == WGradMode::Fused ? "fused" : "split";
}

//! Which checkpointing a schedule gets: None keeps every forward's activations; Full
//! recomputes every unit and Selective the units a memory budget requires, as Megatron-LM does,
//! after the gradient arrives (RL); FullEarly and SelectiveEarly checkpoint the same units with
//! the recompute free to start before it (R), which hides part of it in the wait for the
//! gradient; Mario hoists recomputes into bubbles and preposes forwards (checkpoint_mario).
enum class CheckpointMode { None, Full, Selective, Mario, FullEarly, SelectiveEarly };

//! The mode's command-line name ("none", "full", "selective", "mario", ...).
constexpr const char* to_string(CheckpointMode m) noexcept {
  switch (m) {
    case CheckpointMode::None:
      return "none";
    case CheckpointMode::Full:
      return "full";
    case CheckpointMode::Selective:
      return "selective";
    case CheckpointMode::Mario:
      return "mario";
    case CheckpointMode::FullEarly:
      return "full-early";
    case CheckpointMode::SelectiveEarly:
      return "selective-early";
  }
  return "?";
}

//! When a conventional (full or selective) recompute may run: Late (RL) once its backward's
//! gradient is there, as inside Megatron-LM's backward call; Early (R) once its forward is.
enum class RecomputeTiming { Late, Early };

//! True for the modes that checkpoint every unit (Full, FullEarly).
constexpr bool is_full(CheckpointMode m) noexcept {
  return m == CheckpointMode::Full || m == CheckpointMode::FullEarly;
}
//! True for the conventional budgeted modes (Selective, SelectiveEarly).
constexpr bool is_selective(CheckpointMode m) noexcept {
  return m == CheckpointMode::Selective || m == CheckpointMode::SelectiveEarly;
}
//! The recompute timing of a conventional mode (Early for FullEarly and SelectiveEarly).
constexpr RecomputeTiming timing_of(CheckpointMode m) noexcept {
  return m == CheckpointMode::FullEarly || m == CheckpointMode::SelectiveEarly
             ? RecomputeTiming::Early
             : RecomputeTiming::Late;
}

}  // namespace pipesched
