// pipesched tune, printing what the search found: as text (the bests, each pair's best, the
// search, the notes) or as one JSON object (docs/cli.md), each plan with the `pipesched
// simulate` command that reproduces its step time and its schedule in the text form.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::cli {

namespace {

// `s` as one shell word: as it is, or in single quotes (each ' inside written '\'').
std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$`;&|<>()*?[]{}#~!") == std::string::npos) return s;
  std::string out = "'";
  for (char ch : s)
    out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

//! A `pipesched simulate` command line that builds this plan's schedule the way tune did
//! (generate, fit, place W parts, checkpoint) under the same cost model, so that its makespan
//! is the plan's step time.
std::string plan_command(const tuning::Plan& p, const CommandContext& c) {
  const GeneratorInfo& g = find_generator(p.base);
  std::string cmd = "pipesched simulate --schedule " + p.base + " --ranks " +
                    std::to_string(p.schedule.problem.ranks) + " --microbatches " +
                    std::to_string(p.microbatches);
  if (g.chunks_vary) cmd += " --chunks " + std::to_string(p.chunks);
  if (p.slices > 1) {
    cmd += " --slices " + std::to_string(p.slices);
    if (c.transformer && !c.slicing.empty()) cmd += " --slicing " + c.slicing;
  }
  if (p.fine_wgrad)
    cmd += " --wgrad fine --wgrad-parts " +
           (c.wgrad_parts == 0 ? std::string("gemm") : std::to_string(c.wgrad_parts));
  if (c.transformer) {
    if (!c.model.empty()) cmd += " --model " + quoted(c.model);
    if (!c.profile.empty()) cmd += " --profile " + quoted(c.profile);
    cmd += c.cluster.empty() ? " --device " + quoted(c.device) : " --cluster " + quoted(c.cluster);
    if (!c.sequence.empty()) cmd += " --sequence " + c.sequence;
    cmd += " --microbatch-size " + std::to_string(p.microbatch_size);
    if (!c.gpus_per_node.empty()) cmd += " --gpus-per-node " + c.gpus_per_node;
    if (p.tensor > 1) cmd += " --tp " + std::to_string(p.tensor);
    if (p.sequence_parallel) cmd += " --sp";
    if (p.data > 1) cmd += " --dp " + std::to_string(p.data);
    if (p.zero > 0) cmd += " --zero " + std::to_string(p.zero);
    cmd += " --layers " + join_ints(p.layers_per_stage, ",");
    if (c.whole_step) cmd += " --whole-step";
  } else if (!c.cost.empty()) {
    cmd += " --cost " + quoted(c.cost);
  }
  if (p.checkpoint != CheckpointMode::None)
    cmd += std::string(" --checkpoint ") + to_string(p.checkpoint);
  if (p.offloads > 0) cmd += " --offload";
  if (p.vocabulary) cmd += " --vocab-parallel";
  if (p.schedule.has_gradient_reduction()) cmd += " --overlap-reduction";
  // The budget tune held the plan to, where the schedule depends on it.
  const std::string budget = c.transformer && c.budget.empty() ? "device" : c.budget;
  if (!budget.empty() && (p.fitted || p.fine_wgrad || p.offloads > 0 || p.vocabulary ||
                          p.checkpoint != CheckpointMode::None)) {
    cmd += " --memory-budget " + quoted(budget);
    if (g.generate_within) cmd += p.fitted ? " --fit" : " --no-fit";
  }
  return cmd;
}

namespace {

// The JSON is a contract (docs/cli.md): each plan as write_plan writes it, with the command
// that reproduces it.
void plan_json(json::Writer& w, const std::optional<tuning::Plan>& plan, const CommandContext& c) {
  if (!plan)
    w.value(nullptr);
  else
    write_plan(w, *plan, plan_command(*plan, c));
}

//! The widest line of the text report.
constexpr std::size_t report_width = 100;

//! Columns `text` takes on a terminal (UTF-8: continuation bytes take none).
std::size_t columns(const std::string& text) {
  std::size_t n = 0;
  for (char ch : text)
    n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

//! Prints `text` (`first` before it) in lines of at most report_width columns, broken at
//! spaces, each further line indented by `indent` spaces; `end` closes every line but the
//! last (" \\" keeps a command one shell command). A word longer than a line is left whole.
//! `glue` (when not '\\0') joins words that stay together; it prints as a space.
void print_wrapped(const std::string& first, const std::string& text, std::size_t indent,
                   const std::string& end = "", char glue = '\0') {
  auto put = [&](std::string out) {
    if (glue != '\0') std::replace(out.begin(), out.end(), glue, ' ');
    std::fputs(out.c_str(), stdout);
  };
  std::string line = first;
  std::size_t at = 0;
  bool empty = true;  // no word of `text` on this line yet
  while (at < text.size()) {
    std::size_t next = text.find(' ', at);
    if (next == std::string::npos) next = text.size();
    const std::string word = text.substr(at, next - at);
    at = next + 1;
    if (word.empty()) {
      if (empty) line += ' ';  // the padding of a column, before any word
      continue;
    }
    const std::size_t wide = columns(line) + (empty ? 0 : 1) + columns(word);
    if (!empty && wide + (at < text.size() ? columns(end) : 0) > report_width) {
      put(line + end + "\n");
      line.assign(indent, ' ');
      empty = true;
    }
    line += (empty ? "" : " ") + word;
    empty = false;
  }
  put(line + "\n");
}

//! A command line with the spaces inside each option's value (quoted) and between an option and
//! its value replaced by `glue`, so that print_wrapped breaks it only before an option.
std::string glued_options(const std::string& command, char glue) {
  std::string out = command;
  bool quoted = false;
  std::size_t word = 0;  // where the current word starts
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\'') quoted = !quoted;
    if (out[i] != ' ') continue;
    const bool option = out.compare(word, 2, "--") == 0;
    const bool next_option = out.compare(i + 1, 2, "--") == 0;
    if (quoted || (option && !next_option)) {
      out[i] = glue;
      continue;
    }
    word = i + 1;
  }
  return out;
}

//! What joins the words print_wrapped keeps on one line.
constexpr char glue = '\x01';

//! `text` with its spaces glued: print_wrapped keeps it on one line.
std::string unbroken(std::string text) {
  std::replace(text.begin(), text.end(), ' ', glue);
  return text;
}

//! `v` with `digits` digits after the point ("%.2f").
std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

//! `text` padded with spaces to `width` columns.
std::string padded(std::string text, std::size_t width) {
  const std::size_t n = columns(text);
  if (n < width) text.append(width - n, ' ');
  return text;
}

//! A plan's step time in the cost model's unit.
std::string step_text(const tuning::Plan& p, const Units& units) {
  return format_time(p.makespan, units.time, 6);
}

//! How much faster the best plan is, where it is: "  (best is 1.2x faster)".
std::string behind_best(const tuning::Plan& p, const tuning::Result& r) {
  if (!r.best || p.makespan <= r.best->makespan * (1 + 1e-12)) return "";
  return " (best is " + format_number(p.makespan / r.best->makespan, 4) + "x faster)";
}

//! The column where the best rows' plans start.
constexpr std::size_t label_width = 26;

//! One of the bests as a row: "best:", the plan in a few words, its step, wrapped under the
//! plan's column.
void print_row(const char* what, const std::optional<tuning::Plan>& p, const tuning::Result& r,
               const Units& units) {
  const std::string label = padded(what, label_width) + " ";
  if (!p) {
    std::printf("%snone fits\n", label.c_str());
    return;
  }
  print_wrapped(
      label,
      describe(*p) + ", " + unbroken("step " + step_text(*p, units)) + unbroken(behind_best(*p, r)),
      label_width + 1, "", glue);
}

}  // namespace

void print_tune_json(const tuning::Result& r, const TuneCommand& c) {
  const CommandContext& ctx = c.context;
  const Units& units = c.units;
  json::Writer w;
  w.begin_object();
  w.key("best");
  plan_json(w, r.best, ctx);
  w.key("baselines").begin_array();
  for (const tuning::Baseline& b : r.baselines) {
    if (b.plan) {
      plan_json(w, b.plan, ctx);
    } else {
      w.begin_object()
          .field("schedule", b.base)
          .field("checkpoint", to_string(b.checkpoint))
          .key("step_time_s")
          .value(nullptr)
          .end_object();
    }
  }
  w.end_array();
  w.key("search")
      .begin_object()
      .field("candidates", r.candidates_tried)
      .field("total", r.candidates_total)
      .field("seconds", r.seconds)
      .field("cut", r.cut)
      .field("threads", r.threads)
      .field("refused", r.candidates_refused)
      .field("over_budget", r.candidates_over_budget)
      .field("pruned", r.candidates_pruned)
      .end_object();
  w.key("best_without_checkpoint");
  plan_json(w, r.best_without_checkpoint, ctx);
  w.key("best_conventional");
  plan_json(w, r.best_conventional, ctx);
  w.key("best_mario");
  plan_json(w, r.best_mario, ctx);
  w.field("time_unit", units.time)
      .field("candidates", r.candidates_tried)
      .field("seconds", r.seconds)
      .key("notes")
      .begin_array();
  for (const tuning::Note& n : r.notes)
    w.begin_object()
        .field("configuration", n.configuration)
        .field("reason", words_of(n.message, "tune"))
        .field("count", n.count)
        .end_object();
  w.end_array().end_object();
  std::cout << w.take() << "\n";
}

void print_tune_text(const tuning::Result& r, const TuneCommand& c) {
  const CommandContext& ctx = c.context;
  const Units& units = c.units;
  const bool tc = c.transformer;
  // Every line is at most report_width columns: longer ones wrap at spaces, under their
  // column (the command with shell continuations, so that it still pastes as one).
  const std::string margin(label_width + 1, ' ');
  print_row("best:", r.best, r, units);
  if (r.best) {
    if (tc)
      print_wrapped(margin,
                    "MFU " + fixed(100 * r.best->mfu, 1) + "% (causal attention; " +
                        fixed(100 * r.best->mfu_usual, 1) +
                        "% counting it in full, as PaLM and Megatron-LM do), largest GPU's "
                        "memory " +
                        format_memory(r.best->peak_memory, units.memory, 4),
                    label_width + 1);
    print_wrapped(margin, glued_options(plan_command(*r.best, ctx), glue), label_width + 3, " \\",
                  glue);
  }
  print_row("best without checkpoint:", r.best_without_checkpoint, r, units);
  print_row("best conventional:", r.best_conventional, r, units);
  print_row("best Mario:", r.best_mario, r, units);
  // The pairs: schedule, checkpoint mode and step in columns, the plan after them (wrapped
  // under its column).
  std::printf("\nbest of each schedule and checkpoint mode:\n");
  const std::size_t plan_column = 2 + 17 + 16 + 14;
  std::printf("  %-17s%-16s%-14s%s\n", "schedule", "checkpoint", "step", "plan");
  for (const tuning::Baseline& b : r.baselines) {
    const std::string head = "  " + padded(b.base, 16) + " " + padded(to_string(b.checkpoint), 15) +
                             " " + padded(b.plan ? step_text(*b.plan, units) : "", 13) + " ";
    const std::string behind = b.plan ? behind_best(*b.plan, r) : "";
    print_wrapped(head,
                  b.plan
                      ? describe(*b.plan) + (behind.empty() ? "" : " " + unbroken(behind.substr(1)))
                      : "none fits",
                  plan_column, "", glue);
  }
  const std::string summary =
      "searched " + std::to_string(r.candidates_tried) + " candidates in " + fixed(r.seconds, 2) +
      " s on " + std::to_string(r.threads) + " thread" + (r.threads == 1 ? "" : "s") + " (" +
      std::to_string(r.candidates_refused) + " refused, " +
      std::to_string(r.candidates_over_budget) + " over budget, " +
      std::to_string(r.candidates_pruned) + " pruned)" +
      (r.cut ? "; " + unbroken(r.interrupted ? "cut short by a signal" : "cut by --time-limit") +
                   " after " + std::to_string(r.candidates_tried) + " of " +
                   std::to_string(r.candidates_total)
             : "");
  print_wrapped("", summary, 2, "", glue);
  for (const tuning::Note& n : r.notes) {
    std::string line = n.configuration + ": " + words_of(n.message, "tune");
    if (n.count > 1) line += " (\xC3\x97" + std::to_string(n.count) + ")";
    print_wrapped("note: ", line, 6);
  }
}

}  // namespace pipesched::cli
