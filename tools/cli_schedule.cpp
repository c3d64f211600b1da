// The pipesched command: a schedule from its options or a file, fitted, with its weight
// gradients placed and checkpointed as the options ask (prepare; see cli.hpp).
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
#include <limits>
#include <sstream>
#include <utility>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/layout.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/layout_search.hpp"

namespace pipesched::cli {

// ---------------------------------------------------------------------------------------
// Getting a schedule: from a generator or from a file.

const std::vector<OptionSpec> schedule_options = {
    {"--schedule", true, "generator name (see pipesched list)", "NAME"},
    {"--ranks", true, "pipeline ranks P", "P"},
    {"--microbatches", true, "microbatches per step M", "M"},
    {"--chunks", true,
     "stages per rank V (" +
         builtin_names([](const GeneratorInfo& g) { return g.chunks_vary; }, ", ") + "; default 2)",
     "V"},
    {"--slices", true,
     "slices per microbatch K (" +
         builtin_names([](const GeneratorInfo& g) { return g.slices; }, ", ") + "; default 1)",
     "K"},
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
    {"--overlap-reduction", false,
     "each stage's data-parallel gradient reduction as an action after its last weight "
     "gradient, overlapping the rest of the rank's list (with --dp; otherwise after the list)"},
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
    w.parts = lower_ascii(a.get("--wgrad-parts")) == "gemm"
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
  const ActionEstimate e = estimate_actions(
      static_cast<double>(p.ranks) * counted_chunks, p.microbatches, p.slices, counted,
      checkpoint.recomputes, comm, a.has("--offload"), a.has("--vocab-parallel"));
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
                                const WGradChoice& w, bool checkpointed, bool comm, bool offloaded,
                                bool vocabulary) {
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
  if (offloaded) {
    e.per_unit += 2;
    e.breakdown += ", OFFLOAD, RELOAD";
  }
  if (vocabulary) {
    // A VOCAB_F, a VOCAB_B, an EMBED_F and an EMBED_B per rank and unit of a microbatch: at
    // most four per stage's unit.
    e.per_unit += 4;
    e.breakdown += ", VOCAB_F, VOCAB_B, EMBED_F, EMBED_B";
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

SimulationResult simulate_schedule(const Schedule& s, const AnyCost& cost) {
  Step step("simulating schedule '" + s.name + "' (" + grouped(s.action_count()) + " actions)");
  SimulationResult r;
  try {
    r = std::visit([&](const auto& c) { return simulate(s, c); }, cost);
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
  // The cost models' figures are bounded so that this does not happen; should it, the
  // result is refused rather than printed as inf or nan.
  if (!std::isfinite(r.makespan) || !std::isfinite(r.bubble_ratio) ||
      !std::isfinite(r.peak_memory_max))
    throw usage_error("the simulated step is not a finite figure (makespan " +
                      format_general(r.makespan) + ", peak memory " +
                      format_general(r.peak_memory_max) +
                      "): the cost model's times or sizes overflow; check the --cost, --model "
                      "and --device figures against their ranges (docs/cli.md)");
  return r;
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
  if (lower_ascii(text) == "device") {
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
            orders + " only, not on '" + name +
            "'; use one of those, or --checkpoint selective "
            "or full");
      throw usage_error("--checkpoint " + std::string(policy.name) + " runs on " + orders +
                        " only, not on '" + name + "'");
    }
  }
  return policy;
}

//! `s` fitted, with its weight gradients placed, and checkpointed, as --memory-budget,
//! --fit / --no-fit, --wgrad fine and --checkpoint ask, under `cost`: a generated schedule is
//! built again by assemble_plan (policy/assemble.hpp), as plan<> and pipesched tune build
//! theirs, so that a plan's `simulate` command gives its step time; a schedule FILE is only
//! checkpointed. --fit asks for FitOrder::Fitted, --no-fit for Own, neither for Auto; --warmup
//! sets the order's warm-up, which is then never fitted; --wgrad-parts gemm leaves `cost` with
//! its weight gradients split per GEMM. A budget the schedule cannot meet is bad usage (exit 2)
//! with the library's message.
Schedule apply_budget_options(Schedule s, const Args& a, AnyCost& cost, CheckpointChoice& choice,
                              const WGradChoice& wgrad, bool generated) {
  if (a.has("--fit") && a.has("--no-fit")) throw usage_error("give --fit or --no-fit, not both");
  if (a.has("--memory-budget")) {
    choice.budget = parse_budget_option(a.get("--memory-budget"), cost, s);
    choice.budgeted = true;
  }
  const GeneratorInfo* g = generated ? &find_generator(a.get("--schedule")) : nullptr;
  const bool knob = g && g->generate_within && choice.budget.limited() && !a.has("--warmup");
  if (a.has("--fit") && !knob)
    throw usage_error(
        "--fit fits a schedule's own memory knob to --memory-budget: give a budget and a "
        "schedule with one (" +
        memory_knob_orders() + ", slice-pipe without --warmup)");
  const bool cost_aware = g && g->generate_with_cost && !a.has("--warmup");
  const bool offload = a.has("--offload");
  if (offload && !choice.budget.limited())
    throw usage_error(
        "--offload moves to host memory what --memory-budget asks: give a budget (an amount, or "
        "device)");
  if (offload && choice.policy->mode == CheckpointMode::Mario)
    throw usage_error(
        "--offload places offloads before checkpointing, and --checkpoint mario reorders "
        "forwards around its recomputes without them; use --checkpoint none, full or selective "
        "with --offload, or mario without it");
  if (offload && s.problem.slices > 1)
    throw usage_error(
        "--offload moves whole microbatches' activations, and the schedule cuts "
        "microbatches into " +
        std::to_string(s.problem.slices) +
        " slices (a slice's keys and values stay with its microbatch); use "
        "--slices 1 with --offload");
  if (!choice.policy->recomputes && !choice.budgeted && !wgrad.fine && !cost_aware) return s;
  try {
    if (!g) {
      Step step(std::string(offload ? "offloading and " : "") + "checkpointing (--checkpoint " +
                std::string(choice.policy->name) + ")");
      return std::visit(
          [&](const auto& c) {
            auto checkpoint = [&](const Schedule& x) {
              return choice.policy->apply(x, CostRef(c), choice.budget);
            };
            if (!offload) return checkpoint(s);
            return offload_where_faster(s, c, choice.budget, OffloadOptions{}, checkpoint);
          },
          cost);
    }
    PlanRecipe recipe{.wgrad = wgrad.mode,
                      .fine_wgrad = wgrad.fine,
                      .wgrad_parts = wgrad.parts,
                      .fit = a.has("--fit")      ? FitOrder::Fitted
                             : a.has("--no-fit") ? FitOrder::Own
                                                 : FitOrder::Auto};
    if (a.has("--warmup")) recipe.warmup = parse_int("--warmup", a.get("--warmup"), 1, 1 << 24);
    recipe.offload = offload;
    recipe.vocabulary = a.has("--vocab-parallel");
    Step step("building the plan (" + std::string(g->name) +
              (knob ? ", fitted to the budget where that helps" : "") +
              (wgrad.fine ? ", weight-gradient parts placed" : "") +
              (offload ? ", offloaded" : "") +
              (recipe.vocabulary ? ", vocabulary passes added" : "") + ", --checkpoint " +
              std::string(choice.policy->name) + ")");
    // The schedule generated already is the order's own where no cost reaches the generator.
    const Schedule* own = cost_aware ? nullptr : &s;
    AnyCost planned = cost;
    Schedule out = std::visit(
        [&](const auto& c) {
          auto plan = assemble_plan(*g, s.problem, c, choice.budget, recipe, *choice.policy, own);
          planned = std::move(plan.cost);
          return std::move(plan.schedule);
        },
        cost);
    cost = std::move(planned);
    return out;
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

// `s` with vocabulary passes where --vocab-parallel asks (pass/vocabulary.hpp), under `cost`
// (whose output layer prepare() split by vocabulary), placed within `budget` where a lag can
// be; `s` itself otherwise.
Schedule with_vocabulary_passes(Schedule s, const Args& a, const AnyCost& cost,
                                const MemoryBudget& budget) {
  if (!a.has("--vocab-parallel") || s.has_vocabulary()) return s;  // assemble_plan added them
  Step step("adding vocabulary passes (--vocab-parallel)");
  try {
    const VocabularyOptions options{.budget = budget};
    return std::visit([&](const auto& c) { return add_vocabulary_passes(s, c, options); }, cost);
  } catch (const invalid_problem& e) {
    throw usage_error("--vocab-parallel: " + e.message());
  }
}

// --layout TEXT or --layers: checks the stage count against the schedule's. --layout auto:
// searches the layers per stage (tune/layout_search.hpp), each layout's plan built and
// simulated as this command builds and simulates it, and keeps the fastest.
void choose_layout(Prepared& out, const Args& a) {
  TransformerCost& cost = std::get<TransformerCost>(out.cost);
  const Schedule& s = out.schedule;
  const int replicas = s.problem.replicas > 1 ? s.problem.replicas : 1;
  const int S = s.problem.stages / replicas;
  const std::string option = a.has("--layers") ? "--layers" : "--layout";
  if (a.has("--layout") && a.get("--layout") == "auto") {
    if (cost.model.layers < S)
      throw usage_error("--layout auto: the model's " + std::to_string(cost.model.layers) +
                        " layers are fewer than the schedule's " + std::to_string(S) +
                        " stages; use fewer ranks or chunks");
    Step step("searching the layout (--layout auto)");
    std::string first_refusal;  // why the first layout without a plan had none
    auto evaluate = [&](const std::vector<int>& layers) {
      AnyCost c = out.cost;
      std::get<TransformerCost>(c).parallel.layers = layers;
      CheckpointChoice choice = out.checkpoint;
      try {
        const Schedule built = with_vocabulary_passes(
            apply_budget_options(s, a, c, choice, out.wgrad, !out.from_file), a, c, choice.budget);
        const SimulationResult r = simulate_schedule(built, c);
        return r.deadlock ? std::numeric_limits<double>::infinity() : r.makespan;
      } catch (const usage_error& e) {
        if (first_refusal.empty()) first_refusal = e.what();
        return std::numeric_limits<double>::infinity();  // this layout's plan cannot be built
      }
    };
    LayoutSearchResult found;
    try {
      found = search_layout(cost, s.problem, s.placement, evaluate);
    } catch (const invalid_problem& e) {
      throw usage_error("--layout auto: " + e.message());
    }
    if (!std::isfinite(found.step))
      throw usage_error(
          "--layout auto: none of the " + std::to_string(found.evaluations) +
          " layouts tried gives a plan; the first could not be built: " + first_refusal);
    cost.parallel.layers = found.layers;
    out.layouts_tried = found.evaluations;
    out.even_step = found.even_step;
  } else if (static_cast<int>(cost.parallel.layers.size()) != S) {
    const int chunks = s.problem.stages / std::max(1, s.problem.ranks);
    throw usage_error(
        option + " gives " + std::to_string(cost.parallel.layers.size()) +
        " stages but schedule '" + s.name + "' has " + std::to_string(S) +
        (replicas > 1 ? " per model replica" : "") + " (" + std::to_string(s.problem.ranks) +
        " ranks x " + std::to_string(chunks) + (chunks == 1 ? " chunk" : " chunks") +
        (replicas > 1 ? " / " + std::to_string(replicas) + " replicas" : "") + "); give " +
        std::to_string(S) + (a.has("--layers") ? " layer counts" : " stages"));
  }
  try {
    out.layout = to_string(Layout::of_stage_layers(cost.parallel.layers));
  } catch (const invalid_problem& e) {
    throw usage_error(option + ": " + e.message());
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
     "activation memory per rank, one amount for every rank: N (microbatches), 24GB, 512MiB or "
     "device",
     "X"},
    {"--fit", false,
     "fit the schedule's own memory knob (" + memory_knob_orders() +
         ") to the budget before checkpointing (default: only without checkpointing, or when its "
         "own schedule cannot meet the budget)"},
    {"--no-fit", false,
     "keep the schedule's own order under the budget (checkpointing alone fits it)"},
    {"--offload", false,
     "move activations to host memory where --memory-budget asks, before checkpointing: each "
     "copy on the GPU's host link while the rank computes (not with --checkpoint mario or "
     "--slices)"},
    {"--vocab-parallel", false,
     "split the vocabulary layers over every rank: the output layer (LM head, softmax, loss) and "
     "the input embedding's token table, one shard each, run as vocabulary passes (VOCAB_F, "
     "VOCAB_B, EMBED_F, EMBED_B) in each rank's list (one replica; not in PyTorch's format)"},
};

Prepared prepare(const Args& a, const PrepareOptions& options) {
  Prepared out;
  out.cost = get_cost(a);
  // The cost splits both vocabulary layers too; a schedule FILE with passes keeps them, one
  // without gets them.
  if (a.has("--vocab-parallel") && is_transformer(out.cost)) {
    Parallelism& q = std::get<TransformerCost>(out.cost).parallel;
    q.vocabulary = q.input_vocabulary = true;
  }
  if (a.has("--vocab-parallel") && std::holds_alternative<UniformCost>(out.cost))
    std::get<UniformCost>(out.cost).input_vocabulary = true;
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
    // A microbatch runs through the stages of its replica only: S / P stages × M × K units.
    if (checkpointed) {
      const Problem& p = out.schedule.problem;
      const double units = static_cast<double>(p.replica_stages()) * p.microbatches * p.slices;
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
    // A file with vocabulary passes keeps them: its input embedding is split where it has
    // EMBED_F and EMBED_B (a file written with the head alone split keeps the embedding whole;
    // UniformCost prices whichever passes the file has).
    if (out.schedule.has_vocabulary()) {
      const bool input = out.schedule.has_input_vocabulary();
      if (!is_transformer(out.cost))
        std::get<UniformCost>(out.cost).input_vocabulary = input;
      else if (a.has("--vocab-parallel"))
        std::get<TransformerCost>(out.cost).parallel.input_vocabulary = input;
    }
  } else {
    out.schedule = generated_schedule(
        a, *out.checkpoint.policy, options.lower_comm, out.wgrad,
        is_transformer(out.cost) ? std::get<TransformerCost>(out.cost).model.layers : 0);
  }
  out.slicing = apply_slicing_options(out.cost, a, out.schedule);
  if (a.has("--layout") || a.has("--layers")) choose_layout(out, a);
  out.schedule = apply_budget_options(std::move(out.schedule), a, out.cost, out.checkpoint,
                                      out.wgrad, !out.from_file);
  out.schedule =
      with_vocabulary_passes(std::move(out.schedule), a, out.cost, out.checkpoint.budget);
  if (a.has("--overlap-reduction")) out.schedule = add_gradient_reduction(out.schedule);
  if (options.lower_comm) {
    Step step("lowering to sends and receives");
    out.schedule =
        lower_communication(out.schedule, {.max_outstanding_sends = options.max_outstanding_sends});
  }
  require_valid(out.schedule);
  return out;
}

}  // namespace pipesched::cli
