// The pipesched command: subcommands, JSON output equal to the library call, exit codes,
// checkpointing and memory budgets, slices, slice lengths, warm-up and fine weight gradients.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "pipesched/analysis/slicing.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pipesched.hpp"
#include "pipesched/tune/tune.hpp"
#include "pipesched/version.hpp"

#include "../io/json_checker.hpp"

namespace ps = pipesched;

namespace {

struct CliRun {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::filesystem::path scratch() {
  auto dir =
      std::filesystem::temp_directory_path() / ("pipesched_cli_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the command with `args` after the shell commands in `before` (e.g. a ulimit).
CliRun run_after(const std::string& before, const std::string& args) {
  const auto dir = scratch();
  const auto out = dir / "stdout", err = dir / "stderr";
  std::string cmd = before + "'" + PIPESCHED_CLI_PATH + "' " + args + " >'" + out.string() +
                    "' 2>'" + err.string() + "'";
  int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

CliRun run(const std::string& args) {
  return run_after("", args);
}

std::string data(const std::string& name) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + name;
}

// The number after "key": in a flat JSON text (the first occurrence after `from`).
double json_field(const std::string& json, const std::string& key, std::size_t from = 0) {
  std::size_t at = json.find("\"" + key + "\":", from);
  EXPECT_NE(at, std::string::npos) << key << " missing in " << json;
  if (at == std::string::npos) return -1;
  return std::stod(json.substr(at + key.size() + 3));
}

}  // namespace

TEST(Cli, HelpAndList) {
  CliRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("simulate"), std::string::npos);
  r = run("list");
  EXPECT_EQ(r.code, 0);
  for (const auto& g : ps::builtin_generators())
    EXPECT_NE(r.out.find(std::string(g.name)), std::string::npos) << g.name;
  for (const char* mode : {"full", "selective", "mario", "full-early", "selective-early"})
    EXPECT_NE(r.out.find(mode), std::string::npos) << mode;
  for (const char* policy : {"uniform", "balanced", "terapipe", "split|fine", "--slices"})
    EXPECT_NE(r.out.find(policy), std::string::npos) << policy;
  for (const char* sub : {"generate", "validate", "simulate", "render", "convert"}) {
    r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("usage: pipesched " + std::string(sub)), std::string::npos) << r.out;
    if (std::string(sub) == "generate" || std::string(sub) == "simulate" ||
        std::string(sub) == "render") {
      EXPECT_NE(r.out.find("--checkpoint MODE"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("--memory-budget X"), std::string::npos) << r.out;
      for (const char* option :
           {"--slices K", "--slicing MODE", "--warmup N", "--wgrad-parts N", "fused|split|fine"})
        EXPECT_NE(r.out.find(option), std::string::npos) << option << " in " << r.out;
    }
  }
}

// `list` shows where Mario applies from the orders' own facts, in each schedule's row and in
// the --checkpoint mario entry, and `--checkpoint mario` follows the same facts.
TEST(Cli, ListShowsWhereMarioAppliesAsTheOrdersSay) {
  const CliRun r = run("list");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string mario_orders;
  for (const auto& g : ps::builtin_generators()) {
    SCOPED_TRACE(g.name);
    const std::size_t at = r.out.find("  " + std::string(g.name) + " ");
    ASSERT_NE(at, std::string::npos);
    const std::string row = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_EQ(row.find("; mario]") != std::string::npos, g.mario) << row;
    if (g.mario) mario_orders += (mario_orders.empty() ? "" : ", ") + std::string(g.name);
    const CliRun m = run("simulate --schedule " + std::string(g.name) +
                         " --ranks 2 --microbatches 4 --checkpoint mario --memory-budget 1");
    EXPECT_EQ(m.code == 2 && m.err.find("runs on") != std::string::npos, !g.mario) << m.err;
  }
  EXPECT_NE(r.out.find("within --memory-budget (" + mario_orders + ")"), std::string::npos)
      << r.out;
}

TEST(Cli, BadUsageExitsTwoWithAMessage) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {
           Case{"", "usage: pipesched"},
           Case{"frobnicate", "unknown command 'frobnicate'"},
           Case{"generate --schedule nope --ranks 4 --microbatches 8", "unknown schedule 'nope'"},
           Case{"generate --schedule 1f1b --ranks four --microbatches 8",
                "--ranks needs a whole number"},
           Case{"generate --schedule 1f1b --ranks 4", "needs --ranks P and --microbatches M"},
           Case{"generate --schedule dualpipe-v --ranks 4 --microbatches 3", "microbatches"},
           Case{"generate --schedule 1f1b --ranks 4 --microbatches 8 --bogus",
                "unknown option '--bogus'"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost f=x",
                "--cost f needs a finite decimal number"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost q=1",
                "unknown key 'q'"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --model nope --device h100",
                "nope"},
           Case{"validate /nonexistent/file.csv", "/nonexistent/file.csv"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint some",
                "checkpoint mode 'some' is unknown; choose none"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective",
                "give --memory-budget"},
           Case{"render --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint mario",
                "give --memory-budget"},
           Case{"generate --schedule gpipe --ranks 4 --microbatches 8 --checkpoint mario "
                "--memory-budget 2",
                "runs on 1f1b, interleaved-1f1b, zb-h1 and chimera only, not on 'gpipe'"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full "
                "--memory-budget 2XB",
                "memory budget '2XB' has an unknown unit 'XB'"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget -1",
                "is negative"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 0", "is zero"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 24GB",
                "is in bytes, but UniformCost"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 2 --model gpt3-1.3b --device a100-80gb",
                "is a plain number, i.e. in memory units, but --model/--device measure memory "
                "in bytes"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget device",
                "only TransformerCost knows"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full "
                "--memory-budget device --model llama2-34b --device rtx-4090",
                "leaving nothing for activations"},
           // Budgets the schedule cannot meet: the library's message, exit code 2.
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 2",
                "without checkpointing rank 0 of '1f1b' holds 4, over the budget 2; use "
                "--checkpoint selective or --checkpoint mario"},
           Case{"generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full "
                "--memory-budget 0.5",
                "still holds 1.15, over the budget 0.5"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 0.5",
                "memory budget 0.5 is too small for rank 0"},
           Case{"render --schedule zb-h1 --ranks 4 --microbatches 8 --checkpoint mario "
                "--memory-budget 0.5",
                "Mario: no schedule of 'zb-h1' fits the memory budget"},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  }
}

TEST(Cli, ValidateAcceptsPyTorchFilesAndRejectsBrokenOnes) {
  for (const char* f : {"zb1p_2rank_2stagep_compute.csv", "zb1p_2rank_2stagep_comms.csv",
                        "dualpipev_4rank_10mb.csv"}) {
    CliRun r = run("validate '" + data(f) + "'");
    EXPECT_EQ(r.code, 0) << f << ": " << r.err;
    EXPECT_NE(r.out.find("valid"), std::string::npos);
  }
  const auto bad = scratch() / "bad.csv";
  std::ofstream(bad) << "0F0,0B0,0F1\n1F0,1B0,1F1,1B1\n";  // 0B1 missing
  CliRun r = run("validate '" + bad.string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("never runs the backward of stage 0 microbatch 1"), std::string::npos)
      << r.err;
  std::ofstream(bad) << "0F0,0X0\n";
  r = run("validate '" + bad.string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("line 1, column 5"), std::string::npos) << r.err;
}

TEST(Cli, SimulateJsonEqualsTheLibrary) {
  struct Case {
    const char* args;
    ps::Schedule schedule;
    ps::UniformCost cost;
  };
  const Case cases[] = {
      {"--schedule 1f1b --ranks 4 --microbatches 8",
       ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}),
       {}},
      {"--schedule interleaved-1f1b --ranks 4 --microbatches 8 --chunks 3 --cost "
       "f=1,b=3,w=1.5,comm=0.25",
       ps::schedule::interleaved_1f1b({.ranks = 4, .stages = 12, .microbatches = 8}),
       {.f = 1, .b = 3, .w = 1.5, .comm = 0.25}},
      {"--schedule zb-h1 --ranks 4 --microbatches 8",
       ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8}),
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CliRun r = run(std::string("simulate --json ") + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    ps::SimulationResult lib = ps::simulate(c.schedule, c.cost);
    EXPECT_DOUBLE_EQ(json_field(r.out, "makespan"), lib.makespan);
    EXPECT_DOUBLE_EQ(json_field(r.out, "bubble_ratio"), lib.bubble_ratio);
    EXPECT_DOUBLE_EQ(json_field(r.out, "peak_memory_max"), lib.peak_memory_max);
    std::size_t at = r.out.find("\"ranks\":[");
    ASSERT_NE(at, std::string::npos);
    for (int rank = 0; rank < c.schedule.rank_count(); ++rank) {
      at = r.out.find("{\"rank\":" + std::to_string(rank), at);
      ASSERT_NE(at, std::string::npos);
      EXPECT_DOUBLE_EQ(json_field(r.out, "busy", at), lib.ranks[rank].busy);
      EXPECT_DOUBLE_EQ(json_field(r.out, "idle", at), lib.ranks[rank].idle);
      EXPECT_DOUBLE_EQ(json_field(r.out, "peak_memory", at), lib.ranks[rank].peak_memory);
    }
  }
  // A file simulates like the generated schedule it was written from.
  const auto file = scratch() / "dv.csv";
  CliRun g =
      run("generate --schedule dualpipe-v --ranks 4 --microbatches 10 -o '" + file.string() + "'");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(slurp(file), slurp(data("dualpipev_4rank_10mb.csv")));
  CliRun r = run("simulate --json '" + file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  ps::SimulationResult lib =
      ps::simulate(ps::schedule::dualpipe_v({.ranks = 4, .microbatches = 10}));
  EXPECT_DOUBLE_EQ(json_field(r.out, "makespan"), lib.makespan);
}

TEST(Cli, SimulateWithTransformerCost) {
  CliRun r =
      run("simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b "
          "--device a100-80gb");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"time_unit\":\"seconds\""), std::string::npos);
  EXPECT_GT(json_field(r.out, "makespan"), 0.0);
  EXPECT_GT(json_field(r.out, "peak_memory_max"), 1e6);  // bytes
}

TEST(Cli, RenderAndConvert) {
  const auto dir = scratch();
  CliRun r = run("render --schedule interleaved-1f1b --ranks 4 --microbatches 8 --svg '" +
                 (dir / "t.svg").string() + "' --trace '" + (dir / "t.json").string() + "' --text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(dir / "t.svg").find("<svg"), std::string::npos);
  EXPECT_NE(slurp(dir / "t.json").find("traceEvents"), std::string::npos);
  EXPECT_FALSE(r.out.empty());
  // CSV -> text -> CSV is the identity on PyTorch's file.
  r = run("convert '" + data("zb1p_2rank_2stagep_comms.csv") + "' '" + (dir / "s.txt").string() +
          "'");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("convert '" + (dir / "s.txt").string() + "' '" + (dir / "s.csv").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(dir / "s.csv"), slurp(data("zb1p_2rank_2stagep_comms.csv")));
}

// ---------------------------------------------------------------------------------------
// Checkpointing and memory budgets

namespace {

int recomputes(const ps::Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      n += a.kind == ps::OpKind::R;
  return n;
}

ps::MemoryBudget budget_of(double all) {
  ps::MemoryBudget b;
  b.all = all;
  return b;
}

// The simulate --json figures equal the library's simulation of `s`, rank by rank.
void expect_json_matches(const std::string& json, const ps::Schedule& s,
                         const ps::SimulationResult& lib) {
  EXPECT_NE(json.find("\"schedule\":\"" + s.name + "\""), std::string::npos) << json;
  EXPECT_DOUBLE_EQ(json_field(json, "actions"), static_cast<double>(s.action_count()));
  EXPECT_DOUBLE_EQ(json_field(json, "recomputes"), recomputes(s));
  EXPECT_DOUBLE_EQ(json_field(json, "makespan"), lib.makespan);
  EXPECT_DOUBLE_EQ(json_field(json, "peak_memory_max"), lib.peak_memory_max);
  std::size_t at = json.find("\"ranks\":[");
  ASSERT_NE(at, std::string::npos);
  for (int rank = 0; rank < s.rank_count(); ++rank) {
    at = json.find("{\"rank\":" + std::to_string(rank), at);
    ASSERT_NE(at, std::string::npos);
    EXPECT_DOUBLE_EQ(json_field(json, "peak_memory", at), lib.ranks[rank].peak_memory);
  }
}

}  // namespace

TEST(CliCheckpoint, GenerateFullWritesRecomputesThatValidate) {
  const auto file = scratch() / "full.csv";
  CliRun r = run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full -o '" +
                 file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = slurp(file);
  EXPECT_NE(csv.find("2RL0"), std::string::npos) << csv;  // after its gradient, as Megatron-LM
  const ps::Schedule lib =
      ps::checkpoint_full(ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}));
  EXPECT_EQ(csv, ps::to_csv(lib));
  r = run("validate '" + file.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  // The file simulates as the library's checkpointed schedule.
  r = run("simulate --json '" + file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "recomputes"), 32);
  EXPECT_DOUBLE_EQ(json_field(r.out, "peak_memory_max"), ps::simulate(lib).peak_memory_max);
  // --comm lowers the checkpointed schedule: recomputes stay, sends and receives appear.
  r =
      run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full --comm "
          "--format text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2RL0"), std::string::npos);
  EXPECT_NE(r.out.find("SEND_F"), std::string::npos);
  // full-early writes plain recomputes.
  r = run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full-early");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ps::to_csv(ps::checkpoint_full(
                       ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}),
                       ps::RecomputeTiming::Early)));
  EXPECT_NE(r.out.find("2R0"), std::string::npos);
  EXPECT_EQ(r.out.find("RL"), std::string::npos);
}

TEST(CliCheckpoint, SimulateJsonEqualsTheLibraryForEveryMode) {
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::UniformCost cost;
  struct Case {
    const char* args;
    ps::CheckpointMode mode;
    double budget;  // infinity: none given
  };
  const double none = std::numeric_limits<double>::infinity();
  for (const Case& c : {
           Case{"", ps::CheckpointMode::None, none},
           Case{"--memory-budget 4", ps::CheckpointMode::None, 4},
           Case{"--checkpoint full", ps::CheckpointMode::Full, none},
           Case{"--checkpoint full --memory-budget 1.5", ps::CheckpointMode::Full, 1.5},
           Case{"--checkpoint selective --memory-budget 2", ps::CheckpointMode::Selective, 2},
           Case{"--checkpoint selective --memory-budget=3", ps::CheckpointMode::Selective, 3},
           Case{"--checkpoint mario --memory-budget 2", ps::CheckpointMode::Mario, 2},
           Case{"--checkpoint MARIO --memory-budget 1.5", ps::CheckpointMode::Mario, 1.5},
           Case{"--checkpoint full-early", ps::CheckpointMode::FullEarly, none},
           Case{"--checkpoint selective-early --memory-budget 2",
                ps::CheckpointMode::SelectiveEarly, 2},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r =
        run(std::string("simulate --json --schedule 1f1b --ranks 4 --microbatches 8 ") + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib = ps::apply_checkpoint(base, c.mode, cost, budget_of(c.budget));
    const ps::SimulationResult sim = ps::simulate(lib, cost);
    expect_json_matches(r.out, lib, sim);
    EXPECT_NE(r.out.find(std::string("\"checkpoint\":\"") + ps::to_string(c.mode) + "\""),
              std::string::npos)
        << r.out;
    if (std::isfinite(c.budget)) {
      EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), c.budget);
      EXPECT_LE(sim.peak_memory_max, c.budget + 1e-9);
    } else {
      EXPECT_NE(r.out.find("\"memory_budget\":null"), std::string::npos) << r.out;
    }
    if (ps::is_selective(c.mode) || c.mode == ps::CheckpointMode::Mario) {
      EXPECT_GT(recomputes(lib), 0);
    }
  }
}

TEST(CliCheckpoint, SelectiveAtBudgetTwoStaysWithinIt) {
  CliRun r =
      run("simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint "
          "selective --memory-budget 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const double peak = json_field(r.out, "peak_memory_max");
  EXPECT_LE(peak, 2.0 + 1e-9);
  const ps::Schedule lib = ps::checkpoint_selective(
      ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}), ps::UniformCost{}, budget_of(2));
  EXPECT_DOUBLE_EQ(peak, ps::simulate(lib).peak_memory_max);
  // The text form says what was done.
  r =
      run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
          "--memory-budget 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint selective, memory budget 2 microbatches per rank, " +
                       std::to_string(recomputes(lib)) + " recomputes"),
            std::string::npos)
      << r.out;
}

TEST(CliCheckpoint, MarioOnEachOfItsBasesEqualsTheLibrary) {
  struct Case {
    const char* args;
    ps::Schedule base;
  };
  const Case cases[] = {
      {"--schedule 1f1b --ranks 4 --microbatches 8",
       ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8})},
      {"--schedule interleaved-1f1b --ranks 4 --microbatches 8",
       ps::schedule::interleaved_1f1b({.ranks = 4, .stages = 8, .microbatches = 8})},
      {"--schedule zb-h1 --ranks 4 --microbatches 8",
       ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CliRun r = run(std::string("simulate --json --checkpoint mario --memory-budget 2 ") + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib = ps::checkpoint_mario(c.base, ps::UniformCost{}, budget_of(2));
    const ps::SimulationResult sim = ps::simulate(lib);
    expect_json_matches(r.out, lib, sim);
    EXPECT_LE(sim.peak_memory_max, 2.0 + 1e-9);
  }
  // generate writes the Mario schedule, and it validates.
  const auto file = scratch() / "mario.csv";
  CliRun g =
      run("generate --schedule zb-h1 --ranks 4 --microbatches 8 --checkpoint mario "
          "--memory-budget 2 -o '" +
          file.string() + "'");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(slurp(file),
            ps::to_csv(ps::checkpoint_mario(cases[2].base, ps::UniformCost{}, budget_of(2))));
  EXPECT_EQ(run("validate '" + file.string() + "'").code, 0);
}

TEST(CliCheckpoint, TransformerCostBudgetsAreBytesOrTheDevicesMemory) {
  const std::string common =
      "simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device "
      "a100-40gb --checkpoint selective ";
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::TransformerCost cost{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("a100-40gb"), {}};
  // 'device': per-rank budgets of device memory less weights, gradients, optimizer state.
  CliRun r = run(common + "--memory-budget device");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::MemoryBudget device = ps::device_memory_budget(cost, base.problem, base.placement);
  std::size_t at = r.out.find("\"ranks\":[");
  double least = device.of(0);
  for (int rank = 0; rank < 4; ++rank) {
    at = r.out.find("{\"rank\":" + std::to_string(rank), at);
    ASSERT_NE(at, std::string::npos);
    EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget", at), device.of(rank));
    least = std::min(least, device.of(rank));
  }
  EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), least);
  EXPECT_NE(r.out.find("\"memory_unit\":\"bytes\""), std::string::npos);
  // A byte budget below the plain schedule's peak: recomputes, within the budget, as the
  // library does; every decimal and binary spelling of the same amount agrees.
  for (const char* text : {"2.5GB", "2.5 gb", "2500MB", "2500000000B"}) {
    SCOPED_TRACE(text);
    r = run(common + "--memory-budget '" + text + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib =
        ps::apply_checkpoint(base, ps::CheckpointMode::Selective, cost, budget_of(2.5e9));
    const ps::SimulationResult sim = ps::simulate(lib, cost);
    expect_json_matches(r.out, lib, sim);
    EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), 2.5e9);
    EXPECT_LE(sim.peak_memory_max, 2.5e9);
    EXPECT_GT(recomputes(lib), 0);
  }
  r = run(common + "--memory-budget 2GiB");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), 2.0 * 1024 * 1024 * 1024);
}

// Under --model a budget the schedule cannot meet is refused with the budget as given and what
// the rank holds in GiB, rounded up: an amount --memory-budget takes and the schedule meets.
TEST(CliCheckpoint, TransformerCostRefusalsSpeakGiBThatTheBudgetOptionTakes) {
  const std::string common =
      "simulate --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device "
      "a100-40gb ";
  CliRun r = run(common + "--memory-budget 1GB");
  ASSERT_EQ(r.code, 2) << r.err;
  // The budget as the user gave it; what the rank holds in GiB, rounded up.
  EXPECT_NE(r.err.find("over the budget 1GB;"), std::string::npos) << r.err;
  const std::string lead = "give a budget of at least ";
  const std::size_t at = r.err.find(lead);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::size_t end = r.err.find("GiB", at);
  ASSERT_NE(end, std::string::npos) << r.err;
  const std::string amount = r.err.substr(at + lead.size(), end + 3 - at - lead.size());
  EXPECT_EQ(r.err.find("e+"), std::string::npos) << r.err;  // no raw byte counts left
  r = run(common + "--memory-budget " + amount);
  EXPECT_EQ(r.code, 0) << amount << ": " << r.err;
  // Counts in messages about other things stay numbers, and UniformCost's units stay plain.
  r = run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 2");
  EXPECT_NE(r.err.find("holds 4, over the budget 2"), std::string::npos) << r.err;
}

TEST(CliCheckpoint, RenderDrawsTheCheckpointedSchedule) {
  const auto dir = scratch();
  CliRun r = run("render --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full --svg '" +
                 (dir / "ck.svg").string() + "' --trace '" + (dir / "ck.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string trace = slurp(dir / "ck.json");
  EXPECT_NE(trace.find("traceEvents"), std::string::npos);
  EXPECT_NE(trace.find("RL0"), std::string::npos) << trace.substr(0, 400);  // late recomputes
  CliRun plain = run("render --schedule 1f1b --ranks 2 --microbatches 4 --text");
  CliRun full = run("render --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full --text");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_NE(plain.out, full.out);
}

TEST(Cli, TuneFindsAPlanWithinTheBudget) {
  CliRun r = run("tune --ranks 4 --global-batch 16 --memory-budget 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  ps::TuneRequest req;
  req.ranks = 4;
  req.global_batch = 16;
  req.microbatch_sizes = {1};
  req.budget = ps::MemoryBudget{.all = 2.0};
  const ps::TuneResult lib = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(lib.best.has_value());
  EXPECT_DOUBLE_EQ(json_field(r.out, "makespan"), lib.best->makespan);
  EXPECT_NE(r.out.find("\"best_without_checkpoint\":null"), std::string::npos) << r.out;
  // A human-readable table by default; nothing fits at all: exit 1.
  r = run("tune --ranks 4 --global-batch 16 --memory-budget 2");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("best Mario:"), std::string::npos) << r.out;
  r = run("tune --ranks 8 --global-batch 16 --memory-budget 0.5");
  EXPECT_EQ(r.code, 1) << r.err;
  r = run("tune --ranks 4 --global-batch 16 --memory-budget 24GB");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("plain number"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------
// Slices, slice lengths, warm-up and fine weight gradients

TEST(CliSlicing, GenerateSlicePipeWritesSlicesThatValidate) {
  const auto file = scratch() / "slice_pipe.csv";
  CliRun r = run("generate --schedule slice-pipe --ranks 4 --microbatches 8 --slices 4 -o '" +
                 file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = slurp(file);
  EXPECT_NE(csv.find(".3"), std::string::npos) << csv.substr(0, 400);
  const ps::Schedule lib =
      ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 8, .slices = 4});
  EXPECT_EQ(csv, ps::to_csv(lib));
  r = run("validate '" + file.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 slices"), std::string::npos) << r.out;
  // The other slice-level schedules, and a set warm-up, reach their generators.
  r = run("generate --schedule seq-1f1b --ranks 3 --microbatches 5 --slices 2 --format text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            ps::to_text(ps::schedule::seq_1f1b({.ranks = 3, .microbatches = 5, .slices = 2})));
  r =
      run("generate --schedule gpipe --ranks 2 --microbatches 2 --slices 3 --wgrad split "
          "--format text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ps::to_text(ps::schedule::gpipe({.ranks = 2, .microbatches = 2, .slices = 3},
                                                   ps::WGradMode::Split)));
  r =
      run("generate --schedule slice-pipe --ranks 4 --microbatches 4 --slices 4 --warmup 9 "
          "--format text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ps::to_text(ps::schedule::slice_pipe(
                       {.ranks = 4, .stages = 8, .microbatches = 4, .slices = 4},
                       ps::WGradMode::Fused, {.warmup = 9})));
  // simulate --json reports the warm-up: rank 0's, and each rank's (at least the floor).
  r =
      run("simulate --json --schedule slice-pipe --ranks 4 --microbatches 4 --slices 4 "
          "--warmup 9");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "warmup"), 9);
  const ps::Schedule nine =
      ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 4, .slices = 4},
                               ps::WGradMode::Fused, {.warmup = 9});
  EXPECT_EQ(ps::warmup_of(nine, 0), 9);
  EXPECT_NE(r.out.find("\"warmup\":" + std::to_string(ps::warmup_of(nine, 3))), std::string::npos)
      << r.out;
  r = run("simulate --json --schedule slice-pipe --ranks 4 --microbatches 4 --slices 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "warmup"), ps::schedule::detail::slice_warmup(4, 2, 4, 0, 4));
}

TEST(CliSlicing, SimulateJsonEqualsTheLibraryForEverySlicing) {
  // UniformCost: slices split a microbatch evenly; no slice_lengths in the output.
  CliRun r = run("simulate --json --schedule slice-pipe --ranks 4 --microbatches 8 --slices 4");
  ASSERT_EQ(r.code, 0) << r.err;
  ps::Schedule lib =
      ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 8, .slices = 4});
  expect_json_matches(r.out, lib, ps::simulate(lib));
  EXPECT_NE(r.out.find("\"slices\":4"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("slice_lengths"), std::string::npos) << r.out;

  // TransformerCost: the lengths of each mode, in the output and in the simulation.
  ps::TransformerCost base{
      ps::presets::find_model("llama2-7b"), ps::presets::find_device("rtx-4090"), {}};
  base.model.sequence = 8192;
  lib = ps::schedule::seq_1f1b({.ranks = 4, .microbatches = 8, .slices = 4});
  double uniform_makespan = 0;
  for (ps::SlicingMode mode :
       {ps::SlicingMode::Uniform, ps::SlicingMode::Balanced, ps::SlicingMode::TeraPipe}) {
    SCOPED_TRACE(ps::to_string(mode));
    r = run(std::string("simulate --json --schedule seq-1f1b --ranks 4 --microbatches 8 --slices "
                        "4 --model llama2-7b --device rtx-4090 --sequence 8192 --slicing ") +
            ps::to_string(mode));
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::TransformerCost cost = ps::with_slicing(base, mode, 4, 4);
    const ps::SimulationResult sim = ps::simulate(lib, cost);
    expect_json_matches(r.out, lib, sim);
    std::string lengths;
    for (int t : cost.slice_lengths)
      lengths += (lengths.empty() ? "" : ",") + std::to_string(t);
    EXPECT_NE(r.out.find("\"slice_lengths\":[" + lengths + "]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string("\"slicing\":\"") + ps::to_string(mode) + "\""),
              std::string::npos)
        << r.out;
    if (mode == ps::SlicingMode::Uniform)
      uniform_makespan = sim.makespan;
    else
      EXPECT_LT(sim.makespan, uniform_makespan);
  }
  // The text form names the slicing and its lengths.
  r =
      run("simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 4 --model llama2-7b "
          "--device rtx-4090 --sequence 8192 --slicing balanced");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<int> b = ps::balanced_slices(base, 4);
  EXPECT_NE(r.out.find("4 slices per microbatch, balanced: " + std::to_string(b[0]) + ", " +
                       std::to_string(b[1])),
            std::string::npos)
      << r.out;
}

TEST(CliSlicing, FineWeightGradientsEqualTheLibraryPass) {
  struct Case {
    std::string args;
    ps::Schedule split;
    ps::MemoryBudget budget;
    int parts;
  };
  const Case cases[] = {
      {"--schedule zb-h1 --ranks 4 --microbatches 8 --wgrad fine",
       ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8}), ps::MemoryBudget{}, 4},
      {"--schedule slice-pipe --ranks 4 --microbatches 8 --slices 2 --wgrad fine --wgrad-parts 2 "
       "--memory-budget 3",
       ps::schedule::slice_pipe({.ranks = 4, .stages = 8, .microbatches = 8, .slices = 2},
                                ps::WGradMode::Split),
       budget_of(3), 2},
  };
  const ps::UniformCost cost;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CliRun r = run("simulate --json " + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib = ps::fill_weight_gradients(c.split, cost, c.budget, c.parts);
    expect_json_matches(r.out, lib, ps::simulate(lib, cost));
    r = run("generate --format text " + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, ps::to_text(lib));
    EXPECT_NE(r.out.find(":" + std::to_string(c.parts - 1)), std::string::npos);
  }
}

TEST(CliSlicing, BadSlicingUsageExitsTwoWithAMessage) {
  const std::string model = " --model llama2-7b --device rtx-4090";
  struct Case {
    std::string args;
    std::string says;
  };
  for (const Case& c : {
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --warmup 3",
                "--warmup: schedule '1f1b' has no warm-up to set; schedules with one: slice-pipe"},
           Case{"generate --schedule zb-v --ranks 4 --microbatches 8 --warmup 3",
                "schedule 'zb-v' has no warm-up"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --slices 4",
                "schedule '1f1b' runs whole microbatches; slice-level schedules are gpipe, "
                "seq-1f1b, slice-pipe"},
           Case{"simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 4 --slicing "
                "even" +
                    model,
                "slicing mode 'even' is unknown; choose uniform"},
           Case{"simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 4 --slicing "
                "balanced",
                "--slicing balanced chooses slice lengths from the cost of each token"},
           Case{"render --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 4 --slicing "
                "terapipe",
                "give --model and --device"},
           Case{"simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 0",
                "--slices needs a whole number from 1"},
           Case{"simulate --schedule slice-pipe --ranks 4 --microbatches 8 --slices 4 --warmup 0",
                "--warmup needs a whole number from 1"},
           Case{"simulate --schedule slice-pipe --ranks 4 --microbatches 8 --slices 4 --warmup 1",
                "warmup = 1"},
           Case{"simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 40 --sequence "
                "32" +
                    model,
                "slices = 40 exceeds the sequence of 32 tokens"},
           Case{"simulate --schedule seq-1f1b --ranks 64 --microbatches 64 --slices 2 --slicing "
                "terapipe" +
                    model,
                "cannot be split over 64 stages"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --wgrad-parts 2",
                "--wgrad-parts sets the parts of each weight gradient under --wgrad fine"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --wgrad fine --wgrad-parts 0",
                "--wgrad-parts needs a whole number from 1"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --wgrad coarse",
                "--wgrad takes fused, split or fine, got 'coarse'"},
           Case{"simulate --slices 4 '" + data("zb1p_2rank_2stagep_compute.csv") + "'",
                "give either a schedule FILE or --schedule NAME"},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  }
}

// ---------------------------------------------------------------------------------------
// Limits: sizes that would take the machine's memory are refused before anything is built

namespace {

// What no message of the command may show: C++'s own words.
void expect_no_cxx_words(const std::string& err) {
  for (const char* word : {"std::", "bad_alloc", "terminate", "what()", "::", "TuneRequest.",
                           "Problem.", "ModelShape.", "MemoryBudget."})
    EXPECT_EQ(err.find(word), std::string::npos) << "'" << word << "' in: " << err;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(CliLimits, SchedulesOverTheActionLimitAreRefusedNamingTheFlags) {
  struct Case {
    std::string args;
    std::vector<std::string> names;  // in the message
  };
  for (const Case& c : {
           Case{"simulate --schedule zb-v --ranks 1024 --microbatches 100000",
                {"--ranks 1024", "--microbatches 100000", "2 chunks per rank",
                 "614,400,000 actions", "F, I, W", "2,000,000"}},
           Case{"generate --schedule interleaved-1f1b --ranks 64 --microbatches 4096 --chunks 1024",
                {"--ranks", "--microbatches", "--chunks 1024", "2,000,000"}},
           Case{"simulate --schedule seq-1f1b --ranks 8 --microbatches 1024 --slices 65536",
                {"--slices 65536", "fewer --slices", "2,000,000"}},
           Case{"render --schedule zb-h1 --ranks 64 --microbatches 1024 --wgrad fine "
                "--wgrad-parts 1024",
                {"--wgrad-parts 1024", "1024 W parts", "fewer --wgrad-parts"}},
           Case{"generate --schedule 1f1b --ranks 64 --microbatches 16384 --checkpoint full",
                {"F, B, R", "3,145,728 actions"}},
           Case{"generate --schedule 1f1b --ranks 64 --microbatches 8192 --comm",
                {"2 sends, 2 receives, 2 send waits", "4,194,304 actions"}},
           // Just over: 2 x 500001 units of F and B are 4 actions past the limit.
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 500001", {"2,000,004 actions"}},
       }) {
    SCOPED_TRACE(c.args);
    const auto start = std::chrono::steady_clock::now();
    CliRun r = run(c.args);
    EXPECT_LT(seconds_since(start), 10.0);  // refused before generating anything
    EXPECT_EQ(r.code, 2) << r.err;
    for (const std::string& n : c.names)
      EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
    expect_no_cxx_words(r.err);
  }
  // Under the limit the same flags work (2 x 50000 units of F and B: 200,000 actions).
  CliRun r = run("simulate --json --schedule 1f1b --ranks 2 --microbatches 50000");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "actions"), 200000);
  // Pictures have their own, lower limit.
  r = run("render --schedule 1f1b --ranks 2 --microbatches 50001 --svg '" +
          (scratch() / "big.svg").string() + "'");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("draw at most 200,000"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(scratch() / "big.svg"));
}

TEST(CliLimits, RunningOutOfMemoryIsASentenceNotACrash) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // The sanitizers reserve terabytes of address space at start-up, so a sanitized tool cannot
  // start under `ulimit -v` at all; the plain build runs this test.
  GTEST_SKIP() << "a sanitized build cannot run under an address-space limit";
#endif
  // 1.9 million actions need about 250 MB; 160 MB of address space is not enough.
  CliRun r =
      run_after("ulimit -v 160000; ", "simulate --schedule 1f1b --ranks 8 --microbatches 118000");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("pipesched simulate: out of memory while ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("schedule '1f1b'"), std::string::npos) << r.err;
  expect_no_cxx_words(r.err);
}

TEST(CliLimits, TuneRefusesASearchGridOverTheLimit) {
  const auto start = std::chrono::steady_clock::now();
  CliRun r = run("tune --ranks 4096 --global-batch 1048576 --memory-budget 2");
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(r.code, 2) << r.err;
  for (const char* n : {"--global-batch", "--ranks", "2,000,000", "interleaved-1f1b with 4"})
    EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
  expect_no_cxx_words(r.err);
  // Too many configurations, however small each is.
  std::string slices;
  for (int k = 1; k <= 4096; ++k)
    slices += (k > 1 ? "," : "") + std::to_string(k);
  r =
      run("tune --ranks 1 --global-batch 720720 --model gpt3-1.3b --device h100 --bases "
          "seq-1f1b --microbatch-sizes 1,2,3,4,5,6,7,8,9,10 --slices " +
          slices);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("over 10,000 configurations"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------
// Numbers: every numeric flag is finite and in range

TEST(CliNumbers, CostsAndBudgetsMustBeFiniteAndInRange) {
  const std::string sim = "simulate --schedule 1f1b --ranks 4 --microbatches 8 ";
  struct Case {
    std::string args;
    std::string says;
  };
  for (const Case& c : {
           Case{sim + "--cost f=1e308,b=1e308",
                "--cost f = 1e308 is out of range; give a number from 0 to 1e+12"},
           Case{sim + "--cost b=1e13", "--cost b = 1e13 is out of range"},
           Case{sim + "--cost f=inf", "--cost f needs a finite decimal number from 0 to 1e+12"},
           Case{sim + "--cost f=nan", "--cost f needs a finite decimal number"},
           Case{sim + "--cost f=0x10", "--cost f needs a finite decimal number"},
           Case{sim + "--cost f=1e999", "--cost f = 1e999 is out of range"},
           Case{sim + "--cost comm=-1", "--cost comm = -1 is out of range"},
           Case{sim + "--cost boundary=2",
                "--cost boundary = 2 is out of range; give a number "
                "from 0 to 1"},
           Case{sim + "--cost f=1,b=2,f=3", "--cost gives f twice; give each key once"},
           Case{sim + "--memory-budget nan", "memory budget 'nan' does not start with a number"},
           Case{sim + "--memory-budget inf", "memory budget 'inf' does not start with a number"},
           Case{sim + "--memory-budget 1e400", "memory budget '1e400' is too large"},
           Case{sim + "--model gpt3-1.3b --device h100 --memory-budget 1e308TB", "is too large"},
           Case{sim + "--model gpt3-1.3b --device h100 --sequence nan",
                "--sequence needs a whole number"},
           Case{"tune --ranks 4 --global-batch 8 --cost f=1e308",
                "--cost f = 1e308 is out of range"},
           Case{"tune --ranks 4 --global-batch 8 --memory-budget inf",
                "memory budget 'inf' does not start with a number"},
           Case{"tune --ranks 4 --global-batch 8 --cost w=1,w=1", "--cost gives w twice"},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("inf"), std::string::npos) << r.out;
  }
  // The largest times allowed still give finite figures.
  CliRun r =
      run("simulate --json " + sim.substr(9) + "--cost f=1e12,b=1e12,w=1e12,r=1e12,comm=1e12");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("null,\"bubble"), std::string::npos) << r.out;
  EXPECT_GT(json_field(r.out, "makespan"), 1e12);
  EXPECT_TRUE(std::isfinite(json_field(r.out, "bubble_ratio")));
}

// ---------------------------------------------------------------------------------------
// JSON: always valid, whatever the file is called

TEST(CliJson, NonUtf8FileNamesStillGiveValidJson) {
  const auto file = scratch() / "caf\xE9-\x01.csv";  // Latin-1 'é' and a control character
  std::filesystem::copy_file(data("zb1p_2rank_2stagep_compute.csv"), file,
                             std::filesystem::copy_options::overwrite_existing);
  CliRun r = run("simulate --json '" + file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  ps::test_json::Json doc;
  ASSERT_NO_THROW(doc = ps::test_json::parse_json(r.out)) << r.out;
  EXPECT_EQ(doc.at("schedule").string, "caf\xEF\xBF\xBD-\x01.csv");
  EXPECT_NE(r.out.find("\\u0001"), std::string::npos) << r.out;
  EXPECT_EQ(doc.at("ranks").array.size(), 2u);
  // The trace of the same file is valid too.
  const auto trace = scratch() / "named.json";
  r = run("render '" + file.string() + "' --trace '" + trace.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_NO_THROW(doc = ps::test_json::parse_json(slurp(trace)));
  EXPECT_EQ(doc.at("otherData").at("schedule").string, "caf\xEF\xBF\xBD-\x01.csv");
}

TEST(CliJson, EveryJsonOutputParses) {
  for (const char* args :
       {"list --json", "simulate --json --schedule zb-v --ranks 4 --microbatches 8",
        "simulate --json --schedule seq-1f1b --ranks 8 --microbatches 8 --slices 2 --model "
        "llama2-7b --device rtx-4090 --checkpoint selective --memory-budget device",
        "tune --json --ranks 4 --global-batch 8 --memory-budget 2",
        "tune --json --ranks 16 --global-batch 64 --model gpt3-1.3b --device a100-80gb --bases "
        "interleaved-1f1b --microbatch-sizes 1,2,4"}) {
    SCOPED_TRACE(args);
    CliRun r = run(args);
    ASSERT_LE(r.code, 1) << r.err;
    EXPECT_NO_THROW(ps::test_json::parse_json(r.out)) << r.out;
  }
}

TEST(CliList, JsonListsEveryGeneratorPolicyAndPreset) {
  CliRun r = run("list --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const auto& schedules = doc.at("schedules").array;
  ASSERT_EQ(schedules.size(), ps::builtin_generators().size());
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ps::GeneratorInfo& g = ps::builtin_generators()[i];
    SCOPED_TRACE(g.name);
    EXPECT_EQ(schedules[i].at("name").string, g.name);
    EXPECT_EQ(schedules[i].at("chunks").number, g.default_chunks);
    EXPECT_EQ(schedules[i].at("slices").boolean, g.slices);
    EXPECT_EQ(schedules[i].at("warmup").boolean, static_cast<bool>(g.generate_with_warmup));
    EXPECT_EQ(schedules[i].at("mario").boolean, g.mario);
    EXPECT_EQ(schedules[i].at("default_wgrad").string, ps::to_string(g.default_wgrad));
  }
  EXPECT_EQ(doc.at("checkpoint").array.size(), std::size(ps::checkpoint_modes));
  EXPECT_EQ(doc.at("models").array.size(), ps::presets::models().size());
  EXPECT_EQ(doc.at("devices").array.size(), ps::presets::devices().size());
  EXPECT_EQ(doc.at("devices").array[0].at("memory_bytes").number,
            ps::presets::devices()[0].device.memory_bytes);
  // What list does not take, it says, naming what it does take.
  r = run("list --all");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option '--all'; list accepts --json"), std::string::npos) << r.err;
  r = run("validate --all x.csv");
  EXPECT_NE(r.err.find("validate takes no options"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------
// Messages speak the command line's words

TEST(CliWords, MessagesNameFlagsNotTheLibrarysFields) {
  struct Case {
    std::string args;
    std::string command;
    std::string says;  // in the command line's words
  };
  const std::string model = " --model gpt3-1.3b --device a100-80gb";
  for (const Case& c : {
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 2", "simulate",
                "use --checkpoint selective or --checkpoint mario"},
           Case{"generate --schedule zb-h1 --ranks 4 --microbatches 8 --wgrad fused", "generate",
                "--wgrad split"},
           Case{"simulate --schedule 1f1b --ranks 64 --microbatches 8" + model, "simulate",
                "the model's layers = 24 cannot be split over 64 stages"},
           Case{
               "simulate --schedule seq-1f1b --ranks 4 --microbatches 8 --slices 40 --sequence 32" +
                   model,
               "simulate", "--slicing uniform: slices = 40 exceeds the sequence of 32 tokens"},
           Case{"tune --ranks 4 --global-batch 8 --bases ,", "tune", "--bases needs"},
           Case{"tune --ranks 4 --global-batch 8 --bases 2f2b", "tune",
                "--bases: unknown schedule '2f2b'"},
           Case{"tune --ranks 4 --global-batch 8 --microbatch-sizes 3" + model, "tune",
                "none of --microbatch-sizes 3 divides --global-batch 8"},
           Case{"tune --ranks 4 --global-batch 8 --checkpoint ,", "tune", "--checkpoint needs"},
           Case{"tune --ranks 4 --global-batch 8 --microbatch-sizes 2", "tune",
                "--microbatch-sizes needs --model"},
           Case{"render --schedule 1f1b --ranks 4 --microbatches 8 --cost f=1e12 --trace '" +
                    (scratch() / "t.json").string() + "'",
                "render", "--trace: the step takes"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --bogus", "simulate",
                "unknown option '--bogus'; simulate accepts --schedule"},
           Case{"validate", "validate", "give a schedule FILE"},
           Case{"convert a", "convert", "give IN and OUT"},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r = run(c.args);
    EXPECT_GE(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    // One prefix, naming the subcommand.
    EXPECT_EQ(r.err.rfind("pipesched " + c.command + ": ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find("pipesched " + c.command + ": pipesched"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("pipesched: pipesched"), std::string::npos) << r.err;
    expect_no_cxx_words(r.err);
  }
  // Tune's notes are translated too.
  CliRun r =
      run("tune --ranks 16 --global-batch 64 --bases interleaved-1f1b --microbatch-sizes "
          "1,2,4" +
          model);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("note: "), std::string::npos) << r.out;
  expect_no_cxx_words(r.out);
}

// ---------------------------------------------------------------------------------------
// Help and version

TEST(CliHelp, EveryHelpFitsInAHundredColumnsAndNamesTheVersion) {
  auto columns = [](const std::string& line) {
    std::size_t n = 0;
    for (char c : line)
      n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  };
  for (const char* args : {"--help", "list --help", "generate --help", "validate --help",
                           "simulate --help", "render --help", "convert --help", "tune --help"}) {
    SCOPED_TRACE(args);
    CliRun r = run(args);
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream lines(r.out);
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count)
      EXPECT_LE(columns(line), 100u) << line;
    EXPECT_GT(count, 3);
  }
  CliRun r = run("--help");
  EXPECT_NE(r.out.find("pipesched --version"), std::string::npos) << r.out;
  r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, std::string("pipesched ") + PIPESCHED_VERSION_STRING + "\n");
  EXPECT_EQ(r.out, "pipesched 0.2.0\n");
  // Option help wraps under its own column, not back at the margin.
  r = run("simulate --help");
  EXPECT_NE(r.out.find("\n                            "), std::string::npos) << r.out;
}

// ---------------------------------------------------------------------------------------
// Units: seconds and GiB under TransformerCost, abstract units under UniformCost

TEST(CliUnits, TransformerCostFiguresAreSecondsAndGiBEverywhere) {
  const std::string problem = "--schedule 1f1b --ranks 4 --microbatches 8";
  const std::string model = " --model gpt3-1.3b --device a100-80gb";
  const ps::TransformerCost cost{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("a100-80gb"), {}};
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::SimulationResult lib = ps::simulate(s, cost);
  const std::string makespan = ps::detail::format_time(lib.makespan, "seconds", 6);
  const std::string peak = ps::detail::format_memory(lib.peak_memory_max, "bytes", 6);
  CliRun r = run("simulate " + problem + model);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan " + makespan + ", "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max peak memory " + peak), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ps::detail::format_time(lib.ranks[3].busy, "seconds", 6)), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("bytes"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("units"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;  // 3.2 GiB, not 3.42e+09

  r = run("render --text " + problem + model);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan " + ps::detail::format_time(lib.makespan, "seconds") + ", "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GiB"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("units"), std::string::npos) << r.out;

  const auto svg = scratch() / "units.svg";
  r = run("render --svg '" + svg.string() + "' " + problem + model);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string text = slurp(svg);
  EXPECT_NE(text.find(">time (s)</text>"), std::string::npos);
  EXPECT_NE(text.find("makespan " + ps::detail::format_time(lib.makespan, "seconds")),
            std::string::npos);
  EXPECT_NE(text.find("peak memory " + ps::detail::format_memory(lib.peak_memory_max, "bytes")),
            std::string::npos);
  EXPECT_EQ(text.find("units"), std::string::npos);

  // JSON stays in seconds and bytes, as documented.
  r = run("simulate --json " + problem + model);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "makespan"), lib.makespan);
  EXPECT_DOUBLE_EQ(json_field(r.out, "peak_memory_max"), lib.peak_memory_max);
  EXPECT_NE(r.out.find("\"memory_unit\":\"bytes\""), std::string::npos);

  // UniformCost: abstract units.
  r = run("simulate " + problem);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan 33 units, bubble 27.27%, max peak memory 4 microbatches"),
            std::string::npos)
      << r.out;
  r = run("render --text " + problem);
  EXPECT_NE(r.out.find("makespan 33 units"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| peak 1 microbatch\n"), std::string::npos) << r.out;
  r = run("render --svg '" + svg.string() + "' " + problem);
  ASSERT_EQ(r.code, 0) << r.err;
  text = slurp(svg);
  EXPECT_NE(text.find(">time (units)</text>"), std::string::npos);
  EXPECT_NE(text.find("makespan 33 units"), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// tune: progress and notes

TEST(CliTune, ProgressRewritesItsLineCleanlyWithTheTimeLeft) {
  CliRun r = run("tune --progress --ranks 4 --global-batch 16 --memory-budget 2 --chunks 2,4,8");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.front(), '\r');
  EXPECT_EQ(r.err.back(), '\n');
  std::vector<std::string> updates;
  std::stringstream ss(r.err.substr(1, r.err.size() - 2));
  for (std::string u; std::getline(ss, u, '\r');)
    updates.push_back(u);
  ASSERT_GE(updates.size(), 2u) << r.err;
  // Each update covers the text of the one before (its padding is spaces already): nothing
  // of an older, longer line is left.
  for (std::size_t i = 1; i < updates.size(); ++i) {
    const std::size_t text = updates[i - 1].find_last_not_of(' ') + 1;
    EXPECT_GE(updates[i].size(), text) << updates[i - 1] << "\n" << updates[i];
  }
  EXPECT_NE(updates.front().find("left"), std::string::npos) << updates.front();
  EXPECT_EQ(updates.back().rfind("tune: 24/24 candidates in ", 0), 0u) << updates.back();
  EXPECT_NE(updates.back().find(", best: "), std::string::npos) << updates.back();
  for (const std::string& u : updates)
    EXPECT_EQ(u.find('\n'), std::string::npos) << u;
  // Without --progress and off a terminal, standard error stays quiet.
  r = run("tune --ranks 4 --global-batch 16 --memory-budget 2");
  EXPECT_EQ(r.err, "");
}

TEST(CliTune, RepeatedNotesArePrintedOnceWithACount) {
  // 24 layers over 16 x 2 and 16 x 4 stages: every microbatch size refused, twice over.
  CliRun r =
      run("tune --ranks 16 --global-batch 64 --model gpt3-1.3b --device a100-80gb "
          "--bases interleaved-1f1b --microbatch-sizes 1,2,4");
  EXPECT_EQ(r.code, 1) << r.err;
  std::vector<std::string> notes;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("note: ", 0) == 0) notes.push_back(line);
  ASSERT_EQ(notes.size(), 2u) << r.out;
  for (const std::string& n : notes) {
    EXPECT_EQ(n.substr(n.size() - 6),
              " (\xC3\x97"
              "3)")
        << n;
    EXPECT_NE(n.find("the model's layers = 24"), std::string::npos) << n;
  }
  EXPECT_NE(notes[0].find("32 stages"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("64 stages"), std::string::npos) << notes[1];
  // The JSON carries the same notes with their counts.
  r =
      run("tune --json --ranks 16 --global-batch 64 --model gpt3-1.3b --device a100-80gb "
          "--bases interleaved-1f1b --microbatch-sizes 1,2,4");
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  ASSERT_EQ(doc.at("notes").array.size(), 2u);
  EXPECT_EQ(doc.at("notes").array[0].at("count").number, 3);
}

// Chimera from the command line: generated to CSV and to text, each validates and reads back
// with its two replicas; simulate names them (JSON `replicas`, the table's line) and gives the
// basic unit's 5D − 4; Mario checkpoints it within a budget; a file for PyTorch is refused.
TEST(Cli, ChimeraGeneratesValidatesAndSimulates) {
  for (const char* ext : {"csv", "txt"}) {
    SCOPED_TRACE(ext);
    const auto file = scratch() / (std::string("chimera.") + ext);
    CliRun g =
        run("generate --schedule chimera --ranks 4 --microbatches 6 -o '" + file.string() + "'");
    ASSERT_EQ(g.code, 0) << g.err;
    CliRun v = run("validate '" + file.string() + "'");
    EXPECT_EQ(v.code, 0) << v.err;
    EXPECT_NE(v.out.find("8 stages"), std::string::npos) << v.out;
    CliRun s = run("simulate --json '" + file.string() + "'");
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_NE(s.out.find("\"replicas\":2"), std::string::npos) << s.out;
  }
  CliRun j = run("simulate --json --schedule chimera --ranks 8 --microbatches 8");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(json_field(j.out, "makespan"), 5.0 * 8 - 4);
  EXPECT_NE(j.out.find("\"replicas\":2"), std::string::npos) << j.out;
  CliRun t = run("simulate --schedule chimera --ranks 4 --microbatches 4");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("2 model replicas of 4 stages each"), std::string::npos) << t.out;
  // Other schedules' JSON has no replicas field.
  CliRun o = run("simulate --json --schedule 1f1b --ranks 4 --microbatches 4");
  EXPECT_EQ(o.out.find("replicas"), std::string::npos) << o.out;
  CliRun m =
      run("simulate --json --schedule chimera --ranks 4 --microbatches 8 --checkpoint mario "
          "--memory-budget 3");
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_LE(json_field(m.out, "peak_memory_max"), 3.0);
  EXPECT_GT(json_field(m.out, "recomputes"), 0.0);
  CliRun p = run("generate --schedule chimera --ranks 2 --microbatches 2 --format pytorch");
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("2 model replicas"), std::string::npos) << p.err;
}

// tune --gpus: the cluster search's contract (docs/cli.md).

namespace {

const char* const small_cluster_tune =
    "tune --gpus 8 --gpus-per-node 4 --global-batch 16 --model gpt3-1.3b --device a100-40gb "
    "--sequence 1024 --bases 1f1b,zb-h1,slice-pipe --slices 1,2 --fine-wgrad "
    "--checkpoint none,selective,mario --microbatch-sizes 1,2 --chunks 2";

}  // namespace

TEST(CliTune, ClusterPlansCarryTheContractAndTheirCommandsReproduceTheirStepTimes) {
  CliRun r = run(std::string(small_cluster_tune) + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const auto& best = doc.at("best");
  for (const char* key : {"schedule", "checkpoint", "wgrad", "pp", "dp", "tp", "microbatch_size",
                          "microbatches", "chunks", "slices", "warmup", "layers_per_stage",
                          "step_time_s", "peak_memory_bytes", "mfu", "command"})
    EXPECT_NE(best.find(key), nullptr) << key;
  EXPECT_EQ(best.at("pp").number * best.at("dp").number * best.at("tp").number, 8);
  double layers = 0;
  for (const auto& n : best.at("layers_per_stage").array)
    layers += n.number;
  EXPECT_EQ(layers, 24);
  EXPECT_GT(best.at("mfu").number, 0);
  EXPECT_LT(best.at("mfu").number, 1);
  EXPECT_LE(best.at("peak_memory_bytes").number, 40.0 * 1024 * 1024 * 1024);
  const auto& search = doc.at("search");
  EXPECT_GT(search.at("candidates").number, 0);
  EXPECT_GE(search.at("seconds").number, 0);
  EXPECT_FALSE(search.at("cut").boolean);
  // The library's search gives the same best step.
  ps::ClusterRequest req;
  req.gpus = 8;
  req.gpus_per_node = 4;
  req.global_batch = 16;
  req.search.bases = {"1f1b", "zb-h1", "slice-pipe"};
  req.search.slices = {1, 2};
  req.search.fine_wgrad = true;
  req.search.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective,
                            ps::CheckpointMode::Mario};
  req.search.microbatch_sizes = {1, 2};
  req.search.chunks = {2};
  ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  model.sequence = 1024;
  const ps::TuneResult lib = ps::tune_cluster(req, model, ps::presets::find_device("a100-40gb"));
  ASSERT_TRUE(lib.best);
  EXPECT_DOUBLE_EQ(best.at("step_time_s").number, lib.best->makespan);
  // One baseline per (schedule, checkpoint) pair; Mario does not run on slice-pipe.
  const auto& baselines = doc.at("baselines").array;
  ASSERT_EQ(baselines.size(), 9u);
  int reproduced = 0;
  for (const auto& b : baselines) {
    const std::string name = b.at("schedule").string + " " + b.at("checkpoint").string;
    SCOPED_TRACE(name);
    if (b.at("step_time_s").type == ps::test_json::Json::Null) {
      EXPECT_EQ(name, "slice-pipe mario");
      continue;
    }
    const std::string command = b.at("command").string;
    ASSERT_EQ(command.rfind("pipesched simulate ", 0), 0u) << command;
    CliRun s = run(command.substr(std::string("pipesched ").size()) + " --json");
    ASSERT_EQ(s.code, 0) << command << "\n" << s.err;
    EXPECT_DOUBLE_EQ(json_field(s.out, "makespan"), b.at("step_time_s").number) << command;
    ++reproduced;
  }
  EXPECT_EQ(reproduced, 8);
  // The text form: the best plan, its command, and a row per pair.
  r = run(small_cluster_tune);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("best of each schedule and checkpoint mode:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipesched simulate --schedule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MFU "), std::string::npos) << r.out;
}

TEST(CliTune, TimeLimitReturnsTheBestSoFarAndSaysTheSearchWasCut) {
  const std::string args =
      "tune --gpus 16 --global-batch 64 --model gpt3-13b --device a100-40gb --time-limit 0.001";
  CliRun r = run(args + " --json");
  ASSERT_NE(r.code, 2) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  EXPECT_TRUE(doc.at("search").at("cut").boolean);
  EXPECT_LT(doc.at("search").at("candidates").number, doc.at("search").at("total").number);
  r = run(args);
  EXPECT_NE(r.out.find("cut by --time-limit"), std::string::npos) << r.out;
}

TEST(CliTune, ClusterOptionsAreCheckedInTheFlagsWords) {
  struct Case {
    std::string args, says;
  };
  const std::string model = " --model gpt3-1.3b --device a100-40gb";
  for (const Case& c : {
           Case{"tune --gpus 8 --ranks 4 --global-batch 8" + model, "not both"},
           Case{"tune --gpus 8 --global-batch 8", "give --model NAME and --device NAME"},
           Case{"tune --gpus 8 --global-batch 8 --dp 2" + model, "--dp is what --gpus searches"},
           Case{"tune --gpus 8 --global-batch 8 --memory-budget 20GB" + model,
                "held to its device memory"},
           Case{"tune --ranks 4 --global-batch 8 --pp 2" + model, "--pp needs --gpus"},
           Case{"tune --gpus 8 --global-batch 8 --zero 3" + model, "--zero"},
           Case{"tune --gpus 8 --global-batch 8 --tp 3" + model, "no way to run 8 GPUs"},
           Case{"tune --gpus 8 --global-batch 8 --threads 0" + model, "--threads"},
           Case{"tune --gpus 8 --global-batch 8 --time-limit -1" + model, "--time-limit"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --tp 2", "needs --model"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --zero 1" + model,
                "give --dp 2 or more"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --sp" + model,
                "give --tp 2 or more"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --layers 6,6,6" + model,
                "--layers has 3 entries"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --layers 6,6,6,5" + model,
                "--layers sum to 23 layers"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --tp 3" + model,
                "--tp 3 does not divide"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --fit" + model,
                "--fit fits a schedule's own memory knob"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --wgrad fine --wgrad-parts "
                "gemm",
                "--wgrad-parts gemm cuts each weight gradient per weight GEMM"},
           Case{"tune --ranks 4 --global-batch 8 --fine-wgrad --wgrad-parts gemm",
                "--wgrad-parts gemm cuts each weight gradient per weight GEMM"},
           Case{"tune --ranks 4 --global-batch 8 --fine-wgrad --wgrad-parts 99999999999" + model,
                "--wgrad-parts"},
           Case{"tune --gpus 99999999999 --global-batch 8" + model, "--gpus"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --tp x" + model, "--tp"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --layers 1,,x" + model,
                "--layers"},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    expect_no_cxx_words(r.err);
  }
}

// Weight gradients cut per GEMM: the plan's command reproduces its step time.
TEST(CliTune, PerGemmWeightGradientPlansReproduce) {
  CliRun r = run(
      "tune --json --ranks 4 --global-batch 8 --model gpt3-1.3b --device a100-40gb --sequence 1024 "
      "--bases 1f1b --fine-wgrad --wgrad-parts gemm --microbatch-sizes 1 --checkpoint none");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const auto& best = doc.at("best");
  EXPECT_EQ(best.at("wgrad").string, "fine");
  const std::string command = best.at("command").string;
  ASSERT_NE(command.find("--wgrad-parts gemm"), std::string::npos) << command;
  CliRun s = run(command.substr(std::string("pipesched ").size()) + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_DOUBLE_EQ(json_field(s.out, "makespan"), best.at("step_time_s").number);
}

// The parallelism options of the cost model reach the simulation: data-parallel replicas add
// their gradient all-reduce to the step, tensor parallelism splits the work.
TEST(CliTune, SimulateCountsDataAndTensorParallelism) {
  const std::string base =
      "simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device "
      "a100-40gb";
  CliRun plain = run(base), dp = run(base + " --dp 2"), tp = run(base + " --tp 2 --sp");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(dp.code, 0) << dp.err;
  ASSERT_EQ(tp.code, 0) << tp.err;
  EXPECT_GT(json_field(dp.out, "makespan"), json_field(plain.out, "makespan"));
  EXPECT_LT(json_field(tp.out, "makespan"), json_field(plain.out, "makespan"));
  EXPECT_LT(json_field(tp.out, "peak_memory_max"), json_field(plain.out, "peak_memory_max"));
}
