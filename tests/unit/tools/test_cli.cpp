// The pipesched command: subcommands, JSON output equal to the library call, exit codes.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pipesched/pipesched.hpp"

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

CliRun run(const std::string& args) {
  const auto dir = scratch();
  const auto out = dir / "stdout", err = dir / "stderr";
  std::string cmd = std::string("'") + PIPESCHED_CLI_PATH + "' " + args + " >'" + out.string() +
                    "' 2>'" + err.string() + "'";
  int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
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
  for (const auto& g : ps::generators())
    EXPECT_NE(r.out.find(std::string(g.name)), std::string::npos) << g.name;
  for (const char* sub : {"generate", "validate", "simulate", "render", "convert"}) {
    r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("usage: pipesched " + std::string(sub)), std::string::npos) << r.out;
  }
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
                "--cost f needs a number"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost q=1",
                "unknown key 'q'"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --model nope --device h100",
                "nope"},
           Case{"validate /nonexistent/file.csv", "/nonexistent/file.csv"},
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
