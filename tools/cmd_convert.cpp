// pipesched convert: a schedule file from PyTorch's CSV to pipesched's text form or back.
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/csv.hpp"

namespace pipesched::cli {

int cmd_convert(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"--format", true,
       "output form instead of OUT's extension: csv, pytorch (CSV that PyTorch can run: refuses "
       "what its runtime cannot run, see validate --format pytorch; writes B for BW) or text",
       "csv|pytorch|text"}};
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched convert IN OUT [--format csv|pytorch|text]",
        "Converts a schedule between PyTorch's CSV and pipesched's text form.\n"
        "The input form is detected; the output form follows OUT's extension\n"
        "(.csv → CSV, anything else → text; '-' writes text to standard "
        "output)\nunless --format says otherwise. A file read with CRLF line "
        "ends (CSV or text) is\nwritten with them, and a full backward "
        "read as BW is written BW, except with\n--format pytorch, which "
        "writes B (PyTorch 2.15 refuses BW). With --format pytorch a\n"
        "schedule PyTorch's runtime cannot run (slices, W parts, recomputes, offloads,\n"
        "vocabulary passes, the last stage's forwards out of microbatch order, ...; see\n"
        "pipesched validate --help) is refused (exit 1) with the rank, position and rule,\n"
        "and so is one the validator refuses (pipesched validate says why); nothing is\n"
        "written then.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("convert", argv, specs, 2);
  if (a.positionals.size() != 2) throw usage_error("give IN and OUT");
  // Given at all, --format names a form: an empty word is refused, not read as "by extension".
  const std::string format = a.get("--format", "");
  if (a.has("--format") && format != "csv" && format != "text" && format != "pytorch")
    throw usage_error("--format takes csv, pytorch or text, got '" + format + "'");
  Schedule s = read_schedule(a.positionals[0]);
  if (format == "pytorch") {
    // PyTorch's runtime checks less than pipesched's validator: a schedule it cannot run
    // correctly (a missing action, a deadlock) is refused here, before anything is written.
    require_valid(s);
    s = spelled_for_pytorch(std::move(s));
    check_pytorch_runnable(s);
  }
  const std::string& out = a.positionals[1];
  if (format.empty()) {
    if (out == "-")
      std::cout << schedule_as_text(s, false);
    else
      write_schedule(out, s);
  } else {
    const std::string text = schedule_as_text(s, format != "text");
    if (out == "-")
      std::cout << text;
    else
      write_output(out, text);
  }
  return exit_ok;
}

}  // namespace pipesched::cli
