// SVG timeline of a simulated schedule: a row per rank with each action drawn from its start to
// its end, coloured by kind, the rank's memory curve beneath its row, a title with the headline
// figures and a legend. The file is standalone and opens in any browser.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/detail/render_common.hpp"

namespace pipesched {

//! How render_svg lays the picture out.
struct SvgOptions {
  int width = 1200;     //!< picture width in pixels, 300 to 100000
  int row_height = 26;  //!< height of a rank's action row in pixels, 10 to 400
  std::string title;    //!< first title line; empty = the schedule's name
  //! Unit written after memory figures ("units" for the cost models' default unit, "GiB",
  //! ...); "bytes" reads the figures as byte counts and writes them with binary prefixes.
  std::string memory_unit = "units";
  //! Unit of the simulated times: "seconds" writes the makespan and tooltips as seconds
  //! ("0.447 s") and captions the time axis "time (s)"; any other text is written after the
  //! figures ("44 units", axis "time (units)"); empty leaves bare numbers and no caption.
  std::string time_unit;
  bool show_memory = true;  //!< draw each rank's memory curve beneath its row
};

namespace detail {

//! An sRGB colour.
struct Rgb {
  int r = 0, g = 0, b = 0;
};

inline std::string hex(Rgb c) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "#";
  for (int v : {c.r, c.g, c.b}) {
    v = std::clamp(v, 0, 255);
    s += digits[v / 16];
    s += digits[v % 16];
  }
  return s;
}

//! `c` moved towards white by `t` (0 = unchanged, 1 = white).
inline Rgb lighten(Rgb c, double t) {
  auto mix = [t](int v) { return static_cast<int>(std::lround(v + (255 - v) * t)); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

//! Labels go dark on light fills, white on dark ones (relative luminance, sRGB weights).
inline bool is_light(Rgb c) {
  return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b > 150;
}

//! Base colour of a kind. Chosen far apart in hue so kinds stay apart when a later chunk is
//! drawn in a lighter shade.
inline Rgb kind_colour(OpKind k) {
  switch (k) {
    case OpKind::F:
      return {47, 107, 176};  // blue
    case OpKind::B:
      return {62, 150, 62};  // green
    case OpKind::I:
      return {20, 160, 170};  // teal
    case OpKind::W:
      return {236, 132, 32};  // orange
    case OpKind::R:
      return {140, 86, 180};  // purple
    case OpKind::SendF:
    case OpKind::SendB:
    case OpKind::RecvF:
    case OpKind::RecvB:
      return {110, 110, 110};  // grey
    default:
      return {200, 200, 200};
  }
}

//! Text for XML content and attribute values: valid UTF-8, markup characters escaped, and the
//! control characters XML 1.0 forbids (and line breaks, which a one-line text cannot hold)
//! turned into blanks.
inline std::string xml_escape(std::string_view text) {
  std::string out;
  for (char ch : sanitize_utf8(text)) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
        out += ch;
    }
  }
  return out;
}

//! Pixel coordinate with at most two decimals.
inline std::string px(double v) {
  return fixed_number(v, 2);
}

//! Rough width in pixels of `text` in a sans-serif font of size `font` (digits and lowercase
//! letters average a little over half an em). Used only to decide what fits.
inline double text_width(std::string_view text, double font) {
  std::size_t chars = 0;
  for (char c : text)
    chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // count code points
  return static_cast<double>(chars) * font * 0.6;
}

//! A tick step of 1, 2 or 5 × 10^k that puts at most `max_ticks` ticks on [0, span].
inline double tick_step(double span, int max_ticks) {
  if (!(span > 0) || max_ticks < 1) return 1;
  const double raw = span / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

//! Greedy line breaking of `parts` joined by `sep` into lines no wider than `width` pixels.
inline std::vector<std::string> wrap_parts(const std::vector<std::string>& parts,
                                           std::string_view sep, double font, double width) {
  std::vector<std::string> lines;
  std::string line;
  for (const std::string& p : parts) {
    std::string candidate = line.empty() ? p : line + std::string(sep) + p;
    if (!line.empty() && text_width(candidate, font) > width) {
      lines.push_back(line);
      line = p;
    } else {
      line = std::move(candidate);
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

inline void check_svg_options(const SvgOptions& opt) {
  if (opt.width < 300 || opt.width > 100000)
    throw invalid_problem("SvgOptions.width = " + std::to_string(opt.width) +
                          " is out of range; use 300 to 100000 pixels.");
  if (opt.row_height < 10 || opt.row_height > 400)
    throw invalid_problem("SvgOptions.row_height = " + std::to_string(opt.row_height) +
                          " is out of range; use 10 to 400 pixels.");
}

}  // namespace detail

//! Draws `s` as simulated in `sim` (the result of `simulate(s, ...)`): a row per rank with a
//! rectangle per action from its start to its end (F blue, B green, I teal, W orange,
//! R purple, an Overlap half blue half green, sends and receives thin grey bars; actions of a
//! later chunk in a lighter shade of their kind), labelled with its microbatch (`m.k` with
//! slices) where the box is wide enough; idle time shows the row's grey background. Under
//! each row, unless turned off, the rank's memory curve, scaled to the largest peak over
//! ranks, with its peak written beside it. Zero-length actions are not drawn. Each action
//! rectangle has class "action" and a tooltip with the action string and its times.
//! Throws invalid_schedule when `sim` does not belong to `s` or records a deadlock, and
//! invalid_problem when an option is out of range.
inline std::string render_svg(const Schedule& s, const SimulationResult& sim,
                              const SvgOptions& opt = {}) {
  using namespace detail;
  check_svg_options(opt);
  check_simulation(s, sim, "an SVG timeline");

  const int nranks = static_cast<int>(s.ranks.size());
  const double width = opt.width;
  const double row_h = opt.row_height;
  const double mem_h = opt.show_memory ? std::max(12.0, std::round(row_h * 0.8)) : 0.0;
  const double mem_gap = opt.show_memory ? 2.0 : 0.0;
  const double rank_gap = opt.show_memory ? 10.0 : 4.0;
  const double label_font = std::clamp(std::round(row_h * 0.45), 8.0, 12.0);
  const double rank_font = 12, small_font = 10, title_font = 16, figures_font = 12;
  const double pad = 12;

  // The memory scale: from the lowest value drawn (0 unless a cost model frees more than it
  // allocated) to the largest peak over ranks.
  double mem_lo = 0, mem_hi = sim.peak_memory_max;
  for (const RankSummary& rs : sim.ranks) {
    mem_hi = std::max(mem_hi, rs.peak_memory);
    for (const MemoryPoint& p : rs.memory) {
      mem_lo = std::min(mem_lo, p.value);
      mem_hi = std::max(mem_hi, p.value);
    }
  }

  // Left margin: wide enough for "rank N" and "peak X" under it.
  double left = pad + text_width("rank " + std::to_string(std::max(nranks - 1, 0)), rank_font);
  if (opt.show_memory)
    for (const RankSummary& rs : sim.ranks)
      left = std::max(
          left,
          pad + text_width("peak " + format_memory(rs.peak_memory, opt.memory_unit), small_font));
  const std::string axis_caption =
      opt.time_unit.empty()
          ? std::string()
          : "time (" + (opt.time_unit == "seconds" ? std::string("s") : opt.time_unit) + ")";
  if (!axis_caption.empty()) left = std::max(left, pad + text_width(axis_caption, small_font));
  left = std::min(left + 8, width / 3);
  const double right = pad + 8;
  const double chart_w = width - left - right;
  const double span = sim.makespan > 0 ? sim.makespan : 1.0;
  const double scale = chart_w / span;
  auto x_of = [&](double t) { return left + t * scale; };

  // Title: the name, then the figures, wrapped to the width.
  const std::string name = !opt.title.empty() ? opt.title
                           : !s.name.empty()  ? s.name
                                              : std::string("schedule");
  std::vector<std::string> figures{std::to_string(s.problem.ranks) + " ranks",
                                   std::to_string(s.problem.stages) + " stages",
                                   "placement " + s.placement.describe(),
                                   std::to_string(s.problem.microbatches) + " microbatches"};
  if (s.problem.slices > 1) figures.push_back(std::to_string(s.problem.slices) + " slices");
  figures.push_back("makespan " + format_time(sim.makespan, opt.time_unit));
  figures.push_back("bubble " + format_percent(sim.bubble_ratio));
  figures.push_back("peak memory " + format_memory(sim.peak_memory_max, opt.memory_unit));
  const std::vector<std::string> figure_lines =
      wrap_parts(figures, " \xC2\xB7 ", figures_font, width - 2 * pad);

  std::string body;
  double y = pad + title_font;
  body += "<text class=\"title\" x=\"" + px(pad) + "\" y=\"" + px(y) + "\" font-size=\"" +
          px(title_font) + "\" font-weight=\"bold\">" + xml_escape(name) + "</text>\n";
  for (const std::string& line : figure_lines) {
    y += figures_font + 6;
    body += "<text class=\"figures\" x=\"" + px(pad) + "\" y=\"" + px(y) + "\" font-size=\"" +
            px(figures_font) + "\" fill=\"#333\">" + xml_escape(line) + "</text>\n";
  }

  // Time axis above the rows.
  y += 8 + small_font;
  const double axis_y = y;
  if (!axis_caption.empty())
    body += "<text class=\"axis-caption\" x=\"" + px(pad) + "\" y=\"" + px(axis_y) +
            "\" font-size=\"" + px(small_font) + "\" fill=\"#555\">" + xml_escape(axis_caption) +
            "</text>\n";
  const double chart_top = axis_y + 6;
  const double block_h = row_h + mem_gap + mem_h;
  const double chart_bottom = chart_top + nranks * block_h + std::max(nranks - 1, 0) * rank_gap;
  auto row_top = [&](int r) { return chart_top + r * (block_h + rank_gap); };

  // Backgrounds first: rows (idle time shows through) and memory bands.
  for (int r = 0; r < nranks; ++r) {
    const double top = row_top(r);
    body += "<text class=\"rank\" x=\"" + px(pad) + "\" y=\"" +
            px(top + row_h / 2 + rank_font * 0.35) + "\" font-size=\"" + px(rank_font) +
            "\">rank " + std::to_string(r) + "</text>\n";
    body += "<rect class=\"lane\" x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"" +
            px(chart_w) + "\" height=\"" + px(row_h) + "\" fill=\"#e6e6e6\"/>\n";
    if (opt.show_memory)
      body += "<rect class=\"memory-band\" x=\"" + px(left) + "\" y=\"" +
              px(top + row_h + mem_gap) + "\" width=\"" + px(chart_w) + "\" height=\"" + px(mem_h) +
              "\" fill=\"#f5f5f5\"/>\n";
  }

  // Ticks and grid lines, under the actions.
  const double step = tick_step(span, std::max(1, static_cast<int>(chart_w / 70)));
  for (int k = 0;; ++k) {
    const double t = k * step;
    if (t > span * (1 + 1e-9)) break;
    const double x = x_of(t);
    body += "<line class=\"grid\" x1=\"" + px(x) + "\" y1=\"" + px(axis_y + 2) + "\" x2=\"" +
            px(x) + "\" y2=\"" + px(chart_bottom) +
            "\" stroke=\"#c8c8c8\" stroke-width=\"0.5\"/>\n";
    body += "<text class=\"tick\" x=\"" + px(x) + "\" y=\"" + px(axis_y) + "\" font-size=\"" +
            px(small_font) + "\" text-anchor=\"middle\" fill=\"#555\">" + format_number(t) +
            "</text>\n";
  }

  // Chunks of a rank get lighter shades so interleaved and V-shape schedules read apart.
  int chunks = 1;
  for (int r = 0; r < s.placement.ranks(); ++r)
    chunks = std::max(chunks, static_cast<int>(s.placement.stages_of(r).size()));
  auto shade = [&](Rgb base, int stage) {
    if (chunks <= 1 || stage < 0 || stage >= s.placement.stages()) return base;
    return lighten(base, 0.5 * s.placement.chunk_of(stage) / (chunks - 1));
  };

  // An Overlap is one rectangle filled by a hard-stop gradient: its forward colour on top, its
  // backward colour below. One gradient per colour pair, defined once.
  std::map<std::pair<std::string, std::string>, std::string> overlap_fills;
  std::string defs;
  auto overlap_fill = [&](const std::string& top_fill, const std::string& bottom_fill) {
    auto [it, added] = overlap_fills.try_emplace({top_fill, bottom_fill},
                                                 "overlap" + std::to_string(overlap_fills.size()));
    if (added)
      defs += "<linearGradient id=\"" + it->second +
              "\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\"><stop offset=\"0.5\" stop-color=\"" +
              top_fill + "\"/><stop offset=\"0.5\" stop-color=\"" + bottom_fill +
              "\"/></linearGradient>\n";
    return "url(#" + it->second + ")";
  };
  std::array<bool, op_kind_count> seen{};
  bool comm_seen = false;

  for (int r = 0; r < nranks; ++r) {
    const double top = row_top(r);
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      const ActionTiming& t = sim.timing[r][i];
      if (a.kind == OpKind::Idle || !(t.end > t.start)) continue;
      const double x0 = x_of(t.start), w = (t.end - t.start) * scale;
      const std::string tip = xml_escape(to_string(a) + " on rank " + std::to_string(r) + ": " +
                                         format_time(t.start, opt.time_unit) + " to " +
                                         format_time(t.end, opt.time_unit));
      seen[static_cast<std::size_t>(a.kind)] = true;
      if (is_comm(a.kind)) {
        comm_seen = true;
        const double h = std::max(3.0, row_h / 4);
        body += "<rect class=\"action " + std::string(to_string(a.kind)) + "\" x=\"" + px(x0) +
                "\" y=\"" + px(top + row_h - h) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
                "\" fill=\"" + hex(kind_colour(a.kind)) + "\"><title>" + tip + "</title></rect>\n";
        continue;
      }
      Rgb fill_rgb;
      std::string fill;
      if (a.kind == OpKind::Overlap) {
        const std::string top_fill = hex(shade(kind_colour(OpKind::F), a.stage));
        const std::string bottom_fill = hex(shade(kind_colour(OpKind::B), a.b_stage));
        fill = overlap_fill(top_fill, bottom_fill);
        fill_rgb = kind_colour(OpKind::F);
      } else {
        fill_rgb = shade(kind_colour(a.kind), a.stage);
        fill = hex(fill_rgb);
      }
      body += "<rect class=\"action " + std::string(to_string(a.kind)) + "\" x=\"" + px(x0) +
              "\" y=\"" + px(top) + "\" width=\"" + px(w) + "\" height=\"" + px(row_h) +
              "\" fill=\"" + fill + "\" stroke=\"#ffffff\" stroke-width=\"" +
              px(std::min(1.0, w / 4)) + "\"><title>" + tip + "</title></rect>\n";
      const std::string label = unit_label(a, s.problem.slices);
      if (text_width(label, label_font) + 4 <= w)
        body += "<text class=\"label\" x=\"" + px(x0 + w / 2) + "\" y=\"" +
                px(top + row_h / 2 + label_font * 0.35) + "\" font-size=\"" + px(label_font) +
                "\" text-anchor=\"middle\" fill=\"" + (is_light(fill_rgb) ? "#1a1a1a" : "#ffffff") +
                "\">" + xml_escape(label) + "</text>\n";
    }

    if (!opt.show_memory) continue;
    const RankSummary& rs = sim.ranks[r];
    const double band_top = top + row_h + mem_gap;
    const double inner = mem_h - 2;
    auto y_of = [&](double v) {
      const double range = mem_hi - mem_lo;
      const double frac = range > 0 ? (v - mem_lo) / range : 0.0;
      return band_top + 1 + inner * (1 - frac);
    };
    const double base = y_of(0);
    std::string path = "M" + px(x_of(0)) + "," + px(base);
    double held = 0;
    for (const MemoryPoint& p : rs.memory) {
      const double x = x_of(std::clamp(p.time, 0.0, span));
      path += " L" + px(x) + "," + px(y_of(held)) + " L" + px(x) + "," + px(y_of(p.value));
      held = p.value;
    }
    path += " L" + px(x_of(span)) + "," + px(y_of(held)) + " L" + px(x_of(span)) + "," + px(base) +
            " Z";
    body += "<path class=\"memory\" d=\"" + path +
            "\" fill=\"#c3cad6\" stroke=\"#4a5568\" stroke-width=\"1\" stroke-linejoin=\"miter\">"
            "<title>" +
            xml_escape("rank " + std::to_string(r) + " memory, peak " +
                       format_memory(rs.peak_memory, opt.memory_unit)) +
            "</title></path>\n";
    body += "<text class=\"peak\" x=\"" + px(pad) + "\" y=\"" +
            px(band_top + mem_h / 2 + small_font * 0.35) + "\" font-size=\"" + px(small_font) +
            "\" fill=\"#4a5568\">" +
            xml_escape("peak " + format_memory(rs.peak_memory, opt.memory_unit)) + "</text>\n";
  }

  // Legend: the kinds that appear, idle, memory; wrapped to the width.
  struct Entry {
    std::string swatch_fill;
    std::string text;
  };
  std::vector<Entry> entries;
  auto add = [&](OpKind k, const char* text) {
    if (seen[static_cast<std::size_t>(k)]) entries.push_back({hex(kind_colour(k)), text});
  };
  add(OpKind::F, "F forward");
  add(OpKind::B, "B backward");
  add(OpKind::I, "I input gradient");
  add(OpKind::W, "W weight gradient");
  add(OpKind::R, "R recompute");
  if (seen[static_cast<std::size_t>(OpKind::Overlap)]) {
    entries.push_back(
        {overlap_fill(hex(kind_colour(OpKind::F)), hex(kind_colour(OpKind::B))), "F+B overlapped"});
  }
  if (comm_seen) entries.push_back({hex(kind_colour(OpKind::SendF)), "send / receive"});
  entries.push_back({"#e6e6e6", "idle"});
  if (opt.show_memory) entries.push_back({"#c3cad6", "memory held"});
  if (chunks > 1) entries.push_back({"", "lighter shade = later chunk"});

  const double sw = 12, legend_font = 11;
  double lx = left, ly = chart_bottom + 14;
  std::string legend;
  for (const Entry& e : entries) {
    const double w = (e.swatch_fill.empty() ? 0 : sw + 5) + text_width(e.text, legend_font) + 18;
    if (lx > left && lx + w > width - right) {
      lx = left;
      ly += sw + 8;
    }
    double tx = lx;
    if (!e.swatch_fill.empty()) {
      legend += "<rect class=\"swatch\" x=\"" + px(lx) + "\" y=\"" + px(ly) + "\" width=\"" +
                px(sw) + "\" height=\"" + px(sw) + "\" fill=\"" + e.swatch_fill +
                "\" stroke=\"#999\" stroke-width=\"0.5\"/>\n";
      tx += sw + 5;
    }
    legend += "<text class=\"legend\" x=\"" + px(tx) + "\" y=\"" + px(ly + sw - 2) +
              "\" font-size=\"" + px(legend_font) + "\" fill=\"#333\">" + xml_escape(e.text) +
              "</text>\n";
    lx += w;
  }
  const double height = std::ceil(ly + sw + pad);

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(width) + "\" height=\"" +
         px(height) + "\" viewBox=\"0 0 " + px(width) + " " + px(height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  out += "<title>" + xml_escape(name) + "</title>\n";
  if (!defs.empty()) out += "<defs>\n" + defs + "</defs>\n";
  out += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + px(width) + "\" height=\"" +
         px(height) + "\" fill=\"#ffffff\"/>\n";
  out += body;
  out += legend;
  out += "</svg>\n";
  return out;
}

}  // namespace pipesched
