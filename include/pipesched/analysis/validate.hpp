// Validation of a schedule: every unit computed exactly once, indices in range, each stage
// on one rank, dependency order, matched communication, and deadlock freedom (a dry run of
// all ranks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! One broken rule. `rank`/`position` locate the action (-1 when the violation is about
//! something absent, e.g. a missing backward); `rule` is a short stable identifier:
//! `shape`, `index-range`, `placement`, `duplicate`, `missing`, `order`, `missing-receive`,
//! `unmatched-comm`, `missing-wait`, `channel-order`, `reduce-grad`, `deadlock`.
struct Violation {
  int rank = -1;        //!< the rank whose list holds the action, or -1
  int position = -1;    //!< its index in that list, or -1
  Action action;        //!< the action the violation is about
  std::string rule;     //!< the rule's identifier (see above)
  std::string message;  //!< a full sentence: where, what, and the rule it breaks
};

namespace detail {

//! `n` with its digits in groups of three: 1999990 → "1,999,990".
inline std::string group_digits(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace detail

//! Everything `check` found; empty when the schedule is valid. A schedule can break a rule
//! billions of times (a file naming a million microbatches and a million slices misses 10^12
//! forwards), so the report keeps the first `max_recorded` violations in `violations` and
//! counts the rest in `omitted`; `total()` is the number found.
struct ValidationReport {
  //! How many violations are kept with their messages.
  static constexpr std::size_t max_recorded = 1000;

  std::vector<Violation> violations;  //!< the first violations found, at most max_recorded
  std::uint64_t omitted = 0;          //!< violations found beyond those kept

  //! True when no violation was found: the schedule is valid.
  bool ok() const noexcept { return violations.empty() && omitted == 0; }
  //! Every violation found, kept or not.
  std::uint64_t total() const noexcept {
    return detail::saturating_add(static_cast<std::uint64_t>(violations.size()), omitted);
  }
  //! True when no further violation would be kept.
  bool full() const noexcept { return violations.size() >= max_recorded; }
  //! Keeps `v` while there is room, else counts it.
  void add(Violation v) {
    if (full()) {
      omitted = detail::saturating_add(omitted, 1);
    } else {
      violations.push_back(std::move(v));
    }
  }
  //! True when some kept violation has this rule identifier.
  bool has(std::string_view rule) const {
    return std::any_of(violations.begin(), violations.end(),
                       [&](const Violation& v) { return v.rule == rule; });
  }
  //! The first `max` messages, one per line, and a count of the rest ("… and 1,999,990 more").
  std::string summary(std::size_t max = 8) const {
    std::string out;
    for (std::size_t i = 0; i < violations.size() && i < max; ++i)
      out += (i ? "\n" : "") + violations[i].message;
    const std::uint64_t shown = std::min<std::uint64_t>(violations.size(), max);
    if (total() > shown) out += "\n… and " + detail::group_digits(total() - shown) + " more";
    return out;
  }
  //! "schedule 'NAME' is invalid (N problems):" and the summary.
  std::string message(const std::string& schedule_name, std::size_t max = 8) const {
    const std::uint64_t n = total();
    return "schedule '" + schedule_name + "' is invalid (" + detail::group_digits(n) + " problem" +
           (n == 1 ? "" : "s") + "):\n" + summary(max);
  }
};

namespace detail {

inline std::string where(int rank, int position) {
  return "rank " + std::to_string(rank) + " position " + std::to_string(position);
}

inline std::string stage_count_text(int stages) {
  return std::to_string(stages) + (stages == 1 ? " stage" : " stages") + " (0.." +
         std::to_string(stages - 1) + ")";
}

//! What one unit (stage, microbatch, slice) holds: counts per kind and its W parts.
struct UnitSeen {
  int f = 0, b = 0, i = 0, r = 0;
  std::vector<int> w_parts;  //!< the part index of every W of the unit, in list order
  friend bool operator==(const UnitSeen&, const UnitSeen&) = default;
};

// The exactly-once rules for one unit; `emit(rule, make_message)` is called per violation
// (make_message builds the text only when the report keeps it).
template <class Emit>
void unit_rules(const Schedule& s, UnitKey key, const UnitSeen& u, Emit&& emit) {
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
      return unit(OpKind::R) + " appears " + std::to_string(u.r) +
             " times; a checkpointed forward is recomputed at most once.";
    });
}

// The structural checks: shape, ranges, placement, and exactly-once counts. Costs what the
// schedule's actions cost (plus at most max_recorded absent units), whatever its dimensions.
inline void check_units(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  auto add = [&](int r, int i, const Action& a, const char* rule, auto make_message) {
    if (rep.full()) {
      rep.add({});
      return;
    }
    rep.add({r, i, a, rule, make_message()});
  };
  if (s.rank_count() != p.ranks || s.placement.ranks() != p.ranks ||
      s.placement.stages() != p.stages || p.stages < 1 || p.microbatches < 1 || p.slices < 1) {
    add(-1, -1, Action{}, "shape", [&] {
      return "the schedule's shape is inconsistent: problem says ranks = " +
             std::to_string(p.ranks) + ", stages = " + std::to_string(p.stages) +
             ", microbatches = " + std::to_string(p.microbatches) +
             ", slices = " + std::to_string(p.slices) + "; it has " +
             std::to_string(s.rank_count()) + " rank lists and a placement of " +
             std::to_string(s.placement.stages()) + " stages over " +
             std::to_string(s.placement.ranks()) + " ranks; all must agree and be positive.";
    });
    return;
  }
  UnitTable<UnitSeen> seen(p, s.action_count());
  auto in_range = [&](int st, int mb, int sl) {
    return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      auto unit_check = [&](int st, int mb, int sl) {
        if (!in_range(st, mb, sl)) {
          add(r, i, a, "index-range", [&] {
            return to_string(a) + " at " + where(r, i) + " is out of range: stages run 0.." +
                   std::to_string(p.stages - 1) + ", microbatches 0.." +
                   std::to_string(p.microbatches - 1) + ", slices 0.." +
                   std::to_string(p.slices - 1) + ".";
          });
          return false;
        }
        if (!p.has_unit(st, mb)) {
          add(r, i, a, "index-range", [&] {
            return to_string(a) + " at " + where(r, i) + " runs microbatch " + std::to_string(mb) +
                   " on stage " + std::to_string(st) + " of replica " +
                   std::to_string(p.replica_of_stage(st)) + ", but microbatch " +
                   std::to_string(mb) + " runs through replica " +
                   std::to_string(p.replica_of_microbatch(mb)) +
                   " (microbatch m through replica m mod " + std::to_string(p.replicas) +
                   ", stages " + std::to_string(p.replica_of_microbatch(mb) * p.replica_stages()) +
                   ".." +
                   std::to_string((p.replica_of_microbatch(mb) + 1) * p.replica_stages() - 1) +
                   ").";
          });
          return false;
        }
        if (s.placement.rank_of(st) != r) {
          add(r, i, a, "placement", [&] {
            return to_string(a) + " at " + where(r, i) + " runs stage " + std::to_string(st) +
                   ", which the placement (" + s.placement.describe() + ") puts on rank " +
                   std::to_string(s.placement.rank_of(st)) +
                   "; each stage lives on exactly one rank and all its actions run there.";
          });
        }
        return true;
      };
      if (a.kind == OpKind::Overlap) {
        if (unit_check(a.stage, a.microbatch, a.slice)) ++seen.at(a.stage, a.microbatch, a.slice).f;
        if (unit_check(a.b_stage, a.b_microbatch, a.b_slice))
          ++seen.at(a.b_stage, a.b_microbatch, a.b_slice).b;
        continue;
      }
      if (is_comm(a.kind) || is_wait_send(a.kind)) {
        if (!in_range(a.stage, a.microbatch, a.slice)) {
          unit_check(a.stage, a.microbatch, a.slice);
          continue;
        }
        const OpKind k = send_of_wait(a.kind);  // a WAIT_SEND names its send's unit
        const bool fwd = k == OpKind::SendF || k == OpKind::RecvF;
        const bool send = k == OpKind::SendF || k == OpKind::SendB;
        const long long peer = a.stage + ((fwd == send) ? 1LL : -1LL);
        if (peer < 0 || peer >= p.stages) {
          add(r, i, a, "index-range", [&] {
            return to_string(a) + " at " + where(r, i) + (send ? " sends to" : " receives from") +
                   " stage " + std::to_string(peer) + ", which does not exist: the schedule has " +
                   stage_count_text(p.stages) +
                   "; forward data flows from stage s to s+1 and gradients from s to s-1.";
          });
          continue;
        }
        if (p.replica_of_stage(static_cast<int>(peer)) != p.replica_of_stage(a.stage)) {
          add(r, i, a, "index-range", [&] {
            return to_string(a) + " at " + where(r, i) + (send ? " sends to" : " receives from") +
                   " stage " + std::to_string(peer) + " of replica " +
                   std::to_string(p.replica_of_stage(static_cast<int>(peer))) + ", but stage " +
                   std::to_string(a.stage) + " belongs to replica " +
                   std::to_string(p.replica_of_stage(a.stage)) +
                   "; data flows only between neighbouring stages of one replica.";
          });
          continue;
        }
        unit_check(a.stage, a.microbatch, a.slice);
        if (s.placement.rank_of(static_cast<int>(peer)) == s.placement.rank_of(a.stage))
          add(r, i, a, "placement", [&] {
            return to_string(a) + " at " + where(r, i) + " communicates between stages " +
                   std::to_string(a.stage) + " and " + std::to_string(peer) +
                   ", which are both on rank " + std::to_string(s.placement.rank_of(a.stage)) +
                   "; only cross-rank neighbours send and receive.";
          });
        continue;
      }
      if (a.part < 0 || (a.part != 0 && a.kind != OpKind::W)) {
        add(r, i, a, "index-range", [&] {
          return to_string(a) + " at " + where(r, i) + " has part " + std::to_string(a.part) +
                 "; only W actions have parts, numbered from 0.";
        });
        continue;
      }
      if (!unit_check(a.stage, a.microbatch, a.slice)) continue;
      UnitSeen& u = seen.at(a.stage, a.microbatch, a.slice);
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
          break;
        case OpKind::W:
          u.w_parts.push_back(a.part);
          break;
        default:
          break;
      }
    }
  }

  // Exactly-once rules, per unit in (stage, microbatch, slice) order. The walk over every unit
  // of the problem stops once the report is full; the rest is counted without a walk: a unit
  // no action names misses its forward and its backward (two violations), and the units some
  // action names are visited directly.
  auto keep = [&](UnitKey k, const UnitSeen& u) {
    unit_rules(s, k, u, [&](const char* rule, auto make_message) {
      add(s.placement.rank_of(k.stage), -1, Action::make(OpKind::F, k.stage, k.microbatch, k.slice),
          rule, make_message);
    });
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
    unit_rules(s, k, u, [&](const char*, auto) { rep.add({}); });
  });
  const std::uint64_t after = step_unit_count(p) - walked;
  const std::uint64_t absent = after - std::min(after, named_after);
  rep.omitted = saturating_add(rep.omitted, absent > UINT64_MAX / 2 ? UINT64_MAX : 2 * absent);
}

// Communication must come in matched pairs (each send has exactly one receive). Messages to
// or from a stage that does not exist are check_units' to report.
inline void check_comm_pairs(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  struct Count {
    int send = 0, recv = 0;
    int send_rank = -1, send_pos = -1, recv_rank = -1, recv_pos = -1;
    bool operator==(const Count&) const = default;
  };
  // Keyed by the stage that produced the data: SendF(s) / RecvF(s+1) carry F(s); SendB(s) /
  // RecvB(s-1) carry B(s).
  UnitTable<Count> fwd(p, s.action_count()), bwd(p, s.action_count());
  auto ok = [&](long long st, int mb, int sl) {
    return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_comm(a.kind)) continue;
      const bool forward = a.kind == OpKind::SendF || a.kind == OpKind::RecvF;
      const bool send = a.kind == OpKind::SendF || a.kind == OpKind::SendB;
      const long long producer = send ? a.stage : a.stage + (forward ? -1LL : 1LL);
      const long long consumer = forward ? producer + 1 : producer - 1;
      if (!ok(producer, a.microbatch, a.slice) || !ok(consumer, a.microbatch, a.slice)) continue;
      if (p.replica_of_stage(static_cast<int>(producer)) !=
          p.replica_of_stage(static_cast<int>(consumer)))
        continue;  // check_units reports a message between replicas
      Count& c = (forward ? fwd : bwd).at(static_cast<int>(producer), a.microbatch, a.slice);
      if (send) {
        ++c.send;
        c.send_rank = r;
        c.send_pos = i;
      } else {
        ++c.recv;
        c.recv_rank = r;
        c.recv_pos = i;
      }
    }
  for (int dir = 0; dir < 2; ++dir)
    (dir == 0 ? fwd : bwd).for_each_stored([&](UnitKey k, const Count& c) {
      const int st = k.stage, mb = k.microbatch, sl = k.slice;
      Action send = Action::make(dir == 0 ? OpKind::SendF : OpKind::SendB, st, mb, sl);
      Action recv = Action::make(dir == 0 ? OpKind::RecvF : OpKind::RecvB,
                                 dir == 0 ? st + 1 : st - 1, mb, sl);
      if (rep.full()) {
        if (c.send > 1 || c.recv > 1 || (c.send == 1 && c.recv == 0)) rep.add({});
        return;
      }
      if (c.send > 1 || c.recv > 1)
        rep.add({c.send > 1 ? c.send_rank : c.recv_rank, c.send > 1 ? c.send_pos : c.recv_pos,
                 c.send > 1 ? send : recv, "duplicate",
                 to_string(c.send > 1 ? send : recv) + " appears " +
                     std::to_string(c.send > 1 ? c.send : c.recv) +
                     " times; each message is sent once and received once."});
      else if (c.send == 1 && c.recv == 0)
        rep.add({c.send_rank, c.send_pos, send, "unmatched-comm",
                 to_string(send) + " at " + where(c.send_rank, c.send_pos) +
                     " is never received; add " + to_string(recv) + " on rank " +
                     std::to_string(s.placement.rank_of(recv.stage)) + "."});
    });
}

// When a schedule has WAIT_SENDs (PyTorch 2.15 requires one per send), every send needs
// exactly one, later on its rank, and every WAIT_SEND needs its send (the graph reports a
// WAIT_SEND without a send or before it). A schedule with no WAIT_SEND at all completes its
// sends at the end of the step, as pipesched's transports do and its files before waits had.
inline void check_send_waits(const Schedule& s, ValidationReport& rep) {
  bool any = false;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      any = any || is_wait_send(a.kind);
  if (!any) return;
  const Problem& p = s.problem;
  struct Seen {
    int waits = 0, wait_rank = -1, wait_pos = -1;
    bool operator==(const Seen&) const = default;
  };
  UnitTable<Seen> fwd(p, s.action_count()), bwd(p, s.action_count());
  auto ok = [&](const Action& a) {
    return a.stage >= 0 && a.stage < p.stages && a.microbatch >= 0 &&
           a.microbatch < p.microbatches && a.slice >= 0 && a.slice < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_wait_send(a.kind) || !ok(a)) continue;
      Seen& w = (a.kind == OpKind::WaitSendF ? fwd : bwd).at(a.stage, a.microbatch, a.slice);
      if (++w.waits == 1) {
        w.wait_rank = r;
        w.wait_pos = i;
      }
    }
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if ((a.kind != OpKind::SendF && a.kind != OpKind::SendB) || !ok(a)) continue;
      const Seen& w = (a.kind == OpKind::SendF ? fwd : bwd).get(a.stage, a.microbatch, a.slice);
      const Action wait = Action::make(wait_of_send(a.kind), a.stage, a.microbatch, a.slice);
      if (w.waits == 0) {
        if (rep.full()) {
          rep.add({});
          continue;
        }
        rep.add({r, i, a, "missing-wait",
                 to_string(a) + " at " + where(r, i) + " has no " + to_string(wait) +
                     ": the schedule completes its sends with WAIT_SEND actions (PyTorch 2.15 "
                     "runs a send's buffer until its wait), so every send needs one; add " +
                     to_string(wait) + " after it on rank " + std::to_string(r) +
                     ", or remove every WAIT_SEND to complete all sends at the end of the "
                     "step."});
      } else if (w.waits > 1) {
        if (rep.full()) {
          rep.add({});
          continue;
        }
        rep.add({w.wait_rank, w.wait_pos, wait, "duplicate",
                 to_string(wait) + " appears " + std::to_string(w.waits) +
                     " times; each send is waited for once."});
      }
    }
}

// Every channel (sender rank → receiver rank) must deliver in order: the receiver's receives
// from a rank come in the order of that rank's sends to it. PyTorch (and MPI or NCCL without
// tags) match the messages between two ranks in the order they are posted, so a receive out
// of that order takes another message's data, and the step computes wrong gradients without
// failing. Reports the first out-of-order message of each channel.
inline void check_channels(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  const int n = s.rank_count();
  // A message: its direction and the stage that produced it, microbatch and slice.
  struct Message {
    bool forward;
    int producer, microbatch, slice;
    int rank, position;  // where the send (or receive) stands
    bool same(const Message& o) const {
      return forward == o.forward && producer == o.producer && microbatch == o.microbatch &&
             slice == o.slice;
    }
  };
  auto peer_rank = [&](int stage) -> int {
    return stage >= 0 && stage < p.stages ? s.placement.rank_of(stage) : -1;
  };
  // Per channel (from, to): the sends in the sender's list order, the receives in the
  // receiver's. Channels are kept sparse: a schedule has about 2 per rank.
  struct Channel {
    int from, to;
    std::vector<Message> sends, recvs;
  };
  std::vector<Channel> channels;
  std::vector<std::vector<std::pair<int, std::size_t>>> by_from(static_cast<std::size_t>(n));
  auto channel = [&](int from, int to) -> Channel& {
    for (const auto& [t, idx] : by_from[static_cast<std::size_t>(from)])
      if (t == to) return channels[idx];
    by_from[static_cast<std::size_t>(from)].push_back({to, channels.size()});
    channels.push_back({from, to, {}, {}});
    return channels.back();
  };
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_comm(a.kind)) continue;
      const bool forward = a.kind == OpKind::SendF || a.kind == OpKind::RecvF;
      const bool send = a.kind == OpKind::SendF || a.kind == OpKind::SendB;
      const long long other = a.stage + (forward == send ? 1LL : -1LL);
      if (other < 0 || other >= p.stages) continue;  // check_units reports it
      const int peer = peer_rank(static_cast<int>(other));
      if (peer < 0 || peer >= n || peer == r) continue;
      const int producer = send ? a.stage : static_cast<int>(other);
      Message m{forward, producer, a.microbatch, a.slice, r, i};
      if (send)
        channel(r, peer).sends.push_back(m);
      else
        channel(peer, r).recvs.push_back(m);
    }
  for (const Channel& c : channels) {
    const std::size_t common = std::min(c.sends.size(), c.recvs.size());
    for (std::size_t j = 0; j < common; ++j) {
      if (c.sends[j].same(c.recvs[j])) continue;
      if (rep.full()) {
        rep.add({});
        break;
      }
      const Message& sm = c.sends[j];
      const Message& rm = c.recvs[j];
      auto send_text = [](const Message& m) {
        return to_string(Action::make(m.forward ? OpKind::SendF : OpKind::SendB, m.producer,
                                      m.microbatch, m.slice));
      };
      const Action recv = s.ranks[rm.rank][rm.position];
      std::string expected;
      for (std::size_t q = j; q < c.recvs.size(); ++q)
        if (c.recvs[q].same(sm)) {
          expected = " (it comes later, at position " + std::to_string(c.recvs[q].position) + ")";
          break;
        }
      const std::string nth = std::to_string(j + 1);
      rep.add({rm.rank, rm.position, recv, "channel-order",
               "channel rank " + std::to_string(c.from) + " -> rank " + std::to_string(c.to) +
                   " is not first-in first-out: its message " + nth + " is " + send_text(sm) +
                   " (rank " + std::to_string(c.from) + " position " + std::to_string(sm.position) +
                   "), but receive " + nth + " from rank " + std::to_string(c.from) + " on rank " +
                   std::to_string(c.to) + " is " + to_string(recv) + " at " +
                   where(rm.rank, rm.position) +
                   "; PyTorch and MPI match the messages between two ranks in the order they are "
                   "posted, so the receive for " +
                   send_text(sm) + expected +
                   " must come first: post receives in the order of "
                   "the sends."});
      break;
    }
  }
}

// PyTorch 2.15 runs one gradient reduction at a time per rank: each REDUCE_GRAD is completed by
// the WAIT_REDUCE_GRAD of the same stage before the next REDUCE_GRAD, and none is left open.
inline void check_gradient_reductions(const Schedule& s, ValidationReport& rep) {
  for (int r = 0; r < s.rank_count(); ++r) {
    int pending = -1, pending_pos = -1;  // the stage whose reduction is open, and where
    const auto& list = s.ranks[r];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (a.kind == OpKind::ReduceGrad) {
        if (pending >= 0)
          rep.add({r, i, a, "reduce-grad",
                   to_string(a) + " at " + where(r, i) + " starts a reduction while stage " +
                       std::to_string(pending) + "'s (position " + std::to_string(pending_pos) +
                       ") is open; a rank runs one gradient reduction at a time, so put " +
                       std::to_string(pending) + "WAIT_REDUCE_GRAD before it."});
        pending = a.stage;
        pending_pos = i;
      } else if (a.kind == OpKind::WaitReduceGrad) {
        if (pending != a.stage)
          rep.add({r, i, a, "reduce-grad",
                   to_string(a) + " at " + where(r, i) + " waits for a reduction of stage " +
                       std::to_string(a.stage) + ", but " +
                       (pending < 0 ? std::string("none is open")
                                    : "the open one is stage " + std::to_string(pending) + "'s") +
                       "; each WAIT_REDUCE_GRAD follows the REDUCE_GRAD of its stage."});
        pending = -1;
      }
    }
    if (pending >= 0)
      rep.add({r, pending_pos, list[static_cast<std::size_t>(pending_pos)], "reduce-grad",
               to_string(list[static_cast<std::size_t>(pending_pos)]) + " at " +
                   where(r, pending_pos) + " is never waited for; add " + std::to_string(pending) +
                   "WAIT_REDUCE_GRAD after it on rank " + std::to_string(r) + "."});
  }
}

// Dry run: every rank runs its list in order; report ranks that can never finish.
inline void check_deadlock(const DependencyGraph& g, ValidationReport& rep) {
  ReplayResult res = replay(g, [](int) {});
  if (!res.complete) rep.add({-1, -1, Action{}, "deadlock", describe_deadlock(g, res)});
}

}  // namespace detail

//! Checks every rule and returns all violations found (the dry run only when the
//! schedule's units and order are consistent, so a deadlock report is about order alone).
inline ValidationReport check(const Schedule& s) {
  ValidationReport rep;
  detail::check_units(s, rep);
  if (rep.has("shape")) return rep;
  if (s.has_comm()) {
    detail::check_comm_pairs(s, rep);
    detail::check_channels(s, rep);
  }
  detail::check_send_waits(s, rep);
  detail::check_gradient_reductions(s, rep);
  detail::DependencyGraph g(s);
  for (const auto& issue : g.issues())
    rep.add({issue.at.rank, issue.at.position, s.ranks[issue.at.rank][issue.at.position],
             issue.rule, issue.message});
  rep.omitted = detail::saturating_add(rep.omitted, g.issues_omitted());
  if (rep.ok()) detail::check_deadlock(g, rep);
  return rep;
}

//! Throws invalid_schedule with every violation's message when `s` breaks a rule.
inline void validate(const Schedule& s) {
  ValidationReport rep = check(s);
  if (!rep.ok()) throw invalid_schedule(rep.message(s.name));
}

}  // namespace pipesched
