// A tune search as one self-contained HTML page: a scatter plot (inline SVG) of step time
// against peak memory of every candidate the search evaluated, its Pareto frontier, the best
// plan and each pair's best (the baselines) marked, the memory budget as a line; then a
// timeline (render_svg) of the best plan and of each baseline with its command line and
// figures. No external resources; a few lines of JavaScript add tooltips and record script
// errors, and the page reads the same without them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/io/detail/svg_primitives.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched {

//! One timeline of the report: a plan's heading, its command line, figures and SVG.
struct ReportTimeline {
  std::string heading;               //!< "best", "1f1b with mario", ...
  std::string plan;                  //!< the plan in a few words (describe)
  std::string command;               //!< the command line that reproduces it
  std::vector<std::string> figures;  //!< "step 447 ms", "bubble 12.0%", ...
  std::string svg;                   //!< its render_svg picture (an SVG document)
};

//! What render_html_report is told besides the result.
struct HtmlReportOptions {
  std::string title = "pipesched tune";  //!< the page's title
  std::string command;                   //!< the tune command line, shown under the title
  //! Unit of step times: "seconds" writes SI-prefixed seconds ("12.5 ms"), anything else is
  //! written after the number ("44 units").
  std::string time_unit = "units";
  //! Unit of memory: "bytes" writes binary prefixes ("3.2 GiB"), anything else after the
  //! number ("2.5 microbatches").
  std::string memory_unit = "microbatches";
  //! What the memory axis shows: false, tuning::Point::peak_memory (TransformerCost: the largest
  //! GPU's memory, static bytes included); true, tuning::Point::activation_peak (a budget given
  //! as activation memory per rank).
  bool activation_axis = false;
  std::string memory_caption = "peak memory";  //!< the memory axis's caption, without unit
  //! The memory budget on the axis's quantity (infinite: none, no line).
  double memory_limit = std::numeric_limits<double>::infinity();
  std::vector<ReportTimeline> timelines;  //!< the best plan's first, then the baselines'
  int width = 1000;                       //!< scatter plot width in pixels, 400 to 4000
};

namespace detail {

//! `text` for HTML content and attribute values (the XML escaping, which HTML reads alike).
inline std::string html_escape(std::string_view text) {
  return xml_escape(text);
}

//! The caption of an axis: "step time (s)", "peak memory (bytes)", "... (units)".
inline std::string axis_caption(const std::string& what, const std::string& unit) {
  return what + " (" + (unit == "seconds" ? std::string("s") : unit) + ")";
}

//! The memory figure of `p` the plot's memory axis shows.
inline double plotted_memory(const tuning::Point& p, const HtmlReportOptions& opt) {
  return opt.activation_axis ? p.activation_peak : p.peak_memory;
}

//! A marker's data attributes and tooltip: the configuration and its figures.
inline std::string point_tip(const tuning::Point& p, const HtmlReportOptions& opt) {
  return describe(p) + ": step " + format_time(p.makespan, opt.time_unit) + ", " +
         opt.memory_caption + " " + format_memory(plotted_memory(p, opt), opt.memory_unit) +
         (p.fits ? "" : ", over the budget") + (p.frontier ? ", on the frontier" : "");
}

//! Whether the memory budget `limit` is drawn on the memory axis of points reaching `data_max`:
//! a finite budget up to twice the largest point (further out it would squeeze every point
//! into the axis's left part, as a device's 80 GB does a small model's few GiB; the plot then
//! notes it instead).
inline bool budget_on_axis(double data_max, double limit) {
  return std::isfinite(limit) && (limit <= 2 * data_max || !(data_max > 0));
}

//! The five markers of the plot, which its legend repeats.
enum class MarkerKind { Best, Baseline, Frontier, Fits, OverBudget };

//! The class of a marker's group in the plot ("point best", ...).
inline const char* marker_class(MarkerKind k) {
  switch (k) {
    case MarkerKind::Best:
      return "best";
    case MarkerKind::Baseline:
      return "baseline";
    case MarkerKind::Frontier:
      return "frontier-point";
    case MarkerKind::Fits:
      return "fits";
    case MarkerKind::OverBudget:
      return "over-budget";
  }
  return "";
}

//! The SVG shape of a marker centred at (`x`, `y`), the same in the plot and the legend.
inline std::string marker_shape(MarkerKind k, double x, double y) {
  switch (k) {
    case MarkerKind::Best:
      return "<path d=\"M" + px(x) + "," + px(y - 9) + " L" + px(x + 8) + "," + px(y + 6) + " L" +
             px(x - 8) + "," + px(y + 6) + " Z\" fill=\"#e67e22\" stroke=\"#7a3e00\"/>";
    case MarkerKind::Baseline:
      return "<rect x=\"" + px(x - 5) + "\" y=\"" + px(y - 5) +
             "\" width=\"10\" height=\"10\" fill=\"none\" stroke=\"#2e7d32\" stroke-width=\"2\"/>";
    case MarkerKind::Frontier:
      return "<circle cx=\"" + px(x) + "\" cy=\"" + px(y) +
             "\" r=\"4\" fill=\"#1f6fb2\" stroke=\"#0b3d66\"/>";
    case MarkerKind::Fits:
      return "<circle cx=\"" + px(x) + "\" cy=\"" + px(y) +
             "\" r=\"3\" fill=\"#9aa5b1\" stroke=\"#6b7785\"/>";
    case MarkerKind::OverBudget:
      return "<circle cx=\"" + px(x) + "\" cy=\"" + px(y) +
             "\" r=\"3\" fill=\"none\" stroke=\"#b0b0b0\"/>";
  }
  return "";
}

//! The legend: each marker drawn as the plot draws it, then the frontier line and, under a
//! budget (`budget`), the budget line.
inline std::string report_legend(bool budget) {
  auto item = [](MarkerKind k, const char* text) {
    return std::string("<span class=\"legend-item\" data-marker=\"") + marker_class(k) +
           "\"><svg class=\"legend-symbol\" width=\"20\" height=\"20\" viewBox=\"0 0 20 20\">" +
           marker_shape(k, 10, 11) + "</svg>" + text + "</span>";
  };
  auto line = [](const char* cls, const char* attrs, const char* text) {
    return std::string("<span class=\"legend-item\" data-line=\"") + cls +
           "\"><svg class=\"legend-symbol\" width=\"24\" height=\"20\" viewBox=\"0 0 24 20\">"
           "<line x1=\"2\" y1=\"10\" x2=\"22\" y2=\"10\" " +
           attrs + "/></svg>" + text + "</span>";
  };
  return "<p class=\"legend\">" + item(MarkerKind::Best, "best") +
         item(MarkerKind::Baseline, "best of a (schedule, checkpoint) pair") +
         item(MarkerKind::Frontier, "Pareto frontier") + item(MarkerKind::Fits, "fits") +
         item(MarkerKind::OverBudget, "over the budget") +
         line("frontier", "stroke=\"#1f6fb2\" stroke-width=\"2\"", "frontier") +
         (budget
              ? line("budget", "stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"",
                     "budget")
              : std::string()) +
         "</p>\n";
}

//! The scatter plot of `r` as an inline SVG element.
inline std::string report_scatter(const tuning::Result& r, const HtmlReportOptions& opt) {
  const double W = std::clamp(opt.width, 400, 4000), H = 520;
  const double left = 90, right = 20, top = 20, bottom = 60;
  const double cw = W - left - right, ch = H - top - bottom;
  // Memory across, time up: the frontier runs from the top left to the bottom right.
  std::vector<tuning::Point> marked;
  if (r.best) marked.push_back(point_of(*r.best));
  for (const tuning::Baseline& b : r.baselines)
    if (b.plan) marked.push_back(point_of(*b.plan));
  double tmax = 0, mmax = 0;
  for (const std::vector<tuning::Point>* set :
       {&r.evaluated, static_cast<const std::vector<tuning::Point>*>(&marked)})
    for (const tuning::Point& p : *set) {
      tmax = std::max(tmax, p.makespan);
      mmax = std::max(mmax, plotted_memory(p, opt));
    }
  // The memory axis spans the data; the budget joins it only when it is in range
  // (budget_on_axis), else a note names it.
  const bool budget_line = budget_on_axis(mmax, opt.memory_limit);
  if (budget_line) mmax = std::max(mmax, opt.memory_limit);
  tmax = tmax > 0 ? tmax * 1.05 : 1;
  mmax = mmax > 0 ? mmax * 1.05 : 1;
  auto x_of = [&](double m) { return left + cw * m / mmax; };
  auto y_of = [&](double t) { return top + ch * (1 - t / tmax); };
  std::string s = "<svg id=\"scatter\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(W) +
                  "\" height=\"" + px(H) + "\" viewBox=\"0 0 " + px(W) + " " + px(H) +
                  "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + px(W) + "\" height=\"" + px(H) + "\" fill=\"#fff\"/>\n";
  s += "<rect x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"" + px(cw) + "\" height=\"" +
       px(ch) + "\" fill=\"#fafafa\" stroke=\"#888\"/>\n";
  const double mstep = memory_tick_step(mmax, 8, opt.memory_unit);
  for (int k = 0; k * mstep <= mmax * (1 + 1e-9); ++k) {
    const double x = x_of(k * mstep);
    s += "<line class=\"grid\" x1=\"" + px(x) + "\" y1=\"" + px(top) + "\" x2=\"" + px(x) +
         "\" y2=\"" + px(top + ch) +
         "\" stroke=\"#e0e0e0\"/>\n<text class=\"tick memory-tick\" x=\"" + px(x) + "\" y=\"" +
         px(top + ch + 16) + "\" text-anchor=\"middle\">" +
         html_escape(memory_tick(k * mstep, mmax, opt.memory_unit)) + "</text>\n";
  }
  const double tstep = tick_step(tmax, 8);
  for (int k = 0; k * tstep <= tmax * (1 + 1e-9); ++k) {
    const double y = y_of(k * tstep);
    s += "<line class=\"grid\" x1=\"" + px(left) + "\" y1=\"" + px(y) + "\" x2=\"" + px(left + cw) +
         "\" y2=\"" + px(y) + "\" stroke=\"#e0e0e0\"/>\n<text class=\"tick time-tick\" x=\"" +
         px(left - 6) + "\" y=\"" + px(y + 4) + "\" text-anchor=\"end\">" +
         html_escape(time_tick(k * tstep, tmax, opt.time_unit)) + "</text>\n";
  }
  s += "<text class=\"axis-caption\" x=\"" + px(left + cw / 2) + "\" y=\"" + px(H - 14) +
       "\" text-anchor=\"middle\" font-size=\"13\">" +
       html_escape(axis_caption(opt.memory_caption, opt.memory_unit)) + "</text>\n";
  s += "<text class=\"axis-caption\" transform=\"translate(16," + px(top + ch / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" +
       html_escape(axis_caption("step time", opt.time_unit)) + "</text>\n";
  if (budget_line) {
    const double x = x_of(opt.memory_limit);
    s += "<line class=\"budget\" x1=\"" + px(x) + "\" y1=\"" + px(top) + "\" x2=\"" + px(x) +
         "\" y2=\"" + px(top + ch) +
         "\" stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n<text "
         "class=\"budget-label\" x=\"" +
         px(x - 4) + "\" y=\"" + px(top + 14) + "\" text-anchor=\"end\" fill=\"#c0392b\">" +
         html_escape("budget " + format_memory(opt.memory_limit, opt.memory_unit)) + "</text>\n";
  } else if (std::isfinite(opt.memory_limit)) {
    s += "<text class=\"budget-note\" x=\"" + px(left + cw - 6) + "\" y=\"" + px(top + 14) +
         "\" text-anchor=\"end\" fill=\"#c0392b\">" +
         html_escape("budget " + format_memory(opt.memory_limit, opt.memory_unit) +
                     ": beyond the axis \xE2\x86\x92") +
         "</text>\n";
  }
  // The frontier as a staircase, under the points.
  std::vector<tuning::Point> front;
  for (const tuning::Point& p : r.evaluated)
    if (p.frontier) front.push_back(p);
  std::sort(front.begin(), front.end(), [&](const tuning::Point& a, const tuning::Point& b) {
    return plotted_memory(a, opt) < plotted_memory(b, opt);
  });
  if (!front.empty()) {
    std::string d;
    for (std::size_t i = 0; i < front.size(); ++i) {
      const double x = x_of(plotted_memory(front[i], opt)), y = y_of(front[i].makespan);
      d += (i == 0 ? "M" : " H" + px(x) + " V") + (i == 0 ? px(x) + "," + px(y) : px(y));
    }
    s += "<path class=\"frontier\" d=\"" + d +
         "\" fill=\"none\" stroke=\"#1f6fb2\" stroke-width=\"2\"/>\n";
  }
  auto marker = [&](const tuning::Point& p, const std::string& cls, const std::string& shape) {
    s += "<g class=\"point " + cls + "\" data-tip=\"" + html_escape(point_tip(p, opt)) + "\">" +
         shape + "<title>" + html_escape(point_tip(p, opt)) + "</title></g>\n";
  };
  for (const tuning::Point& p : r.evaluated) {
    const double x = x_of(plotted_memory(p, opt)), y = y_of(p.makespan);
    const MarkerKind k = p.frontier ? MarkerKind::Frontier
                         : p.fits   ? MarkerKind::Fits
                                    : MarkerKind::OverBudget;
    marker(p, marker_class(k), marker_shape(k, x, y));
  }
  for (std::size_t i = 0; i < marked.size(); ++i) {
    const tuning::Point& p = marked[i];
    const double x = x_of(plotted_memory(p, opt)), y = y_of(p.makespan);
    const MarkerKind k = i == 0 && r.best ? MarkerKind::Best : MarkerKind::Baseline;
    marker(p, marker_class(k), marker_shape(k, x, y));
  }
  s += "</svg>\n";
  return s;
}

//! The page's style sheet.
inline const char* report_style() {
  return "body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1300px}"
         "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
         "code,pre{background:#f3f3f3;padding:2px 4px;font-size:12px}"
         "pre{padding:8px;white-space:pre-wrap;word-break:break-all}"
         ".legend-item{margin-right:18px;white-space:nowrap}"
         ".legend-symbol{vertical-align:middle;margin-right:4px}"
         ".timeline svg{max-width:100%;height:auto}"
         "table.summary{border-collapse:collapse;font-size:13px;margin:12px 0}"
         "table.summary th,table.summary td{border:1px solid #ccc;padding:3px 8px;text-align:left}"
         "table.summary th,table.summary td:first-child{white-space:nowrap}"
         "table.summary td.num{text-align:right;white-space:nowrap}"
         "#tip{position:fixed;display:none;background:#222;color:#fff;padding:4px 8px;"
         "font-size:12px;border-radius:3px;pointer-events:none}";
}

//! The page's script: tooltips for the plot's points, script errors recorded in the page
//! (#script-errors) and a marker that the script ran (the hidden #script-status's
//! data-done="yes", for tests; nothing shows on the page).
inline const char* report_script() {
  return "window.onerror=function(m,s,l){var e=document.getElementById('script-errors');"
         "if(e){var d=document.createElement('div');d.className='script-error';"
         "d.textContent=m+' (line '+l+')';e.appendChild(d);}};\n"
         "document.addEventListener('DOMContentLoaded',function(){\n"
         "var tip=document.getElementById('tip');\n"
         "var pts=document.querySelectorAll('#scatter .point');\n"
         "for(var i=0;i<pts.length;i++){(function(p){\n"
         "p.addEventListener('mousemove',function(ev){tip.textContent=p.getAttribute('data-tip');"
         "tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';"
         "tip.style.top=(ev.clientY+12)+'px';});\n"
         "p.addEventListener('mouseleave',function(){tip.style.display='none';});})(pts[i]);}\n"
         "document.getElementById('script-status').setAttribute('data-done','yes');\n"
         "});\n";
}

//! The summary table: the best plan, then the best plan of each (schedule, checkpoint) pair
//! searched (a pair where nothing fits says so), with what comparing them takes: the
//! configuration, step time and how many times the best's it is, bubble, the plotted memory,
//! recomputes, and the MFU where the cost model counts FLOPs. Empty without a plan or pair.
inline std::string report_summary(const tuning::Result& r, const HtmlReportOptions& opt) {
  if (!r.best && r.baselines.empty()) return {};
  bool mfu = r.best && r.best->mfu > 0;
  for (const tuning::Baseline& b : r.baselines)
    mfu = mfu || (b.plan && b.plan->mfu > 0);
  auto cell = [](const std::string& text, bool num = false) {
    return std::string(num ? "<td class=\"num\">" : "<td>") + html_escape(text) + "</td>";
  };
  auto row = [&](const std::string& cls, const std::string& label, const std::string& base,
                 const std::string& checkpoint, const tuning::Plan* p) {
    std::string t = "<tr class=\"" + cls + "\">" + cell(label) + cell(base) + cell(checkpoint);
    if (p == nullptr)
      return t + "<td colspan=\"" + std::to_string(mfu ? 7 : 6) +
             "\">no plan of this pair fits the budget</td></tr>\n";
    t += cell(describe(*p)) + cell(format_time(p->makespan, opt.time_unit), true);
    t +=
        cell(r.best && r.best->makespan > 0 ? format_number(p->makespan / r.best->makespan, 4) + "x"
                                            : std::string("-"),
             true);
    t += cell(format_percent(p->bubble_ratio), true) +
         cell(format_memory(plotted_memory(point_of(*p), opt), opt.memory_unit), true) +
         cell(std::to_string(p->recomputes), true);
    if (mfu) t += cell(p->mfu > 0 ? format_percent(p->mfu) : std::string("-"), true);
    return t + "</tr>\n";
  };
  std::string h =
      "<h2>Best plans</h2>\n<table id=\"summary\" class=\"summary\">\n<tr><th></th>"
      "<th>schedule</th><th>checkpoint</th><th>plan</th><th>step time</th><th>vs "
      "best</th><th>bubble</th><th>" +
      html_escape(opt.memory_caption) + "</th><th>recomputes</th>" + (mfu ? "<th>MFU</th>" : "") +
      "</tr>\n";
  if (r.best) h += row("best", "best", r.best->base, checkpoint_name(*r.best), &*r.best);
  for (const tuning::Baseline& b : r.baselines)
    h += row(
        "baseline", "best of pair", b.base,
        b.checkpoint_policy.empty() ? std::string(to_string(b.checkpoint)) : b.checkpoint_policy,
        b.plan ? &*b.plan : nullptr);
  return h + "</table>\n";
}

}  // namespace detail

//! The HTML page of tune result `r`: a heading with the search's figures, the scatter plot of
//! every evaluated candidate (tuning::Result::evaluated; step time up, memory across, frontier
//! points filled blue and joined, over-budget ones hollow, the best a triangle, each
//! baseline a square; the memory axis spans the points, and the budget is a dashed line when
//! it lies within twice the largest point, else a note), a legend drawing each marker as the
//! plot does, a table of the best and the baselines (detail::report_summary), then
//! `opt.timelines`. Every text is escaped for HTML content and attributes.
inline std::string render_html_report(const tuning::Result& r, const HtmlReportOptions& opt) {
  using namespace detail;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  html_escape(opt.title) + "</title>\n<style>" + report_style() +
                  "</style>\n<script>" + report_script() + "</script>\n</head>\n<body>\n";
  h += "<h1>" + html_escape(opt.title) + "</h1>\n";
  if (!opt.command.empty()) h += "<pre class=\"command\">" + html_escape(opt.command) + "</pre>\n";
  int frontier = 0, over = 0;
  for (const tuning::Point& p : r.evaluated) {
    frontier += p.frontier;
    over += !p.fits;
  }
  h +=
      "<p class=\"search\">" +
      html_escape(
          std::to_string(r.candidates_tried) + " candidates settled (" +
          std::to_string(r.evaluated_count) + " evaluated, " + std::to_string(r.candidates_pruned) +
          " pruned, " + std::to_string(r.candidates_refused) + " refused) in " +
          format_time(r.seconds, "seconds", 3) +
          (r.cut ? (r.interrupted ? ", cut short by a stop request" : ", cut by the time limit")
                 : "") +
          "; the plot shows " + std::to_string(r.evaluated.size()) +
          (static_cast<int>(r.evaluated.size()) < r.evaluated_count
               ? " of them (the first in the search's order, and the whole frontier)"
               : "") +
          ", " + std::to_string(frontier) + " on the Pareto frontier, " + std::to_string(over) +
          " over the budget.") +
      "</p>\n<p class=\"note\">Pruned candidates are not evaluated: the search skips what "
      "cannot beat its pair's fastest plan, so slower plans that need less memory may be "
      "missing from the frontier.</p>\n";
  h += "<div id=\"script-status\" data-done=\"no\" hidden></div>\n<div "
       "id=\"script-errors\"></div>\n";
  h += report_legend(std::isfinite(opt.memory_limit));
  h += report_scatter(r, opt);
  h += "<div id=\"tip\"></div>\n";
  h += report_summary(r, opt);
  for (const ReportTimeline& t : opt.timelines) {
    h += "<section class=\"timeline\">\n<h2>" + html_escape(t.heading) + ": " +
         html_escape(t.plan) + "</h2>\n<pre class=\"command\">" + html_escape(t.command) +
         "</pre>\n<ul class=\"figures\">";
    for (const std::string& f : t.figures)
      h += "<li>" + html_escape(f) + "</li>";
    h += "</ul>\n";
    // The SVG document inline, without its XML declaration.
    std::string_view svg = t.svg;
    if (svg.substr(0, 5) == "<?xml") svg.remove_prefix(std::min(svg.find('\n') + 1, svg.size()));
    h += std::string(svg) + "</section>\n";
  }
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace pipesched
