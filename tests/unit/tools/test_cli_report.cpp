// pipesched tune --report: the page holds a point per evaluated candidate and each marked plan,
// a timeline per plan with its simulate command (whose step time the page's figure matches),
// its axes in the cost model's units; a bad --report is refused in one sentence.
#include <gtest/gtest.h>

#include <string>

#include "cli_support.hpp"

namespace test_cli_report {

using namespace cli_test;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

}  // namespace

TEST(CliReport, UniformCostPageHoldsEveryPointAndEachPlansTimeline) {
  const auto page = scratch() / "uniform.html";
  const CliRun r =
      run("tune --ranks 4 --global-batch 8 --memory-budget 3 --threads 1 --json "
          "--report '" +
          page.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string h = slurp(page);
  ASSERT_FALSE(h.empty());
  const double candidates = json_field(r.out, "candidates");
  const double pruned = json_field(r.out, "pruned");
  const double refused = json_field(r.out, "refused");
  // A timeline for the best and for each (schedule, checkpoint) pair with a plan.
  const std::size_t from = r.out.find("\"baselines\":["), to = r.out.find("\"search\":");
  ASSERT_LT(from, to);
  const std::size_t pairs = count(r.out.substr(from, to - from), "\"command\":");
  EXPECT_GE(pairs, 3u);
  EXPECT_EQ(count(h, "<section class=\"timeline\">"), 1 + pairs);
  EXPECT_EQ(count(h, "class=\"point best\""), 1u);
  EXPECT_EQ(count(h, "class=\"point baseline\""), pairs);
  // Every candidate evaluated is a point (a few over the budget are settled unsimulated).
  const std::size_t points = count(h, "<g class=\"point ") - 1 - pairs;
  EXPECT_NE(h.find("(" + std::to_string(points) + " evaluated,"), std::string::npos);
  EXPECT_LE(static_cast<double>(points), candidates - pruned - refused);
  EXPECT_GT(points, 0u);
  EXPECT_NE(h.find(">step time (units)<"), std::string::npos);
  EXPECT_NE(h.find(">largest rank&apos;s activation memory (microbatches)<"), std::string::npos);
  EXPECT_NE(h.find("budget 3 microbatches"), std::string::npos);
  EXPECT_NE(h.find("pipesched simulate --schedule "), std::string::npos);
  EXPECT_NE(h.find(">time (units)<"), std::string::npos);  // the timelines' own axis
}

TEST(CliReport, TransformerCostPageInSecondsAndBytes) {
  const auto page = scratch() / "transformer.html";
  const CliRun r =
      run("tune --ranks 4 --global-batch 16 --model gpt3-1.3b --device rtx-4090 "
          "--bases 1f1b,zb-h1 --microbatch-sizes 1,2 --threads 1 --report '" +
          page.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string h = slurp(page);
  EXPECT_NE(h.find(">step time (s)<"), std::string::npos);
  EXPECT_NE(h.find(">largest GPU&apos;s memory (bytes)<"), std::string::npos);
  EXPECT_NE(h.find(" GiB</text>"), std::string::npos);
  EXPECT_NE(h.find("budget 24 GiB"), std::string::npos);  // the device's memory
  EXPECT_NE(h.find(">time (s)<"), std::string::npos);
  EXPECT_NE(h.find(" ms</text>"), std::string::npos);  // SI-prefixed ticks of the timelines
}

TEST(CliReport, BadReportIsRefused) {
  const CliRun dash = run("tune --ranks 2 --global-batch 4 --memory-budget 2 --report -");
  EXPECT_EQ(dash.code, 2);
  EXPECT_NE(dash.err.find("--report needs a file name"), std::string::npos) << dash.err;
  const CliRun dir =
      run("tune --ranks 2 --global-batch 4 --memory-budget 2 --report /nonexistent-dir/x.html");
  EXPECT_EQ(dir.code, 2);
  EXPECT_NE(dir.err.find("cannot write '/nonexistent-dir/x.html'"), std::string::npos) << dir.err;
}

}  // namespace test_cli_report
