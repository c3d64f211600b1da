// pipesched render: pictures of a simulated schedule (SVG timeline, Chrome trace, text grid),
// with times and memory in the cost model's units.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/svg.hpp"
#include "pipesched/io/text_grid.hpp"
#include "pipesched/io/trace.hpp"

namespace pipesched::cli {

int cmd_render(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = schedule_options;
  specs.insert(specs.end(), cost_options.begin(), cost_options.end());
  specs.insert(specs.end(), slicing_options.begin(), slicing_options.end());
  specs.insert(specs.end(), checkpoint_options.begin(), checkpoint_options.end());
  specs.push_back(
      {"--svg", true, "write an SVG timeline (a row per rank, memory beneath)", "FILE"});
  specs.push_back(
      {"--trace", true, "write Chrome trace JSON (Perfetto, chrome://tracing)", "FILE"});
  specs.push_back({"--text", false, "print a text grid (the default when no file is asked for)"});
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched render (--schedule NAME ... | FILE) [--cost ... | --model M|--profile F "
        "(--device D | "
        "--cluster C) "
        "[--slicing MODE]] [--checkpoint MODE] [--memory-budget X] [--svg FILE] [--trace FILE] "
        "[--text]",
        "Draws a simulated schedule, sliced, checkpointed and with weight gradients placed as\n"
        "--slicing, --checkpoint and --wgrad ask (see pipesched simulate --help). Times and\n"
        "memory are in seconds and GiB under --model/--device, in abstract units and\n"
        "microbatches under --cost. The SVG and the trace draw at most " +
            grouped(max_drawn_actions) + " actions.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("render", argv, specs, 1);
  const bool files = a.has("--svg") || a.has("--trace");
  const Prepared p = prepare(a);
  const Schedule& s = p.schedule;
  if (files && static_cast<double>(s.action_count()) > max_drawn_actions)
    throw usage_error("schedule '" + s.name + "' has " + grouped(s.action_count()) +
                      " actions; --svg and --trace draw at most " + grouped(max_drawn_actions) +
                      " (beyond that the files take gigabytes and no viewer shows the actions "
                      "apart); draw fewer --ranks or --microbatches, or use --text");
  const SimulationResult r = simulate_schedule(s, p.cost);
  const Units u = units_of(p.cost);
  const bool tc = is_transformer(p.cost);
  if (a.has("--svg")) {
    SvgOptions o;
    o.memory_unit = u.memory;
    o.time_unit = u.time;
    std::string svg;
    {
      Step step("drawing the SVG timeline");
      svg = render_svg(s, r, o);
    }
    write_output(a.get("--svg"), svg);
  }
  if (a.has("--trace")) {
    TraceOptions o;
    o.time_scale = tc ? 1e6 : 1000.0;  // seconds → µs; one unit → 1 ms
    o.memory_unit = u.memory;
    // The trace counts whole nanoseconds in a double, exact up to 2^53.
    if (r.makespan * o.time_scale * 1000.0 > 9007199254740992.0)
      throw usage_error("--trace: the step takes " + format_time(r.makespan, u.time) +
                        ", longer than a Chrome trace can hold at " +
                        (tc ? "its microseconds" : "one unit = 1 ms") +
                        " (2^53 ns, about 104 days); use smaller --cost times");
    std::string trace;
    {
      Step step("writing the Chrome trace");
      trace = render_chrome_trace(s, r, o);
    }
    write_output(a.get("--trace"), trace);
  }
  if (a.has("--text") || !files) {
    TextGridOptions o;
    o.memory_unit = u.memory;
    o.time_unit = u.time;
    Step step("drawing the text grid");
    std::cout << render_text_grid(s, r, o);
  }
  return exit_ok;
}

}  // namespace pipesched::cli
