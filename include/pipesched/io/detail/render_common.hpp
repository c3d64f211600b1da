// What the schedule pictures (SVG timeline, Chrome trace, text grid) and the command's reports
// share: the check that a simulation result belongs to the schedule being drawn, the letters
// and labels of actions, and (from io/json.hpp) UTF-8 clean-up for user text. Time, memory and
// percentage figures are core/format.hpp's.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/json.hpp"

namespace pipesched::detail {

//! Throws invalid_schedule unless `sim` could have come from simulating `s`: one timing per
//! action, finite times with end >= start, and no deadlock (whose timing is incomplete, so a
//! picture of it would be wrong). `what` names the picture in the message.
inline void check_simulation(const Schedule& s, const SimulationResult& sim, const char* what) {
  const std::string head = std::string("cannot draw ") + what + " of schedule '" + s.name + "': ";
  auto bad = [&](const Message& why) { throw invalid_schedule(head + why); };
  if (sim.deadlock)
    bad("its simulation deadlocked, so only part of it has times (" + sim.deadlock_report +
        "); fix the schedule (" + api_name("pipesched::check", "pipesched::check") +
        " says where) and simulate it again.");
  const Message hint = "; pass the result of " +
                       api_name("pipesched::simulate", "pipesched::simulate") +
                       " on this same schedule.";
  if (sim.timing.size() != s.ranks.size() || sim.ranks.size() != s.ranks.size())
    bad("the simulation result has " + std::to_string(sim.timing.size()) + " timing lists and " +
        std::to_string(sim.ranks.size()) + " rank summaries but the " + "schedule has " +
        std::to_string(s.ranks.size()) + " ranks" + hint);
  if (!std::isfinite(sim.makespan) || sim.makespan < 0)
    bad("the simulation's makespan " + std::to_string(sim.makespan) + " is not a finite time >= 0" +
        hint);
  if (!std::isfinite(sim.bubble_ratio) || !std::isfinite(sim.peak_memory_max))
    bad("the simulation's bubble ratio or peak memory is not finite" + hint);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    if (sim.timing[r].size() != s.ranks[r].size())
      bad("rank " + std::to_string(r) + " has " + std::to_string(s.ranks[r].size()) +
          " actions but " + std::to_string(sim.timing[r].size()) + " timings" + hint);
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const ActionTiming& t = sim.timing[r][i];
      if (!std::isfinite(t.start) || !std::isfinite(t.end) || t.start < 0 || t.end < t.start)
        bad("action " + std::to_string(i) + " of rank " + std::to_string(r) + " has start " +
            std::to_string(t.start) + " and end " + std::to_string(t.end) +
            "; times must be finite with 0 <= start <= end" + hint);
    }
    for (const MemoryPoint& p : sim.ranks[r].memory)
      if (!std::isfinite(p.time) || !std::isfinite(p.value))
        bad("rank " + std::to_string(r) + "'s memory curve holds a value that is not finite" +
            hint);
    if (!std::isfinite(sim.ranks[r].peak_memory))
      bad("rank " + std::to_string(r) + "'s peak memory is not finite" + hint);
  }
}

// The figures of tables and reports (core/format.hpp), by their old names.
using pipesched::format_memory;
using pipesched::format_percent;
using pipesched::format_time;

//! The one-letter name of a kind in the text grid and the SVG legend: F, B, I, W, R, O for
//! Overlap, '>' for a send or its wait, '<' for a receive, '*' for an action on a whole stage
//! (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD), 'v' for an OFFLOAD (to host memory), '^'
//! for a RELOAD, 'S' for a VOCAB_F and 'T' for a VOCAB_B (the vocabulary passes' names in
//! Yeung et al.), '.' for idle.
constexpr char kind_letter(OpKind k) noexcept {
  switch (k) {
    case OpKind::F:
      return 'F';
    case OpKind::B:
      return 'B';
    case OpKind::I:
      return 'I';
    case OpKind::W:
      return 'W';
    case OpKind::R:
      return 'R';
    case OpKind::Overlap:
      return 'O';
    case OpKind::SendF:
    case OpKind::SendB:
    case OpKind::WaitSendF:
    case OpKind::WaitSendB:
      return '>';
    case OpKind::RecvF:
    case OpKind::RecvB:
      return '<';
    case OpKind::Unshard:
    case OpKind::Reshard:
    case OpKind::ReduceGrad:
    case OpKind::WaitReduceGrad:
      return '*';
    case OpKind::Offload:
      return 'v';
    case OpKind::Reload:
      return '^';
    case OpKind::VocabF:
      return 'S';
    case OpKind::VocabB:
      return 'T';
    case OpKind::EmbedF:
      return 'E';
    case OpKind::EmbedB:
      return 'G';
    case OpKind::Idle:
      return '.';
  }
  return '?';
}

//! The short label of an action's work unit: its microbatch, with `.slice` when the problem
//! cuts sequences into slices; an Overlap shows "forward/backward" microbatches.
inline std::string unit_label(const Action& a, int slices) {
  auto one = [&](int mb, int slice) {
    std::string s = std::to_string(mb);
    if (slices > 1) s += "." + std::to_string(slice);
    return s;
  };
  if (a.kind == OpKind::Overlap)
    return one(a.microbatch, a.slice) + "/" + one(a.b_microbatch, a.b_slice);
  return one(a.microbatch, a.slice);
}

}  // namespace pipesched::detail
