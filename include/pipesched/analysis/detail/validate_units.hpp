// The structural checks of validation (validate.hpp): the schedule's shape, every action's
// indices and placement, and that every unit (stage, microbatch, slice) runs its forward,
// backward, weight-gradient parts and recompute exactly as often as it must.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/analysis/validation_report.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

inline std::string stage_count_text(int stages) {
  return std::to_string(stages) + (stages == 1 ? " stage" : " stages") + " (0.." +
         std::to_string(stages - 1) + ")";
}

//! What one unit (stage, microbatch, slice) holds: counts per kind and its W parts.
struct UnitSeen {
  int f = 0, b = 0, i = 0, r = 0;
  int r_late = 0;               //!< of the r recomputes, the late ones (`RL`)
  int offload = 0, reload = 0;  //!< OFFLOAD and RELOAD actions of the unit
  //! VOCAB_F and VOCAB_B of shard `stage` (counted under the shard's index; shard j < ranks)
  int vocab_f = 0, vocab_b = 0;
  //! EMBED_F and EMBED_B of shard `stage` (likewise)
  int embed_f = 0, embed_b = 0;
  std::vector<int> w_parts;  //!< the part index of every W of the unit, in list order
  friend bool operator==(const UnitSeen&, const UnitSeen&) = default;
};

// The exactly-once rules of the vocabulary passes of shard key.stage (a rank) for microbatch
// key.microbatch and slice key.slice, in a schedule with vocabulary passes (`input`: with the
// input embedding's passes too).
template <class Emit>
void vocabulary_rules(UnitKey key, const UnitSeen& u, Emit&& emit, bool input) {
  const int j = key.stage, mb = key.microbatch, sl = key.slice;
  auto pass = [&](OpKind k) { return to_string(Action::make(k, j, mb, sl)); };
  for (const OpKind k : {OpKind::VocabF, OpKind::VocabB, OpKind::EmbedF, OpKind::EmbedB}) {
    if (is_input_vocabulary(k) && !input) continue;
    const int n = k == OpKind::VocabF   ? u.vocab_f
                  : k == OpKind::VocabB ? u.vocab_b
                  : k == OpKind::EmbedF ? u.embed_f
                                        : u.embed_b;
    if (n == 0)
      emit("missing", [&, k] {
        return "rank " + std::to_string(j) + " never runs " + pass(k) +
               (is_input_vocabulary(k)
                    ? "; with the input embedding split every rank runs one EMBED_F and one "
                      "EMBED_B of its shard for every microbatch (and slice)."
                    : "; with vocabulary passes every rank runs one VOCAB_F and one VOCAB_B of "
                      "its shard for every microbatch (and slice).");
      });
    if (n > 1)
      emit("duplicate", [&, k, n] {
        return pass(k) + " appears " + std::to_string(n) +
               " times; every shard runs each vocabulary pass of a microbatch once.";
      });
  }
}

// The exactly-once rules for one unit; `emit(rule, make_message)` is called per violation
// (make_message builds the text only when the report keeps it). `vocabulary`: the schedule
// holds vocabulary passes, whose shard key.stage (when a rank) is checked too.
template <class Emit>
void unit_rules(const Schedule& s, UnitKey key, const UnitSeen& u, Emit&& emit,
                bool vocabulary = false, bool input_vocabulary = false) {
  if (vocabulary && key.stage < s.problem.ranks) vocabulary_rules(key, u, emit, input_vocabulary);
  const Problem& p = s.problem;
  const int st = key.stage, mb = key.microbatch, sl = key.slice;
  const int owner = s.placement.rank_of(st);
  auto unit = [&](OpKind k) { return to_string(Action::make(k, st, mb, sl)); };
  const std::size_t w_total = u.w_parts.size();
  if (u.f == 0)
    emit("missing", [&] {
      return "rank " + std::to_string(owner) + " never runs " + unit(OpKind::F) +
             "; every (stage, microbatch, slice) needs exactly one forward.";
    });
  if (u.f > 1)
    emit("duplicate", [&] {
      return unit(OpKind::F) + " appears " + std::to_string(u.f) +
             " times; every (stage, microbatch, slice) needs exactly one forward.";
    });
  if (u.b == 0 && u.i == 0)
    emit("missing", [&] {
      return "rank " + std::to_string(owner) + " never runs the backward of stage " +
             std::to_string(st) + " microbatch " + std::to_string(mb) +
             (p.slices > 1 ? " slice " + std::to_string(sl) : std::string()) + " (" +
             unit(OpKind::B) + ", or " + unit(OpKind::I) + " and " + unit(OpKind::W) +
             "); every forward needs exactly one backward.";
    });
  if (u.b + u.i > 1)
    emit("duplicate", [&] {
      return "the backward of " + unit(OpKind::F) + " appears " + std::to_string(u.b + u.i) +
             " times (" + std::to_string(u.b) + " B, " + std::to_string(u.i) +
             " I); every forward needs exactly one: B, or I followed by W.";
    });
  if (u.b >= 1 && w_total > 0)
    emit("duplicate", [&] {
      return unit(OpKind::W) + " runs although the backward is the full " + unit(OpKind::B) +
             ", which already computes weight gradients; use B alone or I then W.";
    });
  if (u.i >= 1 && w_total == 0)
    emit("missing", [&] {
      return "rank " + std::to_string(owner) + " runs " + unit(OpKind::I) +
             " but never its weight gradient " + unit(OpKind::W) +
             "; a split backward needs both I and W.";
    });
  if (u.i == 0 && u.b == 0 && w_total > 0)
    emit("missing", [&] {
      return unit(OpKind::W) + " runs but " + unit(OpKind::I) + " never does; W follows its I.";
    });
  if (w_total > 0) {
    // Parts are 0..n-1, each once: report every repeated part and every gap (a gap as one
    // violation, so a lone part 2147483647 is one problem, not two billion).
    std::vector<int> parts = u.w_parts;
    std::sort(parts.begin(), parts.end());
    const int top = parts.back();
    long long expect = 0;  // the next part that should run
    for (std::size_t j = 0; j < parts.size();) {
      const int part = parts[j];
      std::size_t n = 0;
      while (j < parts.size() && parts[j] == part) {
        ++j;
        ++n;
      }
      if (part > expect) {
        const long long lo = expect, hi = part - 1LL;
        emit("missing", [&] {
          return "the weight gradient of " + unit(OpKind::F) + " has parts up to " +
                 std::to_string(top) +
                 (lo == hi ? " but part " + std::to_string(lo) + " never runs"
                           : " but parts " + std::to_string(lo) + ".." + std::to_string(hi) +
                                 " never run") +
                 "; parts are numbered 0..n-1 and each runs once.";
        });
      }
      if (n > 1)
        emit("duplicate", [&] {
          return "W part " + std::to_string(part) + " of " + unit(OpKind::F) + " appears " +
                 std::to_string(n) + " times; each part runs once.";
        });
      expect = part + 1LL;
    }
  }
  if (u.r > 1)
    emit("duplicate", [&] {
      // Named as written: RL (a late recompute) when every one is late.
      Action late = Action::late_recompute(st, mb, sl);
      const std::string what =
          u.r_late == u.r ? to_string(late) + " (a late recompute)"
          : u.r_late == 0 ? unit(OpKind::R)
                          : "the recompute of " + unit(OpKind::F) + " (" +
                                std::to_string(u.r - u.r_late) + " " + unit(OpKind::R) + ", " +
                                std::to_string(u.r_late) + " " + to_string(late) + ")";
      return what + " appears " + std::to_string(u.r) +
             " times; a checkpointed forward is recomputed at most once (R or RL, not both).";
    });
  if (u.offload > 1 || u.reload > 1)
    emit("duplicate", [&] {
      const bool off = u.offload > 1;
      return unit(off ? OpKind::Offload : OpKind::Reload) + " appears " +
             std::to_string(off ? u.offload : u.reload) +
             " times; a unit's activations are offloaded at most once, and reloaded once.";
    });
  if (u.offload > 0 && u.reload == 0)
    emit("missing", [&] {
      return unit(OpKind::Offload) + " moves the activations of " + unit(OpKind::F) +
             " to host memory, but no " + unit(OpKind::Reload) +
             " brings them back for its backward; put one before the backward.";
    });
  if (u.reload > 0 && u.offload == 0)
    emit("missing", [&] {
      return unit(OpKind::Reload) + " brings back activations that no " + unit(OpKind::Offload) +
             " moved to host memory; offload them after " + unit(OpKind::F) +
             ", or remove the RELOAD.";
    });
  if (u.offload > 0 && u.r > 0)
    emit("offload", [&] {
      return unit(OpKind::Offload) + " offloads a unit that is also recomputed (" +
             unit(OpKind::R) +
             "); a unit keeps its activations, recomputes them or offloads them, one of the "
             "three.";
    });
  if (u.offload > 0 && p.slices > 1)
    emit("offload", [&] {
      return unit(OpKind::Offload) +
             " offloads one slice of a microbatch; offloading is of whole microbatches (a "
             "slice's keys and values stay in its microbatch's context for the later slices), "
             "so write the schedule without slices or without OFFLOAD.";
    });
}

// Adds a violation of `rule` at rank `r` position `i`; `make_message()` builds its text only
// when the report keeps it.
template <class MakeMessage>
void add_violation(ValidationReport& rep, int r, int i, const Action& a, const char* rule,
                   MakeMessage make_message) {
  if (rep.full()) {
    rep.add({});
    return;
  }
  rep.add({r, i, a, rule, make_message()});
}

// The problem, the rank lists and the placement agree and are positive; else reports `shape`
// and returns false.
inline bool check_shape(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  if (s.rank_count() != p.ranks || s.placement.ranks() != p.ranks ||
      s.placement.stages() != p.stages || p.stages < 1 || p.microbatches < 1 || p.slices < 1) {
    add_violation(rep, -1, -1, Action{}, "shape", [&] {
      return "the schedule's shape is inconsistent: problem says ranks = " +
             std::to_string(p.ranks) + ", stages = " + std::to_string(p.stages) +
             ", microbatches = " + std::to_string(p.microbatches) +
             ", slices = " + std::to_string(p.slices) + "; it has " +
             std::to_string(s.rank_count()) + " rank lists and a placement of " +
             std::to_string(s.placement.stages()) + " stages over " +
             std::to_string(s.placement.ranks()) + " ranks; all must agree and be positive.";
    });
    return false;
  }
  return true;
}

// True when (st, mb, sl) is within the problem's stages, microbatches and slices.
inline bool unit_in_range(const Problem& p, int st, int mb, int sl) {
  return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
}

// The checks of the unit (st, mb, sl) that action `a` at rank `r` position `i` names: in
// range, a unit of its microbatch's replica, on its stage's rank. False when there is no such
// unit to count.
inline bool check_unit_of(const Schedule& s, ValidationReport& rep, int r, int i, const Action& a,
                          int st, int mb, int sl) {
  const Problem& p = s.problem;
  if (!unit_in_range(p, st, mb, sl)) {
    add_violation(rep, r, i, a, "index-range", [&] {
      return to_string(a) + " at " + where(r, i) + " is out of range: stages run 0.." +
             std::to_string(p.stages - 1) + ", microbatches 0.." +
             std::to_string(p.microbatches - 1) + ", slices 0.." + std::to_string(p.slices - 1) +
             ".";
    });
    return false;
  }
  if (!p.has_unit(st, mb)) {
    add_violation(rep, r, i, a, "index-range", [&] {
      return to_string(a) + " at " + where(r, i) + " runs microbatch " + std::to_string(mb) +
             " on stage " + std::to_string(st) + " of replica " +
             std::to_string(p.replica_of_stage(st)) + ", but microbatch " + std::to_string(mb) +
             " runs through replica " + std::to_string(p.replica_of_microbatch(mb)) +
             " (microbatch m through replica m mod " + std::to_string(p.replicas) + ", stages " +
             std::to_string(p.replica_of_microbatch(mb) * p.replica_stages()) + ".." +
             std::to_string((p.replica_of_microbatch(mb) + 1) * p.replica_stages() - 1) + ").";
    });
    return false;
  }
  if (s.placement.rank_of(st) != r) {
    add_violation(rep, r, i, a, "placement", [&] {
      return to_string(a) + " at " + where(r, i) + " runs stage " + std::to_string(st) +
             ", which the placement (" + s.placement.describe() + ") puts on rank " +
             std::to_string(s.placement.rank_of(st)) +
             "; each stage lives on exactly one rank and all its actions run there.";
    });
  }
  return true;
}

// The checks of a whole-stage action `a` (REDUCE_GRAD, UNSHARD, ...) at rank `r` position
// `i`: a stage in range, on its rank. It names no microbatch, so it belongs to every replica's
// step (a Chimera stage of replica 1 reduces like one of replica 0).
inline void check_stage_action(const Schedule& s, ValidationReport& rep, int r, int i,
                               const Action& a) {
  const Problem& p = s.problem;
  if (a.stage < 0 || a.stage >= p.stages || a.microbatch != 0 || a.slice != 0) {
    add_violation(rep, r, i, a, "index-range", [&] {
      return to_string(a) + " at " + where(r, i) + " is out of range: stages run 0.." +
             std::to_string(p.stages - 1) + ", and a whole-stage action names no microbatch.";
    });
    return;
  }
  if (s.placement.rank_of(a.stage) != r) {
    add_violation(rep, r, i, a, "placement", [&] {
      return to_string(a) + " at " + where(r, i) + " runs stage " + std::to_string(a.stage) +
             ", which the placement (" + s.placement.describe() + ") puts on rank " +
             std::to_string(s.placement.rank_of(a.stage)) +
             "; each stage lives on exactly one rank and all its actions run there.";
    });
  }
}

// The checks of a send, receive or WAIT_SEND `a` at rank `r` position `i`: its unit, and a
// peer stage that exists, belongs to the same replica and sits on another rank.
inline void check_comm_action(const Schedule& s, ValidationReport& rep, int r, int i,
                              const Action& a) {
  const Problem& p = s.problem;
  if (!unit_in_range(p, a.stage, a.microbatch, a.slice)) {
    check_unit_of(s, rep, r, i, a, a.stage, a.microbatch, a.slice);
    return;
  }
  const OpKind k = send_of_wait(a.kind);  // a WAIT_SEND names its send's unit
  const bool fwd = k == OpKind::SendF || k == OpKind::RecvF;
  const bool send = k == OpKind::SendF || k == OpKind::SendB;
  const long long peer = a.stage + ((fwd == send) ? 1LL : -1LL);
  if (peer < 0 || peer >= p.stages) {
    add_violation(rep, r, i, a, "index-range", [&] {
      // The stage past either end is named as such, never as stage -1 or stage S.
      const std::string what = is_wait_send(a.kind) ? " waits for a send to"
                               : send               ? " sends to"
                                                    : " receives from";
      const std::string last = std::to_string(p.stages - 1);
      return to_string(a) + " at " + where(r, i) + what + " the stage " +
             (peer < 0 ? "before stage 0" : "after stage " + last) +
             ", which does not exist: stage " +
             (peer < 0 ? "0 is the first" : last + " is the last") + " of the schedule's " +
             stage_count_text(p.stages) +
             "; forward data flows from stage s to s+1 and gradients from s to s-1.";
    });
    return;
  }
  if (p.replica_of_stage(static_cast<int>(peer)) != p.replica_of_stage(a.stage)) {
    add_violation(rep, r, i, a, "index-range", [&] {
      return to_string(a) + " at " + where(r, i) + (send ? " sends to" : " receives from") +
             " stage " + std::to_string(peer) + " of replica " +
             std::to_string(p.replica_of_stage(static_cast<int>(peer))) + ", but stage " +
             std::to_string(a.stage) + " belongs to replica " +
             std::to_string(p.replica_of_stage(a.stage)) +
             "; data flows only between neighbouring stages of one replica.";
    });
    return;
  }
  check_unit_of(s, rep, r, i, a, a.stage, a.microbatch, a.slice);
  if (s.placement.rank_of(static_cast<int>(peer)) == s.placement.rank_of(a.stage))
    add_violation(rep, r, i, a, "placement", [&] {
      return to_string(a) + " at " + where(r, i) + " communicates between stages " +
             std::to_string(a.stage) + " and " + std::to_string(peer) +
             ", which are both on rank " + std::to_string(s.placement.rank_of(a.stage)) +
             "; only cross-rank neighbours send and receive.";
    });
}

// The checks of vocabulary pass `a` at rank `r` position `i`: one replica, a shard that is a
// rank, on that rank, a microbatch and slice in range. False when it is not to be counted.
inline bool check_vocabulary_action(const Schedule& s, ValidationReport& rep, int r, int i,
                                    const Action& a) {
  const Problem& p = s.problem;
  if (p.replicas != 1) {
    add_violation(rep, r, i, a, "vocabulary", [&] {
      return to_string(a) + " at " + where(r, i) + " is a vocabulary pass in a schedule of " +
             std::to_string(p.replicas) +
             " replicas; vocabulary parallelism splits the output layer of one pipeline over "
             "its ranks, so use one replica.";
    });
    return false;
  }
  if (a.stage < 0 || a.stage >= p.ranks || a.microbatch < 0 || a.microbatch >= p.microbatches ||
      a.slice < 0 || a.slice >= p.slices) {
    add_violation(rep, r, i, a, "index-range", [&] {
      return to_string(a) + " at " + where(r, i) + " is out of range: vocabulary shards run 0.." +
             std::to_string(p.ranks - 1) + " (one per rank), microbatches 0.." +
             std::to_string(p.microbatches - 1) + ", slices 0.." + std::to_string(p.slices - 1) +
             ".";
    });
    return false;
  }
  if (p.ranks > max_vocabulary_ranks) {
    add_violation(rep, r, i, a, "vocabulary", [&] {
      return to_string(a) + " at " + where(r, i) + " is a vocabulary pass over " +
             std::to_string(p.ranks) + " ranks; vocabulary parallelism is supported up to " +
             std::to_string(max_vocabulary_ranks) + " ranks.";
    });
    return false;
  }
  if (a.stage != r)
    add_violation(rep, r, i, a, "placement", [&] {
      return to_string(a) + " at " + where(r, i) + " runs vocabulary shard " +
             std::to_string(a.stage) + ", which rank " + std::to_string(a.stage) +
             " holds; shard j of the output layer (and of the input embedding) lives on rank j "
             "and its passes run there.";
    });
  return true;
}

// Counts compute action `a` in `u`, the unit it names.
inline void count_unit_action(UnitSeen& u, const Action& a) {
  switch (a.kind) {
    case OpKind::F:
      ++u.f;
      break;
    case OpKind::B:
      ++u.b;
      break;
    case OpKind::I:
      ++u.i;
      break;
    case OpKind::R:
      ++u.r;
      u.r_late += a.late;
      break;
    case OpKind::W:
      u.w_parts.push_back(a.part);
      break;
    case OpKind::Offload:
      ++u.offload;
      break;
    case OpKind::Reload:
      ++u.reload;
      break;
    case OpKind::VocabF:
      ++u.vocab_f;
      break;
    case OpKind::VocabB:
      ++u.vocab_b;
      break;
    case OpKind::EmbedF:
      ++u.embed_f;
      break;
    case OpKind::EmbedB:
      ++u.embed_b;
      break;
    default:
      break;
  }
}

// Every action's indices and placement; the compute actions of each unit counted in `seen`.
inline void check_actions(const Schedule& s, ValidationReport& rep, UnitTable<UnitSeen>& seen) {
  for (int r = 0; r < s.rank_count(); ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      if (a.kind == OpKind::Overlap) {
        if (check_unit_of(s, rep, r, i, a, a.stage, a.microbatch, a.slice))
          ++seen.at(a.stage, a.microbatch, a.slice).f;
        if (check_unit_of(s, rep, r, i, a, a.b_stage, a.b_microbatch, a.b_slice))
          ++seen.at(a.b_stage, a.b_microbatch, a.b_slice).b;
        continue;
      }
      if (is_comm(a.kind) || is_wait_send(a.kind)) {
        check_comm_action(s, rep, r, i, a);
        continue;
      }
      if (a.part < 0 || (a.part != 0 && a.kind != OpKind::W)) {
        add_violation(rep, r, i, a, "index-range", [&] {
          return to_string(a) + " at " + where(r, i) + " has part " + std::to_string(a.part) +
                 "; only W actions have parts, numbered from 0.";
        });
        continue;
      }
      if (is_stage_action(a.kind)) {
        check_stage_action(s, rep, r, i, a);
        continue;
      }
      if (is_vocabulary(a.kind)) {
        if (check_vocabulary_action(s, rep, r, i, a))
          count_unit_action(seen.at(a.stage, a.microbatch, a.slice), a);
        continue;
      }
      if (!check_unit_of(s, rep, r, i, a, a.stage, a.microbatch, a.slice)) continue;
      count_unit_action(seen.at(a.stage, a.microbatch, a.slice), a);
    }
  }
}

// The exactly-once rules of every unit, counted in `seen`.
inline void check_exactly_once(const Schedule& s, const UnitTable<UnitSeen>& seen,
                               ValidationReport& rep) {
  const Problem& p = s.problem;
  // Exactly-once rules, per unit in (stage, microbatch, slice) order. The walk over every unit
  // of the problem stops once the report is full; the rest is counted without a walk: a unit
  // no action names misses its forward and its backward (two violations), and the units some
  // action names are visited directly.
  const bool vocabulary = s.has_vocabulary() && p.replicas == 1;
  const bool input_vocabulary = vocabulary && s.has_input_vocabulary();
  auto keep = [&](UnitKey k, const UnitSeen& u) {
    unit_rules(
        s, k, u,
        [&](const char* rule, auto make_message) {
          add_violation(rep, s.placement.rank_of(k.stage), -1,
                        Action::make(OpKind::F, k.stage, k.microbatch, k.slice), rule,
                        make_message);
        },
        vocabulary, input_vocabulary);
  };
  UnitKey stop{p.stages, 0, 0};  // the first unit not walked
  std::uint64_t walked = 0;
  for (int st = 0; st < p.stages && stop.stage == p.stages; ++st)
    for (int mb = 0; mb < p.microbatches && stop.stage == p.stages; ++mb)
      for (int sl = 0; sl < p.slices; ++sl) {
        if (rep.full()) {
          stop = {st, mb, sl};
          break;
        }
        if (!p.has_unit(st, mb)) break;  // another replica's microbatch: no unit here
        keep({st, mb, sl}, seen.get(st, mb, sl));
        ++walked;
      }
  if (stop.stage == p.stages) return;
  std::uint64_t named_after = 0;
  seen.for_each_stored([&](UnitKey k, const UnitSeen& u) {
    if (k < stop) return;
    ++named_after;
    unit_rules(
        s, k, u, [&](const char*, auto) { rep.add({}); }, vocabulary, input_vocabulary);
  });
  const std::uint64_t after = step_unit_count(p) - walked;
  const std::uint64_t absent = after - std::min(after, named_after);
  rep.omitted = saturating_add(rep.omitted, absent > UINT64_MAX / 2 ? UINT64_MAX : 2 * absent);
}

// The structural checks: shape, ranges, placement, and exactly-once counts. Costs what the
// schedule's actions cost (plus at most max_recorded absent units), whatever its dimensions.
inline void check_units(const Schedule& s, ValidationReport& rep) {
  if (!check_shape(s, rep)) return;
  UnitTable<UnitSeen> seen(s.problem, s.action_count());
  check_actions(s, rep, seen);
  check_exactly_once(s, seen, rep);
}

}  // namespace pipesched::detail
