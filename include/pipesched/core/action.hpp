// The unit of every schedule: an action (forward, backward, recompute, send, ...)
// on one stage, microbatch and slice.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace pipesched {

//! What an action does. The compute kinds follow DESIGN: `F` forward, `B` full backward,
//! `I` backward for inputs only, `W` backward for weights only, `R` recompute of a
//! checkpointed forward. `SendF`/`RecvF` move a forward activation, `SendB`/`RecvB` an
//! input gradient. `Overlap` runs one forward and one full backward together (DualPipe).
//! `Idle` is an explicit empty slot in a rank's list (a blank cell in PyTorch's CSV).
//! The kinds after `Idle` come from PyTorch's lowered schedules: `WaitSendF`/`WaitSendB`
//! complete an earlier send of the same unit (a send is posted, and done only at its wait);
//! `Unshard`/`Reshard` (FSDP: gather and release a stage's sharded parameters) and
//! `ReduceGrad`/`WaitReduceGrad` (start and finish the data-parallel gradient reduction of a
//! stage) act on a whole stage and have no microbatch. pipesched schedules them as written and
//! gives them no dependency; see docs/formats.md. `Offload` and `Reload` (pipesched's own, like
//! R) move a unit's activations to host memory and back: an OFFLOAD waits for the copy of its
//! forward's activations to host memory (started when the forward ended, on the rank's host
//! link) and frees them on the device; a RELOAD takes the device memory again and starts the
//! copy back, which its backward waits for. `VocabF` and `VocabB` (pipesched's own) are the
//! vocabulary passes of vocabulary parallelism: the output layer (LM head, softmax and loss)
//! split by vocabulary over every rank, one shard each. `EmbedF` and `EmbedB` are the input
//! embedding's vocabulary passes: its token table split the same way, each shard looking up
//! the tokens it holds (EMBED_F, its partial reduced into the first stage's input) and adding
//! its rows' gradient from the first stage's input gradient (EMBED_B). Their `stage` field
//! names the shard, which rank `stage` holds; see core/rules.hpp for what they wait for.
enum class OpKind : std::uint8_t {
  F,               //!< forward
  B,               //!< full backward: input and weight gradients
  I,               //!< backward for the input gradient only
  W,               //!< backward for the weight gradient only (or one part of it)
  R,               //!< recompute of a checkpointed forward
  SendF,           //!< send a forward activation to the next stage
  RecvF,           //!< receive a forward activation from the previous stage
  SendB,           //!< send an input gradient to the previous stage
  RecvB,           //!< receive an input gradient from the next stage
  Overlap,         //!< one forward and one full backward run together (DualPipe)
  Idle,            //!< an explicit empty slot
  WaitSendF,       //!< complete an earlier SendF of the same unit
  WaitSendB,       //!< complete an earlier SendB of the same unit
  Unshard,         //!< FSDP: gather a stage's sharded parameters
  Reshard,         //!< FSDP: release them
  ReduceGrad,      //!< start the data-parallel gradient reduction of a stage
  WaitReduceGrad,  //!< finish it
  Offload,         //!< wait for a forward's activations to reach host memory, free them
  Reload,          //!< take the device memory again and copy them back for the backward
  VocabF,          //!< vocabulary forward: a shard's logits, softmax statistics, gradient share
  VocabB,          //!< vocabulary backward: the shard's weight gradient
  EmbedF,          //!< input embedding forward: a shard's lookups of the tokens it holds
  EmbedB           //!< input embedding backward: the gradient of the shard's rows
};

//! The number of OpKind values (`EmbedB` is the last, 22).
inline constexpr int op_kind_count = 23;

//! Short name of a kind as used in action strings (`F`, `B`, `SEND_F`, `OVERLAP_F_B`, ...).
constexpr std::string_view to_string(OpKind k) noexcept {
  switch (k) {
    case OpKind::F:
      return "F";
    case OpKind::B:
      return "B";
    case OpKind::I:
      return "I";
    case OpKind::W:
      return "W";
    case OpKind::R:
      return "R";
    case OpKind::SendF:
      return "SEND_F";
    case OpKind::RecvF:
      return "RECV_F";
    case OpKind::SendB:
      return "SEND_B";
    case OpKind::RecvB:
      return "RECV_B";
    case OpKind::Overlap:
      return "OVERLAP_F_B";
    case OpKind::Idle:
      return "IDLE";
    case OpKind::WaitSendF:
      return "WAIT_SEND_F";
    case OpKind::WaitSendB:
      return "WAIT_SEND_B";
    case OpKind::Unshard:
      return "UNSHARD";
    case OpKind::Reshard:
      return "RESHARD";
    case OpKind::ReduceGrad:
      return "REDUCE_GRAD";
    case OpKind::WaitReduceGrad:
      return "WAIT_REDUCE_GRAD";
    case OpKind::Offload:
      return "OFFLOAD";
    case OpKind::Reload:
      return "RELOAD";
    case OpKind::VocabF:
      return "VOCAB_F";
    case OpKind::VocabB:
      return "VOCAB_B";
    case OpKind::EmbedF:
      return "EMBED_F";
    case OpKind::EmbedB:
      return "EMBED_B";
  }
  return "?";
}

//! True for the kinds that compute (F, B, I, W, R, Overlap).
constexpr bool is_compute(OpKind k) noexcept {
  return k == OpKind::F || k == OpKind::B || k == OpKind::I || k == OpKind::W || k == OpKind::R ||
         k == OpKind::Overlap;
}
//! True for SendF, RecvF, SendB, RecvB.
constexpr bool is_comm(OpKind k) noexcept {
  return k == OpKind::SendF || k == OpKind::RecvF || k == OpKind::SendB || k == OpKind::RecvB;
}
//! True for WaitSendF and WaitSendB: the completion of an earlier send of the same unit.
constexpr bool is_wait_send(OpKind k) noexcept {
  return k == OpKind::WaitSendF || k == OpKind::WaitSendB;
}
//! True for the actions on a whole stage (no microbatch): Unshard, Reshard, ReduceGrad and
//! WaitReduceGrad.
constexpr bool is_stage_action(OpKind k) noexcept {
  return k == OpKind::Unshard || k == OpKind::Reshard || k == OpKind::ReduceGrad ||
         k == OpKind::WaitReduceGrad;
}
//! The send a WaitSendF / WaitSendB completes (SendF / SendB); `k` itself otherwise.
constexpr OpKind send_of_wait(OpKind k) noexcept {
  return k == OpKind::WaitSendF ? OpKind::SendF : k == OpKind::WaitSendB ? OpKind::SendB : k;
}
//! The wait that completes a SendF / SendB (WaitSendF / WaitSendB); `k` itself otherwise.
constexpr OpKind wait_of_send(OpKind k) noexcept {
  return k == OpKind::SendF ? OpKind::WaitSendF : k == OpKind::SendB ? OpKind::WaitSendB : k;
}
//! True for Offload and Reload: a copy of a unit's activations to host memory or back.
constexpr bool is_offload_action(OpKind k) noexcept {
  return k == OpKind::Offload || k == OpKind::Reload;
}
//! True for EmbedF and EmbedB: a pass of the input embedding over one vocabulary shard.
constexpr bool is_input_vocabulary(OpKind k) noexcept {
  return k == OpKind::EmbedF || k == OpKind::EmbedB;
}
//! True for VocabF, VocabB, EmbedF and EmbedB: a pass of the output layer or of the input
//! embedding over one vocabulary shard (its `stage` field names the shard).
constexpr bool is_vocabulary(OpKind k) noexcept {
  return k == OpKind::VocabF || k == OpKind::VocabB || is_input_vocabulary(k);
}
//! True for the kinds that propagate a gradient to the previous stage (B and I).
constexpr bool is_input_backward(OpKind k) noexcept {
  return k == OpKind::B || k == OpKind::I;
}

//! One step of a rank's list. `stage`, `microbatch`, `slice` and `part` locate it; an
//! `Overlap` holds its forward half in those fields and its backward half in `b_*`. A recompute
//! with `late` set (written `RL`) also waits for the inputs of its backward — the gradient of
//! the next stage and the backward of the next slice — as a recompute inside the backward call
//! runs (Megatron-LM's activation checkpointing); a plain R needs only its forward.
struct Action {
  OpKind kind = OpKind::Idle;  //!< what the action does
  int stage = 0;               //!< the pipeline stage it computes or moves data of
  int microbatch = 0;          //!< the microbatch (0 for the stage-wide PyTorch kinds)
  int slice = 0;               //!< the sequence slice (0 with whole sequences)
  int part = 0;                //!< which piece of a split weight-gradient (W) computation
  int b_stage = 0;             //!< Overlap only: stage of the backward half
  int b_microbatch = 0;        //!< Overlap only: microbatch of the backward half
  int b_slice = 0;             //!< Overlap only: slice of the backward half
  bool late = false;           //!< R only: waits for its backward's inputs (see above)
  //! B, or an Overlap's backward half: read as `BW` (another spelling of a full backward,
  //! which PyTorch 2.15 refuses) and written back so. Spelling only: operator== ignores it.
  bool spelled_bw = false;

  //! An explicit idle slot.
  static constexpr Action idle() noexcept { return Action{}; }
  //! A compute or communication action.
  static constexpr Action make(OpKind kind, int stage, int microbatch, int slice = 0,
                               int part = 0) noexcept {
    return Action{kind, stage, microbatch, slice, part};
  }
  //! A late recompute (`RL`) of unit (stage, microbatch, slice): it runs once its backward's
  //! inputs are there.
  static constexpr Action late_recompute(int stage, int microbatch, int slice = 0) noexcept {
    Action a = make(OpKind::R, stage, microbatch, slice);
    a.late = true;
    return a;
  }
  //! A forward `f` and a full backward `b` run together.
  static constexpr Action overlap(const Action& f, const Action& b) noexcept {
    Action a{OpKind::Overlap, f.stage, f.microbatch, f.slice, 0, b.stage, b.microbatch, b.slice};
    a.spelled_bw = b.spelled_bw;
    return a;
  }
  //! The forward half of an Overlap.
  constexpr Action forward_half() const noexcept {
    return Action::make(OpKind::F, stage, microbatch, slice);
  }
  //! The backward half of an Overlap.
  constexpr Action backward_half() const noexcept {
    Action a = Action::make(OpKind::B, b_stage, b_microbatch, b_slice);
    a.spelled_bw = spelled_bw;
    return a;
  }

  friend constexpr bool operator==(const Action& a, const Action& b) noexcept {
    if (a.kind != b.kind) return false;
    if (a.kind == OpKind::Idle) return true;
    if (a.kind == OpKind::Overlap)
      return a.stage == b.stage && a.microbatch == b.microbatch && a.slice == b.slice &&
             a.b_stage == b.b_stage && a.b_microbatch == b.b_microbatch && a.b_slice == b.b_slice;
    return a.stage == b.stage && a.microbatch == b.microbatch && a.slice == b.slice &&
           a.part == b.part && a.late == b.late;
  }
};

//! The action in pipesched's action-string form: PyTorch's exact form (`2F0`, `0I1`,
//! `3SEND_F1`, `(0F7;7B3)OVERLAP_F_B`) when it uses no extension, plus a slice suffix `.k`
//! when slice != 0 and a part suffix `:j` when part != 0 (`2W0.3:1`). A late recompute is
//! `RL` (`2RL0`). A full backward read as `BW` (`spelled_bw`) is written `BW`. Idle is "". An
//! action on a whole stage has no microbatch: `0UNSHARD`, `2REDUCE_GRAD`.
inline std::string to_string(const Action& a) {
  auto unit = [&](int stage, OpKind kind, int mb, int slice, int part) {
    std::string s = std::to_string(stage);
    s += to_string(kind);
    if (kind == OpKind::R && a.late) s += 'L';
    if (kind == OpKind::B && a.spelled_bw) s += 'W';
    s += std::to_string(mb);
    if (slice != 0) s += "." + std::to_string(slice);
    if (part != 0) s += ":" + std::to_string(part);
    return s;
  };
  switch (a.kind) {
    case OpKind::Idle:
      return {};
    case OpKind::Unshard:
    case OpKind::Reshard:
    case OpKind::ReduceGrad:
    case OpKind::WaitReduceGrad:
      return std::to_string(a.stage) + std::string(to_string(a.kind));  // a whole stage
    case OpKind::Overlap:
      return "(" + unit(a.stage, OpKind::F, a.microbatch, a.slice, 0) + ";" +
             unit(a.b_stage, OpKind::B, a.b_microbatch, a.b_slice, 0) + ")OVERLAP_F_B";
    default:
      return unit(a.stage, a.kind, a.microbatch, a.slice, a.part);
  }
}

//! Writes the action string of `a` ("2F0", "(0F7;7B3)OVERLAP_F_B"; an idle slot as "idle"),
//! so that test frameworks and logs print actions readably.
inline std::ostream& operator<<(std::ostream& os, const Action& a) {
  return os << (a.kind == OpKind::Idle ? std::string("idle") : to_string(a));
}

//! Writes the short name of `k` ("F", "SEND_F", ...).
inline std::ostream& operator<<(std::ostream& os, OpKind k) {
  return os << to_string(k);
}

}  // namespace pipesched
