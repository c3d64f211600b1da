// SVG timeline of a simulated schedule: a row per rank with each action drawn from its start to
// its end, coloured by kind, the rank's memory curve beneath its row, a title with the headline
// figures and a legend. The file is standalone and opens in any browser. render_svg computes the
// layout (detail::svg_layout), then draws the heading, the lanes, the ticks, each rank's actions
// and memory curve, the legend, and wraps them in the document; the colours and text measures
// it draws with are in io/detail/svg_primitives.hpp.
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
#include "pipesched/io/detail/svg_primitives.hpp"

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
  //! ("447 ms", "1.5 s"; detail::format_time) and captions the time axis "time (s)"; any other text
  //! is written after the figures ("44 units", axis "time (units)"); empty leaves bare numbers and
  //! no caption.
  std::string time_unit;
  bool show_memory = true;  //!< draw each rank's memory curve beneath its row
};

namespace detail {

//! Throws invalid_problem when an option of `opt` is out of range.
inline void check_svg_options(const SvgOptions& opt) {
  if (opt.width < 300 || opt.width > 100000)
    throw invalid_problem("SvgOptions.width = " + std::to_string(opt.width) +
                          " is out of range; use 300 to 100000 pixels.");
  if (opt.row_height < 10 || opt.row_height > 400)
    throw invalid_problem("SvgOptions.row_height = " + std::to_string(opt.row_height) +
                          " is out of range; use 10 to 400 pixels.");
}

//! Where everything of an SVG timeline goes, computed before anything is drawn: sizes and
//! fonts, the memory scale, the margins and time scale, the heading's lines and their
//! baselines, the chart's rows, and how many chunks a rank holds (for the shades).
struct SvgLayout {
  int nranks = 0;
  double width = 0, row_h = 0;
  double mem_h = 0, mem_gap = 0, rank_gap = 0;  // memory band, band gap, gap between ranks
  double label_font = 0;
  double rank_font = 12, small_font = 10, title_font = 16, figures_font = 12;
  double pad = 12;
  double mem_lo = 0, mem_hi = 0;  // the memory scale
  double left = 0, right = 0, chart_w = 0, span = 0, scale = 0;
  std::string axis_caption;               // "time (s)", ...; empty for none
  std::string name;                       // the title's first line
  std::vector<std::string> figure_lines;  // the headline figures, wrapped
  double title_y = 0;                     // baseline of the name
  std::vector<double> figure_y;           // baseline of each figure line
  double axis_y = 0, chart_top = 0, block_h = 0, chart_bottom = 0;
  int chunks = 1;  // most stages a rank holds

  //! The x coordinate of time `t`.
  double x_of(double t) const { return left + t * scale; }
  //! The top of rank r's action row.
  double row_top(int r) const { return chart_top + r * (block_h + rank_gap); }
};

//! The memory scale: from the lowest value drawn (0 unless a cost model frees more than it
//! allocated) to the largest peak over ranks.
inline void svg_memory_scale(SvgLayout& L, const SimulationResult& sim) {
  L.mem_lo = 0;
  L.mem_hi = sim.peak_memory_max;
  for (const RankSummary& rs : sim.ranks) {
    L.mem_hi = std::max(L.mem_hi, rs.peak_memory);
    for (const MemoryPoint& p : rs.memory) {
      L.mem_lo = std::min(L.mem_lo, p.value);
      L.mem_hi = std::max(L.mem_hi, p.value);
    }
  }
}

//! The left margin (wide enough for "rank N", "peak X" under it and the axis caption), the
//! right one, and the time scale.
inline void svg_margins(SvgLayout& L, const SimulationResult& sim, const SvgOptions& opt) {
  double left =
      L.pad + text_width("rank " + std::to_string(std::max(L.nranks - 1, 0)), L.rank_font);
  if (opt.show_memory)
    for (const RankSummary& rs : sim.ranks)
      left = std::max(left,
                      L.pad + text_width("peak " + format_memory(rs.peak_memory, opt.memory_unit),
                                         L.small_font));
  L.axis_caption =
      opt.time_unit.empty()
          ? std::string()
          : "time (" + (opt.time_unit == "seconds" ? std::string("s") : opt.time_unit) + ")";
  if (!L.axis_caption.empty())
    left = std::max(left, L.pad + text_width(L.axis_caption, L.small_font));
  L.left = std::min(left + 8, L.width / 3);
  L.right = L.pad + 8;
  L.chart_w = L.width - L.left - L.right;
  L.span = sim.makespan > 0 ? sim.makespan : 1.0;
  L.scale = L.chart_w / L.span;
}

//! The heading: the name, then the figures wrapped to the width, and the baselines of each
//! line down to the time axis.
inline void svg_heading(SvgLayout& L, const Schedule& s, const SimulationResult& sim,
                        const SvgOptions& opt) {
  L.name = !opt.title.empty() ? opt.title : !s.name.empty() ? s.name : std::string("schedule");
  std::vector<std::string> figures{std::to_string(s.problem.ranks) + " ranks",
                                   std::to_string(s.problem.stages) + " stages",
                                   "placement " + s.placement.describe(),
                                   std::to_string(s.problem.microbatches) + " microbatches"};
  if (s.problem.slices > 1) figures.push_back(std::to_string(s.problem.slices) + " slices");
  figures.push_back("makespan " + format_time(sim.makespan, opt.time_unit));
  figures.push_back("bubble " + format_percent(sim.bubble_ratio));
  figures.push_back("peak memory " + format_memory(sim.peak_memory_max, opt.memory_unit));
  L.figure_lines = wrap_parts(figures, " \xC2\xB7 ", L.figures_font, L.width - 2 * L.pad);

  double y = L.pad + L.title_font;
  L.title_y = y;
  for (std::size_t i = 0; i < L.figure_lines.size(); ++i) {
    y += L.figures_font + 6;
    L.figure_y.push_back(y);
  }
  y += 8 + L.small_font;
  L.axis_y = y;
}

//! The layout of `s` as simulated in `sim`, drawn with `opt`.
inline SvgLayout svg_layout(const Schedule& s, const SimulationResult& sim, const SvgOptions& opt) {
  SvgLayout L;
  L.nranks = static_cast<int>(s.ranks.size());
  L.width = opt.width;
  L.row_h = opt.row_height;
  L.mem_h = opt.show_memory ? std::max(12.0, std::round(L.row_h * 0.8)) : 0.0;
  L.mem_gap = opt.show_memory ? 2.0 : 0.0;
  L.rank_gap = opt.show_memory ? 10.0 : 4.0;
  L.label_font = std::clamp(std::round(L.row_h * 0.45), 8.0, 12.0);
  svg_memory_scale(L, sim);
  svg_margins(L, sim, opt);
  svg_heading(L, s, sim, opt);
  // The rows under the time axis.
  L.chart_top = L.axis_y + 6;
  L.block_h = L.row_h + L.mem_gap + L.mem_h;
  L.chart_bottom = L.chart_top + L.nranks * L.block_h + std::max(L.nranks - 1, 0) * L.rank_gap;
  // Chunks of a rank get lighter shades so interleaved and V-shape schedules read apart.
  for (int r = 0; r < s.placement.ranks(); ++r)
    L.chunks = std::max(L.chunks, static_cast<int>(s.placement.stages_of(r).size()));
  return L;
}

//! `base` in the shade of `stage`'s chunk: lighter for later chunks.
inline Rgb shade(const SvgLayout& L, const Placement& placement, Rgb base, int stage) {
  if (L.chunks <= 1 || stage < 0 || stage >= placement.stages()) return base;
  return lighten(base, 0.5 * placement.chunk_of(stage) / (L.chunks - 1));
}

//! An Overlap is one rectangle filled by a hard-stop gradient: its forward colour on top, its
//! backward colour below. One gradient per colour pair, defined once in `defs`.
struct OverlapFills {
  std::map<std::pair<std::string, std::string>, std::string> ids;
  std::string defs;

  //! The fill of an Overlap box with `top_fill` over `bottom_fill`.
  std::string fill(const std::string& top_fill, const std::string& bottom_fill) {
    auto [it, added] =
        ids.try_emplace({top_fill, bottom_fill}, "overlap" + std::to_string(ids.size()));
    if (added)
      defs += "<linearGradient id=\"" + it->second +
              "\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\"><stop offset=\"0.5\" stop-color=\"" +
              top_fill + "\"/><stop offset=\"0.5\" stop-color=\"" + bottom_fill +
              "\"/></linearGradient>\n";
    return "url(#" + it->second + ")";
  }
};

//! What the drawn actions were, for the legend.
struct SvgSeen {
  std::array<bool, op_kind_count> kinds{};
  bool comm = false;
};

//! The title, the figure lines and the time axis's caption.
inline void draw_heading(const SvgLayout& L, std::string& body) {
  body += "<text class=\"title\" x=\"" + px(L.pad) + "\" y=\"" + px(L.title_y) + "\" font-size=\"" +
          px(L.title_font) + "\" font-weight=\"bold\">" + xml_escape(L.name) + "</text>\n";
  for (std::size_t i = 0; i < L.figure_lines.size(); ++i)
    body += "<text class=\"figures\" x=\"" + px(L.pad) + "\" y=\"" + px(L.figure_y[i]) +
            "\" font-size=\"" + px(L.figures_font) + "\" fill=\"#333\">" +
            xml_escape(L.figure_lines[i]) + "</text>\n";
  if (!L.axis_caption.empty())
    body += "<text class=\"axis-caption\" x=\"" + px(L.pad) + "\" y=\"" + px(L.axis_y) +
            "\" font-size=\"" + px(L.small_font) + "\" fill=\"#555\">" +
            xml_escape(L.axis_caption) + "</text>\n";
}

//! Backgrounds first: each rank's label, its row (idle time shows through) and its memory
//! band.
inline void draw_lanes(const SvgLayout& L, const SvgOptions& opt, std::string& body) {
  for (int r = 0; r < L.nranks; ++r) {
    const double top = L.row_top(r);
    body += "<text class=\"rank\" x=\"" + px(L.pad) + "\" y=\"" +
            px(top + L.row_h / 2 + L.rank_font * 0.35) + "\" font-size=\"" + px(L.rank_font) +
            "\">rank " + std::to_string(r) + "</text>\n";
    body += "<rect class=\"lane\" x=\"" + px(L.left) + "\" y=\"" + px(top) + "\" width=\"" +
            px(L.chart_w) + "\" height=\"" + px(L.row_h) + "\" fill=\"#e6e6e6\"/>\n";
    if (opt.show_memory)
      body += "<rect class=\"memory-band\" x=\"" + px(L.left) + "\" y=\"" +
              px(top + L.row_h + L.mem_gap) + "\" width=\"" + px(L.chart_w) + "\" height=\"" +
              px(L.mem_h) + "\" fill=\"#f5f5f5\"/>\n";
  }
}

//! Ticks and grid lines, under the actions; with time unit "seconds" the ticks carry an SI
//! prefix ("250 \xC2\xB5s", "12.5 ms"), else they are bare numbers of the caption's unit.
inline void draw_ticks(const SvgLayout& L, const SvgOptions& opt, std::string& body) {
  const double step = tick_step(L.span, std::max(1, static_cast<int>(L.chart_w / 70)));
  for (int k = 0;; ++k) {
    const double t = k * step;
    if (t > L.span * (1 + 1e-9)) break;
    const double x = L.x_of(t);
    body += "<line class=\"grid\" x1=\"" + px(x) + "\" y1=\"" + px(L.axis_y + 2) + "\" x2=\"" +
            px(x) + "\" y2=\"" + px(L.chart_bottom) +
            "\" stroke=\"#c8c8c8\" stroke-width=\"0.5\"/>\n";
    body += "<text class=\"tick\" x=\"" + px(x) + "\" y=\"" + px(L.axis_y) + "\" font-size=\"" +
            px(L.small_font) + "\" text-anchor=\"middle\" fill=\"#555\">" +
            xml_escape(time_tick(t, L.span, opt.time_unit)) + "</text>\n";
  }
}

//! The box of compute action `a` (from `x0`, `w` wide, in the row at `top`) with its
//! tooltip `tip`, and its label when the box is wide enough.
inline void draw_box(const Schedule& s, const SvgLayout& L, const Action& a, double x0, double w,
                     double top, const std::string& tip, OverlapFills& fills, std::string& body) {
  Rgb fill_rgb;
  std::string fill;
  if (a.kind == OpKind::Overlap) {
    const std::string top_fill = hex(shade(L, s.placement, kind_colour(OpKind::F), a.stage));
    const std::string bottom_fill = hex(shade(L, s.placement, kind_colour(OpKind::B), a.b_stage));
    fill = fills.fill(top_fill, bottom_fill);
    fill_rgb = kind_colour(OpKind::F);
  } else {
    fill_rgb = shade(L, s.placement, kind_colour(a.kind), a.stage);
    fill = hex(fill_rgb);
  }
  body += "<rect class=\"action " + std::string(to_string(a.kind)) + "\" x=\"" + px(x0) +
          "\" y=\"" + px(top) + "\" width=\"" + px(w) + "\" height=\"" + px(L.row_h) +
          "\" fill=\"" + fill + "\" stroke=\"#ffffff\" stroke-width=\"" + px(std::min(1.0, w / 4)) +
          "\"><title>" + tip + "</title></rect>\n";
  const std::string label = unit_label(a, s.problem.slices);
  if (text_width(label, L.label_font) + 4 <= w)
    body += "<text class=\"label\" x=\"" + px(x0 + w / 2) + "\" y=\"" +
            px(top + L.row_h / 2 + L.label_font * 0.35) + "\" font-size=\"" + px(L.label_font) +
            "\" text-anchor=\"middle\" fill=\"" + (is_light(fill_rgb) ? "#1a1a1a" : "#ffffff") +
            "\">" + xml_escape(label) + "</text>\n";
}

//! Rank r's actions of nonzero length: thin bars for sends and receives, boxes for the rest.
inline void draw_rank_actions(const Schedule& s, const SimulationResult& sim, const SvgOptions& opt,
                              const SvgLayout& L, int r, OverlapFills& fills, SvgSeen& seen,
                              std::string& body) {
  const double top = L.row_top(r);
  for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
    const Action& a = s.ranks[r][i];
    const ActionTiming& t = sim.timing[r][i];
    if (a.kind == OpKind::Idle || !(t.end > t.start)) continue;
    const double x0 = L.x_of(t.start), w = (t.end - t.start) * L.scale;
    const std::string tip = xml_escape(to_string(a) + " on rank " + std::to_string(r) + ": " +
                                       format_time(t.start, opt.time_unit) + " to " +
                                       format_time(t.end, opt.time_unit));
    seen.kinds[static_cast<std::size_t>(a.kind)] = true;
    if (is_comm(a.kind)) {
      seen.comm = true;
      const double h = std::max(3.0, L.row_h / 4);
      body += "<rect class=\"action " + std::string(to_string(a.kind)) + "\" x=\"" + px(x0) +
              "\" y=\"" + px(top + L.row_h - h) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
              "\" fill=\"" + hex(kind_colour(a.kind)) + "\"><title>" + tip + "</title></rect>\n";
      continue;
    }
    draw_box(s, L, a, x0, w, top, tip, fills, body);
  }
}

//! Rank r's memory curve in its band, with its peak written beside it.
inline void draw_memory(const SimulationResult& sim, const SvgOptions& opt, const SvgLayout& L,
                        int r, std::string& body) {
  const double top = L.row_top(r);
  const RankSummary& rs = sim.ranks[r];
  const double band_top = top + L.row_h + L.mem_gap;
  const double inner = L.mem_h - 2;
  auto y_of = [&](double v) {
    const double range = L.mem_hi - L.mem_lo;
    const double frac = range > 0 ? (v - L.mem_lo) / range : 0.0;
    return band_top + 1 + inner * (1 - frac);
  };
  const double base = y_of(0);
  std::string path = "M" + px(L.x_of(0)) + "," + px(base);
  double held = 0;
  for (const MemoryPoint& p : rs.memory) {
    const double x = L.x_of(std::clamp(p.time, 0.0, L.span));
    path += " L" + px(x) + "," + px(y_of(held)) + " L" + px(x) + "," + px(y_of(p.value));
    held = p.value;
  }
  path += " L" + px(L.x_of(L.span)) + "," + px(y_of(held)) + " L" + px(L.x_of(L.span)) + "," +
          px(base) + " Z";
  body += "<path class=\"memory\" d=\"" + path +
          "\" fill=\"#c3cad6\" stroke=\"#4a5568\" stroke-width=\"1\" stroke-linejoin=\"miter\">"
          "<title>" +
          xml_escape("rank " + std::to_string(r) + " memory, peak " +
                     format_memory(rs.peak_memory, opt.memory_unit)) +
          "</title></path>\n";
  body += "<text class=\"peak\" x=\"" + px(L.pad) + "\" y=\"" +
          px(band_top + L.mem_h / 2 + L.small_font * 0.35) + "\" font-size=\"" + px(L.small_font) +
          "\" fill=\"#4a5568\">" +
          xml_escape("peak " + format_memory(rs.peak_memory, opt.memory_unit)) + "</text>\n";
}

//! One legend entry: its swatch's fill (none when empty) and its text.
struct LegendEntry {
  std::string swatch_fill;
  std::string text;
};

//! The legend's entries: the kinds that appear, idle, memory, the shades.
inline std::vector<LegendEntry> legend_entries(const SvgLayout& L, const SvgOptions& opt,
                                               const SvgSeen& seen, OverlapFills& fills) {
  std::vector<LegendEntry> entries;
  auto add = [&](OpKind k, const char* text) {
    if (seen.kinds[static_cast<std::size_t>(k)]) entries.push_back({hex(kind_colour(k)), text});
  };
  add(OpKind::F, "F forward");
  add(OpKind::B, "B backward");
  add(OpKind::I, "I input gradient");
  add(OpKind::W, "W weight gradient");
  add(OpKind::R, "R recompute");
  add(OpKind::VocabF, "S vocabulary forward");
  add(OpKind::VocabB, "T vocabulary backward");
  add(OpKind::EmbedF, "E embedding forward");
  add(OpKind::EmbedB, "G embedding backward");
  if (seen.kinds[static_cast<std::size_t>(OpKind::Overlap)]) {
    entries.push_back(
        {fills.fill(hex(kind_colour(OpKind::F)), hex(kind_colour(OpKind::B))), "F+B overlapped"});
  }
  if (seen.comm) entries.push_back({hex(kind_colour(OpKind::SendF)), "send / receive"});
  entries.push_back({"#e6e6e6", "idle"});
  if (opt.show_memory) entries.push_back({"#c3cad6", "memory held"});
  if (L.chunks > 1) entries.push_back({"", "lighter shade = later chunk"});
  return entries;
}

//! The legend under the chart, wrapped to the width, into `legend`; returns the picture's
//! height.
inline double draw_legend(const SvgLayout& L, const std::vector<LegendEntry>& entries,
                          std::string& legend) {
  const double sw = 12, legend_font = 11;
  double lx = L.left, ly = L.chart_bottom + 14;
  for (const LegendEntry& e : entries) {
    const double w = (e.swatch_fill.empty() ? 0 : sw + 5) + text_width(e.text, legend_font) + 18;
    if (lx > L.left && lx + w > L.width - L.right) {
      lx = L.left;
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
  return std::ceil(ly + sw + L.pad);
}

//! The SVG document: its header and title, the gradients in `defs`, a white background, then
//! `body` and `legend`.
inline std::string svg_document(const SvgLayout& L, const std::string& defs,
                                const std::string& body, const std::string& legend, double height) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(L.width) + "\" height=\"" +
         px(height) + "\" viewBox=\"0 0 " + px(L.width) + " " + px(height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  out += "<title>" + xml_escape(L.name) + "</title>\n";
  if (!defs.empty()) out += "<defs>\n" + defs + "</defs>\n";
  out += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + px(L.width) + "\" height=\"" +
         px(height) + "\" fill=\"#ffffff\"/>\n";
  out += body;
  out += legend;
  out += "</svg>\n";
  return out;
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
  const SvgLayout L = svg_layout(s, sim, opt);
  std::string body;
  draw_heading(L, body);
  draw_lanes(L, opt, body);
  draw_ticks(L, opt, body);
  OverlapFills fills;
  SvgSeen seen;
  for (int r = 0; r < L.nranks; ++r) {
    draw_rank_actions(s, sim, opt, L, r, fills, seen, body);
    if (opt.show_memory) draw_memory(sim, opt, L, r, body);
  }
  std::string legend;
  const double height = draw_legend(L, legend_entries(L, opt, seen, fills), legend);
  return svg_document(L, fills.defs, body, legend, height);
}

}  // namespace pipesched
