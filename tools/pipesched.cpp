// The pipesched command: explore schedules without writing code.
//
//   pipesched list
//   pipesched generate --schedule NAME --ranks P --microbatches M [...] [-o FILE]
//   pipesched validate FILE
//   pipesched simulate (--schedule NAME ... | FILE) [cost] [checkpoint] [--json]
//   pipesched render   (--schedule NAME ... | FILE) [cost] [checkpoint] [--svg FILE] ...
//   pipesched convert IN OUT
//
// where [cost] is --cost K=V,... or --model M --device D (with --slicing MODE for the slice
// lengths), and [checkpoint] is --checkpoint none|full|selective|mario with --memory-budget X.
// A generated schedule takes --slices K, --warmup N and --wgrad fused|split|fine besides.
//
// Exit codes: 0 ok, 1 the schedule is invalid, 2 bad usage or unreadable input (an
// unknown checkpoint mode, a malformed memory budget, or a budget no checkpointing meets).
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/io/svg.hpp"
#include "pipesched/io/text_grid.hpp"
#include "pipesched/io/trace.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pipesched.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_invalid = 1;
constexpr int exit_usage = 2;

//! Bad usage or unreadable input: reported on stderr, exit code 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
//! The schedule breaks a rule: exit code 1.
struct invalid_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------
// Argument parsing: options with a value (--name VALUE or --name=VALUE), switches and
// positionals, checked against what each subcommand accepts.

struct OptionSpec {
  std::string name;  // "--ranks"
  bool takes_value;  // false for switches
  std::string help;  // one line for --help
  std::string value_name = "";
};

struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> positionals;
  bool has(const std::string& k) const { return values.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
  }
};

Args parse_args(const std::string& command, const std::vector<std::string>& argv,
                const std::vector<OptionSpec>& specs, std::size_t max_positionals) {
  Args a;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
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
        throw usage_error("pipesched " + command + ": unknown option '" + name + "'; it accepts " +
                          known + " (see pipesched " + command + " --help)");
      }
      if (a.has(spec->name))
        throw usage_error("pipesched " + command + ": option " + spec->name +
                          " given twice; give it once");
      if (spec->takes_value) {
        if (!inline_value) {
          if (i + 1 >= argv.size())
            throw usage_error("pipesched " + command + ": option " + spec->name + " needs a " +
                              (spec->value_name.empty() ? "value" : spec->value_name));
          value = argv[++i];
        }
        a.values[spec->name] = value;
      } else {
        if (inline_value)
          throw usage_error("pipesched " + command + ": option " + spec->name + " takes no value");
        a.values[spec->name] = "1";
      }
    } else {
      a.positionals.push_back(arg);
    }
  }
  if (a.positionals.size() > max_positionals)
    throw usage_error("pipesched " + command + ": unexpected argument '" +
                      a.positionals[max_positionals] + "' (see pipesched " + command + " --help)");
  return a;
}

int parse_int(const std::string& option, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw usage_error(option + " needs a whole number from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ", got '" + text + "'");
  return static_cast<int>(v);
}

double parse_double(const std::string& what, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v))
    throw usage_error(what + " needs a number, got '" + text + "'");
  return v;
}

std::string help_text(const std::string& usage, const std::string& about,
                      const std::vector<OptionSpec>& specs) {
  std::string out = "usage: " + usage + "\n\n" + about + "\n";
  if (!specs.empty()) out += "\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  " + s.name + (s.takes_value ? " " + s.value_name : "");
    if (left.size() < 28)
      left.resize(28, ' ');
    else
      left += "  ";
    out += left + s.help + "\n";
  }
  return out;
}

bool wants_help(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// ---------------------------------------------------------------------------------------
// Getting a schedule: from a generator or from a file.

const std::vector<OptionSpec> schedule_options = {
    {"--schedule", true, "generator name (see pipesched list)", "NAME"},
    {"--ranks", true, "pipeline ranks P", "P"},
    {"--microbatches", true, "microbatches per step M", "M"},
    {"--chunks", true, "stages per rank V (interleaved-1f1b, looped-bfs, slice-pipe; default 2)",
     "V"},
    {"--slices", true, "sequence slices per microbatch K (gpipe, seq-1f1b, slice-pipe; default 1)",
     "K"},
    {"--warmup", true,
     "forwards rank 0 runs before its first backward (slice-pipe; default: the schedule's)", "N"},
    {"--wgrad", true,
     "backward: fused (B), split (I then W) or fine (W cut into parts run in waits); default: "
     "the schedule's",
     "fused|split|fine"},
    {"--wgrad-parts", true, "parts of each weight gradient with --wgrad fine (default 4)", "N"},
};

//! How the backward is asked for: the generator's mode, and for `fine` the parts that
//! fill_weight_gradients cuts each W into after checkpointing.
struct WGradChoice {
  ps::WGradMode mode = ps::WGradMode::Fused;
  bool fine = false;
  int parts = 4;
};

//! The generators accepting `has`, by name: "gpipe, seq-1f1b, slice-pipe".
template <class Pred>
std::string generator_names(Pred has) {
  std::string names;
  for (const auto& g : ps::generators())
    if (has(g)) names += (names.empty() ? "" : ", ") + std::string(g.name);
  return names;
}

WGradChoice parse_wgrad_choice(const ps::GeneratorInfo& g, const Args& a) {
  WGradChoice w;
  w.mode = g.default_wgrad;
  const std::string name(g.name);
  if (a.has("--wgrad")) {
    const std::string text = a.get("--wgrad");
    if (text == "fused") {
      w.mode = ps::WGradMode::Fused;
    } else if (text == "split") {
      w.mode = ps::WGradMode::Split;
    } else if (text == "fine") {
      if (!g.split)
        throw usage_error("--wgrad fine cuts the weight gradients of a split backward, which '" +
                          name + "' does not run; use --wgrad fused");
      w.mode = ps::WGradMode::Split;
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
    w.parts = parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  }
  return w;
}

ps::Schedule generated_schedule(const std::string& command, const Args& a,
                                WGradChoice* wgrad_choice = nullptr) {
  if (!a.has("--schedule"))
    throw usage_error("pipesched " + command +
                      ": give --schedule NAME (see pipesched list) or a "
                      "schedule FILE");
  const ps::GeneratorInfo& g = [&]() -> const ps::GeneratorInfo& {
    try {
      return ps::find_generator(a.get("--schedule"));
    } catch (const ps::invalid_problem& e) {
      throw usage_error(e.what());
    }
  }();
  if (!a.has("--ranks") || !a.has("--microbatches"))
    throw usage_error("pipesched " + command + ": --schedule needs --ranks P and --microbatches M");
  ps::Problem p;
  p.ranks = parse_int("--ranks", a.get("--ranks"), 1, 65536);
  p.microbatches = parse_int("--microbatches", a.get("--microbatches"), 1, 1 << 20);
  if (a.has("--chunks")) {
    int v = parse_int("--chunks", a.get("--chunks"), 1, 1024);
    p.stages = p.ranks * v;
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
  const WGradChoice w = parse_wgrad_choice(g, a);
  if (wgrad_choice) *wgrad_choice = w;
  try {
    return warmup > 0 ? g.generate_with_warmup(p, w.mode, warmup) : g.generate(p, w.mode);
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
}

ps::Schedule file_schedule(const std::string& path) {
  try {
    return ps::read_schedule_file(path);
  } catch (const ps::error& e) {
    throw usage_error(e.what());
  }
}

ps::Schedule get_schedule(const std::string& command, const Args& a, WGradChoice& wgrad) {
  bool from_gen = false;
  for (const OptionSpec& o : schedule_options)
    from_gen = from_gen || a.has(o.name);
  if (!a.positionals.empty()) {
    if (from_gen)
      throw usage_error("pipesched " + command +
                        ": give either a schedule FILE or --schedule "
                        "NAME with its options, not both");
    return file_schedule(a.positionals[0]);
  }
  return generated_schedule(command, a, &wgrad);
}

void require_valid(const ps::Schedule& s) {
  ps::ValidationReport rep = ps::check(s);
  if (!rep.ok())
    throw invalid_error("schedule '" + s.name + "' is invalid (" +
                        std::to_string(rep.violations.size()) + " problem" +
                        (rep.violations.size() == 1 ? "" : "s") + "):\n" + rep.summary());
}

// ---------------------------------------------------------------------------------------
// Cost models from the command line.

const std::vector<OptionSpec> cost_options = {
    {"--cost", true, "UniformCost parameters, e.g. f=1,b=2,w=1,r=1,comm=0,boundary=0.05,w_memory=0",
     "K=V,..."},
    {"--model", true, "TransformerCost model preset (see pipesched list)", "NAME"},
    {"--device", true, "TransformerCost device preset (see pipesched list)", "NAME"},
    {"--sequence", true, "sequence length for --model (default: the preset's)", "N"},
    {"--microbatch-size", true, "sequences per microbatch for --model (default 1)", "B"},
};

ps::UniformCost parse_uniform_cost(const std::string& text) {
  ps::UniformCost c;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      throw usage_error("--cost: '" + item +
                        "' is not KEY=VALUE; keys are f, b, w, r, comm, "
                        "boundary, w_memory");
    std::string k = item.substr(0, eq);
    double v = parse_double("--cost " + k, item.substr(eq + 1));
    if (k == "f")
      c.f = v;
    else if (k == "b")
      c.b = v;
    else if (k == "w")
      c.w = v;
    else if (k == "r")
      c.r = v;
    else if (k == "comm")
      c.comm = v;
    else if (k == "boundary")
      c.boundary = v;
    else if (k == "w_memory")
      c.w_memory = v;
    else
      throw usage_error("--cost: unknown key '" + k +
                        "'; keys are f, b, w, r, comm, boundary, "
                        "w_memory");
  }
  try {
    c.check();
  } catch (const ps::invalid_problem& e) {
    throw usage_error(std::string("--cost: ") + e.what());
  }
  return c;
}

using AnyCost = std::variant<ps::UniformCost, ps::TransformerCost>;

AnyCost get_cost(const Args& a) {
  const bool transformer = a.has("--model") || a.has("--device");
  if (transformer && a.has("--cost"))
    throw usage_error(
        "give either --cost (UniformCost) or --model and --device "
        "(TransformerCost), not both");
  if (!transformer) {
    if (a.has("--sequence") || a.has("--microbatch-size"))
      throw usage_error("--sequence and --microbatch-size need --model and --device");
    return parse_uniform_cost(a.get("--cost"));
  }
  if (!a.has("--model") || !a.has("--device"))
    throw usage_error(
        "TransformerCost needs both --model NAME and --device NAME (see pipesched "
        "list)");
  try {
    ps::ModelShape m = ps::presets::find_model(a.get("--model"));
    if (a.has("--sequence")) m.sequence = parse_int("--sequence", a.get("--sequence"), 1, 1 << 24);
    if (a.has("--microbatch-size"))
      m.microbatch_size = parse_int("--microbatch-size", a.get("--microbatch-size"), 1, 1 << 16);
    ps::TransformerCost c{m, ps::presets::find_device(a.get("--device")), {}};
    return c;
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
}

ps::SimulationResult run_simulation(const ps::Schedule& s, const AnyCost& cost) {
  try {
    return std::visit([&](const auto& c) { return ps::simulate(s, c); }, cost);
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
}

bool is_transformer(const AnyCost& c) {
  return std::holds_alternative<ps::TransformerCost>(c);
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

//! The slicing asked for and, under TransformerCost, the lengths it gave.
struct SlicingChoice {
  ps::SlicingMode mode = ps::SlicingMode::Uniform;
  std::vector<int> lengths;  // empty without TransformerCost
};

//! Sets the slice lengths of a TransformerCost `cost` for the slices of `s` as --slicing asks
//! (TeraPipe's p is the rank count of `s`); any other cost is left as it is.
SlicingChoice apply_slicing_options(AnyCost& cost, const Args& a, const ps::Schedule& s) {
  SlicingChoice choice;
  if (a.has("--slicing")) {
    try {
      choice.mode = ps::parse_slicing_mode(a.get("--slicing"));
    } catch (const ps::parse_error& e) {
      throw usage_error(std::string("--slicing: ") + e.what());
    }
  }
  if (!is_transformer(cost)) {
    if (choice.mode != ps::SlicingMode::Uniform)
      throw usage_error(std::string("--slicing ") + ps::to_string(choice.mode) +
                        " chooses slice lengths from the cost of each token under causal "
                        "attention, which only TransformerCost knows; give --model and --device "
                        "(UniformCost cuts every microbatch into equal slices)");
    return choice;
  }
  auto& tc = std::get<ps::TransformerCost>(cost);
  try {
    choice.lengths = ps::slice_lengths(tc, choice.mode, s.problem.slices, s.problem.ranks);
  } catch (const ps::invalid_problem& e) {
    throw usage_error(std::string("--slicing ") + ps::to_string(choice.mode) + ": " + e.what());
  }
  tc.slice_lengths = choice.lengths;
  return choice;
}

std::string join_ints(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? separator : "") + std::to_string(values[i]);
  return out;
}

//! `s` with its weight gradients cut into parts and placed in waits when --wgrad fine asks,
//! under the cost and the memory budget in use; otherwise `s`.
ps::Schedule apply_wgrad_choice(const ps::Schedule& s, const WGradChoice& w, const AnyCost& cost,
                                const ps::MemoryBudget& budget) {
  if (!w.fine) return s;
  try {
    return std::visit(
        [&](const auto& c) { return ps::fill_weight_gradients(s, c, budget, w.parts); }, cost);
  } catch (const ps::invalid_problem& e) {
    throw usage_error(std::string("--wgrad fine: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------
// Checkpointing from the command line: a mode and a per-rank memory budget, in the memory
// unit of the cost model that also decides what to recompute.

const std::vector<OptionSpec> checkpoint_options = {
    {"--checkpoint", true, "none (default), full, selective or mario (the last two need a budget)",
     "MODE"},
    {"--memory-budget", true,
     "activation memory per rank: N (microbatches), 24GB, 512MiB or device", "X"},
};

//! The checkpointing asked for and the budget it was held to.
struct CheckpointChoice {
  ps::CheckpointMode mode = ps::CheckpointMode::None;
  ps::MemoryBudget budget;  // unlimited when --memory-budget is not given
  bool budgeted = false;
};

ps::MemoryBudget parse_budget_option(const std::string& text, const AnyCost& cost,
                                     const ps::Schedule& s) {
  const bool tc = is_transformer(cost);
  if (ps::detail::lower_ascii(text) == "device") {
    if (!tc)
      throw usage_error(
          "--memory-budget device is the device's memory less weights, gradients and "
          "optimizer state, which only TransformerCost knows; give --model and --device, or "
          "a plain number of microbatches");
    try {
      return ps::device_memory_budget(std::get<ps::TransformerCost>(cost), s.problem, s.placement);
    } catch (const ps::invalid_problem& e) {
      throw usage_error(std::string("--memory-budget device: ") + e.what());
    }
  }
  ps::MemoryBudgetValue v;
  try {
    v = ps::parse_memory_budget(text);
  } catch (const ps::parse_error& e) {
    throw usage_error(std::string("--memory-budget: ") + e.what() +
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
  ps::MemoryBudget b;
  b.all = v.value;
  return b;
}

//! `s` checkpointed as --checkpoint and --memory-budget ask, under `cost`. A budget the
//! schedule cannot meet is bad usage (exit 2) with the library's message.
ps::Schedule apply_checkpoint_options(const ps::Schedule& s, const Args& a, const AnyCost& cost,
                                      CheckpointChoice& choice) {
  if (a.has("--checkpoint")) {
    try {
      choice.mode = ps::parse_checkpoint_mode(a.get("--checkpoint"));
    } catch (const ps::parse_error& e) {
      throw usage_error(std::string("--checkpoint: ") + e.what());
    }
  }
  const bool chooses =
      choice.mode == ps::CheckpointMode::Selective || choice.mode == ps::CheckpointMode::Mario;
  if (chooses && !a.has("--memory-budget"))
    throw usage_error(std::string("--checkpoint ") + ps::to_string(choice.mode) +
                      " chooses what to recompute from a memory budget; give --memory-budget X "
                      "too (e.g. 2 microbatches, or 24GB / device with --model and --device)");
  // The same rule as plan<..., checkpoint::Mario>; a schedule file is taken as it is.
  if (choice.mode == ps::CheckpointMode::Mario && a.has("--schedule")) {
    const std::string name = a.get("--schedule");
    if (name != ps::order::OneFOneB::name && name != ps::order::Interleaved1F1B::name &&
        name != ps::order::ZeroBubbleH1::name)
      throw usage_error(
          "--checkpoint mario hides recomputes in the bubbles of a "
          "one-forward-one-backward rhythm and runs on 1f1b, interleaved-1f1b and "
          "zb-h1 only, not on '" +
          name + "'; use one of those, or --checkpoint selective or full");
  }
  if (a.has("--memory-budget")) {
    choice.budget = parse_budget_option(a.get("--memory-budget"), cost, s);
    choice.budgeted = true;
  }
  if (choice.mode == ps::CheckpointMode::None && !choice.budgeted) return s;
  try {
    return std::visit(
        [&](const auto& c) { return ps::apply_checkpoint(s, choice.mode, c, choice.budget); },
        cost);
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
}

int recompute_count(const ps::Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const ps::Action& x : list)
      n += x.kind == ps::OpKind::R;
  return n;
}

// ---------------------------------------------------------------------------------------
// Output helpers.

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

void write_output(const std::string& path, const std::string& content) {
  if (path.empty() || path == "-") {
    std::cout << content;
    return;
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) throw usage_error("cannot write '" + path + "': " + std::strerror(errno));
  f << content;
  if (!f.flush()) throw usage_error("cannot write '" + path + "': " + std::strerror(errno));
}

// ---------------------------------------------------------------------------------------
// Subcommands.

int cmd_list(const std::vector<std::string>& argv) {
  if (wants_help(argv)) {
    std::cout << help_text("pipesched list",
                           "Lists the schedules, placements, policies and cost-model presets.", {});
    return exit_ok;
  }
  parse_args("list", argv, {}, 0);
  std::printf("schedules (--schedule):\n");
  for (const auto& g : ps::generators())
    std::printf("  %-18s %s [%s%s%s%s; wgrad: %s%s%s]\n", std::string(g.name).c_str(),
                std::string(g.summary).c_str(), ps::to_string(g.placement),
                g.chunks_vary ? ", --chunks" : "", g.slices ? ", --slices" : "",
                g.generate_with_warmup ? ", --warmup" : "", g.fused ? "fused" : "",
                g.fused && g.split ? "|" : "", g.split ? "split|fine" : "");
  std::printf("\nplacements:\n");
  std::printf("  %-18s %s\n", "linear", "one stage per rank: stage s on rank s");
  std::printf("  %-18s %s\n", "interleaved", "looped: rank r holds stages r, r+p, r+2p, ...");
  std::printf("  %-18s %s\n", "v-shape", "zig-zag: rank r holds stages r and 2p-1-r (and so on)");
  std::printf("\ncheckpoint policies (--checkpoint):\n");
  std::printf("  %-18s %s\n", "none", "keep every activation until its backward");
  std::printf("  %-18s %s\n", "full", "recompute every forward right before its backward");
  std::printf("  %-18s %s\n", "selective",
              "recompute what --memory-budget requires, right before its backward");
  std::printf("  %-18s %s\n", "mario",
              "recompute in bubbles, prepose forwards, within --memory-budget "
              "(1f1b, interleaved-1f1b, zb-h1)");
  std::printf("\nslicing policies (--slices K, --slicing):\n");
  std::printf("  %-18s %s\n", "whole", "whole sequences (one slice per microbatch, --slices 1)");
  std::printf("  %-18s %s\n", "uniform",
              "K slices of equal length, the last taking the remainder (the default)");
  std::printf("  %-18s %s\n", "balanced",
              "K slices of equal forward time under causal attention: later slices shorter "
              "(--model)");
  std::printf("  %-18s %s\n", "terapipe",
              "K slices minimising TeraPipe's sum + (p-1) x slowest slice time (--model)");
  std::printf("\nwgrad policies (--wgrad):\n");
  std::printf("  %-18s %s\n", "fused", "one backward action B");
  std::printf("  %-18s %s\n", "split", "input gradient I, then weight gradient W (Zero Bubble)");
  std::printf("  %-18s %s\n", "fine",
              "split, each W cut into --wgrad-parts parts run where a rank would wait (MEPipe)");
  std::printf("\nmodels (--model):\n");
  for (const auto& m : ps::presets::models())
    std::printf("  %-18s %s\n", m.name.c_str(), m.description.c_str());
  std::printf("\ndevices (--device):\n");
  for (const auto& d : ps::presets::devices())
    std::printf("  %-18s %s\n", d.name.c_str(), d.description.c_str());
  return exit_ok;
}

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
        "appear as a suffix (2F0.3: slice 3). The cost options only matter for checkpointing\n"
        "and fine weight gradients: they say what an action takes and holds, and so what\n"
        "--memory-budget admits (see pipesched simulate --help).",
        specs);
    return exit_ok;
  }
  Args a = parse_args("generate", argv, specs, 0);
  AnyCost cost = get_cost(a);
  WGradChoice wgrad;
  ps::Schedule s = generated_schedule("generate", a, &wgrad);
  apply_slicing_options(cost, a, s);
  CheckpointChoice choice;
  s = apply_checkpoint_options(s, a, cost, choice);
  s = apply_wgrad_choice(s, wgrad, cost, choice.budget);
  if (a.has("--comm")) s = ps::lower_communication(s);
  require_valid(s);
  std::string format = a.get("--format", "csv");
  if (format != "csv" && format != "text")
    throw usage_error("--format takes csv or text, got '" + format + "'");
  write_output(a.get("-o"), format == "csv" ? ps::to_csv(s) : ps::to_text(s));
  return exit_ok;
}

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
  Args a = parse_args("validate", argv, {}, 1);
  if (a.positionals.empty()) throw usage_error("pipesched validate: give a schedule FILE");
  ps::Schedule s = file_schedule(a.positionals[0]);
  require_valid(s);
  std::printf("%s: valid — %d ranks, %d stages (%s), %d microbatches, %d slice%s, %zu actions%s\n",
              a.positionals[0].c_str(), s.problem.ranks, s.problem.stages,
              s.placement.describe().c_str(), s.problem.microbatches, s.problem.slices,
              s.problem.slices == 1 ? "" : "s", s.action_count(),
              s.has_comm() ? " with communication" : "");
  return exit_ok;
}

int cmd_simulate(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = schedule_options;
  specs.insert(specs.end(), cost_options.begin(), cost_options.end());
  specs.insert(specs.end(), slicing_options.begin(), slicing_options.end());
  specs.insert(specs.end(), checkpoint_options.begin(), checkpoint_options.end());
  specs.push_back({"--json", false, "print one JSON object (schema: docs/cli.md)"});
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched simulate (--schedule NAME --ranks P --microbatches M ... | FILE) "
        "[--cost K=V,...] [--model NAME --device NAME [--slicing MODE]] [--checkpoint MODE] "
        "[--memory-budget X] [--json]",
        "Simulates time and memory. UniformCost (default f=1,b=2,w=1,r=1,comm=0,boundary=0.05)\n"
        "measures time in units of one forward and memory in microbatches of activations;\n"
        "TransformerCost (--model, --device) in seconds and bytes.\n"
        "--checkpoint full|selective|mario recomputes forwards (selective and mario need\n"
        "--memory-budget); a budget counts activations only, per rank, and one the schedule\n"
        "cannot meet is refused (exit 2). With none or full, a budget is only checked. It is\n"
        "a plain number of microbatches under UniformCost; under TransformerCost bytes with a\n"
        "unit (kB MB GB TB, KiB MiB GiB TiB) or 'device': each rank's device memory less its\n"
        "weights, gradients and optimizer state.\n"
        "--slices K cuts each microbatch into K slices (gpipe, seq-1f1b, slice-pipe); under\n"
        "TransformerCost --slicing sets their lengths: uniform (default), balanced (equal\n"
        "forward time: later slices, which attend to a longer prefix, get fewer tokens) or\n"
        "terapipe (TeraPipe's optimum for P ranks). --wgrad fine places the weight-gradient\n"
        "parts under the same cost and budget.",
        specs);
    return exit_ok;
  }
  Args a = parse_args("simulate", argv, specs, 1);
  AnyCost cost = get_cost(a);
  WGradChoice wgrad;
  ps::Schedule s = get_schedule("simulate", a, wgrad);
  require_valid(s);
  const SlicingChoice slicing = apply_slicing_options(cost, a, s);
  CheckpointChoice choice;
  s = apply_checkpoint_options(s, a, cost, choice);
  s = apply_wgrad_choice(s, wgrad, cost, choice.budget);
  require_valid(s);
  ps::SimulationResult r = run_simulation(s, cost);
  const bool tc = is_transformer(cost);
  if (a.has("--json")) {
    std::string j = "{";
    j += "\"schedule\":" + json_string(s.name);
    j += ",\"problem\":{\"ranks\":" + std::to_string(s.problem.ranks) +
         ",\"stages\":" + std::to_string(s.problem.stages) +
         ",\"microbatches\":" + std::to_string(s.problem.microbatches) +
         ",\"slices\":" + std::to_string(s.problem.slices) + "}";
    if (tc) {
      j += ",\"slicing\":" + json_string(ps::to_string(slicing.mode));
      j += ",\"slice_lengths\":[" + join_ints(slicing.lengths, ",") + "]";
    }
    j += ",\"placement\":" + json_string(s.placement.describe());
    j += ",\"actions\":" + std::to_string(s.action_count());
    j += ",\"checkpoint\":" + json_string(ps::to_string(choice.mode));
    // One number for a budget shared by every rank; the smallest when ranks differ
    // ('device'), each rank's own in "ranks".
    double least_budget = choice.budget.all;
    for (int i = 0; i < s.rank_count(); ++i)
      least_budget = std::min(least_budget, choice.budget.of(i));
    j += ",\"memory_budget\":" + json_number(least_budget);
    j += ",\"recomputes\":" + std::to_string(recompute_count(s));
    j += ",\"time_unit\":" + json_string(tc ? "seconds" : "units");
    j += ",\"memory_unit\":" + json_string(tc ? "bytes" : "microbatches");
    j += ",\"deadlock\":" + std::string(r.deadlock ? "true" : "false");
    j += ",\"makespan\":" + json_number(r.makespan);
    j += ",\"bubble_ratio\":" + json_number(r.bubble_ratio);
    j += ",\"peak_memory_max\":" + json_number(r.peak_memory_max);
    j += ",\"ranks\":[";
    for (int i = 0; i < s.rank_count(); ++i) {
      const auto& rk = r.ranks[i];
      j += (i ? "," : "") + std::string("{\"rank\":") + std::to_string(i) +
           ",\"busy\":" + json_number(rk.busy) + ",\"idle\":" + json_number(rk.idle) +
           ",\"peak_memory\":" + json_number(rk.peak_memory) +
           ",\"memory_budget\":" + json_number(choice.budget.of(i)) + "}";
    }
    j += "]}\n";
    std::cout << j;
  } else {
    const char* tu = tc ? "s" : "";
    std::printf("%s: %d ranks, %d stages (%s), %d microbatches, %zu actions\n", s.name.c_str(),
                s.problem.ranks, s.problem.stages, s.placement.describe().c_str(),
                s.problem.microbatches, s.action_count());
    if (s.problem.slices > 1)
      std::printf("%d slices per microbatch%s%s%s\n", s.problem.slices,
                  tc ? (std::string(", ") + ps::to_string(slicing.mode)).c_str() : "",
                  tc ? ": " : "", tc ? (join_ints(slicing.lengths, ", ") + " tokens").c_str() : "");
    std::printf("makespan %.6g%s, bubble %.2f%%, max peak memory %.6g %s\n", r.makespan, tu,
                100 * r.bubble_ratio, r.peak_memory_max, tc ? "bytes" : "microbatches");
    if (choice.mode != ps::CheckpointMode::None || choice.budgeted) {
      std::string budget = "no memory budget";
      if (choice.budgeted && choice.budget.per_rank.empty())
        budget = "memory budget " + ps::detail::budget_text(choice.budget.all) +
                 (tc ? " bytes" : " microbatches") + " per rank";
      else if (choice.budgeted)
        budget = "memory budget per rank as listed";
      std::printf("checkpoint %s, %s, %d recomputes\n", ps::to_string(choice.mode), budget.c_str(),
                  recompute_count(s));
    }
    const bool per_rank_budget = !choice.budget.per_rank.empty();
    std::printf("%6s %14s %14s %16s%s\n", "rank", "busy", "idle", "peak memory",
                per_rank_budget ? "    memory budget" : "");
    for (int i = 0; i < s.rank_count(); ++i) {
      std::printf("%6d %14.6g %14.6g %16.6g", i, r.ranks[i].busy, r.ranks[i].idle,
                  r.ranks[i].peak_memory);
      if (per_rank_budget) std::printf(" %16.6g", choice.budget.of(i));
      std::printf("\n");
    }
  }
  if (r.deadlock) {
    std::fprintf(stderr, "%s\n", r.deadlock_report.c_str());
    return exit_invalid;
  }
  return exit_ok;
}

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
        "pipesched render (--schedule NAME ... | FILE) [--cost ... | --model NAME --device NAME "
        "[--slicing MODE]] [--checkpoint MODE] [--memory-budget X] [--svg FILE] [--trace FILE] "
        "[--text]",
        "Draws a simulated schedule, sliced, checkpointed and with weight gradients placed as\n"
        "--slicing, --checkpoint and --wgrad ask (see pipesched simulate --help).",
        specs);
    return exit_ok;
  }
  Args a = parse_args("render", argv, specs, 1);
  AnyCost cost = get_cost(a);
  WGradChoice wgrad;
  ps::Schedule s = get_schedule("render", a, wgrad);
  require_valid(s);
  apply_slicing_options(cost, a, s);
  CheckpointChoice choice;
  s = apply_checkpoint_options(s, a, cost, choice);
  s = apply_wgrad_choice(s, wgrad, cost, choice.budget);
  require_valid(s);
  ps::SimulationResult r = run_simulation(s, cost);
  const bool tc = is_transformer(cost);
  if (a.has("--svg")) {
    ps::SvgOptions o;
    o.memory_unit = tc ? "bytes" : "microbatches";
    write_output(a.get("--svg"), ps::render_svg(s, r, o));
  }
  if (a.has("--trace")) {
    ps::TraceOptions o;
    o.time_scale = tc ? 1e6 : 1000.0;  // seconds → µs; one unit → 1 ms
    o.memory_unit = tc ? "bytes" : "microbatches";
    write_output(a.get("--trace"), ps::render_chrome_trace(s, r, o));
  }
  if (a.has("--text") || (!a.has("--svg") && !a.has("--trace")))
    std::cout << ps::render_text_grid(s, r);
  return exit_ok;
}

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
  Args a = parse_args("convert", argv, {}, 2);
  if (a.positionals.size() != 2) throw usage_error("pipesched convert: give IN and OUT");
  ps::Schedule s = file_schedule(a.positionals[0]);
  const std::string& out = a.positionals[1];
  if (out == "-") {
    std::cout << ps::to_text(s);
  } else {
    try {
      ps::write_schedule_file(out, s);
    } catch (const ps::error& e) {
      throw usage_error(e.what());
    }
  }
  return exit_ok;
}

// ---------------------------------------------------------------------------------------
// tune: search base schedule, chunks, microbatch size and count, and checkpointing.

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

std::string plan_json(const ps::TunePlan& p) {
  std::string j = "{\"base\":" + json_string(p.base) + ",\"chunks\":" + std::to_string(p.chunks) +
                  ",\"microbatch_size\":" + std::to_string(p.microbatch_size) +
                  ",\"microbatches\":" + std::to_string(p.microbatches) +
                  ",\"checkpoint\":" + json_string(ps::to_string(p.checkpoint)) +
                  ",\"makespan\":" + json_number(p.makespan) +
                  ",\"throughput\":" + json_number(p.throughput) +
                  ",\"bubble_ratio\":" + json_number(p.bubble_ratio) +
                  ",\"recomputes\":" + std::to_string(p.recomputes) +
                  ",\"slices\":" + std::to_string(p.slices) +
                  ",\"fine_wgrad\":" + (p.fine_wgrad ? "true" : "false") + ",\"peak_memory\":[";
  for (std::size_t i = 0; i < p.peak_per_rank.size(); ++i)
    j += (i ? "," : "") + json_number(p.peak_per_rank[i]);
  return j + "]}";
}

int cmd_tune(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"--ranks", true, "pipeline ranks P (devices)", "P"},
      {"--global-batch", true, "sequences per step, cut into microbatches", "N"},
      {"--memory-budget", true,
       "activation memory per rank: N (microbatches) or bytes (24GB); default with --model: "
       "device (memory less weights, gradients and optimizer state), else none",
       "X"},
      {"--bases", true, "base schedules (default 1f1b,interleaved-1f1b,zb-h1)", "LIST"},
      {"--chunks", true, "chunks tried for interleaved-1f1b (default 2,4)", "LIST"},
      {"--microbatch-sizes", true,
       "sequences per microbatch tried (default 1,2,4,8; 1 with "
       "UniformCost)",
       "LIST"},
      {"--checkpoint", true, "modes searched (default none,selective,mario; full is the fallback)",
       "LIST"},
      {"--slices", true, "slices per microbatch tried for gpipe, seq-1f1b, slice-pipe (default 1)",
       "LIST"},
      {"--slicing", true, "how --model cuts slices: uniform (default), balanced or terapipe",
       "MODE"},
      {"--fine-wgrad", false, "also try weight gradients cut into parts placed in waits"},
      {"--wgrad-parts", true, "parts per weight gradient with --fine-wgrad (default 4)", "N"},
      {"--json", false, "print one JSON object"},
      {"--progress", false, "show progress on standard error (default: when it is a terminal)"},
  };
  for (const auto& c : cost_options)
    if (c.name != "--microbatch-size") specs.push_back(c);
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched tune --ranks P --global-batch N (--cost K=V,... | --model M --device D) "
        "[--memory-budget X] [--bases LIST] [--chunks LIST] [--microbatch-sizes LIST] "
        "[--checkpoint LIST] [--slices LIST] [--slicing MODE] [--fine-wgrad] [--json]",
        "Searches base schedule, chunks, microbatch size and count, slices, fine weight gradients\n"
        "and checkpointing (none, conventional selective, Mario) with the simulator, under a\n"
        "per-rank memory budget, and\n"
        "prints the fastest plan beside the fastest without checkpointing and the fastest\n"
        "conventional one. Exit 0 when some plan fits, 1 when none does, 2 on bad usage.",
        specs);
    return exit_ok;
  }
  Args a = parse_args("tune", argv, specs, 0);
  if (!a.has("--ranks") || !a.has("--global-batch"))
    throw usage_error("pipesched tune: give --ranks P and --global-batch N");
  ps::TuneRequest req;
  req.ranks = parse_int("--ranks", a.get("--ranks"), 1, 4096);
  req.global_batch = parse_int("--global-batch", a.get("--global-batch"), 1, 1 << 20);
  if (a.has("--bases")) req.bases = split_list(a.get("--bases"));
  if (a.has("--chunks")) req.chunks = parse_int_list("--chunks", a.get("--chunks"), 1, 64);
  if (a.has("--microbatch-sizes"))
    req.microbatch_sizes =
        parse_int_list("--microbatch-sizes", a.get("--microbatch-sizes"), 1, 1 << 16);
  if (a.has("--checkpoint")) {
    req.checkpoints.clear();
    for (const std::string& m : split_list(a.get("--checkpoint"))) {
      try {
        req.checkpoints.push_back(ps::parse_checkpoint_mode(m));
      } catch (const ps::parse_error& e) {
        throw usage_error(std::string("--checkpoint: ") + e.what());
      }
    }
  }
  if (a.has("--slices")) req.slices = parse_int_list("--slices", a.get("--slices"), 1, 4096);
  if (a.has("--wgrad-parts") && !a.has("--fine-wgrad"))
    throw usage_error("--wgrad-parts needs --fine-wgrad");
  req.fine_wgrad = a.has("--fine-wgrad");
  if (a.has("--wgrad-parts"))
    req.wgrad_parts = parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  const AnyCost cost = get_cost(a);
  const bool tc = is_transformer(cost);
  if (a.has("--slicing")) {
    try {
      req.slicing = ps::parse_slicing_mode(a.get("--slicing"));
    } catch (const ps::parse_error& e) {
      throw usage_error(std::string("--slicing: ") + e.what());
    }
    if (req.slicing != ps::SlicingMode::Uniform && !tc)
      throw usage_error("--slicing " + a.get("--slicing") +
                        " weighs slices by their attention cost, which only --model/--device know");
  }
  if (!tc && !a.has("--microbatch-sizes")) req.microbatch_sizes = {1};
  if (a.has("--memory-budget")) {
    const std::string text = a.get("--memory-budget");
    if (ps::detail::lower_ascii(text) != "device") {
      ps::MemoryBudgetValue v;
      try {
        v = ps::parse_memory_budget(text);
      } catch (const ps::parse_error& e) {
        throw usage_error(std::string("--memory-budget: ") + e.what());
      }
      if (tc != v.bytes)
        throw usage_error("--memory-budget " + text +
                          (tc ? " needs a unit (24GB, 512MiB) or 'device' "
                                "with --model/--device"
                              : " must be a plain number of microbatches "
                                "without --model/--device"));
      req.budget = ps::MemoryBudget{.all = v.value};
    } else if (!tc) {
      throw usage_error("--memory-budget device needs --model and --device");
    }
  }
  try {
    req.check();
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
  const bool show = a.has("--progress") || ::isatty(2);
  auto progress = [&](int done, int total, const ps::TunePlan* best) {
    if (!show) return;
    std::fprintf(stderr, "\rtune: %d/%d candidates%s%s", done, total, best ? ", best so far: " : "",
                 best ? ps::describe(*best).c_str() : "");
    if (done == total) std::fprintf(stderr, "\n");
  };
  ps::TuneResult r;
  try {
    if (tc) {
      const auto& t = std::get<ps::TransformerCost>(cost);
      r = ps::tune(req, t.model, t.device, progress);
    } else {
      r = ps::tune(req, std::get<ps::UniformCost>(cost), progress);
    }
  } catch (const ps::invalid_problem& e) {
    throw usage_error(e.what());
  }
  const char* unit = tc ? " s" : "";
  if (a.has("--json")) {
    auto opt = [&](const std::optional<ps::TunePlan>& p) {
      return p ? plan_json(*p) : std::string("null");
    };
    std::cout << "{\"best\":" << opt(r.best)
              << ",\"best_without_checkpoint\":" << opt(r.best_without_checkpoint)
              << ",\"best_conventional\":" << opt(r.best_conventional)
              << ",\"best_mario\":" << opt(r.best_mario)
              << ",\"time_unit\":" << json_string(tc ? "seconds" : "units")
              << ",\"candidates\":" << r.candidates_tried
              << ",\"seconds\":" << json_number(r.seconds) << "}\n";
  } else {
    auto row = [&](const char* what, const std::optional<ps::TunePlan>& p) {
      if (!p) {
        std::printf("%-26s none fits\n", what);
        return;
      }
      std::printf("%-26s %-58s step %.6g%s", what, ps::describe(*p).c_str(), p->makespan, unit);
      if (r.best && p->makespan > r.best->makespan * (1 + 1e-12))
        std::printf("  (best is %.3fx faster)", p->makespan / r.best->makespan);
      std::printf("\n");
    };
    row("best:", r.best);
    row("best without checkpoint:", r.best_without_checkpoint);
    row("best conventional:", r.best_conventional);
    row("best Mario:", r.best_mario);
    std::printf("searched %d candidates in %.2f s (%d refused, %d over budget, %d pruned)\n",
                r.candidates_tried, r.seconds, r.candidates_refused, r.candidates_over_budget,
                r.candidates_pruned);
    for (const std::string& n : r.notes)
      std::printf("note: %s\n", n.c_str());
  }
  return r.best ? exit_ok : exit_invalid;
}

const char* main_help =
    "usage: pipesched COMMAND [OPTIONS]\n"
    "\n"
    "Pipeline-parallel training schedules: generate, check, simulate and draw them.\n"
    "\n"
    "commands:\n"
    "  list       schedules, placements, policies, model and device presets\n"
    "  generate   write a generated schedule as PyTorch CSV or pipesched text\n"
    "  validate   check a schedule file (exit 1 when invalid)\n"
    "  simulate   time and memory of a schedule under a cost model (--json for scripts)\n"
    "  render     draw a schedule: SVG timeline, Chrome trace, text grid\n"
    "  convert    convert between CSV and the text form\n"
    "  tune       search schedule, microbatching and checkpointing under a memory budget\n"
    "\n"
    "Run 'pipesched COMMAND --help' for a command's options.\n"
    "Exit codes: 0 ok, 1 the schedule is invalid, 2 bad usage or unreadable input.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(main_help, stderr);
    return exit_usage;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "--help" || command == "-h" || command == "help") {
      std::fputs(main_help, stdout);
      return exit_ok;
    }
    if (command == "list") return cmd_list(args);
    if (command == "generate") return cmd_generate(args);
    if (command == "validate") return cmd_validate(args);
    if (command == "simulate") return cmd_simulate(args);
    if (command == "render") return cmd_render(args);
    if (command == "convert") return cmd_convert(args);
    if (command == "tune") return cmd_tune(args);
    throw usage_error("unknown command '" + command +
                      "'; commands are list, generate, validate, simulate, render, convert, tune "
                      "(see pipesched --help)");
  } catch (const usage_error& e) {
    std::fprintf(stderr, "pipesched: %s\n", e.what());
    return exit_usage;
  } catch (const invalid_error& e) {
    std::fprintf(stderr, "pipesched: %s\n", e.what());
    return exit_invalid;
  } catch (const ps::invalid_schedule& e) {
    std::fprintf(stderr, "pipesched: %s\n", e.what());
    return exit_invalid;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipesched: %s\n", e.what());
    return exit_usage;
  }
}
