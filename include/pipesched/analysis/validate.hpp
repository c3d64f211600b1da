// Validation of a schedule: every unit computed exactly once, indices in range, each stage
// on one rank, dependency order, matched communication, and deadlock freedom (a dry run of
// all ranks).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! One broken rule. `rank`/`position` locate the action (-1 when the violation is about
//! something absent, e.g. a missing backward); `rule` is a short stable identifier:
//! `shape`, `index-range`, `placement`, `duplicate`, `missing`, `order`, `missing-receive`,
//! `unmatched-comm`, `deadlock`.
struct Violation {
  int rank = -1;
  int position = -1;
  Action action;
  std::string rule;
  std::string message;  //!< a full sentence: where, what, and the rule it breaks
};

//! Everything `check` found; empty when the schedule is valid.
struct ValidationReport {
  std::vector<Violation> violations;

  bool ok() const noexcept { return violations.empty(); }
  //! True when some violation has this rule identifier.
  bool has(std::string_view rule) const {
    return std::any_of(violations.begin(), violations.end(),
                       [&](const Violation& v) { return v.rule == rule; });
  }
  //! The first `max` messages, one per line, and a count of the rest.
  std::string summary(std::size_t max = 8) const {
    std::string out;
    for (std::size_t i = 0; i < violations.size() && i < max; ++i)
      out += (i ? "\n" : "") + violations[i].message;
    if (violations.size() > max)
      out += "\n(and " + std::to_string(violations.size() - max) + " more)";
    return out;
  }
};

namespace detail {

inline std::string where(int rank, int position) {
  return "rank " + std::to_string(rank) + " position " + std::to_string(position);
}

// The structural checks: shape, ranges, placement, and exactly-once counts.
inline void check_units(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  auto add = [&](int r, int i, const Action& a, const char* rule, std::string msg) {
    rep.violations.push_back({r, i, a, rule, std::move(msg)});
  };
  if (s.rank_count() != p.ranks || s.placement.ranks() != p.ranks ||
      s.placement.stages() != p.stages || p.stages < 1 || p.microbatches < 1 || p.slices < 1) {
    add(-1, -1, Action{}, "shape",
        "the schedule's shape is inconsistent: problem says ranks = " + std::to_string(p.ranks) +
            ", stages = " + std::to_string(p.stages) + ", microbatches = " +
            std::to_string(p.microbatches) + ", slices = " + std::to_string(p.slices) +
            "; it has " + std::to_string(s.rank_count()) + " rank lists and a placement of " +
            std::to_string(s.placement.stages()) + " stages over " +
            std::to_string(s.placement.ranks()) + " ranks; all must agree and be positive.");
    return;
  }
  const std::size_t units = static_cast<std::size_t>(p.stages) * p.microbatches * p.slices;
  struct Seen {
    int f = 0, b = 0, i = 0, r = 0;
    std::vector<int> w_parts;  // count per part index
  };
  std::vector<Seen> seen(units);
  auto key = [&](int st, int mb, int sl) {
    return (static_cast<std::size_t>(st) * p.microbatches + mb) * p.slices + sl;
  };
  auto in_range = [&](int st, int mb, int sl) {
    return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      auto unit_check = [&](int st, int mb, int sl) {
        if (!in_range(st, mb, sl)) {
          add(r, i, a, "index-range",
              to_string(a) + " at " + where(r, i) + " is out of range: stages run 0.." +
                  std::to_string(p.stages - 1) + ", microbatches 0.." +
                  std::to_string(p.microbatches - 1) + ", slices 0.." +
                  std::to_string(p.slices - 1) + ".");
          return false;
        }
        if (s.placement.rank_of(st) != r) {
          add(r, i, a, "placement",
              to_string(a) + " at " + where(r, i) + " runs stage " + std::to_string(st) +
                  ", which the placement (" + s.placement.describe() + ") puts on rank " +
                  std::to_string(s.placement.rank_of(st)) +
                  "; each stage lives on exactly one rank and all its actions run there.");
        }
        return true;
      };
      if (a.kind == OpKind::Overlap) {
        if (unit_check(a.stage, a.microbatch, a.slice))
          ++seen[key(a.stage, a.microbatch, a.slice)].f;
        if (unit_check(a.b_stage, a.b_microbatch, a.b_slice))
          ++seen[key(a.b_stage, a.b_microbatch, a.b_slice)].b;
        continue;
      }
      if (is_comm(a.kind)) {
        if (!in_range(a.stage, a.microbatch, a.slice)) {
          unit_check(a.stage, a.microbatch, a.slice);
          continue;
        }
        const bool fwd = a.kind == OpKind::SendF || a.kind == OpKind::RecvF;
        const bool send = a.kind == OpKind::SendF || a.kind == OpKind::SendB;
        const int peer = a.stage + ((fwd == send) ? 1 : -1);
        if (peer < 0 || peer >= p.stages) {
          add(r, i, a, "index-range",
              to_string(a) + " at " + where(r, i) + " talks to stage " + std::to_string(peer) +
                  ", which does not exist; forward data flows from stage s to s+1 and "
                  "gradients from s to s-1 within 0.." +
                  std::to_string(p.stages - 1) + ".");
          continue;
        }
        unit_check(a.stage, a.microbatch, a.slice);
        if (s.placement.rank_of(peer) == s.placement.rank_of(a.stage))
          add(r, i, a, "placement",
              to_string(a) + " at " + where(r, i) + " communicates between stages " +
                  std::to_string(a.stage) + " and " + std::to_string(peer) +
                  ", which are both on rank " + std::to_string(s.placement.rank_of(a.stage)) +
                  "; only cross-rank neighbours send and receive.");
        continue;
      }
      if (a.part < 0 || (a.part != 0 && a.kind != OpKind::W)) {
        add(r, i, a, "index-range",
            to_string(a) + " at " + where(r, i) + " has part " + std::to_string(a.part) +
                "; only W actions have parts, numbered from 0.");
        continue;
      }
      if (!unit_check(a.stage, a.microbatch, a.slice)) continue;
      Seen& u = seen[key(a.stage, a.microbatch, a.slice)];
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
          if (static_cast<int>(u.w_parts.size()) <= a.part) u.w_parts.resize(a.part + 1, 0);
          ++u.w_parts[a.part];
          break;
        default:
          break;
      }
    }
  }
  // Exactly-once rules, reported per unit.
  for (int st = 0; st < p.stages; ++st)
    for (int mb = 0; mb < p.microbatches; ++mb)
      for (int sl = 0; sl < p.slices; ++sl) {
        const Seen& u = seen[key(st, mb, sl)];
        const int owner = s.placement.rank_of(st);
        auto unit = [&](OpKind k) { return to_string(Action::make(k, st, mb, sl)); };
        auto missing = [&](std::string msg) {
          rep.violations.push_back(
              {owner, -1, Action::make(OpKind::F, st, mb, sl), "missing", std::move(msg)});
        };
        auto dup = [&](std::string msg) {
          rep.violations.push_back(
              {owner, -1, Action::make(OpKind::F, st, mb, sl), "duplicate", std::move(msg)});
        };
        if (u.f == 0)
          missing("rank " + std::to_string(owner) + " never runs " + unit(OpKind::F) +
                  "; every (stage, microbatch, slice) needs exactly one forward.");
        if (u.f > 1)
          dup(unit(OpKind::F) + " appears " + std::to_string(u.f) +
              " times; every (stage, microbatch, slice) needs exactly one forward.");
        const int w_total = [&] {
          int n = 0;
          for (int c : u.w_parts)
            n += c;
          return n;
        }();
        if (u.b == 0 && u.i == 0)
          missing("rank " + std::to_string(owner) + " never runs the backward of stage " +
                  std::to_string(st) + " microbatch " + std::to_string(mb) +
                  (p.slices > 1 ? " slice " + std::to_string(sl) : std::string()) + " (" +
                  unit(OpKind::B) + ", or " + unit(OpKind::I) + " and " + unit(OpKind::W) +
                  "); every forward needs exactly one backward.");
        if (u.b + u.i > 1)
          dup("the backward of " + unit(OpKind::F) + " appears " + std::to_string(u.b + u.i) +
              " times (" + std::to_string(u.b) + " B, " + std::to_string(u.i) +
              " I); every forward needs exactly one: B, or I followed by W.");
        if (u.b >= 1 && w_total > 0)
          dup(unit(OpKind::W) + " runs although the backward is the full " + unit(OpKind::B) +
              ", which already computes weight gradients; use B alone or I then W.");
        if (u.i >= 1 && w_total == 0)
          missing("rank " + std::to_string(owner) + " runs " + unit(OpKind::I) +
                  " but never its weight gradient " + unit(OpKind::W) +
                  "; a split backward needs both I and W.");
        if (u.i == 0 && u.b == 0 && w_total > 0)
          missing(unit(OpKind::W) + " runs but " + unit(OpKind::I) +
                  " never does; W follows its I.");
        for (std::size_t part = 0; part < u.w_parts.size(); ++part) {
          if (u.w_parts[part] == 0)
            missing("the weight gradient of " + unit(OpKind::F) + " has parts up to " +
                    std::to_string(u.w_parts.size() - 1) + " but part " + std::to_string(part) +
                    " never runs; parts are numbered 0..n-1 and each runs once.");
          else if (u.w_parts[part] > 1)
            dup("W part " + std::to_string(part) + " of " + unit(OpKind::F) + " appears " +
                std::to_string(u.w_parts[part]) + " times; each part runs once.");
        }
        if (u.r > 1)
          dup(unit(OpKind::R) + " appears " + std::to_string(u.r) +
              " times; a checkpointed forward is recomputed at most once.");
      }
}

// Communication must come in matched pairs (each send has exactly one receive).
inline void check_comm_pairs(const Schedule& s, ValidationReport& rep) {
  const Problem& p = s.problem;
  struct Count {
    int send = 0, recv = 0;
    int send_rank = -1, send_pos = -1, recv_rank = -1, recv_pos = -1;
  };
  // key: (direction, producer stage, mb, slice)
  const std::size_t units = static_cast<std::size_t>(p.stages) * p.microbatches * p.slices;
  std::vector<Count> fwd(units), bwd(units);
  auto key = [&](int st, int mb, int sl) {
    return (static_cast<std::size_t>(st) * p.microbatches + mb) * p.slices + sl;
  };
  auto ok = [&](int st, int mb, int sl) {
    return st >= 0 && st < p.stages && mb >= 0 && mb < p.microbatches && sl >= 0 && sl < p.slices;
  };
  for (int r = 0; r < s.rank_count(); ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_comm(a.kind)) continue;
      // Producer stage of the data: SendF(s) / RecvF(s+1) carry F(s); SendB(s) / RecvB(s-1) carry
      // B(s).
      int producer = a.kind == OpKind::RecvF   ? a.stage - 1
                     : a.kind == OpKind::RecvB ? a.stage + 1
                                               : a.stage;
      if (!ok(producer, a.microbatch, a.slice) || !ok(a.stage, a.microbatch, a.slice)) continue;
      Count& c = (a.kind == OpKind::SendF || a.kind == OpKind::RecvF
                      ? fwd
                      : bwd)[key(producer, a.microbatch, a.slice)];
      if (a.kind == OpKind::SendF || a.kind == OpKind::SendB) {
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
    for (int st = 0; st < p.stages; ++st)
      for (int mb = 0; mb < p.microbatches; ++mb)
        for (int sl = 0; sl < p.slices; ++sl) {
          const Count& c = (dir == 0 ? fwd : bwd)[key(st, mb, sl)];
          if (c.send == 0 && c.recv == 0) continue;
          Action send = Action::make(dir == 0 ? OpKind::SendF : OpKind::SendB, st, mb, sl);
          Action recv = Action::make(dir == 0 ? OpKind::RecvF : OpKind::RecvB,
                                     dir == 0 ? st + 1 : st - 1, mb, sl);
          if (c.send > 1 || c.recv > 1)
            rep.violations.push_back({c.send > 1 ? c.send_rank : c.recv_rank,
                                      c.send > 1 ? c.send_pos : c.recv_pos,
                                      c.send > 1 ? send : recv, "duplicate",
                                      to_string(c.send > 1 ? send : recv) + " appears " +
                                          std::to_string(c.send > 1 ? c.send : c.recv) +
                                          " times; each message is sent once and received once."});
          else if (c.send == 1 && c.recv == 0)
            rep.violations.push_back({c.send_rank, c.send_pos, send, "unmatched-comm",
                                      to_string(send) + " at " + where(c.send_rank, c.send_pos) +
                                          " is never received; add " + to_string(recv) +
                                          " on rank " +
                                          std::to_string(s.placement.rank_of(recv.stage)) + "."});
        }
}

// Dry run: every rank runs its list in order; report ranks that can never finish.
inline void check_deadlock(const DependencyGraph& g, ValidationReport& rep) {
  ReplayResult res = replay(g, [](int) {});
  if (!res.complete)
    rep.violations.push_back({-1, -1, Action{}, "deadlock", describe_deadlock(g, res)});
}

}  // namespace detail

//! Checks every rule and returns all violations found (the dry run only when the
//! schedule's units and order are consistent, so a deadlock report is about order alone).
inline ValidationReport check(const Schedule& s) {
  ValidationReport rep;
  detail::check_units(s, rep);
  if (rep.has("shape")) return rep;
  if (s.has_comm()) detail::check_comm_pairs(s, rep);
  detail::DependencyGraph g(s);
  for (const auto& issue : g.issues())
    rep.violations.push_back({issue.at.rank, issue.at.position,
                              s.ranks[issue.at.rank][issue.at.position], issue.rule,
                              issue.message});
  if (rep.ok()) detail::check_deadlock(g, rep);
  return rep;
}

//! Throws invalid_schedule with every violation's message when `s` breaks a rule.
inline void validate(const Schedule& s) {
  ValidationReport rep = check(s);
  if (!rep.ok())
    throw invalid_schedule("schedule '" + s.name + "' is invalid (" +
                           std::to_string(rep.violations.size()) + " problem" +
                           (rep.violations.size() == 1 ? "" : "s") + "):\n" + rep.summary());
}

}  // namespace pipesched
