// pipesched tune, reading the command line: the options, their checks (in the order the
// messages promise), the request they make, and the limits on the search grid.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/request.hpp"

namespace pipesched::cli {

namespace {

//! Refuses a search grid too large to search: more configurations than
//! max_tune_configurations, or schedules the search cannot hold. The search holds one
//! schedule per thread as it builds candidates, and the best plan of each (base, mode) pair;
//! each is at most the largest configuration's (`pipelines` lists the pipeline sizes and the
//! most sequences one of them runs).
void check_grid(const tuning::Request& req, const std::vector<std::pair<int, int>>& pipelines,
                int threads, int layers) {
  std::set<std::tuple<int, std::string, int, int, int, bool, bool, bool, bool>> configs;
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
      std::vector<int> chunks = req.chunks;
      if (req.every_equal_chunks)
        for (int c : equal_split_chunks(layers, ranks))
          if (std::find(chunks.begin(), chunks.end(), c) == chunks.end()) chunks.push_back(c);
      for (int c : g.chunks_vary ? chunks : own) {
        // A model too shallow for these stages refuses them before any schedule is built.
        if (layers > 0 && (ranks > layers || (g.chunks_vary && ranks * c > layers))) continue;
        for (int b : req.microbatch_sizes) {
          if (batch % b != 0) continue;
          for (int k : g.slices ? req.slices : whole)
            for (bool fine : fines)
              for (bool fitted : {false, true})
                for (bool offloaded : {false, true})
                  for (bool vocabulary : {false, true}) {
                    if (fitted && !g.generate_within) continue;
                    if (offloaded && (!req.offload || k > 1)) continue;
                    if (vocabulary && (!req.vocabulary || offloaded || !detail::one_replica(g)))
                      continue;
                    if (!configs
                             .emplace(ranks, std::string(g.name), c, b, k, fine, fitted, offloaded,
                                      vocabulary)
                             .second)
                      continue;
                    if (configs.size() > max_tune_configurations)
                      throw usage_error("the search grid has over " +
                                        grouped(max_tune_configurations) + " configurations (" +
                                        (pipelines.size() > 1 ? "pipelines of --gpus x " : "") +
                                        "--bases x --chunks x --microbatch-sizes x --slices" +
                                        (req.fine_wgrad ? " x --fine-wgrad" : "") +
                                        (req.offload ? " x --offload" : "") +
                                        (req.vocabulary ? " x --vocab-parallel" : "") +
                                        "); give fewer values in those lists" +
                                        (req.every_equal_chunks
                                             ? " (--chunks 2,4 tries fewer chunk counts than "
                                               "the default)"
                                             : ""));
                    WGradChoice w;
                    w.mode = fine ? WGradMode::Split : g.default_wgrad;
                    w.fine = fine;
                    w.parts = req.wgrad_parts > 0
                                  ? req.wgrad_parts
                                  : 4 * ((std::max(layers, 1) + ranks - 1) / ranks) + 1;
                    const ActionEstimate e =
                        estimate_actions(static_cast<double>(ranks) * c, batch / b, k, w,
                                         checkpointed, false, offloaded, vocabulary);
                    if (e.actions > largest) {
                      largest = e.actions;
                      largest_label =
                          std::string(g.name) +
                          (c > 1 ? " with " + std::to_string(c) + " chunks per rank" : "") +
                          " over " + std::to_string(ranks) + " ranks" + ", microbatch size " +
                          std::to_string(b) + (k > 1 ? ", " + std::to_string(k) + " slices" : "");
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
void parse_search_options(const Args& a, tuning::Request& req) {
  if (a.has("--bases")) {
    req.bases = split_list("--bases", a.get("--bases"));
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
  // By default also every count cutting the model into equal stages (TransformerCost).
  req.every_equal_chunks = !a.has("--chunks");
  if (a.has("--chunks")) req.chunks = parse_int_list("--chunks", a.get("--chunks"), 1, 64);
  if (a.has("--checkpoint")) {
    req.checkpoints.clear();
    for (const std::string& m : split_list("--checkpoint", a.get("--checkpoint"))) {
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
  req.offload = a.has("--offload");
  req.vocabulary = a.has("--vocab-parallel");
  if (a.has("--wgrad-parts"))
    req.wgrad_parts = lower_ascii(a.get("--wgrad-parts")) == "gemm"
                          ? 0
                          : parse_int("--wgrad-parts", a.get("--wgrad-parts"), 1, 1024);
  if (a.has("--threads")) req.threads = parse_int("--threads", a.get("--threads"), 1, 1024);
  if (a.has("--time-limit"))
    req.time_limit = parse_number("--time-limit", a.get("--time-limit"), 0.001, 1e7);
}

//! --gpus and its cluster options into `c.creq`, or --ranks into `c.req`; the arguments left
//! for the cost model (with --gpus its tensor, data and ZeRO degrees are the search's).
Args parse_pipeline_options(const Args& a, TuneCommand& c) {
  Args cost_args = a;
  if (c.cluster) {
    if (!(a.has("--model") || a.has("--profile")) || !(a.has("--device") || a.has("--cluster")))
      throw usage_error(
          "--gpus searches tensor and data parallelism of a transformer; give "
          "--model NAME|FILE (or --profile FILE) and --device NAME|FILE or --cluster FILE (see "
          "pipesched list)");
    for (const char* o : {"--dp", "--sp", "--layers", "--whole-step"})
      if (a.has(o))
        throw usage_error(std::string(o) +
                          " is what --gpus searches (or always counts); leave it "
                          "out, or use --ranks P for one fixed pipeline");
    c.creq.gpus = parse_int("--gpus", a.get("--gpus"), 1, 1 << 16);
    if (a.has("--pp")) c.creq.pipeline = parse_int_list("--pp", a.get("--pp"), 1, 1 << 16);
    if (a.has("--tp")) c.creq.tensor = parse_int_list("--tp", a.get("--tp"), 1, 1 << 16);
    if (a.has("--zero")) c.creq.zero = parse_int("--zero", a.get("--zero"), 0, 2);
    // A layer profile times the layers as they ran, without sequence parallelism.
    c.creq.sequence_parallel = !a.has("--no-sp") && !a.has("--profile");
    for (const char* o : {"--tp", "--pp", "--zero", "--no-sp"})
      cost_args.values.erase(o);
  } else {
    for (const char* o : {"--pp", "--no-sp"})
      if (a.has(o)) throw usage_error(std::string(o) + " needs --gpus N (a cluster search)");
    c.req.ranks = parse_int("--ranks", a.get("--ranks"), 1, 4096);
  }
  return cost_args;
}

//! The options whose meaning depends on the cost model: microbatch sizes (only a model has
//! more than 1), W parts per GEMM and slicing by attention cost (only a model knows them).
void parse_model_options(const Args& a, TuneCommand& c) {
  tuning::Request& req = c.req;
  const bool tc = c.transformer;
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
  // --layout auto: the best plans' layouts searched (three of them); a layout's text fixes
  // one pipeline's layers (the cost model holds them, as --layers).
  if (a.has("--layout")) {
    if (a.get("--layout") == "auto")
      req.layout_search = 3;
    else if (c.cluster)
      throw usage_error(
          "--layout " + a.get("--layout") +
          " gives the layers of one pipeline, and --gpus searches pipelines of many sizes; "
          "give --layout auto (each best plan's layout searched), or --ranks P");
  }
}

//! --memory-budget into `c.req`; the text as given ("" without one, or for 'device').
std::string parse_budget(const Args& a, TuneCommand& c) {
  tuning::Request& req = c.req;
  const bool tc = c.transformer;
  const bool cluster = c.cluster;
  std::string budget_text;
  if (a.has("--memory-budget")) {
    const std::string text = a.get("--memory-budget");
    if (lower_ascii(text) != "device") {
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
  return budget_text;
}

//! Checks the request (usage_error in the command line's words) and lists the pipelines the
//! search runs, each as (ranks, most sequences a pipeline of that size runs).
std::vector<std::pair<int, int>> searched_pipelines(TuneCommand& c) {
  tuning::Request& req = c.req;
  tuning::ClusterRequest& creq = c.creq;
  std::vector<std::pair<int, int>> pipelines;
  try {
    if (c.cluster) {
      creq.global_batch = req.global_batch;
      creq.search = req;
      creq.check();
      const int per_node = std::get<TransformerCost>(c.cost).device.ranks_per_node;
      check_whole_nodes(creq.gpus, per_node);
      // Each pipeline size with the most sequences one of its pipelines can run: the
      // fewest data-parallel replicas, i.e. the largest tensor degree the node allows.
      const int G = per_node;
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
  return pipelines;
}

//! What each plan's `simulate` command repeats of the command line.
CommandContext command_context(const Args& a, const TuneCommand& c, const std::string& budget) {
  CommandContext ctx;
  ctx.transformer = c.transformer;
  ctx.model = a.get("--model");
  ctx.device = a.get("--device");
  ctx.cluster = a.get("--cluster");
  ctx.profile = a.get("--profile");
  ctx.sequence = a.get("--sequence");
  ctx.gpus_per_node = a.get("--gpus-per-node");
  ctx.cost = a.get("--cost");
  ctx.budget = budget;
  ctx.slicing = c.req.slicing == SlicingMode::Uniform ? "" : to_string(c.req.slicing);
  ctx.wgrad_parts = c.req.wgrad_parts;
  ctx.whole_step = c.cluster || a.has("--whole-step");
  return ctx;
}

}  // namespace

void require_finite(const tuning::Result& r) {
  auto check = [](const std::optional<tuning::Plan>& p) {
    if (!p) return;
    if (std::isfinite(p->makespan) && std::isfinite(p->bubble_ratio) &&
        std::isfinite(p->peak_memory) && std::isfinite(p->mfu))
      return;
    throw usage_error("a plan's simulated step is not a finite figure (step time " +
                      format_general(p->makespan) + ", MFU " + format_general(p->mfu) +
                      "): the cost model's times or sizes overflow; check the --cost, --model "
                      "and --device figures against their ranges (docs/cli.md)");
  };
  check(r.best);
  check(r.best_without_checkpoint);
  check(r.best_conventional);
  check(r.best_mario);
  for (const tuning::Baseline& b : r.baselines)
    check(b.plan);
}

std::vector<OptionSpec> tune_option_specs() {
  std::vector<OptionSpec> specs = {
      {"--ranks", true,
       "a pipeline of P ranks (devices), no data or tensor parallelism beyond "
       "--dp / --tp",
       "P"},
      {"--gpus", true,
       "search the whole cluster of N GPUs instead: every pipeline x data x tensor "
       "factorization (needs --model and --device or --cluster; default: the cluster file's "
       "\"gpus\")",
       "N"},
      {"--global-batch", true, "sequences per step (over all replicas), cut into microbatches",
       "B"},
      {"--memory-budget", true,
       "activation memory per rank, one amount for every rank: N (microbatches) or bytes (24GB); "
       "default with --model: "
       "device (memory less weights, gradients, optimizer state and workspace), else none",
       "X"},
      {"--bases", true, "base schedules (default 1f1b,interleaved-1f1b,zb-h1)", "LIST"},
      {"--chunks", true,
       "chunks per rank tried for the orders that take a chunk count (" +
           builtin_names([](const GeneratorInfo& g) { return g.chunks_vary; }, ", ") +
           "; default 2, 4 and, with --model, every count that cuts the model into equal "
           "stages: 2,3,4,6 for 24 layers over 4 ranks)",
       "LIST"},
      {"--microbatch-sizes", true,
       "sequences per microbatch tried, with --model (default 1,2,4,8); UniformCost's figures "
       "are per microbatch, so without --model the size is 1",
       "LIST"},
      {"--checkpoint", true,
       "modes searched (default none,selective,mario; full is the fallback; also full-early, "
       "selective-early)",
       "LIST"},
      {"--slices", true,
       "slices per microbatch tried for " +
           builtin_names([](const GeneratorInfo& g) { return g.slices; }, ", ") + " (default 1)",
       "LIST"},
      {"--slicing", true, "how --model cuts slices: uniform (default), balanced or terapipe",
       "MODE"},
      {"--fine-wgrad", false, "also try weight gradients cut into parts placed in waits"},
      {"--offload", false,
       "also try each configuration of whole microbatches with activations offloaded to host "
       "memory where the budget asks, before checkpointing (not with mario)"},
      {"--vocab-parallel", false,
       "also try each configuration of one model replica with the output layer split by "
       "vocabulary over the ranks (VOCAB_F, VOCAB_B passes added last, within the budget)"},
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
      {"--report", true,
       "also write an HTML page: every plan evaluated, step time against memory, the frontier, "
       "a table of the best plans, their timelines (the path is checked before the search)",
       "FILE.html"},
      {"--progress", false,
       "show progress and the time left on standard error (default: when it is a terminal)"},
  };
  for (const auto& c : cost_options) {
    if (c.name == "--microbatch-size" || c.name == "--zero") continue;
    if (c.name == "--layout") {
      specs.push_back({"--layout", true,
                       "'auto': also search the layers per stage of the three best plans, each "
                       "layout that beats its plan a plan of its own; or a layout's text (with "
                       "--ranks), as --layers",
                       "auto|TEXT"});
      continue;
    }
    if (c.name == "--tp") {
      specs.push_back({"--tp", true,
                       "tensor-parallel degree: with --gpus the degrees tried (default: every "
                       "divisor of the node the model allows), with --ranks one value",
                       "LIST"});
      continue;
    }
    specs.push_back(c);
  }
  return specs;
}

std::string tune_help(const std::vector<OptionSpec>& specs) {
  return help_text(
      "pipesched tune (--ranks P | --gpus N [--gpus-per-node G]) --global-batch B "
      "(--cost K=V,... | --model M|--profile F (--device D | --cluster C) [--sequence S]) "
      "[--memory-budget "
      "X] "
      "[--bases LIST] [--chunks LIST] [--microbatch-sizes LIST] [--checkpoint LIST] "
      "[--slices LIST] [--slicing MODE] [--fine-wgrad [--wgrad-parts N]] [--pp LIST] "
      "[--tp LIST] [--zero Z] [--threads N] [--time-limit S] [--json] [--report FILE.html] "
      "[--progress]",
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
}

TuneCommand read_tune_command(const std::vector<std::string>& argv,
                              const std::vector<OptionSpec>& specs) {
  Args a = parse_args("tune", argv, specs, 0);
  // A cluster file's GPU count is --gpus unless --gpus or --ranks is given.
  if (const int gpus = cluster_gpus(a); gpus > 0) {
    if (a.has("--gpus") && parse_int("--gpus", a.get("--gpus"), 1, 1 << 16) != gpus)
      throw usage_error("--gpus " + a.get("--gpus") + " but the cluster file " +
                        a.get("--cluster") + " has \"gpus\": " + std::to_string(gpus) +
                        "; give the same count, or leave --gpus out to search the file's");
    if (!a.has("--gpus") && !a.has("--ranks")) a.values["--gpus"] = std::to_string(gpus);
  }
  TuneCommand c;
  c.cluster = a.has("--gpus");
  if (c.cluster == a.has("--ranks"))
    throw usage_error(c.cluster ? "give --ranks P (one pipeline) or --gpus N (a cluster), not both"
                                : "give --ranks P (one pipeline) or --gpus N (a cluster)");
  if (!a.has("--global-batch")) throw usage_error("give --global-batch B");
  c.req.global_batch = parse_int("--global-batch", a.get("--global-batch"), 1, 1 << 20);
  parse_search_options(a, c.req);
  const Args cost_args = parse_pipeline_options(a, c);
  c.cost = get_cost(cost_args);
  c.transformer = is_transformer(c.cost);
  c.units = units_of(c.cost);
  parse_model_options(a, c);
  const std::string budget_text = parse_budget(a, c);
  const int threads = c.req.thread_count();
  const std::vector<std::pair<int, int>> pipelines = searched_pipelines(c);
  check_grid(c.req, pipelines, threads,
             c.transformer ? std::get<TransformerCost>(c.cost).model.layers : 0);
  c.context = command_context(a, c, budget_text);
  c.json = a.has("--json");
  c.progress = a.has("--progress");
  if (a.has("--report")) c.report = a.get("--report");
  if (a.has("--report") && (c.report.empty() || c.report == "-"))
    throw usage_error("--report needs a file name (FILE.html); standard output holds the result");
  return c;
}

}  // namespace pipesched::cli
