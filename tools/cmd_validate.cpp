// pipesched validate: checks a schedule file and prints a one-line summary when it is valid.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/csv.hpp"

namespace pipesched::cli {

int cmd_validate(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"--format", true,
       "also check that PyTorch 2.15's runtime can run the file as it stands: no slices, W "
       "parts, recomputes, offloads, vocabulary passes, replicas or BW spelling, the last stage's "
       "forwards in "
       "microbatch "
       "order and, with communication, a WAIT_SEND for every send and no idle slots",
       "pytorch"}};
  if (wants_help(argv)) {
    std::cout << help_text("pipesched validate FILE [--format pytorch]",
                           "Checks a schedule file (PyTorch CSV or pipesched text): every unit "
                           "computed once,\nindices in range, each stage on one rank, dependency "
                           "order, matched sends and\nreceives, and no deadlock. With --format "
                           "pytorch, also that PyTorch's runtime can run\nit (the rank, position "
                           "and rule of the first action it cannot). Exit 0 when\nvalid, 1 when "
                           "not, 2 when unreadable.",
                           specs);
    return exit_ok;
  }
  const Args a = parse_args("validate", argv, specs, 1);
  if (a.positionals.empty()) throw usage_error("give a schedule FILE");
  const std::string format = a.get("--format", "");
  if (a.has("--format") && format != "pytorch")
    throw usage_error("--format takes pytorch (the runtime to check the file for), got '" + format +
                      "'");
  const Schedule s = read_schedule(a.positionals[0]);
  require_valid(s);
  if (format == "pytorch") check_pytorch_runnable(s, true);
  std::printf("%s: valid — %d ranks, %d stages (%s), %d microbatches, %d slice%s, %zu actions%s\n",
              a.positionals[0].c_str(), s.problem.ranks, s.problem.stages,
              s.placement.describe().c_str(), s.problem.microbatches, s.problem.slices,
              s.problem.slices == 1 ? "" : "s", s.action_count(),
              s.has_comm() ? " with communication" : "");
  return exit_ok;
}

}  // namespace pipesched::cli
