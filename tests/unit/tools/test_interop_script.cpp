// scripts/pytorch-interop.sh --offline, which compares pipesched's generators with PyTorch
// 2.15's stored dumps and needs no PyTorch: it passes on the pipesched command, fails when a
// wrapper on the command swaps every generator for gpipe, and fails by its timeout, in bounded
// time, when one command hangs.
#include <chrono>
#include <string>

#include "cli_support.hpp"

namespace test_interop_script {

namespace {

using namespace cli_test;

const std::string script =
    std::string(PIPESCHED_TEST_DATA_DIR) + "/../../scripts/pytorch-interop.sh";

// Runs the script on `binary`; its output (stdout and stderr together) in `out`.
CliRun run_script(const std::string& binary, const std::string& options = "") {
  const auto dir = scratch();
  const auto out = dir / "script_out";
  const std::string cmd = "bash '" + script + "' --offline --pipesched '" + binary + "' " +
                          options + " >'" + out.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  return r;
}

// A wrapper around the pipesched command: `body` runs first, then the command with "${args[@]}".
std::string wrapper(const std::string& name, const std::string& body) {
  const auto path = scratch() / name;
  std::ofstream(path) << "#!/usr/bin/env bash\nargs=(\"$@\")\n"
                      << body << "\nexec '" << PIPESCHED_CLI_PATH << "' \"${args[@]}\"\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path.string();
}

TEST(InteropScript, OfflinePassesOnThePipeschedCommand) {
  const CliRun r = run_script(PIPESCHED_CLI_PATH);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference_ScheduleZBVZeroBubble_p4_m8.csv"), std::string::npos) << r.out;
}

TEST(InteropScript, FailsWhenEveryGeneratorIsGpipe) {
  const std::string gpipe =
      wrapper("gpipe_everywhere",
              "for i in \"${!args[@]}\"; do\n"
              "  [[ \"${args[$i]}\" == --schedule ]] && args[$((i+1))]=gpipe\n"
              "done");
  const CliRun r = run_script(gpipe);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("other actions than PyTorch's"), std::string::npos) << r.out;
  // GPipe against GPipe still passes: the check compares, it does not refuse everything.
  EXPECT_NE(r.out.find("ok    stored pytorch215/reference_ScheduleGPipe_p2_m4.csv"),
            std::string::npos)
      << r.out;
}

TEST(TimedInteropScript, FailsByTimeoutWhenACommandHangs) {
  // The first generate sleeps (with a child of its own, which the timeout must kill too).
  const auto marker = scratch() / "hung_once";
  std::filesystem::remove(marker);
  const std::string hang = wrapper("hang_once", "if [[ $1 == generate && ! -e '" + marker.string() +
                                                    "' ]]; then\n  touch '" + marker.string() +
                                                    "'\n  sleep 600 & wait\nfi");
  const auto start = std::chrono::steady_clock::now();
  const CliRun r = run_script(hang, "--timeout 2");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("timed out after 2 s"), std::string::npos) << r.out;
  EXPECT_LT(seconds, 60) << r.out;
  EXPECT_TRUE(std::filesystem::exists(marker));
}

TEST(InteropScript, RefusesABadTimeout) {
  const CliRun r = run_script(PIPESCHED_CLI_PATH, "--timeout 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--timeout needs a number of seconds above 0"), std::string::npos) << r.out;
}

}  // namespace

}  // namespace test_interop_script
