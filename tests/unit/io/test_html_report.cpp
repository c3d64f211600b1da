// The HTML report of a tune search: every evaluated point and each marked plan drawn once, the
// frontier and budget drawn, axes captioned in the cost model's units with prefixed ticks, all
// text escaped in content and attributes, the timelines inlined, nothing loaded from outside.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pipesched/io/html_report.hpp"

namespace test_html_report {

namespace ps = pipesched;

namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

ps::tuning::Point point(const std::string& base, double seconds, double bytes, bool fits,
                        bool frontier, std::size_t order) {
  ps::tuning::Point p;
  p.base = base;
  p.checkpoint = "none";
  p.makespan = seconds;
  p.peak_memory = bytes;
  p.activation_peak = bytes / 2;
  p.fits = fits;
  p.frontier = frontier;
  p.order = order;
  return p;
}

ps::tuning::Result result() {
  ps::tuning::Result r;
  r.evaluated = {point("1f1b", 0.030, 10 * GiB, true, true, 0),
                 point("1f1b", 0.020, 14 * GiB, true, true, 1),
                 point("a\"b<c>&'d", 0.040, 12 * GiB, true, false, 2),
                 point("1f1b", 0.010, 30 * GiB, false, false, 3)};
  r.evaluated_count = 4;
  r.candidates_tried = 5;
  r.candidates_pruned = 1;
  ps::tuning::Plan best;
  best.base = "1f1b";
  best.makespan = 0.020;
  best.peak_memory = 14 * GiB;
  best.order = 1;
  r.best = best;
  r.baselines.push_back(ps::tuning::Baseline{"1f1b", ps::CheckpointMode::None, best});
  r.baselines.push_back(ps::tuning::Baseline{"zb-h1", ps::CheckpointMode::None, std::nullopt});
  return r;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

ps::HtmlReportOptions options() {
  ps::HtmlReportOptions o;
  o.title = "tune <script>alert(\"x\")</script>";
  o.command = "pipesched tune --bases 'a b' --report r.html";
  o.time_unit = "seconds";
  o.memory_unit = "bytes";
  o.memory_caption = "largest GPU's memory";
  o.memory_limit = 24 * GiB;
  o.timelines.push_back(
      ps::ReportTimeline{"best",
                         "1f1b <x>",
                         "pipesched simulate --schedule 1f1b",
                         {"step 20 ms"},
                         "<?xml version=\"1.0\"?>\n<svg class=\"timeline-svg\"></svg>\n"});
  return o;
}

}  // namespace

TEST(HtmlReport, DrawsEveryPointOnceAndMarksTheBestAndBaselines) {
  const std::string h = ps::render_html_report(result(), options());
  EXPECT_EQ(count(h, "<g class=\"point "), 4u + 2u);  // 4 evaluated, the best, one baseline
  EXPECT_EQ(count(h, "class=\"point frontier-point\""), 2u);
  EXPECT_EQ(count(h, "class=\"point over-budget\""), 1u);
  EXPECT_EQ(count(h, "class=\"point best\""), 1u);
  EXPECT_EQ(count(h, "class=\"point baseline\""), 1u);
  EXPECT_EQ(count(h, "class=\"frontier\""), 1u);
  EXPECT_EQ(count(h, "class=\"budget\""), 1u);
  EXPECT_NE(h.find("budget 24 GiB"), std::string::npos);
  // The timeline inline, its XML declaration dropped.
  EXPECT_NE(h.find("<svg class=\"timeline-svg\">"), std::string::npos);
  EXPECT_EQ(h.find("<?xml"), std::string::npos);
  EXPECT_NE(h.find("data-done=\"no\""), std::string::npos);  // until the script runs
}

TEST(HtmlReport, AxesInTheCostModelsUnits) {
  const std::string h = ps::render_html_report(result(), options());
  EXPECT_NE(h.find(">step time (s)<"), std::string::npos);
  EXPECT_NE(h.find(">largest GPU&apos;s memory (bytes)<"), std::string::npos);
  EXPECT_NE(h.find("memory-tick\" x=\""), std::string::npos);
  EXPECT_NE(h.find(" GiB</text>"), std::string::npos);
  EXPECT_NE(h.find(" ms</text>"), std::string::npos);
  ps::HtmlReportOptions uniform = options();
  uniform.time_unit = "units";
  uniform.memory_unit = "microbatches";
  uniform.memory_caption = "peak memory";
  uniform.memory_limit = std::numeric_limits<double>::infinity();
  const std::string u = ps::render_html_report(result(), uniform);
  EXPECT_NE(u.find(">step time (units)<"), std::string::npos);
  EXPECT_NE(u.find(">peak memory (microbatches)<"), std::string::npos);
  EXPECT_EQ(u.find(" GiB</text>"), std::string::npos);
  EXPECT_EQ(count(u, "class=\"budget\""), 0u);  // no budget, no line
}

TEST(HtmlReport, EscapesTextInContentAndAttributes) {
  const std::string h = ps::render_html_report(result(), options());
  EXPECT_EQ(h.find("<script>alert"), std::string::npos);
  EXPECT_NE(h.find("<title>tune &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</title>"),
            std::string::npos);
  EXPECT_NE(h.find("data-tip=\"a&quot;b&lt;c&gt;&amp;&apos;d, "), std::string::npos);
  EXPECT_EQ(h.find("a\"b<c>"), std::string::npos);
  EXPECT_NE(h.find("1f1b &lt;x&gt;"), std::string::npos);
  EXPECT_NE(h.find("--bases &apos;a b&apos;"), std::string::npos);
  // Self-contained: no resource named by address (the SVG namespace is a name, not a load).
  EXPECT_EQ(h.find("src="), std::string::npos);
  EXPECT_EQ(h.find("href="), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
}

TEST(HtmlReport, ActivationAxisPlotsTheActivationPeak) {
  ps::HtmlReportOptions o = options();
  o.activation_axis = true;
  const ps::tuning::Result r = result();
  EXPECT_EQ(ps::detail::plotted_memory(r.evaluated[0], o), 5 * GiB);
  o.activation_axis = false;
  EXPECT_EQ(ps::detail::plotted_memory(r.evaluated[0], o), 10 * GiB);
}

TEST(HtmlReport, TimesBelowASecondKeepTheirDigits) {
  ps::tuning::Result r = result();
  r.evaluated[0].makespan = 0.001205;
  const std::string h = ps::render_html_report(r, options());
  EXPECT_NE(h.find(": step 1.205 ms, "), std::string::npos);  // the tooltip
  EXPECT_EQ(h.find("0.001 s"), std::string::npos);
}

TEST(HtmlReport, SaysWhatCutTheSearch) {
  ps::tuning::Result r = result();
  r.cut = true;
  EXPECT_NE(ps::render_html_report(r, options()).find(", cut by the time limit;"),
            std::string::npos);
  r.interrupted = true;  // a stop request (a signal in the command), not the limit
  const std::string h = ps::render_html_report(r, options());
  EXPECT_NE(h.find(", cut short by a stop request;"), std::string::npos);
  EXPECT_EQ(h.find("time limit"), std::string::npos);
}

TEST(HtmlReport, NoDebugLineShowsOnThePage) {
  const std::string h = ps::render_html_report(result(), options());
  // The script's marker for tests stays, hidden and empty; no "script ran" text anywhere.
  EXPECT_NE(h.find("<div id=\"script-status\" data-done=\"no\" hidden></div>"), std::string::npos);
  EXPECT_EQ(h.find("script ran"), std::string::npos);
  EXPECT_EQ(h.find("script did not run"), std::string::npos);
}

TEST(HtmlReport, LegendDrawsEachMarkerAsThePlotDoes) {
  const std::string h = ps::render_html_report(result(), options());
  const std::string legend = h.substr(h.find("<p class=\"legend\">"));
  for (auto k : {ps::detail::MarkerKind::Best, ps::detail::MarkerKind::Baseline,
                 ps::detail::MarkerKind::Frontier, ps::detail::MarkerKind::Fits,
                 ps::detail::MarkerKind::OverBudget}) {
    const std::string cls = ps::detail::marker_class(k);
    SCOPED_TRACE(cls);
    EXPECT_NE(legend.find("data-marker=\"" + cls + "\""), std::string::npos);
    // The legend's shape has the plot's colours: its fill and stroke attributes appear on
    // this class's markers in the plot.
    const std::string shape = ps::detail::marker_shape(k, 10, 11);
    const std::string colours = shape.substr(shape.find(" fill="));
    EXPECT_NE(legend.find(colours), std::string::npos);
    const std::size_t in_plot = h.find("<g class=\"point " + cls + "\"");
    ASSERT_NE(in_plot, std::string::npos);
    EXPECT_EQ(
        h.substr(in_plot, h.find("</g>", in_plot) - in_plot).find(colours) != std::string::npos,
        true);
  }
  EXPECT_EQ(legend.find("&#9650;"), std::string::npos);  // no black text symbols
  EXPECT_NE(legend.find("data-line=\"budget\""), std::string::npos);
  // Without a budget the legend has no budget line.
  ps::HtmlReportOptions none = options();
  none.memory_limit = std::numeric_limits<double>::infinity();
  const std::string u = ps::render_html_report(result(), none);
  EXPECT_EQ(u.find("data-line=\"budget\""), std::string::npos);
}

TEST(HtmlReport, MemoryAxisSpansTheDataAndNotesABudgetFarBeyondIt) {
  // A small model: points of a few GiB under an 80 GiB device.
  ps::tuning::Result r = result();
  for (ps::tuning::Point& p : r.evaluated) {
    p.peak_memory /= 10;
    p.fits = true;
  }
  r.best->peak_memory /= 10;
  r.baselines[0].plan->peak_memory /= 10;
  ps::HtmlReportOptions o = options();
  o.memory_limit = 80 * GiB;
  const std::string h = ps::render_html_report(r, o);
  EXPECT_EQ(count(h, "class=\"budget\""), 0u);  // no line off the data's range
  EXPECT_NE(h.find("class=\"budget-note\""), std::string::npos);
  EXPECT_NE(h.find("budget 80 GiB: beyond the axis"), std::string::npos);
  // The axis ends near the largest point (3 GiB), not at the budget's 80 GiB.
  std::string last_tick;
  for (std::size_t at = h.find("memory-tick"); at != std::string::npos;
       at = h.find("memory-tick", at + 1)) {
    const std::size_t open = h.find('>', at) + 1;
    last_tick = h.substr(open, h.find('<', open) - open);
  }
  EXPECT_EQ(last_tick, "3 GiB");
  EXPECT_TRUE(ps::detail::budget_on_axis(10, 20));
  EXPECT_FALSE(ps::detail::budget_on_axis(10, 21));
  EXPECT_FALSE(ps::detail::budget_on_axis(10, std::numeric_limits<double>::infinity()));
  // A budget within the data's range is a line, as before.
  const std::string near = ps::render_html_report(result(), options());
  EXPECT_EQ(count(near, "class=\"budget\""), 1u);
  EXPECT_EQ(near.find("budget-note"), std::string::npos);
}

TEST(HtmlReport, SummaryTableOfTheBestAndEachPair) {
  ps::tuning::Result r = result();
  r.best->bubble_ratio = 0.125;
  r.best->recomputes = 3;
  r.baselines[0].plan->makespan = 0.025;
  const std::string h = ps::render_html_report(r, options());
  const std::size_t at = h.find("<table id=\"summary\"");
  ASSERT_NE(at, std::string::npos);
  const std::string table = h.substr(at, h.find("</table>", at) - at);
  EXPECT_NE(table.find("<th>step time</th>"), std::string::npos);
  EXPECT_NE(table.find("<th>largest GPU&apos;s memory</th>"), std::string::npos);
  EXPECT_EQ(count(table, "<tr class=\"best\">"), 1u);
  EXPECT_EQ(count(table, "<tr class=\"baseline\">"), 2u);
  EXPECT_NE(table.find("<td class=\"num\">20 ms</td><td class=\"num\">1x</td><td "
                       "class=\"num\">12.5%</td><td class=\"num\">14 GiB</td><td "
                       "class=\"num\">3</td>"),
            std::string::npos);
  EXPECT_NE(table.find("<td class=\"num\">25 ms</td><td class=\"num\">1.25x</td>"),
            std::string::npos);
  EXPECT_NE(table.find("<td>zb-h1</td><td>none</td><td colspan=\"6\">no plan of this pair fits"),
            std::string::npos);
  EXPECT_EQ(table.find("MFU"), std::string::npos);  // no FLOPs in this result
  // Nothing tried, no table.
  EXPECT_EQ(ps::render_html_report(ps::tuning::Result{}, options()).find("id=\"summary\""),
            std::string::npos);
}

}  // namespace test_html_report
