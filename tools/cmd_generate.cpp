// pipesched generate: a generated schedule, checkpointed and with weight-gradient parts placed
// as asked, validated and written as PyTorch CSV or pipesched text.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/csv.hpp"

namespace pipesched::cli {

int cmd_generate(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = schedule_options;
  specs.insert(specs.end(), checkpoint_options.begin(), checkpoint_options.end());
  specs.insert(specs.end(), cost_options.begin(), cost_options.end());
  specs.insert(specs.end(), slicing_options.begin(), slicing_options.end());
  specs.push_back({"--format", true,
                   "output form: csv (PyTorch's CSV), pytorch (CSV that PyTorch can run: "
                   "refuses slices, W parts and R) or text (default csv)",
                   "csv|pytorch|text"});
  specs.push_back({"--comm", false,
                   "lower to explicit SEND/RECV actions, a WAIT_SEND for every send, each "
                   "channel's receives in the order of its sends"});
  specs.push_back({"--max-outstanding-sends", true,
                   "with --comm: at most N sends of a rank without their WAIT_SEND at any point "
                   "(PyTorch's max_outstanding_sends); the oldest send's wait goes before a send "
                   "that would exceed it and receives are posted as their sends are placed",
                   "N"});
  specs.push_back({"-o", true, "write to FILE instead of standard output", "FILE"});
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched generate --schedule NAME --ranks P --microbatches M "
        "[--chunks V] [--slices K] [--warmup N] [--wgrad fused|split|fine] [--wgrad-parts N] "
        "[--checkpoint MODE] [--memory-budget X] "
        "[--cost K=V,... | --model M|--profile F (--device D | --cluster C) [--slicing MODE]] "
        "[--format csv|pytorch|text] "
        "[--comm [--max-outstanding-sends N]] [-o FILE]",
        "Generates a schedule, checkpoints it (recompute actions R, e.g. 2R0), places fine\n"
        "weight-gradient parts (--wgrad fine, e.g. 2W0:1), validates it and writes it. Slices\n"
        "appear as a suffix (2F0.3: slice 3). The cost options only matter with\n"
        "--memory-budget (checkpointing; without it, zb-h1/zb-h2/zb-v and slice-pipe fitting\n"
        "themselves to it) and for fine weight gradients: they say what an action takes and\n"
        "holds, and so what --memory-budget admits (see pipesched simulate --help). A schedule\n"
        "may hold at most " +
            grouped(max_actions) +
            " actions (sends, receives and send waits of --comm included).\n"
            "PyTorch reads 2F0.3 as 2F0 and 2W0:1 as 2W0 without a word, and refuses R: with\n"
            "--format pytorch a schedule that uses slices, W parts or recomputes is refused\n"
            "(exit 1) with the action and the reason.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("generate", argv, specs, 0);
  const std::string format = a.get("--format", "csv");
  if (format != "csv" && format != "text" && format != "pytorch")
    throw usage_error("--format takes csv, pytorch or text, got '" + format + "'");
  int budget = 0;
  if (a.has("--max-outstanding-sends")) {
    if (!a.has("--comm"))
      throw usage_error(
          "--max-outstanding-sends limits the sends of a lowered schedule; give --comm too");
    budget = parse_int("--max-outstanding-sends", a.get("--max-outstanding-sends"), 1, 1 << 20);
  }
  const Prepared p = prepare(
      a, {.allow_file = false, .lower_comm = a.has("--comm"), .max_outstanding_sends = budget});
  if (format == "pytorch") check_pytorch_runnable(p.schedule);
  write_output(a.get("-o"), schedule_as_text(p.schedule, format != "text"));
  return exit_ok;
}

}  // namespace pipesched::cli
