// What the command-line tests share: running the pipesched command, reading its files and
// JSON figures, and the checks several of them make.
#pragma once

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

namespace cli_test {

namespace ps = pipesched;

struct CliRun {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::filesystem::path scratch() {
  auto dir =
      std::filesystem::temp_directory_path() / ("pipesched_cli_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `text` to the file `name` in the scratch folder; returns its path.
inline std::string write(const std::string& name, const std::string& text) {
  const auto path = scratch() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the command with `args` after the shell commands in `before` (e.g. a ulimit).
inline CliRun run_after(const std::string& before, const std::string& args) {
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

inline CliRun run(const std::string& args) {
  return run_after("", args);
}

inline std::string data(const std::string& name) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + name;
}

// The number after "key": in a flat JSON text (the first occurrence after `from`).
inline double json_field(const std::string& json, const std::string& key, std::size_t from = 0) {
  std::size_t at = json.find("\"" + key + "\":", from);
  EXPECT_NE(at, std::string::npos) << key << " missing in " << json;
  if (at == std::string::npos) return -1;
  return std::stod(json.substr(at + key.size() + 3));
}

inline int recomputes(const ps::Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      n += a.kind == ps::OpKind::R;
  return n;
}

inline ps::MemoryBudget budget_of(double all) {
  ps::MemoryBudget b;
  b.all = all;
  return b;
}

// The simulate --json figures equal the library's simulation of `s`, rank by rank.
inline void expect_json_matches(const std::string& json, const ps::Schedule& s,
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

// What no message of the command may show: C++'s own words.
inline void expect_no_cxx_words(const std::string& err) {
  for (const char* word : {"std::", "bad_alloc", "terminate", "what()", "::", "tuning::Request.",
                           "Problem.", "ModelShape.", "MemoryBudget."})
    EXPECT_EQ(err.find(word), std::string::npos) << "'" << word << "' in: " << err;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace cli_test
