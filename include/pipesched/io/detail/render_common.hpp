// What the schedule pictures (SVG timeline, Chrome trace, text grid) share: the check that a
// simulation result belongs to the schedule being drawn, locale-independent number formatting,
// memory and percentage figures, and UTF-8 clean-up for user text.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched::detail {

//! Throws invalid_schedule unless `sim` could have come from simulating `s`: one timing per
//! action, finite times with end >= start, and no deadlock (whose timing is incomplete, so a
//! picture of it would be wrong). `what` names the picture in the message.
inline void check_simulation(const Schedule& s, const SimulationResult& sim, const char* what) {
  const std::string head = std::string("cannot draw ") + what + " of schedule '" + s.name + "': ";
  auto bad = [&](const std::string& why) { throw invalid_schedule(head + why); };
  if (sim.deadlock)
    bad("its simulation deadlocked, so only part of it has times (" + sim.deadlock_report +
        "); fix the schedule (pipesched::check says where) and simulate it again.");
  const std::string hint = "; pass the result of pipesched::simulate on this same schedule.";
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

//! `v` with `decimals` digits after the point, trailing zeros (and a bare point) dropped.
//! Locale-independent, unlike printf.
inline std::string fixed_number(double v, int decimals) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  if (ec != std::errc()) {
    auto [end2, ec2] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
    return ec2 == std::errc() ? std::string(buf, end2) : std::string("?");
  }
  std::string out(buf, end);
  if (out.find('.') != std::string::npos) {
    while (out.back() == '0')
      out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  if (out == "-0") out = "0";
  return out;
}

//! A figure for people to read: about four significant digits, no exponent below 10^9.
inline std::string format_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  const double a = std::fabs(v);
  if (a >= 1e9 || (a > 0 && a < 1e-3)) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 4);
    return ec == std::errc() ? std::string(buf, end) : std::string("?");
  }
  const int decimals = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3;
  return fixed_number(v, decimals);
}

//! `ratio` (0.2) as a percentage with one decimal ("20.0%").
inline std::string format_percent(double ratio) {
  std::string s = fixed_number(ratio * 100.0, 1);
  if (s.find('.') == std::string::npos) s += ".0";
  return s + "%";
}

//! A memory figure: with unit "bytes" the value is a byte count written with a binary
//! prefix ("1.5 GiB"); any other unit is written after the number ("2.5 units").
inline std::string format_memory(double v, const std::string& unit) {
  if (unit != "bytes") return format_number(v) + (unit.empty() ? "" : " " + unit);
  static constexpr const char* prefixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = v;
  int k = 0;
  while (std::fabs(x) >= 1024.0 && k < 6) {
    x /= 1024.0;
    ++k;
  }
  return format_number(x) + " " + prefixes[k];
}

//! `text` with every byte sequence that is not valid UTF-8 replaced by U+FFFD, so that
//! XML and JSON readers accept it.
inline std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      len = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
    if (ok) {
      static constexpr std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= least[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

//! The one-letter name of a kind in the text grid and the SVG legend: F, B, I, W, R, O for
//! Overlap, '>' for a send, '<' for a receive, '.' for idle.
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
      return '>';
    case OpKind::RecvF:
    case OpKind::RecvB:
      return '<';
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
