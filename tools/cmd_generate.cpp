// pipesched generate: a generated schedule, checkpointed and with weight-gradient parts placed
// as asked, validated and written as PyTorch CSV or pipesched text.
#include <iostream>
#include <string>
#include <vector>

#include "common.hpp"

namespace pipesched::cli {

int cmd_generate(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = schedule_options;
  specs.insert(specs.end(), checkpoint_options.begin(), checkpoint_options.end());
  specs.insert(specs.end(), cost_options.begin(), cost_options.end());
  specs.insert(specs.end(), slicing_options.begin(), slicing_options.end());
  specs.push_back(
      {"--format", true, "output form: csv (PyTorch's) or text (default csv)", "csv|text"});
  specs.push_back({"--comm", false, "lower to explicit SEND/RECV actions"});
  specs.push_back({"-o", true, "write to FILE instead of standard output", "FILE"});
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched generate --schedule NAME --ranks P --microbatches M "
        "[--chunks V] [--slices K] [--warmup N] [--wgrad fused|split|fine] [--wgrad-parts N] "
        "[--checkpoint MODE] [--memory-budget X] "
        "[--cost K=V,... | --model NAME --device NAME [--slicing MODE]] [--format csv|text] "
        "[--comm] [-o FILE]",
        "Generates a schedule, checkpoints it (recompute actions R, e.g. 2R0), places fine\n"
        "weight-gradient parts (--wgrad fine, e.g. 2W0:1), validates it and writes it. Slices\n"
        "appear as a suffix (2F0.3: slice 3). The cost options only matter with\n"
        "--memory-budget (checkpointing; without it, zb-h1/zb-h2/zb-v and slice-pipe fitting\n"
        "themselves to it) and for fine weight gradients: they say what an action takes and holds, "
        "and\n"
        "so what --memory-budget admits (see pipesched simulate --help). A schedule may hold at "
        "most\n" +
            grouped(max_actions) + " actions (sends and receives of --comm included).",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("generate", argv, specs, 0);
  const std::string format = a.get("--format", "csv");
  if (format != "csv" && format != "text")
    throw usage_error("--format takes csv or text, got '" + format + "'");
  const Prepared p = prepare(a, {.allow_file = false, .lower_comm = a.has("--comm")});
  write_output(a.get("-o"), schedule_as_text(p.schedule, format == "csv"));
  return exit_ok;
}

}  // namespace pipesched::cli
