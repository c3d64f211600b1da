// pipesched tune's deadlines: an output file that cannot be written is refused before the
// search, and (Timed*: wall clock) --time-limit holds where one candidate alone outlasts it,
// and SIGTERM ends a search with the best plan found so far, marked as cut short.
#include <chrono>
#include <string>

#include "cli_support.hpp"

namespace test_cli_tune_deadline {

using namespace cli_test;

namespace {

// 1F1B over 16 ranks with 4096 microbatches under a budget that needs checkpointing: its
// selective and Mario candidates take seconds each, the rest a fraction of a second.
const char* const long_search =
    "tune --ranks 16 --global-batch 4096 --cost f=1,b=2,w=1,r=1,boundary=0.05 "
    "--memory-budget 2 --bases 1f1b --checkpoint none,selective,mario --threads 2";

}  // namespace

TEST(CliTune, AReportPathThatCannotBeWrittenIsRefusedBeforeTheSearch) {
  const auto dir = scratch();
  for (const std::string& path :
       {(dir / "no such directory" / "tune.html").string(), dir.string()}) {
    SCOPED_TRACE(path);
    const auto t0 = std::chrono::steady_clock::now();
    const CliRun r = run(std::string(long_search) + " --report '" + path + "'");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "");  // no search result printed: it never ran
    EXPECT_NE(r.err.find("cannot write '" + path + "' for --report"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("before the search"), std::string::npos) << r.err;
    expect_no_cxx_words(r.err);
    EXPECT_LT(seconds_since(t0), 60.0);  // generous: the search alone takes far longer
  }
  // A path that can be written passes the check, new or existing, and gets the page.
  for (bool existing : {false, true}) {
    const auto page = dir / "page.html";
    std::filesystem::remove(page);
    if (existing) std::ofstream(page) << "stale-page-marker";
    const CliRun ok =
        run("tune --ranks 4 --global-batch 16 --memory-budget 2 --report '" + page.string() + "'");
    ASSERT_EQ(ok.code, 0) << ok.err;
    const std::string html = slurp(page);
    EXPECT_NE(html.find("<html"), std::string::npos);
    EXPECT_EQ(html.find("stale-page-marker"), std::string::npos);
  }
}

TEST(TimedCliTune, TimeLimitHoldsWhenOneCandidateOutlastsIt) {
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun r = run(std::string(long_search) + " --time-limit 1 --json");
  const double wall = seconds_since(t0);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(wall, 1 + 5.0);  // the limit, one simulation, printing 131k-action schedules
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  EXPECT_TRUE(doc.at("search").at("cut").boolean);
  // The plan is whole: its command reproduces its step time.
  const auto& best = doc.at("best");
  const std::string command = best.at("command").string;
  const std::string simulate = "pipesched simulate ";
  ASSERT_EQ(command.rfind(simulate, 0), 0u) << command;
  const CliRun s = run("simulate " + command.substr(simulate.size()) + " --json");
  ASSERT_EQ(s.code, 0) << command << "\n" << s.err;
  EXPECT_DOUBLE_EQ(json_field(s.out, "makespan"), best.at("makespan").number) << command;
}

TEST(TimedCliTune, ProgressEndsWithWhatCutTheSearch) {
  const CliRun r = run(std::string(long_search) + " --time-limit 1 --progress");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.back(), '\n');
  // The last update: the candidates settled, the time, what cut it and the best plan.
  const std::string last = r.err.substr(r.err.rfind('\r') + 1);
  EXPECT_EQ(last.rfind("tune: ", 0), 0u) << last;
  EXPECT_NE(last.find(" s, cut by --time-limit, best: "), std::string::npos) << last;
  EXPECT_NE(r.out.find("cut by --time-limit"), std::string::npos) << r.out;
}

TEST(TimedCliTune, SigtermPrintsTheBestPlanFoundSoFarMarkedAsCutShort) {
  const auto t0 = std::chrono::steady_clock::now();
  // Without a time limit the search runs for minutes; timeout sends SIGTERM after 4 s, well
  // after phase one has found the full-checkpointing plan. timeout signals the command and
  // then its process group: the second signal, at once, must not kill it.
  const CliRun r = run_after("timeout -s TERM 4 ", long_search);
  const double wall = seconds_since(t0);
  EXPECT_EQ(r.code, 124) << r.err;  // timeout's own status once it has sent the signal
  EXPECT_LT(wall, 4 + 5.0);
  EXPECT_NE(r.err.find("tune: SIGTERM cut the search short"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("cut short by a signal"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipesched simulate"), std::string::npos) << r.out;
}

}  // namespace test_cli_tune_deadline
