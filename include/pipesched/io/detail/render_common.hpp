// What the schedule pictures (SVG timeline, Chrome trace, text grid) and the command's reports
// share: the check that a simulation result belongs to the schedule being drawn,
// locale-independent number formatting, time, memory and percentage figures in a cost model's
// units, and (from io/json.hpp) UTF-8 clean-up for user text.
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

//! `ratio` (0.2) as a percentage with one decimal ("20.0%").
inline std::string format_percent(double ratio) {
  std::string s = fixed_number(ratio * 100.0, 1);
  if (s.find('.') == std::string::npos) s += ".0";
  return s + "%";
}

//! `number` (the figure `v` written out) followed by `unit`, singular for exactly 1 ("1 unit",
//! "1 microbatch", "2 units"); a bare number for an empty unit.
inline std::string with_unit(std::string number, double v, const std::string& unit) {
  if (unit.empty()) return number;
  if (v != 1 || unit.size() < 2 || unit.back() != 's') return number + " " + unit;
  // English plurals in -es after a sibilant ("microbatches", "boxes"); the rest in -s.
  auto ends = [&](std::string_view tail) {
    return unit.size() > tail.size() &&
           unit.compare(unit.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool es = ends("ches") || ends("shes") || ends("sses") || ends("xes") || ends("zes");
  return number + " " + unit.substr(0, unit.size() - (es ? 2 : 1));
}

//! A memory figure in a cost model's unit: with unit "bytes" the value is a byte count
//! written with a binary prefix ("1.5 GiB"); any other unit is written after the number
//! ("2.5 microbatches", singular for 1), an empty one not at all. `digits` as for
//! format_number.
inline std::string format_memory(double v, const std::string& unit, int digits = 4) {
  if (unit != "bytes") return with_unit(format_number(v, digits), v, unit);
  static constexpr const char* prefixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = v;
  int k = 0;
  while (std::fabs(x) >= 1024.0 && k < 6) {
    x /= 1024.0;
    ++k;
  }
  return format_number(x, digits) + " " + prefixes[k];
}

//! A time figure in a cost model's unit: with unit "seconds" (or "s") the value is written in
//! seconds from 1 s up ("1.5 s"), in milliseconds or microseconds between 1 µs and 1 s
//! ("447 ms", "1.205 ms", "250 µs": `digits` significant digits, the prefix chosen
//! after rounding, so 0.99999 s is "1 s"), below 1 µs in seconds again ("5e-07 s"); any
//! other unit is written after the number ("44 units", singular for 1), an empty one not at
//! all (a bare number). `digits` as for format_number.
inline std::string format_time(double v, const std::string& unit, int digits = 4) {
  if (unit != "seconds" && unit != "s") return with_unit(format_number(v, digits), v, unit);
  // `v` / `scale` rounded to `digits` as written, and whether it rounds to 1000 or more (then
  // the next larger prefix says it: "1 s", not "1000 ms").
  auto in = [&](double scale, std::string& number) {
    number = format_number(v / scale, digits);
    double rounded = 0;
    const bool minus = !number.empty() && number[0] == '-';
    std::from_chars(number.data() + minus, number.data() + number.size(), rounded);
    return rounded;
  };
  const double a = std::fabs(v);
  std::string number;
  if (std::isfinite(a) && a < 1 && a > 0) {
    if (a >= 1e-3 * (1 - 1e-12) && in(1e-3, number) < 1000) return number + " ms";
    if (a >= 1e-3 * (1 - 1e-12)) return format_number(v, digits) + " s";
    if (in(1e-6, number) >= 1000) {
      in(1e-3, number);
      return number + " ms";
    }
    if (in(1e-6, number) >= 1) return number + " \xC2\xB5s";
  }
  return format_number(v, digits) + " s";
}

//! The one-letter name of a kind in the text grid and the SVG legend: F, B, I, W, R, O for
//! Overlap, '>' for a send or its wait, '<' for a receive, '*' for an action on a whole stage
//! (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD), '.' for idle.
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
