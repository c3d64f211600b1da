// What the subcommands of the pipesched command share: errors and exit codes, option parsing
// and help, the limits on what a command may build, the one pipeline from options to a
// simulated schedule (parse → generate or read → slice → checkpoint → place weight gradients
// → simulate), cost models and their units, and the translation of the library's words
// (API fields, enumerators) into the command line's (flags and their values).
//
// This header stays light (no generators, passes or renderers): every subcommand's source
// includes it, and only cli.cpp and the subcommand that needs them pay for the heavy
// headers.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"

namespace pipesched::cli {

//! `s` with its ASCII capitals in lower case (option values are read in any case).
inline std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

inline constexpr int exit_ok = 0;
inline constexpr int exit_invalid = 1;
inline constexpr int exit_usage = 2;

//! An error of the command: its message as parts (what a library error it passes on names:
//! fields, enumerators, amounts), which main writes in the command's words (words_of).
struct command_error : std::runtime_error {
  explicit command_error(const Message& m)
      : std::runtime_error(m.text()), parts_(std::make_shared<const Message>(m)) {}
  const Message& message() const noexcept { return *parts_; }

 private:
  std::shared_ptr<const Message> parts_;  // shared: copying an exception must not throw
};
//! Bad usage or unreadable input: reported on stderr, exit code 2.
struct usage_error : command_error {
  using command_error::command_error;
};
//! The schedule breaks a rule: exit code 1.
struct invalid_error : command_error {
  using command_error::command_error;
};

// ---------------------------------------------------------------------------------------
// Limits. Measured on one core of the development machine: generating, validating and
// simulating takes 0.5 to 1 s and 120 to 135 MB per million actions with every generator
// (fine W parts: 3 s and 265 MB), so 2 million actions stay within a few hundred MB and a few
// seconds. Drawing costs more (an SVG and a trace of a million
// actions are 500 MB of text and 15 s), so pictures have a lower limit.

//! Most actions a schedule built by a command may hold (R, W parts and communication
//! included).
inline constexpr double max_actions = 2'000'000;
//! Most actions `render` draws into an SVG or a Chrome trace.
inline constexpr double max_drawn_actions = 200'000;
//! Largest time a --cost key may give: a step of max_actions such actions is at most 2e18,
//! far from overflowing, so makespans, idle times and bubble ratios stay finite numbers.
inline constexpr double max_cost_time = 1e12;
//! Most actions `tune` may hold at once: one schedule per thread while it builds
//! candidates, and the best plan of each (base, checkpoint) pair (about 2 GB at this size).
inline constexpr double held_actions = 8 * max_actions;
//! Most configurations (base, chunks, microbatch size, slices, fine W) `tune` searches.
inline constexpr std::size_t max_tune_configurations = 10'000;

//! `n` with thousands separators: "2,000,000".
std::string grouped(double n);

// ---------------------------------------------------------------------------------------
// Options: --name VALUE or --name=VALUE, switches and positionals, checked against what each
// subcommand accepts.

struct OptionSpec {
  std::string name;  //!< "--ranks"
  bool takes_value;  //!< false for switches
  std::string help;  //!< what it does, for --help (wrapped there)
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

//! Parses `argv` against `specs`; refuses unknown options (listing the accepted ones), an
//! option given twice, a missing value and more than `max_positionals` positionals.
Args parse_args(const std::string& command, const std::vector<std::string>& argv,
                const std::vector<OptionSpec>& specs, std::size_t max_positionals);

//! A whole number from `lo` to `hi`, digits with an optional '-' (no blanks, no '+'), or
//! usage_error naming `option`.
int parse_int(const std::string& option, const std::string& text, int lo, int hi);
//! A finite decimal number from `lo` to `hi` (no "inf", "nan" or hexadecimal), or
//! usage_error naming `what` and the range.
double parse_number(const std::string& what, const std::string& text, double lo, double hi);
//! The items of the comma-separated list `text` given to `option` (none for ""); usage_error
//! for an empty item ("1,,2", "1,2,") or an item with a blank (" 1, 2").
std::vector<std::string> split_list(const std::string& option, const std::string& text);
//! A comma-separated list of whole numbers from `lo` to `hi`.
std::vector<int> parse_int_list(const std::string& option, const std::string& text, int lo, int hi);
//! The numbers joined by `separator`.
std::string join_ints(const std::vector<int>& values, const char* separator);

//! Help text wrapped to help_width columns: usage, about (its own line breaks kept, long
//! lines wrapped), then one entry per option with its help in a hanging column.
std::string help_text(const std::string& usage, const std::string& about,
                      const std::vector<OptionSpec>& specs);
inline constexpr std::size_t help_width = 100;
//! `text` wrapped at blanks to `width` columns, continuation lines indented by `indent`
//! blanks, the first line starting `first_column` columns in.
std::string wrap(const std::string& text, std::size_t width, std::size_t indent,
                 std::size_t first_column = 0);
bool wants_help(const std::vector<std::string>& argv);

// ---------------------------------------------------------------------------------------
// What the command is doing, for the message when memory runs out.

//! Names the step in progress while it lives ("simulating the schedule"); steps nest. A step
//! left by an exception is remembered (the innermost one), so that main, which catches the
//! exception after every step has ended, can still say where it happened.
class Step {
 public:
  explicit Step(std::string what);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
  //! The innermost step an exception left, or the innermost step in progress, or "starting".
  static std::string failed();

 private:
  int exceptions_;  // uncaught exceptions when the step began
};

// ---------------------------------------------------------------------------------------
// The library names its API (Problem.ranks, CheckpointMode::Selective, tuning::Request.bases);
// a command's user typed flags. A library message keeps its mentions of the API apart
// (core/message.hpp), and the command names each by the flag that sets it.

//! `message` in the words of `command`: each API field it mentions as the flag that sets it
//! with its value (`Problem.ranks = 4` → `--ranks 4`; "tune" names tuning::Request's fields by its
//! list options), an enumerator as its flag and value (`--checkpoint selective`), memory
//! amounts as the library formats them (format_memory: 24GB, 3.19GiB).
std::string words_of(const Message& message, std::string_view command);

//! The orders with a memory knob (a generator fitted to a budget: GeneratorInfo::
//! generate_within), as help texts and messages list them: "zb-h1, zb-h2, ...".
std::string memory_knob_orders();

//! The built-in checkpoint policies as --checkpoint's help lists them: "none (default), full,
//! ... or selective-early".
std::string checkpoint_names();

// ---------------------------------------------------------------------------------------
// Cost models, and the units their figures are in.

using AnyCost = std::variant<UniformCost, TransformerCost>;

extern const std::vector<OptionSpec> cost_options;
//! --cost, or --model with --device or --cluster (and --sequence, --microbatch-size); a model
//! or device value naming a file (or ending in .json) is read from it (io/model_file.hpp,
//! io/device_file.hpp), the reader's notes written to standard error.
AnyCost get_cost(const Args& a);
//! The GPU count of the --cluster file ("gpus"); 0 without --cluster or when the file gives
//! none. usage_error when the file cannot be read.
int cluster_gpus(const Args& a);
//! --cost K=V,...: UniformCost, each key once, times from 0 to max_cost_time.
UniformCost parse_uniform_cost(const std::string& text);
bool is_transformer(const AnyCost& c);

//! The units of a cost model's figures, as the JSON output names them: time "units" or
//! "seconds", memory "microbatches" or "bytes". The text output and the pictures write
//! figures with core/format.hpp's format_time and format_memory in these.
struct Units {
  std::string time;
  std::string memory;
};
Units units_of(const AnyCost& c);

// ---------------------------------------------------------------------------------------
// The pipeline: options → schedule → slicing → checkpointing → weight gradients.

extern const std::vector<OptionSpec> schedule_options;
extern const std::vector<OptionSpec> slicing_options;
extern const std::vector<OptionSpec> checkpoint_options;

//! How the backward is asked for: the generator's mode, and for `fine` the parts that
//! fill_weight_gradients cuts each W into after checkpointing.
struct WGradChoice {
  WGradMode mode = WGradMode::Fused;
  bool fine = false;
  int parts = 4;
};

//! The slicing asked for and, under TransformerCost, the lengths it gave.
struct SlicingChoice {
  SlicingMode mode = SlicingMode::Uniform;
  std::vector<int> lengths;  //!< empty without TransformerCost
};

//! The checkpointing asked for and the budget it was held to.
struct CheckpointChoice {
  //! The checkpoint policy (policy/checkpoint_registry.hpp); never null.
  const CheckpointInfo* policy = &builtin_checkpoints()[0];
  MemoryBudget budget;  //!< unlimited when --memory-budget is not given
  bool budgeted = false;
};

//! What `prepare` may start from and do at the end.
struct PrepareOptions {
  bool allow_file = true;         //!< a schedule FILE instead of --schedule (simulate, render)
  bool lower_comm = false;        //!< lower to explicit sends and receives (generate --comm)
  int max_outstanding_sends = 0;  //!< with lower_comm: LowerOptions::max_outstanding_sends
};

//! A schedule made as the options ask, with what was chosen on the way.
struct Prepared {
  AnyCost cost;
  Schedule schedule;
  WGradChoice wgrad;
  SlicingChoice slicing;
  CheckpointChoice checkpoint;
  bool from_file = false;  //!< read from a FILE (taken as it is), not generated
  //! The layout simulated, as text (io/layout.hpp), when --layout or --layers gave one or
  //! --layout auto searched it; empty otherwise.
  std::string layout;
  int layouts_tried = 0;   //!< --layout auto: layouts built and simulated
  double even_step = 0.0;  //!< --layout auto: the even split's step (infinity: no plan)
};

//! The shared pipeline: the cost model, the schedule (generated within max_actions, or read
//! from a FILE and validated), slice lengths, checkpointing, fine weight gradients and
//! communication lowering as asked, and a last validation. Bad options are usage_error, an
//! invalid schedule invalid_error.
Prepared prepare(const Args& a, const PrepareOptions& options = {});

//! `s` simulated under `cost`.
SimulationResult simulate_schedule(const Schedule& s, const AnyCost& cost);

//! The schedule in a file (PyTorch CSV or pipesched text), or usage_error.
Schedule read_schedule(const std::string& path);
//! invalid_error with the validator's report unless `s` is valid.
void require_valid(const Schedule& s);
//! `content` to `path`, or to standard output for "" and "-".
void write_output(const std::string& path, const std::string& content);

//! The schedule as PyTorch's CSV (`csv`) or as pipesched's text form.
std::string schedule_as_text(const Schedule& s, bool csv);
//! `s` to `path`, as CSV when the path ends in .csv, else as text; usage_error when it fails.
void write_schedule(const std::string& path, const Schedule& s);

//! What `list` tells about a generator: the registry's facts without its code, so that `list`
//! does not compile every generator again.
struct GeneratorFacts {
  std::string name, summary, placement, default_wgrad;
  int default_chunks = 1;
  bool chunks_vary = false, fused = false, split = false, slices = false, warmup = false;
  bool mario = false;  //!< --checkpoint mario applies (the order's own fact)
};
std::vector<GeneratorFacts> generator_facts();

//! The upper bound on the actions of a generated schedule that `prepare` checks against
//! max_actions, and how it came about (for the message).
struct ActionEstimate {
  double units = 0;       //!< stages × microbatches × slices
  double per_unit = 0;    //!< actions each unit may take
  double actions = 0;     //!< units × per_unit
  std::string breakdown;  //!< "F, I, W, R", the actions of one unit
};
//! The bound for `stages` stages, `microbatches`, `slices`, a backward `w`, recomputes when
//! `checkpointed`, sends and receives when `comm`, copies when `offloaded` and vocabulary
//! passes when `vocabulary`.
ActionEstimate estimate_actions(double stages, double microbatches, double slices,
                                const WGradChoice& w, bool checkpointed, bool comm,
                                bool offloaded = false, bool vocabulary = false);

// ---------------------------------------------------------------------------------------
// The subcommands, one source file each: `argv` is what follows the subcommand's name; the
// result is the exit code. Errors are thrown (usage_error, invalid_error, the library's) and
// reported by main.

int cmd_list(const std::vector<std::string>& argv);
int cmd_generate(const std::vector<std::string>& argv);
int cmd_validate(const std::vector<std::string>& argv);
int cmd_simulate(const std::vector<std::string>& argv);
int cmd_render(const std::vector<std::string>& argv);
int cmd_convert(const std::vector<std::string>& argv);
int cmd_tune(const std::vector<std::string>& argv);
int cmd_profile(const std::vector<std::string>& argv);

}  // namespace pipesched::cli
