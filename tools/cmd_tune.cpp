// pipesched tune: searches base schedule, chunks, microbatch size and count, slices, fine
// weight gradients and checkpointing with the simulator under a per-rank memory budget, with
// progress on standard error.
#include <unistd.h>

#include <sys/ioctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/schedule/registry.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::cli {

namespace {

void plan_json(json::Writer& w, const std::optional<TunePlan>& plan) {
  if (!plan) {
    w.value(nullptr);
    return;
  }
  const TunePlan& p = *plan;
  w.begin_object()
      .field("base", p.base)
      .field("chunks", p.chunks)
      .field("microbatch_size", p.microbatch_size)
      .field("microbatches", p.microbatches)
      .field("checkpoint", to_string(p.checkpoint))
      .field("makespan", p.makespan)
      .field("throughput", p.throughput)
      .field("bubble_ratio", p.bubble_ratio)
      .field("recomputes", p.recomputes)
      .field("slices", p.slices)
      .field("fine_wgrad", p.fine_wgrad)
      .field("fitted", p.fitted)
      .key("peak_memory")
      .begin_array();
  for (double v : p.peak_per_rank)
    w.value(v);
  w.end_array().end_object();
}

//! "under 1 s left", "about 12 s left", "about 3 min left": the rest of a search.
std::string time_left(double seconds) {
  if (seconds < 1) return "under 1 s left";
  if (seconds < 120) return "about " + std::to_string(static_cast<int>(seconds + 0.5)) + " s left";
  if (seconds < 7200)
    return "about " + std::to_string(static_cast<int>(seconds / 60 + 0.5)) + " min left";
  return "about " + detail::format_number(seconds / 3600, 2) + " h left";
}

//! The progress line of a search on standard error: rewritten in place with "\r", padded over
//! whatever the previous text left, cut to the terminal's width so that it never wraps (a
//! wrapped line cannot be rewritten), with an estimate of the time left. Ends its line when
//! the search ends, however it ends.
class ProgressLine {
 public:
  explicit ProgressLine(bool show) : show_(show), start_(Clock::now()) {
    winsize ws{};
    if (show_ && ::isatty(2) && ::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
      width_ = ws.ws_col - 1;
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() {
    if (printed_ > 0) std::fputc('\n', stderr);
  }

  void update(int done, int total, const TunePlan* best, const std::string& time_unit) {
    if (!show_) return;
    const auto now = Clock::now();
    // A line per candidate would flood a slow terminal: the first, then ten a second.
    if (done != 1 && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::string text =
        "tune: " + std::to_string(done) + "/" + std::to_string(total) + " candidates";
    if (done < total && done > 0)
      text += ", " + time_left(elapsed / done * (total - done));
    else if (done >= total)
      text += " in " + detail::format_number(elapsed, 3) + " s";
    if (best)
      text += (done < total ? ", best so far: " : ", best: ") + describe(*best) + ", step " +
              detail::format_time(best->makespan, time_unit);
    if (text.size() > width_) text.resize(width_);
    std::string line = "\r" + text;
    if (text.size() < printed_) line.append(printed_ - text.size(), ' ');
    printed_ = text.size();
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool show_;
  Clock::time_point start_;
  Clock::time_point last_{};
  std::size_t width_ = 160;  // off a terminal: long enough for any line, still bounded
  std::size_t printed_ = 0;
};

//! Refuses a search grid too large to keep in memory: the tuner holds every configuration's
//! base schedule and simulation while it searches.
void check_grid(const TuneRequest& req) {
  std::set<std::tuple<std::string, int, int, int, bool, bool>> configs;
  double actions = 0, largest = 0;
  std::string largest_label;
  const bool checkpointed =
      req.full_fallback || std::any_of(req.checkpoints.begin(), req.checkpoints.end(),
                                       [](CheckpointMode m) { return m != CheckpointMode::None; });
  for (const std::string& name : req.bases) {
    const GeneratorInfo& g = find_generator(name);
    const std::vector<int> own{g.default_chunks}, whole{1};
    std::vector<bool> fines{false};
    if (req.fine_wgrad && g.split) fines.push_back(true);
    for (int c : g.chunks_vary ? req.chunks : own)
      for (int b : req.microbatch_sizes) {
        if (req.global_batch % b != 0) continue;
        for (int k : g.slices ? req.slices : whole)
          for (bool fine : fines)
            for (bool fitted : {false, true}) {
              if (fitted && !g.generate_within) continue;
              if (!configs.emplace(std::string(g.name), c, b, k, fine, fitted).second) continue;
              if (configs.size() > max_tune_configurations)
                throw usage_error(
                    "the search grid has over " + grouped(max_tune_configurations) +
                    " configurations (--bases x --chunks x --microbatch-sizes x --slices" +
                    (req.fine_wgrad ? " x --fine-wgrad" : "") +
                    "); give fewer values in those lists");
              WGradChoice w;
              w.mode = fine ? WGradMode::Split : g.default_wgrad;
              w.fine = fine;
              w.parts = req.wgrad_parts;
              const ActionEstimate e =
                  estimate_actions(static_cast<double>(req.ranks) * c, req.global_batch / b, k, w,
                                   checkpointed, false);
              actions += e.actions;
              if (e.actions > largest) {
                largest = e.actions;
                largest_label = std::string(g.name) +
                                (c > 1 ? " with " + std::to_string(c) + " chunks per rank" : "") +
                                ", microbatch size " + std::to_string(b) +
                                (k > 1 ? ", " + std::to_string(k) + " slices" : "");
              }
            }
      }
  }
  if (actions > max_actions)
    throw usage_error(
        "the search grid's " + grouped(static_cast<double>(configs.size())) +
        " configurations hold up to " + grouped(actions) + " actions in all (the largest, " +
        largest_label + ", up to " + grouped(largest) + "), over the limit of " +
        grouped(max_actions) +
        " actions a search keeps at once; give fewer --ranks, a smaller --global-batch or "
        "larger --microbatch-sizes, or fewer values in --bases, --chunks or --slices");
}

}  // namespace

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
       "sequences per microbatch tried, with --model (default 1,2,4,8); UniformCost's figures "
       "are per microbatch, so without --model the size is 1",
       "LIST"},
      {"--checkpoint", true,
       "modes searched (default none,selective,mario; full is the fallback; also full-early, "
       "selective-early)",
       "LIST"},
      {"--slices", true, "slices per microbatch tried for gpipe, seq-1f1b, slice-pipe (default 1)",
       "LIST"},
      {"--slicing", true, "how --model cuts slices: uniform (default), balanced or terapipe",
       "MODE"},
      {"--fine-wgrad", false, "also try weight gradients cut into parts placed in waits"},
      {"--wgrad-parts", true, "parts per weight gradient with --fine-wgrad (default 4)", "N"},
      {"--json", false, "print one JSON object"},
      {"--progress", false,
       "show progress and the time left on standard error (default: when it is a terminal)"},
  };
  for (const auto& c : cost_options)
    if (c.name != "--microbatch-size") specs.push_back(c);
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched tune --ranks P --global-batch N (--cost K=V,... | --model M --device D) "
        "[--memory-budget X] [--bases LIST] [--chunks LIST] [--microbatch-sizes LIST] "
        "[--checkpoint LIST] [--slices LIST] [--slicing MODE] [--fine-wgrad [--wgrad-parts N]] "
        "[--json] [--progress]",
        "Searches base schedule, chunks, microbatch size and count, slices, fine weight gradients\n"
        "and checkpointing (none, conventional selective, Mario) with the simulator, under a\n"
        "per-rank memory budget, and prints the fastest plan beside the fastest without\n"
        "checkpointing and the fastest conventional one. Configurations refused for the same\n"
        "reason make one note with their count (×12). The search keeps at most " +
            grouped(max_actions) + "\nactions (all configurations together) and " +
            grouped(max_tune_configurations) +
            " configurations.\n"
            "Exit 0 when some plan fits, 1 when none does, 2 on bad usage.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("tune", argv, specs, 0);
  if (!a.has("--ranks") || !a.has("--global-batch"))
    throw usage_error("give --ranks P and --global-batch N");
  TuneRequest req;
  req.ranks = parse_int("--ranks", a.get("--ranks"), 1, 4096);
  req.global_batch = parse_int("--global-batch", a.get("--global-batch"), 1, 1 << 20);
  if (a.has("--bases")) {
    req.bases = split_list(a.get("--bases"));
    if (req.bases.empty())
      throw usage_error(
          "--bases needs a comma-separated list of schedules (see pipesched "
          "list), got '" +
          a.get("--bases") + "'");
    for (const std::string& name : req.bases) {
      try {
        find_generator(name);
      } catch (const invalid_problem& e) {
        throw usage_error(std::string("--bases: ") + e.what());
      }
    }
  }
  if (a.has("--chunks")) req.chunks = parse_int_list("--chunks", a.get("--chunks"), 1, 64);
  if (a.has("--checkpoint")) {
    req.checkpoints.clear();
    for (const std::string& m : split_list(a.get("--checkpoint"))) {
      try {
        req.checkpoints.push_back(parse_checkpoint_mode(m));
      } catch (const parse_error& e) {
        throw usage_error(std::string("--checkpoint: ") + e.what());
      }
    }
    if (req.checkpoints.empty())
      throw usage_error(
          "--checkpoint needs a comma-separated list of modes (none, full, selective, mario, "
          "full-early, selective-early), got '" +
          a.get("--checkpoint") + "'");
  }
  if (a.has("--slices")) req.slices = parse_int_list("--slices", a.get("--slices"), 1, 4096);
  if (a.has("--wgrad-parts") && !a.has("--fine-wgrad"))
    throw usage_error("--wgrad-parts needs --fine-wgrad");
  req.fine_wgrad = a.has("--fine-wgrad");
  if (a.has("--wgrad-parts"))
    req.wgrad_parts = parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  const AnyCost cost = get_cost(a);
  const bool tc = is_transformer(cost);
  const Units units = units_of(cost);
  if (a.has("--microbatch-sizes")) {
    if (!tc)
      throw usage_error(
          "--microbatch-sizes needs --model and --device: UniformCost's figures are per "
          "microbatch, so without a model the tuner searches microbatch size 1 only");
    req.microbatch_sizes =
        parse_int_list("--microbatch-sizes", a.get("--microbatch-sizes"), 1, 1 << 16);
  }
  if (!tc) req.microbatch_sizes = {1};
  if (std::none_of(req.microbatch_sizes.begin(), req.microbatch_sizes.end(),
                   [&](int b) { return req.global_batch % b == 0; }))
    throw usage_error("none of --microbatch-sizes " + join_ints(req.microbatch_sizes, ",") +
                      " divides --global-batch " + std::to_string(req.global_batch) +
                      "; include a divisor such as 1");
  if (a.has("--slicing")) {
    try {
      req.slicing = parse_slicing_mode(a.get("--slicing"));
    } catch (const parse_error& e) {
      throw usage_error(std::string("--slicing: ") + e.what());
    }
    if (req.slicing != SlicingMode::Uniform && !tc)
      throw usage_error("--slicing " + a.get("--slicing") +
                        " weighs slices by their attention cost, which only --model/--device know");
  }
  if (a.has("--memory-budget")) {
    const std::string text = a.get("--memory-budget");
    if (detail::lower_ascii(text) != "device") {
      MemoryBudgetValue v;
      try {
        v = parse_memory_budget(text);
      } catch (const parse_error& e) {
        throw usage_error(std::string("--memory-budget: ") + e.what());
      }
      if (tc != v.bytes)
        throw usage_error("--memory-budget " + text +
                          (tc ? " needs a unit (24GB, 512MiB) or 'device' with --model/--device"
                              : " must be a plain number of microbatches without "
                                "--model/--device"));
      req.budget = MemoryBudget{.all = v.value};
    } else if (!tc) {
      throw usage_error("--memory-budget device needs --model and --device");
    }
  }
  try {
    req.check();
  } catch (const invalid_problem& e) {
    throw usage_error(e.what());
  }
  check_grid(req);

  TuneResult r;
  {
    ProgressLine line(a.has("--progress") || ::isatty(2));
    auto progress = [&](int done, int total, const TunePlan* best) {
      line.update(done, total, best, units.time);
    };
    Step step("searching " + std::to_string(req.ranks) + "-rank pipelines for a global batch of " +
              std::to_string(req.global_batch));
    try {
      if (tc) {
        const auto& t = std::get<TransformerCost>(cost);
        r = tune(req, t.model, t.device, progress);
      } else {
        r = tune(req, std::get<UniformCost>(cost), progress);
      }
    } catch (const invalid_problem& e) {
      throw usage_error(e.what());
    }
  }
  if (a.has("--json")) {
    json::Writer w;
    w.begin_object();
    w.key("best");
    plan_json(w, r.best);
    w.key("best_without_checkpoint");
    plan_json(w, r.best_without_checkpoint);
    w.key("best_conventional");
    plan_json(w, r.best_conventional);
    w.key("best_mario");
    plan_json(w, r.best_mario);
    w.field("time_unit", units.time)
        .field("candidates", r.candidates_tried)
        .field("seconds", r.seconds)
        .key("notes")
        .begin_array();
    for (const TuneNote& n : r.notes)
      w.begin_object()
          .field("configuration", n.configuration)
          .field("reason", in_cli_words(n.reason, "tune"))
          .field("count", n.count)
          .end_object();
    w.end_array().end_object();
    std::cout << w.take() << "\n";
  } else {
    auto row = [&](const char* what, const std::optional<TunePlan>& p) {
      if (!p) {
        std::printf("%-26s none fits\n", what);
        return;
      }
      std::printf("%-26s %-58s step %s", what, describe(*p).c_str(),
                  detail::format_time(p->makespan, units.time, 6).c_str());
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
    for (const TuneNote& n : r.notes) {
      std::string line = "note: " + in_cli_words(n.text(), "tune");
      if (n.count > 1) line += " (\xC3\x97" + std::to_string(n.count) + ")";
      std::printf("%s\n", line.c_str());
    }
  }
  return r.best ? exit_ok : exit_invalid;
}

}  // namespace pipesched::cli
