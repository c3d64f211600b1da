// The pieces every subcommand of the pipesched command shares (see cli.hpp).
#include "cli.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched::cli {

std::string grouped(double n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", std::floor(n));
  std::string digits = buf, out;
  const std::size_t lead = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i >= lead && (i - lead) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Options

Args parse_args(const std::string& command, const std::vector<std::string>& argv,
                const std::vector<OptionSpec>& specs, std::size_t max_positionals) {
  Args a;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      std::string name = arg, value;
      bool inline_value = false;
      if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inline_value = true;
      }
      const OptionSpec* spec = nullptr;
      for (const auto& s : specs)
        if (s.name == name) spec = &s;
      if (!spec) {
        std::string known;
        for (const auto& s : specs)
          known += (known.empty() ? "" : ", ") + s.name;
        throw usage_error("unknown option '" + name + "'; " + command +
                          (known.empty() ? " takes no options" : " accepts " + known) +
                          " (see pipesched " + command + " --help)");
      }
      if (a.has(spec->name))
        throw usage_error("option " + spec->name + " given twice; give it once");
      if (spec->takes_value) {
        if (!inline_value) {
          if (i + 1 >= argv.size())
            throw usage_error("option " + spec->name + " needs a " +
                              (spec->value_name.empty() ? "value" : spec->value_name));
          value = argv[++i];
        }
        a.values[spec->name] = value;
      } else {
        if (inline_value) throw usage_error("option " + spec->name + " takes no value");
        a.values[spec->name] = "1";
      }
    } else {
      a.positionals.push_back(arg);
    }
  }
  if (a.positionals.size() > max_positionals)
    throw usage_error("unexpected argument '" + a.positionals[max_positionals] +
                      "' (see pipesched " + command + " --help)");
  return a;
}

int parse_int(const std::string& option, const std::string& text, int lo, int hi) {
  // Digits with an optional '-' only: strtol alone would also take blanks and a '+'.
  const std::size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
  const bool digits =
      text.size() > first && text.find_first_not_of("0123456789", first) == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const long v = digits ? std::strtol(text.c_str(), &end, 10) : 0;
  if (!digits || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw usage_error(option + " needs a whole number from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ", got '" + text + "'");
  return static_cast<int>(v);
}

double parse_number(const std::string& what, const std::string& text, double lo, double hi) {
  const std::string range =
      "from " + pipesched::format_general(lo) + " to " + pipesched::format_general(hi);
  // Decimal notation only: strtod alone would also take "inf", "nan" and hexadecimal.
  const bool decimal =
      !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const double v = decimal ? std::strtod(text.c_str(), &end) : 0.0;
  if (!decimal || *end != '\0')
    throw usage_error(what + " needs a finite decimal number " + range + ", got '" + text + "'");
  if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi)
    throw usage_error(what + " = " + text + " is out of range; give a number " + range);
  return v;
}

std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    const std::string position = "item " + std::to_string(out.size() + 1) + " of '" + text + "'";
    if (item.empty()) {
      // Suggest the list as given with the empty items left out.
      std::string kept;
      std::size_t from = 0;
      while (from <= text.size()) {
        const std::size_t to = std::min(text.find(',', from), text.size());
        if (to > from) kept += (kept.empty() ? "" : ",") + text.substr(from, to - from);
        from = to + 1;
      }
      throw usage_error(option + " " + text + ": " + position + " is empty; " +
                        (kept.empty() ? "give at least one item, separated by single commas"
                                      : "give the items separated by single commas: " + kept));
    }
    if (item.find_first_of(" \t\n\r\f\v") != std::string::npos) {
      std::string kept = text;
      std::erase_if(kept, [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); });
      throw usage_error(option + ": " + position + ", '" + item +
                        "', holds a blank; give the list without blanks: " + kept);
    }
    out.push_back(item);
    if (comma == text.size()) return out;
    begin = comma + 1;
  }
}

std::vector<int> parse_int_list(const std::string& option, const std::string& text, int lo,
                                int hi) {
  std::vector<int> out;
  for (const std::string& item : split_list(option, text))
    out.push_back(parse_int(option, item, lo, hi));
  if (out.empty()) throw usage_error(option + " needs a comma-separated list, got '" + text + "'");
  return out;
}

std::string join_ints(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? separator : "") + std::to_string(values[i]);
  return out;
}

namespace {

// Columns a UTF-8 text takes: one per code point (the help's "×" and "→" are one each).
std::size_t columns_of(std::string_view text) {
  std::size_t n = 0;
  for (char c : text)
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

namespace {

// Greedy line filling: as many words on a line as fit in `width` columns.
std::string fill(const std::vector<std::string>& words, std::size_t width, std::size_t indent,
                 std::size_t first_column) {
  std::string out;
  std::size_t column = first_column;
  bool line_empty = true;
  for (const std::string& word : words) {
    const std::size_t w = columns_of(word);
    if (!line_empty && column + 1 + w > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += w;
    line_empty = false;
  }
  return out;
}

// The words of a usage line: an option group in brackets or parentheses stays whole, so a
// line never breaks between "[--checkpoint" and "MODE]".
std::vector<std::string> usage_words(const std::string& usage) {
  std::vector<std::string> words;
  std::string word;
  int depth = 0;
  for (char c : usage) {
    if (c == '[' || c == '(') ++depth;
    if ((c == ']' || c == ')') && depth > 0) --depth;
    if (c == ' ' && depth == 0) {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

}  // namespace

std::string wrap(const std::string& text, std::size_t width, std::size_t indent,
                 std::size_t first_column) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;)
    words.push_back(w);
  return fill(words, width, indent, first_column);
}

std::string help_text(const std::string& usage, const std::string& about,
                      const std::vector<OptionSpec>& specs) {
  constexpr std::size_t column = 28;
  std::string out = "usage: " + fill(usage_words(usage), help_width, 7, 7) + "\n\n";
  // The about text keeps its own line breaks; only a line too long is wrapped.
  std::istringstream lines(about);
  for (std::string line; std::getline(lines, line);)
    out += (columns_of(line) <= help_width ? line : wrap(line, help_width, 0)) + "\n";
  if (!specs.empty()) out += "\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  " + s.name + (s.takes_value ? " " + s.value_name : "");
    if (columns_of(left) + 2 > column) {
      // A long name gets its own line; its help starts on the next.
      out += left + "\n" + std::string(column, ' ');
    } else {
      left.resize(left.size() + column - columns_of(left), ' ');
      out += left;
    }
    out += wrap(s.help, help_width, column, column) + "\n";
  }
  return out;
}

bool wants_help(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// ---------------------------------------------------------------------------------------
// Steps

namespace {
std::vector<std::string>& steps() {
  static std::vector<std::string> s;
  return s;
}
std::string& failed_step() {
  static std::string s;
  return s;
}
}  // namespace

Step::Step(std::string what) : exceptions_(std::uncaught_exceptions()) {
  steps().push_back(std::move(what));
}
Step::~Step() {
  // Moved, not copied: the exception may be bad_alloc, and a destructor must not throw.
  if (std::uncaught_exceptions() > exceptions_ && failed_step().empty())
    failed_step() = std::move(steps().back());
  steps().pop_back();
}
std::string Step::failed() {
  if (!failed_step().empty()) return failed_step();
  return steps().empty() ? std::string("starting") : steps().back();
}

// ---------------------------------------------------------------------------------------
// The library's words → the command line's

namespace {

// A field's name for the command: a flag (written "--ranks 4") or words (written
// "the model's heads = 16").
struct Name {
  std::string text;
  bool flag;
};

std::string dashed(std::string_view field) {
  std::string out = "--";
  for (char c : field)
    out += c == '_' ? '-' : c;
  return out;
}

// The name of the API field `key` on the command line of `command`: the flag that sets it, or
// words where no flag does. Structs whose every field is an option (tuning::Request,
// tuning::ClusterRequest) map a field to its option's spelling; the rest are listed.
std::optional<Name> cli_name(std::string_view key, std::string_view command) {
  struct Entry {
    std::string_view key;
    Name name;
  };
  static const Entry entries[] = {
      {"CheckpointMode", {"--checkpoint", true}},
      {"WGradMode", {"--wgrad", true}},
      {"wgrad", {"--wgrad", true}},
      {"SlicingMode", {"--slicing", true}},
      {"tuning::Request.checkpoints", {"--checkpoint", true}},
      {"tuning::Request.budget.per_rank", {"--memory-budget per rank", true}},
      {"tuning::ClusterRequest.pipeline", {"--pp", true}},
      {"tuning::ClusterRequest.tensor", {"--tp", true}},
      {"Parallelism.tensor", {"--tp", true}},
      {"Parallelism.data", {"--dp", true}},
      {"Parallelism.zero", {"--zero", true}},
      {"Parallelism.layers", {"--layers", true}},
      {"DeviceSpec.ranks_per_node", {"--gpus-per-node", true}},
      {"global_batch", {"--global-batch", true}},
      {"Problem.ranks", {"--ranks", true}},
      {"Problem.slices", {"--slices", true}},
      {"ModelShape.sequence", {"--sequence", true}},
      {"ModelShape.microbatch_size", {"--microbatch-size", true}},
      {"MemoryBudget.all", {"--memory-budget", true}},
      {"TraceOptions.time_scale", {"the trace's time scale", false}},
      {"pipesched::check", {"pipesched validate", false}},
      {"pipesched::simulate", {"the simulator", false}},
      // The function that refused, before its message: the command says which option it was.
      {"uniform_slices:", {"", false}},
      {"balanced_slices:", {"", false}},
      {"terapipe_slices:", {"", false}},
  };
  for (const Entry& e : entries)
    if (e.key == key) return e.name;
  auto after = [&](std::string_view head) -> std::optional<std::string_view> {
    if (!key.starts_with(head)) return std::nullopt;
    return key.substr(head.size());
  };
  if (key == "Problem.microbatches")
    return command == "tune" ? Name{"microbatches", false} : Name{"--microbatches", true};
  if (auto f = after("tuning::Request.")) return Name{dashed(*f), true};
  if (auto f = after("tuning::ClusterRequest.")) return Name{dashed(*f), true};
  if (auto f = after("Parallelism.layers")) return Name{"--layers" + std::string(*f), true};
  if (auto f = after("MemoryBudget.per_rank[")) {
    return Name{"the memory budget of rank " + std::string(f->substr(0, f->find(']'))), false};
  }
  if (auto f = after("Problem.")) return Name{std::string(*f), false};
  if (auto f = after("ModelShape.")) return Name{"the model's " + std::string(*f), false};
  if (auto f = after("DeviceSpec.")) return Name{"the device's " + std::string(*f), false};
  return std::nullopt;
}

struct CliNaming {
  std::string_view command;
  std::optional<std::string> mention(const Message::Mention& m) const {
    const std::optional<Name> name = cli_name(m.key, command);
    if (!name) return std::nullopt;
    if (m.value.empty() || name->text.empty()) return name->text;
    return name->text + (name->flag ? " " : " = ") + m.value;
  }
  std::string amount(const Message::Amount& a) const {
    return format_amount(a.value, a.unit, a.round_up);
  }
};

}  // namespace

std::string words_of(const Message& message, std::string_view command) {
  return message.text(CliNaming{command});
}

std::string checkpoint_names() {
  std::string out;
  const auto all = builtin_checkpoints();
  for (std::size_t i = 0; i < all.size(); ++i)
    out += (i == 0                ? ""
            : i + 1 == all.size() ? " or "
                                  : ", ") +
           std::string(all[i].name) + (i == 0 ? " (default)" : "");
  return out;
}

std::string memory_knob_orders() {
  return builtin_names([](const GeneratorInfo& g) { return static_cast<bool>(g.generate_within); },
                       ", ");
}

}  // namespace pipesched::cli
