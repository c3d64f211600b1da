// pipesched tune --report FILE.html: the search as one self-contained page (io/html_report.hpp)
// with the timeline of the best plan and of each pair's best, each the plan's schedule simulated
// under the cost model it was planned under (cost_of), beside the `pipesched simulate` command
// that reproduces it.
#include <cstddef>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/io/html_report.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/io/svg.hpp"

namespace pipesched::cli {

namespace {

//! The timeline of plan `p`: its schedule simulated under the cost model it was planned under
//! (cost_of), drawn; the command that reproduces it is printed beside it.
ReportTimeline timeline_of(const std::string& heading, const tuning::Plan& p,
                           const TuneCommand& c) {
  ReportTimeline t;
  t.heading = heading;
  t.plan = describe(p);
  t.command = plan_command(p, c.context);
  const Schedule& s = p.schedule;
  const Units& u = c.units;
  t.figures = {"step " + format_time(p.makespan, u.time),
               "bubble " + format_percent(p.bubble_ratio),
               (c.transformer ? "largest GPU's memory " : "peak memory ") +
                   format_memory(p.peak_memory, u.memory),
               std::to_string(p.recomputes) + " recomputes"};
  if (c.transformer) t.figures.push_back("MFU " + format_percent(p.mfu));
  if (static_cast<double>(s.action_count()) > max_drawn_actions) {
    t.figures.push_back("timeline not drawn: " + grouped(s.action_count()) +
                        " actions, more than the " + grouped(max_drawn_actions) + " drawn");
    return t;
  }
  const SimulationResult sim = c.transformer ? simulate_schedule(s, cost_of<TransformerCost>(p))
                                             : simulate_schedule(s, cost_of<UniformCost>(p));
  SvgOptions o;
  o.title = heading + ": " + t.plan;
  o.memory_unit = u.memory;
  o.time_unit = u.time;
  o.width = 1240;
  t.svg = render_svg(s, sim, o);
  return t;
}

}  // namespace

void write_tune_html(const tuning::Result& r, const TuneCommand& c,
                     const std::vector<std::string>& argv) {
  Step step("writing the HTML report " + c.report);
  HtmlReportOptions o;
  o.command = "pipesched tune";
  for (const std::string& word : argv)
    o.command += " " + (word.find_first_of(" '\"\\$`") == std::string::npos || word.empty()
                            ? word
                            : "'" + word + "'");
  o.time_unit = c.units.time;
  o.memory_unit = c.units.memory;
  // The budget line is the constraint itself: under TransformerCost's default budget every
  // GPU is held to its device memory, static bytes included; a budget given holds each
  // rank's activations; UniformCost's memory is activations only.
  if (c.transformer && (c.cluster || !c.req.budget)) {
    o.memory_caption = "largest GPU's memory";
    o.memory_limit = std::get<TransformerCost>(c.cost).device.memory_bytes;
  } else {
    o.activation_axis = c.transformer;
    o.memory_caption = "largest rank's activation memory";
    if (c.req.budget) o.memory_limit = c.req.budget->all;
  }
  if (r.best) o.timelines.push_back(timeline_of("best", *r.best, c));
  for (const tuning::Baseline& b : r.baselines)
    if (b.plan)
      o.timelines.push_back(
          timeline_of("best of " + b.base + " with " + checkpoint_name(*b.plan), *b.plan, c));
  write_output(c.report, render_html_report(r, o));
}

}  // namespace pipesched::cli
