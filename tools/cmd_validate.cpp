// pipesched validate: checks a schedule file and prints a one-line summary when it is valid.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace pipesched::cli {

int cmd_validate(const std::vector<std::string>& argv) {
  if (wants_help(argv)) {
    std::cout << help_text("pipesched validate FILE",
                           "Checks a schedule file (PyTorch CSV or pipesched text): every unit "
                           "computed once,\nindices in range, each stage on one rank, dependency "
                           "order, matched sends and\nreceives, and no deadlock. Exit 0 when "
                           "valid, 1 when not, 2 when unreadable.",
                           {});
    return exit_ok;
  }
  const Args a = parse_args("validate", argv, {}, 1);
  if (a.positionals.empty()) throw usage_error("give a schedule FILE");
  const Schedule s = read_schedule(a.positionals[0]);
  require_valid(s);
  std::printf("%s: valid — %d ranks, %d stages (%s), %d microbatches, %d slice%s, %zu actions%s\n",
              a.positionals[0].c_str(), s.problem.ranks, s.problem.stages,
              s.placement.describe().c_str(), s.problem.microbatches, s.problem.slices,
              s.problem.slices == 1 ? "" : "s", s.action_count(),
              s.has_comm() ? " with communication" : "");
  return exit_ok;
}

}  // namespace pipesched::cli
