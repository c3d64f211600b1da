// pipesched convert: a schedule file from PyTorch's CSV to pipesched's text form or back.
#include <iostream>
#include <string>
#include <vector>

#include "common.hpp"

namespace pipesched::cli {

int cmd_convert(const std::vector<std::string>& argv) {
  if (wants_help(argv)) {
    std::cout << help_text("pipesched convert IN OUT",
                           "Converts a schedule between PyTorch's CSV and pipesched's text form.\n"
                           "The input form is detected; the output form follows OUT's extension\n"
                           "(.csv → CSV, anything else → text; '-' writes text to standard "
                           "output).",
                           {});
    return exit_ok;
  }
  const Args a = parse_args("convert", argv, {}, 2);
  if (a.positionals.size() != 2) throw usage_error("give IN and OUT");
  const Schedule s = read_schedule(a.positionals[0]);
  const std::string& out = a.positionals[1];
  if (out == "-")
    std::cout << schedule_as_text(s, false);
  else
    write_schedule(out, s);
  return exit_ok;
}

}  // namespace pipesched::cli
