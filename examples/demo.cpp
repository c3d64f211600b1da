// The pipesched demo.
//
// Part 1: every built-in schedule generated for one problem, validated, lowered to sends and
// receives and simulated (UniformCost f=1, b=2, w=1), side by side.
// Part 2: a tiny causal GPT trained for a few steps through several schedules on threads
// (one per rank): per schedule the loss of each step, the step time, the measured bubble beside
// the simulated one (whose ranks share this machine's cores as the threads do), each rank's
// measured peak of held activation bytes beside the simulator's prediction, and an SVG timeline.
// Part 3: the same model under a memory budget — 1F1B with Mario's checkpointing, and
// slice-pipe over sequence slices — still computing the same losses.
// With --transport mpi (under `mpirun -np P`), parts 2 and 3 run one rank per MPI process and
// rank 0 prints.
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/io/svg.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pipesched.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#if PIPESCHED_WITH_MPI
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#endif

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

struct Options {
  std::string transport = "inproc";
  bool ranks_given = false;
  int ranks = 4;
  int microbatches = 8;
  int steps = 3;
  std::string svg_dir = "pipesched-demo";
};

bool quiet = false;     // with MPI, ranks other than 0 print only errors
int process_rank = -1;  // with MPI, the rank this process runs

// printf on rank 0 only.
void say(const char* format, ...) {
  if (quiet) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: pipesched_demo [--ranks P] [--microbatches M] [--steps N] [--svg-dir DIR]\n"
               "                      [--transport inproc|mpi]\n"
               "\n"
               "Generates, validates and simulates every built-in schedule for P ranks and M\n"
               "microbatches (default 4 and 8), then trains a tiny GPT for N steps (default 3)\n"
               "through several of them on P threads, printing loss, step time and each rank's\n"
               "measured peak of activation bytes beside the simulator's prediction, and writing\n"
               "the last step's SVG timeline of each schedule it trains (gpipe, 1f1b,\n"
               "interleaved-1f1b, zb-h1, zb-v, dualpipe-v, where P and M allow them) into DIR\n"
               "(default ./pipesched-demo), naming each file it wrote.\n"
               "--transport mpi runs the ranks as MPI processes instead of threads: start it\n"
               "as `mpirun -np P pipesched_demo --transport mpi` (P from mpirun).\n");
  return code;
}

bool parse(int argc, char** argv, Options& o, int& exit_code) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      exit_code = usage(0);
      return false;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "pipesched_demo: %s needs a value\n", a.c_str());
      exit_code = usage(2);
      return false;
    }
    const std::string v = argv[++i];
    if (a == "--svg-dir") {
      o.svg_dir = v;
      continue;
    }
    if (a == "--transport") {
      if (v != "inproc" && v != "mpi") {
        std::fprintf(stderr, "pipesched_demo: --transport is inproc or mpi, got '%s'\n", v.c_str());
        exit_code = 2;
        return false;
      }
      o.transport = v;
      continue;
    }
    int* target = a == "--ranks"          ? &o.ranks
                  : a == "--microbatches" ? &o.microbatches
                  : a == "--steps"        ? &o.steps
                                          : nullptr;
    if (!target) {
      std::fprintf(stderr, "pipesched_demo: unknown option '%s'\n", a.c_str());
      exit_code = usage(2);
      return false;
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > 64) {
      std::fprintf(stderr, "pipesched_demo: %s needs a whole number from 1 to 64, got '%s'\n",
                   a.c_str(), v.c_str());
      exit_code = 2;
      return false;
    }
    *target = static_cast<int>(n);
    o.ranks_given |= a == "--ranks";
  }
  return true;
}

int schedule_table(const Options& o) {
  say("Schedules for %d ranks, %d microbatches (UniformCost f=1 b=2 w=1):\n\n", o.ranks,
      o.microbatches);
  say("%-17s %-22s %8s %9s %8s %9s  %s\n", "schedule", "placement", "actions", "makespan", "bubble",
      "max peak", "status");
  int failures = 0;
  for (const ps::GeneratorInfo& g : ps::generators()) {
    ps::Schedule s;
    try {
      s = g.generate({.ranks = o.ranks, .microbatches = o.microbatches}, g.default_wgrad);
    } catch (const ps::invalid_problem& e) {
      say("%-17s refused: %s\n", std::string(g.name).c_str(), e.what());
      continue;
    }
    const ps::ValidationReport rep = ps::check(s);
    const ps::ValidationReport lowered = ps::check(ps::lower_communication(s));
    const ps::SimulationResult r = ps::simulate(s);
    const bool ok = rep.ok() && lowered.ok() && !r.deadlock;
    failures += !ok;
    say("%-17s %-22s %8zu %9.2f %7.1f%% %9.3f  %s\n", std::string(g.name).c_str(),
        s.placement.describe().c_str(), s.action_count(), r.makespan, 100 * r.bubble_ratio,
        r.peak_memory_max, ok ? "valid" : "INVALID");
    if (!ok) say("%s\n", (rep.ok() ? lowered : rep).summary().c_str());
  }
  return failures;
}

std::string kib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / 1024.0);
  return buf;
}

toy::GptConfig demo_config(const Options& o) {
  return toy::GptConfig{.vocabulary = 32,
                        .hidden = 16,
                        .heads = 2,
                        .ffn = 64,
                        .sequence = 16,
                        .blocks = 2 * o.ranks,
                        .microbatch_size = 2,
                        .seed = 42};
}

// The compute units the demo's ranks share: on threads, this machine's cores; over MPI the
// processes may be on other machines, so each rank counts as having a processor of its own.
ps::SharedCompute shared_compute() {
  if (process_rank >= 0) return {};
  return {static_cast<int>(std::thread::hardware_concurrency())};
}

// The last step's bubble beside the simulator's. Ranks that run as threads on fewer cores also
// wait for a core: the simulator charges that sharing (SharedCompute), and says so once.
void bubble_note(double measured, double simulated, int ranks) {
  say("\n  bubble, measured / simulated: %.1f%% / %.1f%%", 100 * measured, 100 * simulated);
  const int cores = shared_compute().units;
  static bool said = false;  // once: it holds for every run of the demo
  if (!said && cores > 0 && ranks > cores) {
    said = true;
    say("\n  (%d rank threads share %d cores: a rank waits for a core as well as for its inputs; "
        "the simulation shares the cores the same way, every action's time taken as 1)",
        ranks, cores);
  }
}

// One training run of `s` (slices > 1: a slice-level schedule) on fresh stages; prints the
// losses, the mean step time and each rank's measured / simulated peak, and writes the last
// step's timeline to `svg_path` when given; returns mismatches.
int run_gpt(const std::string& label, const ps::Schedule& s, const toy::GptConfig& config,
            const toy::StepData<double>& data, int steps, const std::string& svg_path = {}) {
  const int slices = s.problem.slices;
  std::vector<toy::GptStage<double>> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(config, st, s.problem.stages);
  const ps::SimulationResult predicted =
      ps::simulate(s, toy::gpt_profiled_cost(stages, slices), shared_compute());
  ps::ExecutorOptions options;
  toy::use_sgd(options, s.placement, stages, 0.1);  // SGD, with its snapshot and rollback
  const auto training = toy::training_data(data, slices);
  say("\n%s:\n  loss per step:", label.c_str());
  ps::StepResult last;
  double seconds = 0;
  auto train_with = [&](auto& pipe) {
    for (int step = 0; step < steps; ++step) {
      last = pipe.step(training);
      seconds += last.seconds;
      say(" %.6f", last.loss);
    }
  };
  if (process_rank < 0) {
    ps::inproc::Pipeline<toy::GptStage<double>> pipe(s, stages, options);
    train_with(pipe);
  } else {
#if PIPESCHED_WITH_MPI
    ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, MPI_COMM_WORLD, options);
    train_with(pipe);
#endif
  }
  int recomputes = 0;
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      recomputes += a.kind == ps::OpKind::R;
  say("\n  mean step time: %.2f ms; %d recomputes", 1e3 * seconds / steps, recomputes);
  bubble_note(last.timeline().bubble_ratio, predicted.bubble_ratio, s.rank_count());
  say("\n  activation KiB held at peak, measured / simulated:");
  int failures = 0;
  for (int r = 0; r < s.rank_count(); ++r) {
    const bool same = last.ranks[r].peak_bytes == predicted.ranks[r].peak_memory;
    failures += !same;
    say("  r%d %s/%s%s", r, kib(last.ranks[r].peak_bytes).c_str(),
        kib(predicted.ranks[r].peak_memory).c_str(), same ? "" : " (MISMATCH)");
  }
  say("\n");
  if (!svg_path.empty() && !quiet) {
    ps::SvgOptions svg;
    svg.title = s.name + " — measured step of the toy GPT";
    svg.memory_unit = "bytes";
    svg.time_unit = "seconds";
    // Named only once it is written whole: a full disk or a directory that went away is
    // reported instead.
    std::ofstream file(svg_path, std::ios::binary);
    file << ps::render_svg(last.executed, last.timeline(), svg);
    file.close();
    if (file) {
      say("  timeline: %s\n", svg_path.c_str());
    } else {
      std::fprintf(stderr, "pipesched_demo: cannot write the timeline '%s': %s\n", svg_path.c_str(),
                   std::strerror(errno));
      ++failures;
    }
  }
  return failures;
}

int train(const Options& o) {
  const toy::GptConfig config = demo_config(o);
  const auto data = toy::make_gpt_data<double>(config, o.microbatches, 7);
  std::error_code ec;
  std::filesystem::create_directories(o.svg_dir, ec);
  if (ec) {
    std::fprintf(stderr, "pipesched_demo: cannot create '%s': %s\n", o.svg_dir.c_str(),
                 ec.message().c_str());
    return 2;
  }
  say("\nTraining a tiny GPT (%d blocks, hidden %d, %d heads, sequence %d, vocabulary "
      "%d) for %d steps, %d ranks as %s, %d microbatches of %d sequences, SGD:\n",
      config.blocks, config.hidden, config.heads, config.sequence, config.vocabulary, o.steps,
      o.ranks, process_rank < 0 ? "threads" : "MPI processes", o.microbatches,
      config.microbatch_size);
  int failures = 0;
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v"}) {
    const ps::GeneratorInfo& g = ps::find_generator(name);
    ps::Schedule s;
    try {
      s = g.generate({.ranks = o.ranks, .microbatches = o.microbatches}, g.default_wgrad);
    } catch (const ps::invalid_problem& e) {
      say("\n%s: refused: %s\n", name, e.what());
      continue;
    }
    failures += run_gpt(std::string(name) + " (" + s.placement.describe() + ")", s, config, data,
                        o.steps, o.svg_dir + "/" + name + ".svg");
  }
  return failures;
}

int memory(const Options& o) {
  const toy::GptConfig config = demo_config(o);
  const auto data = toy::make_gpt_data<double>(config, o.microbatches, 7);
  const ps::Schedule base =
      ps::schedule::one_f_one_b({.ranks = o.ranks, .microbatches = o.microbatches});
  std::vector<toy::GptStage<double>> stages;
  for (int st = 0; st < base.problem.stages; ++st)
    stages.emplace_back(config, st, base.problem.stages);
  const ps::ProfiledCost bytes = toy::gpt_profiled_cost(stages);
  const double peak = ps::simulate(base, bytes).peak_memory_max;
  const double budget = 0.5 * peak;
  say("\nThe same GPT under a memory budget of %s KiB per rank (half of 1F1B's largest "
      "peak, %s KiB):\n",
      kib(budget).c_str(), kib(peak).c_str());
  int failures = 0;
  try {
    const ps::Schedule mario = ps::checkpoint_mario(base, bytes, ps::MemoryBudget{.all = budget});
    failures += run_gpt("1f1b + Mario checkpointing", mario, config, data, o.steps);
  } catch (const ps::invalid_problem& e) {
    say("\n1f1b + Mario: %s\n", e.what());
  }
  try {
    const ps::Schedule sliced =
        ps::schedule::slice_pipe({.ranks = o.ranks, .microbatches = o.microbatches, .slices = 4});
    failures +=
        run_gpt("slice-pipe, 4 slices of 4 tokens, 2 chunks", sliced, config, data, o.steps);
  } catch (const ps::invalid_problem& e) {
    say("\nslice-pipe: %s\n", e.what());
  }
  return failures;
}

}  // namespace

int run(const Options& o) {
  try {
    const int failures = schedule_table(o) + train(o) + memory(o);
    return failures == 0 ? 0 : 1;
#if PIPESCHED_WITH_MPI
  } catch (const ps::peer_lost&) {
    throw;  // main ends the job
#endif
  } catch (const ps::error& e) {
    std::fprintf(stderr, "pipesched_demo: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  Options o;
  int code = 0;
  if (!parse(argc, argv, o, code)) return code;
  if (o.transport == "inproc") return run(o);
#if PIPESCHED_WITH_MPI
  ps::mpi::Session session(argc, argv);
  quiet = session.rank() != 0;
  process_rank = session.rank();
  if (o.ranks_given && o.ranks != session.size()) {
    if (!quiet)
      std::fprintf(stderr,
                   "pipesched_demo: --ranks %d but mpirun started %d processes; with "
                   "--transport mpi there is one rank per process (drop --ranks or use "
                   "mpirun -np %d)\n",
                   o.ranks, session.size(), o.ranks);
    return 2;
  }
  o.ranks = session.size();
  try {
    return run(o);
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "pipesched_demo: %s\n", e.what());
    session.abort(1);
  }
#else
  std::fprintf(stderr,
               "pipesched_demo: this build has no MPI transport (MPI was not found when it was "
               "configured); use --transport inproc or install MPI and rebuild\n");
  return 2;
#endif
}
