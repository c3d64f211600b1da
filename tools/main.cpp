// The pipesched command: explore schedules without writing code.
//
//   pipesched list [--json]
//   pipesched generate --schedule NAME --ranks P --microbatches M [...] [-o FILE]
//   pipesched validate FILE
//   pipesched simulate (--schedule NAME ... | FILE) [cost] [checkpoint] [--json]
//   pipesched render   (--schedule NAME ... | FILE) [cost] [checkpoint] [--svg FILE] ...
//   pipesched convert IN OUT
//   pipesched tune --ranks P --global-batch N [cost] [--memory-budget X] [...]
//   pipesched profile [--hidden H ...] [--tokens LIST] [--prefixes LIST] [-o FILE]
//   pipesched --version
//
// where [cost] is --cost K=V,... or --model M (or --profile FILE) --device D or --cluster C
// (with --slicing MODE for the slice lengths), and [checkpoint] is --checkpoint
// none|full|selective|mario with
// --memory-budget X. A generated schedule takes --slices K, --warmup N and --wgrad fused|split|fine
// besides. Each subcommand lives in its own cmd_*.cpp; what they share is in cli.hpp.
//
// Exit codes: 0 ok, 1 the schedule is invalid, 2 bad usage or unreadable input (an
// unknown checkpoint mode, a malformed memory budget, a budget no checkpointing meets, a
// schedule over the size limits, or memory running out).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/version.hpp"

namespace {

namespace cli = pipesched::cli;

const char* main_help =
    "usage: pipesched COMMAND [OPTIONS]\n"
    "       pipesched --version\n"
    "\n"
    "Pipeline-parallel training schedules: generate, check, simulate and draw them.\n"
    "\n"
    "commands:\n"
    "  list       schedules, placements, policies, model and device presets (--json for scripts)\n"
    "  generate   write a generated schedule as PyTorch CSV or pipesched text\n"
    "  validate   check a schedule file (exit 1 when invalid)\n"
    "  simulate   time and memory of a schedule under a cost model (--json for scripts)\n"
    "  render     draw a schedule: SVG timeline, Chrome trace, text grid\n"
    "  convert    convert between CSV and the text form\n"
    "  tune       search schedule, microbatching and checkpointing under a memory budget\n"
    "  profile    measure the toy GPT's layers here and write a layer profile (--profile FILE)\n"
    "\n"
    "Run 'pipesched COMMAND --help' for a command's options, 'pipesched --version' for the\n"
    "version. Exit codes: 0 ok, 1 the schedule is invalid, 2 bad usage or unreadable input.\n";

int run(const std::string& command, const std::vector<std::string>& args) {
  if (command == "list") return cli::cmd_list(args);
  if (command == "generate") return cli::cmd_generate(args);
  if (command == "validate") return cli::cmd_validate(args);
  if (command == "simulate") return cli::cmd_simulate(args);
  if (command == "render") return cli::cmd_render(args);
  if (command == "convert") return cli::cmd_convert(args);
  if (command == "tune") return cli::cmd_tune(args);
  if (command == "profile") return cli::cmd_profile(args);
  throw cli::usage_error("unknown command '" + command +
                         "'; commands are list, generate, validate, simulate, render, convert, "
                         "tune, profile (see pipesched --help)");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(main_help, stderr);
    return cli::exit_usage;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(main_help, stdout);
    return cli::exit_ok;
  }
  if (command == "--version" || command == "version") {
    std::printf("pipesched %s\n", pipesched::version_string);
    return cli::exit_ok;
  }
  // Messages name the subcommand once; what the library says is put in the command's words
  // (its mentions of API fields as flags: cli::words_of).
  const bool known = command == "list" || command == "generate" || command == "validate" ||
                     command == "simulate" || command == "render" || command == "convert" ||
                     command == "tune";
  const std::string prefix = known ? "pipesched " + command + ": " : "pipesched: ";
  auto report = [&](const pipesched::Message& what, int code) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), cli::words_of(what, command).c_str());
    return code;
  };
  // By now the schedule that filled the memory is gone: the message can be built.
  auto out_of_memory = [&] {
    const std::string what = "out of memory while " + cli::Step::failed() +
                             "; give smaller sizes (fewer --ranks or --microbatches)";
    return report(what, cli::exit_usage);
  };
  try {
    return run(command, args);
  } catch (const cli::usage_error& e) {
    return report(e.message(), cli::exit_usage);
  } catch (const cli::invalid_error& e) {
    return report(e.message(), cli::exit_invalid);
  } catch (const pipesched::invalid_schedule& e) {
    return report(e.message(), cli::exit_invalid);
  } catch (const pipesched::error& e) {
    return report(e.message(), cli::exit_usage);
  } catch (const std::bad_alloc&) {
    return out_of_memory();
  } catch (const std::length_error&) {
    // What a container says when asked for more elements than it can address.
    return out_of_memory();
  } catch (const std::exception& e) {
    return report(e.what(), cli::exit_usage);
  }
}
