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
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw usage_error(option + " needs a whole number from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ", got '" + text + "'");
  return static_cast<int>(v);
}

double parse_number(const std::string& what, const std::string& text, double lo, double hi) {
  const std::string range = "from " + pipesched::detail::format_general(lo) + " to " + pipesched::detail::format_general(hi);
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

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_int_list(const std::string& option, const std::string& text, int lo,
                                int hi) {
  std::vector<int> out;
  for (const std::string& item : split_list(text))
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
// words where no flag does. Structs whose every field is an option (TuneRequest,
// ClusterRequest) map a field to its option's spelling; the rest are listed.
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
      {"TuneRequest.checkpoints", {"--checkpoint", true}},
      {"TuneRequest.budget.per_rank", {"--memory-budget per rank", true}},
      {"ClusterRequest.pipeline", {"--pp", true}},
      {"ClusterRequest.tensor", {"--tp", true}},
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
  if (auto f = after("TuneRequest.")) return Name{dashed(*f), true};
  if (auto f = after("ClusterRequest.")) return Name{dashed(*f), true};
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
    out += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i].name) +
           (i == 0 ? " (default)" : "");
  return out;
}

std::string memory_knob_orders() {
  return builtin_names([](const GeneratorInfo& g) { return static_cast<bool>(g.generate_within); },
                       ", ");
}

// ---------------------------------------------------------------------------------------
// Cost models

const std::vector<OptionSpec> cost_options = {
    {"--cost", true,
     "UniformCost parameters, e.g. f=1,b=2,w=1,r=1,comm=0,boundary=0.05,w_memory=0; times from 0 "
     "to 1e12",
     "K=V,..."},
    {"--model", true, "TransformerCost model preset (see pipesched list)", "NAME"},
    {"--device", true, "TransformerCost device preset (see pipesched list)", "NAME"},
    {"--sequence", true, "sequence length for --model (default: the preset's)", "N"},
    {"--microbatch-size", true, "sequences per microbatch for --model (default 1)", "B"},
    {"--tp", true, "tensor-parallel degree of each pipeline rank, inside a node (default 1)", "T"},
    {"--sp", false, "sequence parallelism with --tp (norm and dropout activations split too)"},
    {"--dp", true,
     "data-parallel replicas of the pipeline; their gradients are all-reduced (default 1)", "D"},
    {"--zero", true,
     "ZeRO stage with --dp: 0 (default), 1 (optimizer state sharded), 2 (+ gradients)", "Z"},
    {"--layers", true,
     "layers of each stage of the model, e.g. 6,6,6,6 (default: as even as possible)", "LIST"},
    {"--gpus-per-node", true, "GPUs of a node (default: the device's)", "G"},
    {"--whole-step", false,
     "also the optimizer step (time) and each rank's largest temporary buffer (memory)"},
};

UniformCost parse_uniform_cost(const std::string& text) {
  UniformCost c;
  std::vector<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  const char* keys = "keys are f, b, w, r, comm, boundary, w_memory";
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw usage_error("--cost: '" + item + "' is not KEY=VALUE; " + keys);
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      throw usage_error("--cost gives " + k + " twice; give each key once");
    seen.push_back(k);
    // Times are bounded so that a step of max_actions of them stays finite; the memory
    // shares are fractions of a unit's activations.
    const bool share = k == "boundary" || k == "w_memory";
    double* field = k == "f"          ? &c.f
                    : k == "b"        ? &c.b
                    : k == "w"        ? &c.w
                    : k == "r"        ? &c.r
                    : k == "comm"     ? &c.comm
                    : k == "boundary" ? &c.boundary
                    : k == "w_memory" ? &c.w_memory
                                      : nullptr;
    if (!field) throw usage_error("--cost: unknown key '" + k + "'; " + keys);
    *field = parse_number("--cost " + k, v, 0, share ? 1.0 : max_cost_time);
  }
  try {
    c.check();
  } catch (const invalid_problem& e) {
    throw usage_error("--cost: " + e.message());
  }
  return c;
}

AnyCost get_cost(const Args& a) {
  const bool transformer = a.has("--model") || a.has("--device");
  if (transformer && a.has("--cost"))
    throw usage_error(
        "give either --cost (UniformCost) or --model and --device (TransformerCost), not both");
  if (!transformer) {
    for (const char* o : {"--sequence", "--microbatch-size", "--tp", "--sp", "--dp", "--zero",
                          "--layers", "--gpus-per-node", "--whole-step"})
      if (a.has(o))
        throw usage_error(std::string(o) +
                          " describes a transformer on a device; it needs --model and --device");
    return parse_uniform_cost(a.get("--cost"));
  }
  if (!a.has("--model") || !a.has("--device"))
    throw usage_error(
        "TransformerCost needs both --model NAME and --device NAME (see pipesched list)");
  try {
    ModelShape m = presets::find_model(a.get("--model"));
    if (a.has("--sequence")) m.sequence = parse_int("--sequence", a.get("--sequence"), 1, 1 << 24);
    if (a.has("--microbatch-size"))
      m.microbatch_size = parse_int("--microbatch-size", a.get("--microbatch-size"), 1, 1 << 16);
    TransformerCost c{m, presets::find_device(a.get("--device")), {}};
    if (a.has("--gpus-per-node"))
      c.device.ranks_per_node = parse_int("--gpus-per-node", a.get("--gpus-per-node"), 1, 1 << 16);
    if (a.has("--tp")) c.parallel.tensor = parse_int("--tp", a.get("--tp"), 1, 1 << 16);
    if (a.has("--sp")) {
      if (c.parallel.tensor < 2)
        throw usage_error("--sp splits activations over the tensor group; give --tp 2 or more too");
      c.parallel.sequence_parallel = true;
    }
    if (a.has("--dp")) c.parallel.data = parse_int("--dp", a.get("--dp"), 1, 1 << 20);
    if (a.has("--zero")) {
      c.parallel.zero = parse_int("--zero", a.get("--zero"), 0, 2);
      if (c.parallel.zero > 0 && c.parallel.data < 2)
        throw usage_error("--zero " + a.get("--zero") +
                          " shards over data-parallel replicas; give --dp 2 or more too");
    }
    if (a.has("--layers"))
      c.parallel.layers = parse_int_list("--layers", a.get("--layers"), 1, 1 << 20);
    c.parallel.whole_step = a.has("--whole-step");
    c.check();
    return c;
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

bool is_transformer(const AnyCost& c) {
  return std::holds_alternative<TransformerCost>(c);
}

Units units_of(const AnyCost& c) {
  return is_transformer(c) ? Units{"seconds", "bytes"} : Units{"units", "microbatches"};
}

// ---------------------------------------------------------------------------------------
// Getting a schedule: from a generator or from a file.

const std::vector<OptionSpec> schedule_options = {
    {"--schedule", true, "generator name (see pipesched list)", "NAME"},
    {"--ranks", true, "pipeline ranks P", "P"},
    {"--microbatches", true, "microbatches per step M", "M"},
    {"--chunks", true,
     "stages per rank V (interleaved-1f1b, looped-bfs, interleaved-zb, slice-pipe; default 2)",
     "V"},
    {"--slices", true, "slices per microbatch K (gpipe, seq-1f1b, slice-pipe; default 1)", "K"},
    {"--warmup", true,
     "rank 0's warm-up: forwards before its steady forward-backward pairs (slice-pipe; default: "
     "the schedule's; fewer hold less memory and cost step time gradually)",
     "N"},
    {"--wgrad", true,
     "backward: fused (B), split (I then W) or fine (W cut into parts run in waits); default: "
     "the schedule's",
     "fused|split|fine"},
    {"--wgrad-parts", true,
     "parts of each weight gradient with --wgrad fine (default 4; gemm: one per weight GEMM, "
     "as MEPipe cuts them, with --model)",
     "N|gemm"},
};

namespace {

//! The generators accepting `has`, by name: "gpipe, seq-1f1b, slice-pipe".
template <class Pred>
std::string generator_names(Pred has) {
  std::string names;
  for (const auto& g : generators())
    if (has(g)) names += (names.empty() ? "" : ", ") + std::string(g.name);
  return names;
}

WGradChoice parse_wgrad_choice(const GeneratorInfo& g, const Args& a) {
  WGradChoice w;
  w.mode = g.default_wgrad;
  const std::string name(g.name);
  if (a.has("--wgrad")) {
    const std::string text = a.get("--wgrad");
    if (text == "fused") {
      w.mode = WGradMode::Fused;
    } else if (text == "split") {
      w.mode = WGradMode::Split;
    } else if (text == "fine") {
      if (!g.split)
        throw usage_error("--wgrad fine cuts the weight gradients of a split backward, which '" +
                          name + "' does not run; use --wgrad fused");
      w.mode = WGradMode::Split;
      w.fine = true;
    } else {
      throw usage_error("--wgrad takes fused, split or fine, got '" + text + "'");
    }
  }
  if (a.has("--wgrad-parts")) {
    if (!w.fine)
      throw usage_error(
          "--wgrad-parts sets the parts of each weight gradient under --wgrad fine; give "
          "--wgrad fine too, or leave --wgrad-parts out");
    w.parts = detail::lower_ascii(a.get("--wgrad-parts")) == "gemm"
                  ? 0
                  : parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  }
  return w;
}

const CheckpointInfo& parse_checkpoint_option(const Args& a) {
  if (!a.has("--checkpoint")) return builtin_checkpoints()[0];
  try {
    return find_checkpoint(a.get("--checkpoint"));
  } catch (const parse_error& e) {
    throw usage_error("--checkpoint: " + e.message());
  }
}

// The estimate is checked before anything is allocated: a schedule over the limit would
// otherwise take the machine's memory before the first message.
void check_action_bound(const std::string& name, const ActionEstimate& e, const std::string& sizes,
                        const std::string& fewer) {
  if (e.actions <= max_actions) return;
  throw usage_error("schedule '" + name + "' with " + sizes + " has " + grouped(e.units) +
                    " units (stage, microbatch, slice) of up to " + grouped(e.per_unit) +
                    " actions each (" + e.breakdown + "): up to " + grouped(e.actions) +
                    " actions, over the limit of " + grouped(max_actions) +
                    " actions a command builds (about 300 MB and a few seconds to simulate); " +
                    "use fewer " + fewer);
}

Schedule generated_schedule(const Args& a, const CheckpointInfo& checkpoint, bool comm,
                            WGradChoice& wgrad_choice, int model_layers) {
  if (!a.has("--schedule"))
    throw usage_error("give --schedule NAME (see pipesched list) or a schedule FILE");
  const GeneratorInfo& g = [&]() -> const GeneratorInfo& {
    try {
      return find_generator(a.get("--schedule"));
    } catch (const invalid_problem& e) {
      throw usage_error(e.message());
    }
  }();
  if (!a.has("--ranks") || !a.has("--microbatches"))
    throw usage_error("--schedule needs --ranks P and --microbatches M");
  Problem p;
  p.ranks = parse_int("--ranks", a.get("--ranks"), 1, 65536);
  p.microbatches = parse_int("--microbatches", a.get("--microbatches"), 1, 1 << 20);
  int chunks = g.default_chunks;
  if (a.has("--chunks")) {
    chunks = parse_int("--chunks", a.get("--chunks"), 1, 1024);
    p.stages = p.ranks * chunks;
  }
  const std::string name(g.name);
  if (a.has("--slices")) {
    p.slices = parse_int("--slices", a.get("--slices"), 1, 1 << 16);
    if (p.slices > 1 && !g.slices)
      throw usage_error("--slices " + std::to_string(p.slices) + ": schedule '" + name +
                        "' runs whole microbatches; slice-level schedules are " +
                        generator_names([](const auto& x) { return x.slices; }) +
                        " (or give --slices 1)");
  }
  int warmup = 0;
  if (a.has("--warmup")) {
    if (!g.generate_with_warmup)
      throw usage_error("--warmup: schedule '" + name +
                        "' has no warm-up to set; schedules with one: " +
                        generator_names([](const auto& x) { return x.generate_with_warmup; }));
    warmup = parse_int("--warmup", a.get("--warmup"), 1, 1 << 24);
  }
  wgrad_choice = parse_wgrad_choice(g, a);
  WGradChoice counted = wgrad_choice;  // --wgrad-parts gemm: at most every GEMM of a rank's layers
  if (wgrad_choice.fine && wgrad_choice.parts == 0) {
    if (model_layers == 0)
      throw usage_error(
          "--wgrad-parts gemm cuts each weight gradient per weight GEMM of the model; give "
          "--model and --device too, or a number of parts");
    counted.parts = 4 * ((model_layers + p.ranks - 1) / p.ranks) + 1;
  }

  // A generator that takes no chunk count refuses another one itself, without allocating.
  const int counted_chunks = g.chunks_vary ? chunks : g.default_chunks;
  const ActionEstimate e =
      estimate_actions(static_cast<double>(p.ranks) * counted_chunks, p.microbatches, p.slices,
                       counted, checkpoint.recomputes, comm);
  std::string sizes =
      "--ranks " + std::to_string(p.ranks) + ", --microbatches " + std::to_string(p.microbatches);
  std::string fewer = "--ranks or --microbatches";
  if (counted_chunks > 1) {
    sizes += g.chunks_vary ? ", --chunks " + std::to_string(counted_chunks)
                           : ", " + std::to_string(counted_chunks) + " chunks per rank";
    if (g.chunks_vary) fewer = "--ranks, --microbatches or --chunks";
  }
  if (p.slices > 1) {
    sizes += ", --slices " + std::to_string(p.slices);
    fewer += ", or fewer --slices";
  }
  if (wgrad_choice.fine) {
    sizes += ", --wgrad-parts " + std::to_string(counted.parts);
    fewer += ", or fewer --wgrad-parts";
  }
  check_action_bound(name, e, sizes, fewer);

  Step step("generating schedule '" + name + "' (up to " + grouped(e.actions) + " actions)");
  try {
    return warmup > 0 ? g.generate_with_warmup(p, wgrad_choice.mode, warmup)
                      : g.generate(p, wgrad_choice.mode);
  } catch (const invalid_problem& e2) {
    throw usage_error(e2.message());
  }
}

}  // namespace

ActionEstimate estimate_actions(double stages, double microbatches, double slices,
                                const WGradChoice& w, bool checkpointed, bool comm) {
  ActionEstimate e;
  e.units = stages * microbatches * slices;
  e.per_unit = 1;
  e.breakdown = "F";
  if (w.mode == WGradMode::Fused) {
    e.per_unit += 1;
    e.breakdown += ", B";
  } else if (!w.fine) {
    e.per_unit += 2;
    e.breakdown += ", I, W";
  } else {
    e.per_unit += 1 + w.parts;
    e.breakdown += ", I, " + std::to_string(w.parts) + " W parts";
  }
  if (checkpointed) {
    e.per_unit += 1;
    e.breakdown += ", R";
  }
  if (comm) {
    // At most one activation and one gradient cross ranks per unit: a send, its wait and a
    // receive each.
    e.per_unit += 6;
    e.breakdown += ", 2 sends, 2 receives, 2 send waits";
  }
  e.actions = e.units * e.per_unit;
  return e;
}

Schedule read_schedule(const std::string& path) {
  Step step("reading schedule file '" + path + "'");
  try {
    return read_schedule_file(path);
  } catch (const error& e) {
    throw usage_error(e.message());
  }
}

void require_valid(const Schedule& s) {
  Step step("validating schedule '" + s.name + "' (" + grouped(s.action_count()) + " actions)");
  ValidationReport rep = check(s);
  // The report keeps the first violations and counts the rest: its message has the total.
  if (!rep.ok()) throw invalid_error(rep.message(s.name));
}

void write_output(const std::string& path, const std::string& content) {
  if (path.empty() || path == "-") {
    std::cout << content;
    return;
  }
  Step step("writing '" + path + "'");
  std::ofstream f(path, std::ios::binary);
  if (!f) throw usage_error("cannot write '" + path + "': " + std::strerror(errno));
  f << content;
  if (!f.flush()) throw usage_error("cannot write '" + path + "': " + std::strerror(errno));
}

std::string schedule_as_text(const Schedule& s, bool csv) {
  Step step(std::string("writing the schedule as ") + (csv ? "CSV" : "text"));
  return csv ? to_csv(s) : to_text(s);
}

void write_schedule(const std::string& path, const Schedule& s) {
  Step step("writing '" + path + "'");
  try {
    write_schedule_file(path, s);
  } catch (const error& e) {
    throw usage_error(e.message());
  }
}

std::vector<GeneratorFacts> generator_facts() {
  std::vector<GeneratorFacts> out;
  for (const GeneratorInfo& g : generators())
    out.push_back({std::string(g.name), std::string(g.summary), to_string(g.placement),
                   to_string(g.default_wgrad), g.default_chunks, g.chunks_vary, g.fused, g.split,
                   g.slices, static_cast<bool>(g.generate_with_warmup), g.mario});
  return out;
}

int recompute_count(const Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const Action& x : list)
      n += x.kind == OpKind::R;
  return n;
}

SimulationResult simulate_schedule(const Schedule& s, const AnyCost& cost) {
  Step step("simulating schedule '" + s.name + "' (" + grouped(s.action_count()) + " actions)");
  try {
    return std::visit([&](const auto& c) { return simulate(s, c); }, cost);
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

// ---------------------------------------------------------------------------------------
// Slice lengths from the command line: where each microbatch's sequence is cut, which only
// TransformerCost (tokens, causal attention) can tell apart.

const std::vector<OptionSpec> slicing_options = {
    {"--slicing", true,
     "slice lengths: uniform (default), balanced (equal forward time) or terapipe (TeraPipe's "
     "optimum); the last two need --model and --device",
     "MODE"},
};

namespace {

//! Sets the slice lengths of a TransformerCost `cost` for the slices of `s` as --slicing asks
//! (TeraPipe's p is the rank count of `s`); any other cost is left as it is.
SlicingChoice apply_slicing_options(AnyCost& cost, const Args& a, const Schedule& s) {
  SlicingChoice choice;
  if (a.has("--slicing")) {
    try {
      choice.mode = parse_slicing_mode(a.get("--slicing"));
    } catch (const parse_error& e) {
      throw usage_error("--slicing: " + e.message());
    }
  }
  if (!is_transformer(cost)) {
    if (choice.mode != SlicingMode::Uniform)
      throw usage_error(std::string("--slicing ") + to_string(choice.mode) +
                        " chooses slice lengths from the cost of each token under causal "
                        "attention, which only TransformerCost knows; give --model and --device "
                        "(UniformCost cuts every microbatch into equal slices)");
    return choice;
  }
  auto& tc = std::get<TransformerCost>(cost);
  Step step("choosing slice lengths");
  try {
    choice.lengths = slice_lengths(tc, choice.mode, s.problem.slices, s.problem.ranks);
  } catch (const invalid_problem& e) {
    throw usage_error(std::string("--slicing ") + to_string(choice.mode) + ": " + e.message());
  }
  tc.slice_lengths = choice.lengths;
  return choice;
}

MemoryBudget parse_budget_option(const std::string& text, const AnyCost& cost, const Schedule& s) {
  const bool tc = is_transformer(cost);
  if (detail::lower_ascii(text) == "device") {
    if (!tc)
      throw usage_error(
          "--memory-budget device is the device's memory less weights, gradients and "
          "optimizer state, which only TransformerCost knows; give --model and --device, or "
          "a plain number of microbatches");
    try {
      return device_memory_budget(std::get<TransformerCost>(cost), s.problem, s.placement);
    } catch (const invalid_problem& e) {
      throw usage_error("--memory-budget device: " + e.message());
    }
  }
  MemoryBudgetValue v;
  try {
    v = parse_memory_budget(text);
  } catch (const parse_error& e) {
    throw usage_error("--memory-budget: " + e.message() +
                      (tc ? " With --model/--device, 'device' is accepted too." : ""));
  }
  if (tc && !v.bytes)
    throw usage_error("--memory-budget " + text +
                      " is a plain number, i.e. in memory units, but --model/--device measure "
                      "memory in bytes; give bytes with a unit (24GB, 512MiB) or 'device'");
  if (!tc && v.bytes)
    throw usage_error("--memory-budget " + text +
                      " is in bytes, but UniformCost (no --model/--device) measures memory in "
                      "microbatches of one rank's activations; give a plain number such as 2, "
                      "or give --model and --device to count bytes");
  MemoryBudget b;
  b.all = v.value;
  return b;
}

//! What --checkpoint asks for, refused before anything is built when it cannot run.
const CheckpointInfo& checked_checkpoint(const Args& a) {
  const CheckpointInfo& policy = parse_checkpoint_option(a);
  if (policy.needs_budget && !a.has("--memory-budget"))
    throw usage_error("--checkpoint " + std::string(policy.name) +
                      " chooses what to recompute from a memory budget; give --memory-budget X "
                      "too (e.g. 2 microbatches, or 24GB / device with --model and --device)");
  // The policy's own rule (Mario reads the order's mario_applies, as plan<> does); a schedule
  // file has no order and is taken as it is.
  if (a.has("--schedule")) {
    const std::string name = a.get("--schedule");
    const GeneratorInfo* g = nullptr;
    try {
      g = &find_generator(name);
    } catch (const invalid_problem& e) {
      throw usage_error(e.message());
    }
    if (!policy.runs_on(*g)) {
      const std::string orders =
          builtin_names([&](const GeneratorInfo& o) { return policy.runs_on(o); });
      if (policy.mode == CheckpointMode::Mario)
        throw usage_error(
            "--checkpoint mario hides recomputes in the bubbles of a one-forward-one-backward "
            "rhythm and runs on " +
            orders + " only, not on '" + name + "'; use one of those, or --checkpoint selective "
            "or full");
      throw usage_error("--checkpoint " + std::string(policy.name) + " runs on " + orders +
                        " only, not on '" + name + "'");
    }
  }
  return policy;
}

//! `s` fitted, with its weight gradients placed, and checkpointed, as --memory-budget,
//! --fit / --no-fit, --wgrad fine and --checkpoint ask, under `cost` — the order in which
//! pipesched tune builds a plan, so that a plan's `simulate` command gives its step time:
//!  1. a generated order with a memory knob (GeneratorInfo::generate_within: Zero Bubble's
//!     capped weight-gradient deferral, slice-pipe's warm-up unless --warmup sets it) fits
//!     itself to a budget first — without checkpointing always (unless --no-fit), with
//!     checkpointing when --fit asks, or when its own schedule cannot meet the budget;
//!  2. --wgrad fine places the weight-gradient parts under the budget (when the schedule is
//!     over it whatever they do, for speed alone: checkpointing brings the memory down);
//!  3. --checkpoint recomputes what the budget needs.
//! A budget the schedule cannot meet is bad usage (exit 2) with the library's message.
Schedule apply_budget_options(Schedule s, const Args& a, const AnyCost& cost,
                              CheckpointChoice& choice, const WGradChoice& wgrad, bool generated) {
  if (a.has("--fit") && a.has("--no-fit")) throw usage_error("give --fit or --no-fit, not both");
  if (a.has("--memory-budget")) {
    choice.budget = parse_budget_option(a.get("--memory-budget"), cost, s);
    choice.budgeted = true;
  }
  const GeneratorInfo* g = nullptr;
  if (generated && choice.budget.limited() && !a.has("--warmup") && !a.has("--no-fit")) {
    g = &find_generator(a.get("--schedule"));
    if (!g->generate_within) g = nullptr;
  }
  if (a.has("--fit") && !g)
    throw usage_error(
        "--fit fits a schedule's own memory knob to --memory-budget: give a budget and a "
        "schedule with one (" +
        memory_knob_orders() + ", slice-pipe without --warmup)");
  if (!choice.policy->recomputes && !choice.budgeted && !wgrad.fine) return s;
  auto fitted = [&](const Schedule& own) {
    Step step("fitting schedule '" + std::string(g->name) + "' to the memory budget");
    return std::visit(
        [&](const auto& c) {
          return g->generate_within(own.problem, wgrad.mode, c, choice.budget);
        },
        cost);
  };
  auto placed = [&](Schedule base) {
    if (!wgrad.fine) return base;
    Step step("placing weight-gradient parts");
    try {
      return std::visit(
          [&](const auto& c) {
            try {
              return fill_weight_gradients(base, c, choice.budget, wgrad.parts);
            } catch (const invalid_problem&) {
              if (!choice.budget.limited()) throw;
              return fill_weight_gradients(base, c, MemoryBudget{}, wgrad.parts);
            }
          },
          cost);
    } catch (const invalid_problem& e) {
      throw usage_error("--wgrad fine: " + e.message());
    }
  };
  auto checkpointed = [&](const Schedule& base) {
    Step step("checkpointing (--checkpoint " + std::string(choice.policy->name) + ")");
    return std::visit(
        [&](const auto& c) { return choice.policy->apply(base, CostRef(c), choice.budget); },
        cost);
  };
  const bool fit_first = g && (!choice.policy->recomputes || a.has("--fit"));
  try {
    if (fit_first) return checkpointed(placed(fitted(s)));
    try {
      return checkpointed(placed(s));
    } catch (const invalid_problem&) {
      if (!g) throw;
      try {
        return checkpointed(placed(fitted(s)));
      } catch (const invalid_problem&) {
      }
      throw;  // the order's own schedule's reason
    }
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

}  // namespace

const std::vector<OptionSpec> checkpoint_options = {
    {"--checkpoint", true,
     checkpoint_names() +
         " (selective and mario need a budget; full and selective recompute after the gradient "
         "arrives, as Megatron-LM; the -early ones may recompute before it)",
     "MODE"},
    {"--memory-budget", true,
     "activation memory per rank: N (microbatches), 24GB, 512MiB or device", "X"},
    {"--fit", false,
     "fit the schedule's own memory knob (" + memory_knob_orders() +
         ") to the budget before checkpointing (default: only without checkpointing, or when its "
         "own schedule cannot meet the budget)"},
    {"--no-fit", false,
     "keep the schedule's own order under the budget (checkpointing alone fits it)"},
};

Prepared prepare(const Args& a, const PrepareOptions& options) {
  Prepared out;
  out.cost = get_cost(a);
  out.checkpoint.policy = &checked_checkpoint(a);
  const bool checkpointed = out.checkpoint.policy->recomputes;

  bool from_generator = false;
  for (const OptionSpec& o : schedule_options)
    from_generator = from_generator || a.has(o.name);
  if (options.allow_file && !a.positionals.empty()) {
    if (from_generator)
      throw usage_error(
          "give either a schedule FILE or --schedule NAME with its options, not both");
    out.schedule = read_schedule(a.positionals[0]);
    out.from_file = true;
    // Checkpointing adds at most one R per unit; the file itself is within the readers' limits.
    if (checkpointed) {
      const Problem& p = out.schedule.problem;
      const double units = static_cast<double>(p.stages) * p.microbatches * p.slices;
      const double actions = static_cast<double>(out.schedule.action_count()) + units;
      if (actions > max_actions)
        throw usage_error("schedule '" + out.schedule.name + "' has " +
                          grouped(out.schedule.action_count()) + " actions and --checkpoint " +
                          std::string(out.checkpoint.policy->name) + " may add " + grouped(units) +
                          " recomputes: up to " + grouped(actions) +
                          " actions, over the limit of " + grouped(max_actions) +
                          " actions a command builds; checkpoint a "
                          "smaller schedule");
    }
    require_valid(out.schedule);
  } else {
    out.schedule = generated_schedule(
        a, *out.checkpoint.policy, options.lower_comm, out.wgrad,
        is_transformer(out.cost) ? std::get<TransformerCost>(out.cost).model.layers : 0);
    // --wgrad-parts gemm: as many parts as the stage with the most weight GEMMs has, each
    // W's parts its GEMMs (WGradSplit::PerGemm), as pipesched tune cuts them.
    if (out.wgrad.fine && out.wgrad.parts == 0) {
      auto& tc = std::get<TransformerCost>(out.cost);
      tc.wgrad_split = WGradSplit::PerGemm;
      const CostContext ctx{out.schedule.problem, out.schedule.placement, 1};
      for (int st = 0; st < out.schedule.problem.stages; ++st)
        out.wgrad.parts = std::max(out.wgrad.parts, tc.weight_gemms(ctx, st));
    }
  }
  out.slicing = apply_slicing_options(out.cost, a, out.schedule);
  out.schedule = apply_budget_options(std::move(out.schedule), a, out.cost, out.checkpoint,
                                      out.wgrad, !out.from_file);
  if (options.lower_comm) {
    Step step("lowering to sends and receives");
    out.schedule = lower_communication(out.schedule);
  }
  require_valid(out.schedule);
  return out;
}

}  // namespace pipesched::cli
