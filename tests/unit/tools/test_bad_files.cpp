// Bad schedule files through the pipesched command, as a user meets them: each gives exit 1 or
// 2 with a sentence naming what was wrong, within seconds and a bounded amount of memory
// (measured from the child process's own resource usage), never a library internal message.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace test_bad_files {

namespace {

struct Measured {
  int code = -1;
  std::string err;
  double seconds = 0;
  long max_rss_kb = 0;
};

std::filesystem::path scratch() {
  auto dir = std::filesystem::temp_directory_path() /
             ("pipesched_bad_files_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs the command with `args`, stderr to a file; measures wall time and peak resident memory.
Measured run_measured(const std::vector<std::string>& args) {
  const auto err_path = scratch() / "stderr";
  std::vector<std::string> argv_s = {PIPESCHED_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(err_path.c_str(), "w", stderr)) ::_exit(125);
    if (!std::freopen("/dev/null", "w", stdout)) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  Measured m;
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.max_rss_kb = usage.ru_maxrss;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  m.err = ss.str();
  return m;
}

std::string put(const std::string& name, const std::string& bytes) {
  const auto p = scratch() / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

}  // namespace

// Each of these once read out of bounds, took minutes, or exhausted memory.
TEST(TimedBadFiles, FailFastInBoundedMemoryWithASentence) {
  // The peak of a run on a valid two-action file is the baseline; sanitizer builds start high.
  const Measured base = run_measured({"validate", put("ok.csv", "0F0,0B0\n")});
  ASSERT_EQ(base.code, 0) << base.err;
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"send.csv", "0F0,0SEND_F0,0B0\n", "the stage after stage 0, which does not exist"},
      {"send_b.csv", "0F0,0B0,0SEND_B0\n", "the stage before stage 0, which does not exist"},
      {"part.csv", "0F0,0I0,0W0:2147483647\n", "parts 0..2147483646 never run"},
      {"cube.csv", "300F300.300\n", "more"},
      {"mb.csv", "0F1048575,0B1048575\n", "… and 2,097,142 more"},
      {"all.csv", "1048575F1048575.1048575\n", "more"},
      {"part8.csv", "0F0,0I0,0W0:100000000\n", "parts 0..99999999 never run"},
      {"header.txt",
       "ranks 1 stages 1 microbatches 1048575 slices 1048575\nplacement linear\n"
       "rank 0: 0F0 0B0\n",
       "more"},
      {"norank.csv", "0F0,0B0\n,,,\n", "holds no stage"},
  };
  for (const Case& c : cases)
    for (const char* command : {"validate", "simulate", "render"}) {
      SCOPED_TRACE(std::string(command) + " " + c.name);
      const Measured m = run_measured({command, put(c.name, c.bytes)});
      EXPECT_TRUE(m.code == 1 || m.code == 2) << "exit " << m.code << "\n" << m.err;
      EXPECT_NE(m.err.find(c.says), std::string::npos) << m.err;
      EXPECT_EQ(m.err.find("std::"), std::string::npos) << m.err;
      EXPECT_LT(m.err.size(), 8000u) << "the message must stay short";
      EXPECT_LT(m.seconds, 10.0);  // 96 s before; about 0.1 s in a release build now
      EXPECT_LT(m.max_rss_kb - base.max_rss_kb, 200 * 1024) << "peak " << m.max_rss_kb << " kB";
    }
  // Input that is not a schedule file at all.
  const Measured zero = run_measured({"validate", "/dev/zero"});
  EXPECT_EQ(zero.code, 2) << zero.err;
  EXPECT_NE(zero.err.find("it is a device, not a schedule file"), std::string::npos) << zero.err;
  EXPECT_LT(zero.seconds, 5.0);
  const Measured dir = run_measured({"validate", scratch().string()});
  EXPECT_EQ(dir.code, 2) << dir.err;
  EXPECT_NE(dir.err.find("it is a directory"), std::string::npos) << dir.err;
}

}  // namespace test_bad_files
