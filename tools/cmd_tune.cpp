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
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::cli {

namespace {

//! What a plan's `simulate` command needs besides the plan: how tune was asked.
struct CommandContext {
  bool transformer = false;
  std::string model, device, sequence, gpus_per_node;  //!< option values as given ("" = none)
  std::string cost;                                    //!< --cost text (UniformCost)
  std::string budget;                                  //!< --memory-budget text ("" = none)
  std::string slicing;                                 //!< --slicing text ("" = uniform)
  int wgrad_parts = 4;
  bool whole_step = false;
};

std::string quoted(const std::string& s) {
  return s.find_first_of(" '\"\\$`") == std::string::npos ? s : "'" + s + "'";
}

//! A `pipesched simulate` command line that builds this plan's schedule the way tune did
//! (generate, fit, place W parts, checkpoint) under the same cost model, so that its makespan
//! is the plan's step time.
std::string plan_command(const TunePlan& p, const CommandContext& c) {
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
    cmd += " --model " + quoted(c.model) + " --device " + quoted(c.device);
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
  // The budget tune held the plan to, where the schedule depends on it.
  const std::string budget = c.transformer && c.budget.empty() ? "device" : c.budget;
  if (!budget.empty() && (p.fitted || p.fine_wgrad || p.checkpoint != CheckpointMode::None)) {
    cmd += " --memory-budget " + quoted(budget);
    if (g.generate_within) cmd += p.fitted ? " --fit" : " --no-fit";
  }
  return cmd;
}

const char* wgrad_name(const TunePlan& p) {
  if (p.fine_wgrad) return "fine";
  return p.wgrad == WGradMode::Split ? "split" : "fused";
}

// The JSON is a contract (docs/cli.md).
void plan_json(json::Writer& w, const std::optional<TunePlan>& plan, const CommandContext& c) {
  if (!plan) {
    w.value(nullptr);
    return;
  }
  const TunePlan& p = *plan;
  w.begin_object()
      .field("schedule", p.base)
      .field("checkpoint", to_string(p.checkpoint))
      .field("wgrad", wgrad_name(p))
      .field("pp", p.schedule.problem.ranks)
      .field("dp", p.data)
      .field("tp", p.tensor)
      .field("zero", p.zero)
      .field("sequence_parallel", p.sequence_parallel)
      .field("microbatch_size", p.microbatch_size)
      .field("microbatches", p.microbatches)
      .field("chunks", p.chunks)
      .field("slices", p.slices)
      .field("warmup", p.warmup)
      .key("layers_per_stage")
      .begin_array();
  for (int n : p.layers_per_stage)
    w.value(n);
  w.end_array();
  // Seconds, bytes and MFU exist under TransformerCost only.
  for (const auto& [key, v] :
       {std::pair{"step_time_s", p.makespan}, std::pair{"peak_memory_bytes", p.peak_memory},
        std::pair{"mfu", p.mfu}}) {
    w.key(key);
    if (c.transformer)
      w.value(v);
    else
      w.value(nullptr);
  }
  w.field("command", plan_command(p, c))
      .field("base", p.base)
      .field("makespan", p.makespan)
      .field("throughput", p.throughput)
      .field("bubble_ratio", p.bubble_ratio)
      .field("recomputes", p.recomputes)
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

//! Refuses a search grid too large to search: more configurations than
//! max_tune_configurations, or schedules the search cannot hold. The search holds one
//! schedule per thread as it builds candidates, and the best plan of each (base, mode) pair;
//! each is at most the largest configuration's (`pipelines` lists the pipeline sizes and the
//! most sequences one of them runs).
void check_grid(const TuneRequest& req, const std::vector<std::pair<int, int>>& pipelines,
                int threads, int layers) {
  std::set<std::tuple<int, std::string, int, int, int, bool, bool>> configs;
  double largest = 0;
  std::string largest_label;
  const bool checkpointed =
      req.full_fallback || std::any_of(req.checkpoints.begin(), req.checkpoints.end(),
                                       [](CheckpointMode m) { return m != CheckpointMode::None; });
  for (const auto& [ranks, batch] : pipelines)
    for (const std::string& name : req.bases) {
      const GeneratorInfo& g = find_generator(name);
      const std::vector<int> own{g.default_chunks}, whole{1};
      std::vector<bool> fines{false};
      if (req.fine_wgrad && g.split) fines.push_back(true);
      for (int c : g.chunks_vary ? req.chunks : own) {
        // A model too shallow for these stages refuses them before any schedule is built.
        if (layers > 0 && (ranks > layers || (g.chunks_vary && ranks * c > layers))) continue;
        for (int b : req.microbatch_sizes) {
          if (batch % b != 0) continue;
          for (int k : g.slices ? req.slices : whole)
            for (bool fine : fines)
              for (bool fitted : {false, true}) {
                if (fitted && !g.generate_within) continue;
                if (!configs.emplace(ranks, std::string(g.name), c, b, k, fine, fitted).second)
                  continue;
                if (configs.size() > max_tune_configurations)
                  throw usage_error("the search grid has over " + grouped(max_tune_configurations) +
                                    " configurations (" +
                                    (pipelines.size() > 1 ? "pipelines of --gpus x " : "") +
                                    "--bases x --chunks x --microbatch-sizes x --slices" +
                                    (req.fine_wgrad ? " x --fine-wgrad" : "") +
                                    "); give fewer values in those lists");
                WGradChoice w;
                w.mode = fine ? WGradMode::Split : g.default_wgrad;
                w.fine = fine;
                w.parts = req.wgrad_parts > 0 ? req.wgrad_parts
                                              : 4 * ((std::max(layers, 1) + ranks - 1) / ranks) + 1;
                const ActionEstimate e = estimate_actions(static_cast<double>(ranks) * c, batch / b,
                                                          k, w, checkpointed, false);
                if (e.actions > largest) {
                  largest = e.actions;
                  largest_label = std::string(g.name) +
                                  (c > 1 ? " with " + std::to_string(c) + " chunks per rank" : "") +
                                  " over " + std::to_string(ranks) + " ranks" +
                                  ", microbatch size " + std::to_string(b) +
                                  (k > 1 ? ", " + std::to_string(k) + " slices" : "");
                }
              }
        }
      }
    }
  std::set<std::string> bases(req.bases.begin(), req.bases.end());
  const double pairs = static_cast<double>(bases.size()) * (req.checkpoints.size() + 1);
  const double held = (threads + pairs) * largest;
  if (largest > max_actions || held > held_actions)
    throw usage_error(
        "the search grid's largest configuration (" + largest_label + ") holds up to " +
        grouped(largest) + " actions; the search keeps one such schedule per thread and one per " +
        "(base, checkpoint) pair, up to " + grouped(held) + " actions, over the limit of " +
        grouped(largest > max_actions ? max_actions : held_actions) + " actions (of " +
        grouped(max_actions) +
        " per schedule); give fewer --ranks or --gpus, a smaller --global-batch or "
        "larger --microbatch-sizes, or fewer values in --bases, --chunks or --slices");
}

//! The lists the tune options give, into `req`.
void parse_search_options(const Args& a, TuneRequest& req) {
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
        throw usage_error("--bases: " + e.message());
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
        throw usage_error("--checkpoint: " + e.message());
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
    req.wgrad_parts = detail::lower_ascii(a.get("--wgrad-parts")) == "gemm"
                          ? 0
                          : parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  if (a.has("--threads")) req.threads = parse_int("--threads", a.get("--threads"), 1, 1024);
  if (a.has("--time-limit"))
    req.time_limit = parse_number("--time-limit", a.get("--time-limit"), 0.001, 1e7);
}

}  // namespace

int cmd_tune(const std::vector<std::string>& argv) {
  std::vector<OptionSpec> specs = {
      {"--ranks", true,
       "a pipeline of P ranks (devices), no data or tensor parallelism beyond "
       "--dp / --tp",
       "P"},
      {"--gpus", true,
       "search the whole cluster of N GPUs instead: every pipeline x data x tensor "
       "factorization (needs --model and --device)",
       "N"},
      {"--global-batch", true, "sequences per step (over all replicas), cut into microbatches",
       "B"},
      {"--memory-budget", true,
       "activation memory per rank: N (microbatches) or bytes (24GB); default with --model: "
       "device (memory less weights, gradients, optimizer state and workspace), else none",
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
      {"--wgrad-parts", true,
       "parts per weight gradient with --fine-wgrad (default 4; gemm: one per weight GEMM, as "
       "MEPipe cuts them, with --model)",
       "N|gemm"},
      {"--pp", true, "with --gpus: pipeline sizes tried (default: every divisor)", "LIST"},
      {"--zero", true,
       "ZeRO stage where there are data-parallel replicas: with --gpus 0, 1 (default: "
       "Megatron-LM's distributed optimizer) or 2; with --ranks and --dp 0 (default), 1 or 2",
       "Z"},
      {"--no-sp", false, "with --gpus: no sequence parallelism with tensor parallelism"},
      {"--threads", true, "threads searching (default: one per core)", "N"},
      {"--time-limit", true,
       "stop after S seconds with the best plans found so far (the output says the search was "
       "cut)",
       "S"},
      {"--json", false, "print one JSON object (schema: docs/cli.md)"},
      {"--progress", false,
       "show progress and the time left on standard error (default: when it is a terminal)"},
  };
  for (const auto& c : cost_options) {
    if (c.name == "--microbatch-size" || c.name == "--zero") continue;
    if (c.name == "--tp") {
      specs.push_back({"--tp", true,
                       "tensor-parallel degree: with --gpus the degrees tried (default: every "
                       "divisor of the node the model allows), with --ranks one value",
                       "LIST"});
      continue;
    }
    specs.push_back(c);
  }
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched tune (--ranks P | --gpus N [--gpus-per-node G]) --global-batch B "
        "(--cost K=V,... | --model M --device D [--sequence S]) [--memory-budget X] "
        "[--bases LIST] [--chunks LIST] [--microbatch-sizes LIST] [--checkpoint LIST] "
        "[--slices LIST] [--slicing MODE] [--fine-wgrad [--wgrad-parts N]] [--pp LIST] "
        "[--tp LIST] [--zero Z] [--threads N] [--time-limit S] [--json] [--progress]",
        "Searches base schedule, chunks, microbatch size and count, slices, fine weight gradients\n"
        "and checkpointing (none, conventional selective, Mario) with the simulator, under a\n"
        "per-rank memory budget, for a pipeline of --ranks P ranks; with --gpus N, also every\n"
        "way to run N GPUs as pipeline x data x tensor parallelism (tensor inside a node, data\n"
        "replicas' gradients all-reduced, ZeRO sharding, sequence parallelism) and the layer\n"
        "splits (even, or fewer layers on the last stage for its LM head), counting the\n"
        "optimizer step and each action's workspace. Prints the fastest plan, the fastest of\n"
        "each (schedule, checkpoint) pair, and a `pipesched simulate` command for each that\n"
        "reproduces its step time. Searches on every core; safe bounds skip what cannot win.\n"
        "Configurations refused for the same reason make one note with their count (x12).\n"
        "At most " +
            grouped(max_tune_configurations) + " configurations, and " + grouped(max_actions) +
            " actions per schedule.\n"
            "Exit 0 when some plan fits, 1 when none does, 2 on bad usage.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("tune", argv, specs, 0);
  const bool cluster = a.has("--gpus");
  if (cluster == a.has("--ranks"))
    throw usage_error(cluster ? "give --ranks P (one pipeline) or --gpus N (a cluster), not both"
                              : "give --ranks P (one pipeline) or --gpus N (a cluster)");
  if (!a.has("--global-batch")) throw usage_error("give --global-batch B");
  TuneRequest req;
  req.global_batch = parse_int("--global-batch", a.get("--global-batch"), 1, 1 << 20);
  parse_search_options(a, req);

  // The cost model: with --gpus its tensor, data and ZeRO degrees are the search's.
  Args cost_args = a;
  ClusterRequest creq;
  if (cluster) {
    if (!a.has("--model") || !a.has("--device"))
      throw usage_error(
          "--gpus searches tensor and data parallelism of a transformer; give "
          "--model NAME and --device NAME (see pipesched list)");
    for (const char* o : {"--dp", "--sp", "--layers", "--whole-step"})
      if (a.has(o))
        throw usage_error(std::string(o) +
                          " is what --gpus searches (or always counts); leave it "
                          "out, or use --ranks P for one fixed pipeline");
    creq.gpus = parse_int("--gpus", a.get("--gpus"), 1, 1 << 16);
    if (a.has("--pp")) creq.pipeline = parse_int_list("--pp", a.get("--pp"), 1, 1 << 16);
    if (a.has("--tp")) creq.tensor = parse_int_list("--tp", a.get("--tp"), 1, 1 << 16);
    if (a.has("--zero")) creq.zero = parse_int("--zero", a.get("--zero"), 0, 2);
    creq.sequence_parallel = !a.has("--no-sp");
    for (const char* o : {"--tp", "--pp", "--zero", "--no-sp"})
      cost_args.values.erase(o);
  } else {
    for (const char* o : {"--pp", "--no-sp"})
      if (a.has(o)) throw usage_error(std::string(o) + " needs --gpus N (a cluster search)");
    req.ranks = parse_int("--ranks", a.get("--ranks"), 1, 4096);
  }
  const AnyCost cost = get_cost(cost_args);
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
  if (req.fine_wgrad && req.wgrad_parts == 0 && !tc)
    throw usage_error(
        "--wgrad-parts gemm cuts each weight gradient per weight GEMM of the model; give "
        "--model and --device too, or a number of parts");
  if (std::none_of(req.microbatch_sizes.begin(), req.microbatch_sizes.end(),
                   [&](int b) { return req.global_batch % b == 0; }))
    throw usage_error("none of --microbatch-sizes " + join_ints(req.microbatch_sizes, ",") +
                      " divides --global-batch " + std::to_string(req.global_batch) +
                      "; include a divisor such as 1");
  if (a.has("--slicing")) {
    try {
      req.slicing = parse_slicing_mode(a.get("--slicing"));
    } catch (const parse_error& e) {
      throw usage_error("--slicing: " + e.message());
    }
    if (req.slicing != SlicingMode::Uniform && !tc)
      throw usage_error("--slicing " + a.get("--slicing") +
                        " weighs slices by their attention cost, which only --model/--device know");
  }
  std::string budget_text;
  if (a.has("--memory-budget")) {
    const std::string text = a.get("--memory-budget");
    if (detail::lower_ascii(text) != "device") {
      if (cluster)
        throw usage_error("--memory-budget " + text +
                          ": with --gpus every GPU is held to its device memory (less its "
                          "weights, gradients, optimizer state and workspace); leave it out");
      MemoryBudgetValue v;
      try {
        v = parse_memory_budget(text);
      } catch (const parse_error& e) {
        throw usage_error("--memory-budget: " + e.message());
      }
      if (tc != v.bytes)
        throw usage_error("--memory-budget " + text +
                          (tc ? " needs a unit (24GB, 512MiB) or 'device' with --model/--device"
                              : " must be a plain number of microbatches without "
                                "--model/--device"));
      req.budget = MemoryBudget{.all = v.value};
      budget_text = text;
    } else if (!tc) {
      throw usage_error("--memory-budget device needs --model and --device");
    }
  }
  const int threads = req.threads > 0
                          ? req.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::pair<int, int>> pipelines;  // (ranks, most sequences a pipeline runs)
  try {
    if (cluster) {
      creq.global_batch = req.global_batch;
      creq.search = req;
      creq.check();
      // Each pipeline size with the most sequences one of its pipelines can run: the
      // fewest data-parallel replicas, i.e. the largest tensor degree the node allows.
      const int G = std::get<TransformerCost>(cost).device.ranks_per_node;
      for (int pp = 1; pp <= creq.gpus; ++pp) {
        if (creq.gpus % pp != 0 ||
            (!creq.pipeline.empty() &&
             std::find(creq.pipeline.begin(), creq.pipeline.end(), pp) == creq.pipeline.end()))
          continue;
        int fewest = 0;
        for (int t = 1; t <= G; ++t)
          if (G % t == 0 && (creq.gpus / pp) % t == 0 &&
              (creq.tensor.empty() ||
               std::find(creq.tensor.begin(), creq.tensor.end(), t) != creq.tensor.end()))
            fewest = creq.gpus / pp / t;
        if (fewest > 0) pipelines.emplace_back(pp, req.global_batch / fewest);
      }
    } else {
      req.check();
      pipelines.emplace_back(req.ranks, req.global_batch);
    }
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
  check_grid(req, pipelines, threads, tc ? std::get<TransformerCost>(cost).model.layers : 0);

  CommandContext ctx;
  ctx.transformer = tc;
  ctx.model = a.get("--model");
  ctx.device = a.get("--device");
  ctx.sequence = a.get("--sequence");
  ctx.gpus_per_node = a.get("--gpus-per-node");
  ctx.cost = a.get("--cost");
  ctx.budget = budget_text;
  ctx.slicing = req.slicing == SlicingMode::Uniform ? "" : to_string(req.slicing);
  ctx.wgrad_parts = req.wgrad_parts;
  ctx.whole_step = cluster || a.has("--whole-step");

  TuneResult r;
  {
    ProgressLine line(a.has("--progress") || ::isatty(2));
    auto progress = [&](int done, int total, const TunePlan* best) {
      line.update(done, total, best, units.time);
    };
    Step step(cluster ? "searching " + std::to_string(creq.gpus) + " GPUs for a global batch of " +
                            std::to_string(req.global_batch)
                      : "searching " + std::to_string(req.ranks) +
                            "-rank pipelines for a global batch of " +
                            std::to_string(req.global_batch));
    try {
      if (cluster) {
        const auto& t = std::get<TransformerCost>(cost);
        r = tune_cluster(creq, t.model, t.device, progress);
      } else if (tc) {
        const auto& t = std::get<TransformerCost>(cost);
        r = tune(req, TransformerCostFactory{t.model, t.device, t.parallel}, progress);
      } else {
        r = tune(req, std::get<UniformCost>(cost), progress);
      }
    } catch (const invalid_problem& e) {
      throw usage_error(e.message());
    }
  }
  if (a.has("--json")) {
    json::Writer w;
    w.begin_object();
    w.key("best");
    plan_json(w, r.best, ctx);
    w.key("baselines").begin_array();
    for (const TuneBaseline& b : r.baselines) {
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
    for (const TuneNote& n : r.notes)
      w.begin_object()
          .field("configuration", n.configuration)
          .field("reason", words_of(n.reason, "tune"))
          .field("count", n.count)
          .end_object();
    w.end_array().end_object();
    std::cout << w.take() << "\n";
  } else {
    auto step_of = [&](const TunePlan& p) {
      std::string s = detail::format_time(p.makespan, units.time, 6);
      if (r.best && p.makespan > r.best->makespan * (1 + 1e-12))
        s += "  (best is " + detail::format_number(p.makespan / r.best->makespan, 4) + "x faster)";
      return s;
    };
    auto row = [&](const char* what, const std::optional<TunePlan>& p) {
      if (!p) {
        std::printf("%-26s none fits\n", what);
        return;
      }
      std::printf("%-26s %-58s step %s\n", what, describe(*p).c_str(), step_of(*p).c_str());
    };
    row("best:", r.best);
    if (r.best) {
      if (tc)
        std::printf("%-26s MFU %.1f%%, largest GPU's memory %s\n", "", 100 * r.best->mfu,
                    detail::format_memory(r.best->peak_memory, units.memory, 4).c_str());
      std::printf("%-26s %s\n", "", plan_command(*r.best, ctx).c_str());
    }
    row("best without checkpoint:", r.best_without_checkpoint);
    row("best conventional:", r.best_conventional);
    row("best Mario:", r.best_mario);
    std::printf("\nbest of each schedule and checkpoint mode:\n");
    std::printf("  %-18s %-16s %-64s %s\n", "schedule", "checkpoint", "plan", "step");
    for (const TuneBaseline& b : r.baselines)
      std::printf("  %-18s %-16s %-64s %s\n", b.base.c_str(), to_string(b.checkpoint),
                  b.plan ? describe(*b.plan).c_str() : "none fits",
                  b.plan ? step_of(*b.plan).c_str() : "");
    std::printf(
        "searched %d candidates in %.2f s on %d thread%s (%d refused, %d over budget, %d "
        "pruned)%s\n",
        r.candidates_tried, r.seconds, r.threads, r.threads == 1 ? "" : "s", r.candidates_refused,
        r.candidates_over_budget, r.candidates_pruned,
        r.cut ? ("; cut by --time-limit after " + std::to_string(r.candidates_tried) + " of " +
                 std::to_string(r.candidates_total))
                    .c_str()
              : "");
    for (const TuneNote& n : r.notes) {
      std::string line = "note: " + words_of(n.text(), "tune");
      if (n.count > 1) line += " (\xC3\x97" + std::to_string(n.count) + ")";
      std::printf("%s\n", line.c_str());
    }
  }
  return r.best ? exit_ok : exit_invalid;
}

}  // namespace pipesched::cli
