// Terminal pictures of a schedule: a grid with one line per rank and time quantised to
// columns (from a simulation), and a plain list of each rank's action strings.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/detail/render_common.hpp"

namespace pipesched {

//! How render_text_grid quantises time and decorates the cells.
struct TextGridOptions {
  //! Time columns across the makespan; 0 chooses them: two columns per shortest action (so
  //! its letter and microbatch digit fit), or one when that would pass `max_columns`,
  //! capped at `max_columns`. At most 100000.
  int columns = 0;
  int max_columns = 160;  //!< cap on the automatic choice, 1 to 100000
  bool color = false;     //!< ANSI colours per kind (for terminals that show them)
  //! Unit written after memory figures; "bytes" writes byte counts with binary prefixes.
  std::string memory_unit = "units";
  //! Unit of the times (makespan, column width): "seconds" writes them as seconds ("447 ms", "1.5
  //! s"; detail::format_time), any other text is written after them ("44 units"), empty leaves them
  //! bare numbers.
  std::string time_unit;
};

namespace detail {

//! ANSI SGR colour code of a kind in the text grid.
constexpr const char* ansi_colour(OpKind k) noexcept {
  switch (k) {
    case OpKind::F:
      return "34";  // blue
    case OpKind::B:
      return "32";  // green
    case OpKind::I:
      return "36";  // cyan
    case OpKind::W:
      return "33";  // yellow
    case OpKind::R:
      return "35";  // magenta
    case OpKind::Overlap:
      return "1;34";  // bold blue
    default:
      return "90";  // grey: sends and receives
  }
}

inline int grid_columns(const Schedule& s, const SimulationResult& sim,
                        const TextGridOptions& opt) {
  if (opt.columns < 0 || opt.columns > 100000)
    throw invalid_problem("TextGridOptions.columns = " + std::to_string(opt.columns) +
                          " is out of range; use 0 (chosen from the schedule) or 1 to 100000.");
  if (opt.max_columns < 1 || opt.max_columns > 100000)
    throw invalid_problem("TextGridOptions.max_columns = " + std::to_string(opt.max_columns) +
                          " is out of range; use 1 to 100000.");
  if (opt.columns > 0) return opt.columns;
  if (!(sim.makespan > 0)) return 0;
  double shortest = sim.makespan;
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const double d = sim.timing[r][i].end - sim.timing[r][i].start;
      if (s.ranks[r][i].kind != OpKind::Idle && d > 0) shortest = std::min(shortest, d);
    }
  // The small allowance keeps a makespan that is a whole number of shortest actions from
  // gaining a column to rounding.
  const double fit = std::ceil(sim.makespan / shortest - 1e-9);
  if (2 * fit <= opt.max_columns) return static_cast<int>(2 * fit);
  return static_cast<int>(std::min(fit, static_cast<double>(opt.max_columns)));
}

}  // namespace detail

//! A terminal picture of `s` as simulated in `sim` (the result of `simulate(s, ...)`): a
//! header line (name, makespan, bubble ratio, peak memory, time per column, in the units of
//! `opt`), then one line per rank, `rank r |cells| peak X`, rank labels padded to one width.
//! Cell c covers time
//! [c·dt, (c+1)·dt), dt = makespan / columns, and shows the action running at its middle:
//! the action's first cell holds its kind letter (F, B, I, W, R, O for Overlap, '>' send,
//! '<' receive), the next ones its microbatch (`m.k` with slices, `f/b` for an Overlap) when
//! the whole number fits in the action's cells, the rest the letter again; '.' is idle.
//! Actions shorter than a column may not show. Throws invalid_schedule when `sim` does not
//! belong to `s` or records a deadlock, and invalid_problem when an option is out of range.
inline std::string render_text_grid(const Schedule& s, const SimulationResult& sim,
                                    const TextGridOptions& opt = {}) {
  using namespace detail;
  check_simulation(s, sim, "a text grid");
  const int cols = grid_columns(s, sim, opt);
  const int nranks = static_cast<int>(s.ranks.size());
  const double dt = cols > 0 ? sim.makespan / cols : 0.0;

  std::string out = sanitize_utf8(s.name.empty() ? "schedule" : s.name);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  out += ": makespan " + format_time(sim.makespan, opt.time_unit) + ", bubble " +
         format_percent(sim.bubble_ratio) + ", peak memory " +
         format_memory(sim.peak_memory_max, opt.memory_unit);
  if (cols > 0) out += ", one column = " + format_time(dt, opt.time_unit);
  out += "\n";

  const std::string widest = "rank " + std::to_string(std::max(nranks - 1, 0));
  for (int r = 0; r < nranks; ++r) {
    std::string label = "rank " + std::to_string(r);
    label.resize(widest.size(), ' ');
    out += label + " |";

    // Which action covers the middle of each cell; a rank's actions run in list order.
    std::vector<int> cell(static_cast<std::size_t>(cols), -1);
    const auto& list = s.ranks[r];
    std::size_t i = 0;
    for (int c = 0; c < cols; ++c) {
      const double mid = (c + 0.5) * dt;
      while (i < list.size() && (list[i].kind == OpKind::Idle || sim.timing[r][i].end <= mid))
        ++i;
      if (i < list.size() && sim.timing[r][i].start <= mid) cell[c] = static_cast<int>(i);
    }

    for (int c = 0; c < cols;) {
      if (cell[c] < 0) {
        out += '.';
        ++c;
        continue;
      }
      int n = 1;
      while (c + n < cols && cell[c + n] == cell[c])
        ++n;
      const Action& a = list[static_cast<std::size_t>(cell[c])];
      const char letter = kind_letter(a.kind);
      std::string run(1, letter);
      const std::string number = unit_label(a, s.problem.slices);
      if (static_cast<int>(number.size()) <= n - 1) run += number;
      run.resize(static_cast<std::size_t>(n), letter);
      if (opt.color)
        out += std::string("\x1b[") + ansi_colour(a.kind) + "m" + run + "\x1b[0m";
      else
        out += run;
      c += n;
    }
    out += "| peak " + format_memory(sim.ranks[r].peak_memory, opt.memory_unit) + "\n";
  }
  return out;
}

//! Each rank's list as action strings, one line per rank: `rank 0: 0F0 0F1 0B0 0B1`, with
//! `-` for an idle slot.
inline std::string render_text_list(const Schedule& s) {
  std::string out;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (const Action& a : s.ranks[r])
      out += " " + (a.kind == OpKind::Idle ? std::string("-") : to_string(a));
    out += "\n";
  }
  return out;
}

}  // namespace pipesched
