// pipesched tune: every plan it prints is a `pipesched simulate` command that runs and gives
// the plan's step time exactly, over every base, checkpoint mode, slicing and fine W choice.
#include <map>
#include <set>

#include "cli_support.hpp"

namespace test_cli_tune_plans {

using namespace cli_test;

namespace {

const char* const every_mode = " --checkpoint none,selective,mario,full,full-early,selective-early";

//! Every plan of the tune JSON `out` (the bests and each pair's best; pairs with no plan
//! are skipped), each checked by running its command: exit 0, the same makespan to the bit.
//! `commands` caches the makespan of each command already run. Returns the plans checked.
int expect_plans_reproduce(const std::string& out, std::map<std::string, double>& commands,
                           std::set<std::string>* bases = nullptr,
                           std::set<std::string>* modes = nullptr) {
  const ps::test_json::Json doc = ps::test_json::parse_json(out);
  std::vector<const ps::test_json::Json*> plans;
  for (const char* key : {"best", "best_without_checkpoint", "best_conventional", "best_mario"})
    if (doc.at(key).type != ps::test_json::Json::Null) plans.push_back(&doc.at(key));
  for (const auto& b : doc.at("baselines").array)
    if (b.find("command")) plans.push_back(&b);
  for (const ps::test_json::Json* p : plans) {
    const std::string command = p->at("command").string;
    SCOPED_TRACE(command);
    const std::string simulate = "pipesched simulate ";
    EXPECT_EQ(command.rfind(simulate, 0), 0u);
    auto at = commands.find(command);
    if (at == commands.end()) {
      CliRun s = run(command.substr(std::string("pipesched ").size()) + " --json");
      EXPECT_EQ(s.code, 0) << s.err;
      if (s.code != 0) continue;
      at = commands.emplace(command, json_field(s.out, "makespan")).first;
    }
    EXPECT_EQ(at->second, p->at("makespan").number);
    if (bases) bases->insert(p->at("schedule").string);
    if (modes) modes->insert(p->at("checkpoint").string);
  }
  return static_cast<int>(plans.size());
}

}  // namespace

TEST(CliTunePlans, EveryPlanOfEveryBaseAndModeRunsAndGivesItsStepTime) {
  // UniformCost: every schedule tune accepts, every checkpoint mode, fine W both ways. The
  // built-in generators: other tests of this program register their own, which the command
  // does not know.
  std::string bases;
  for (const auto& g : ps::builtin_generators())
    bases += (bases.empty() ? "" : ",") + std::string(g.name);
  std::map<std::string, double> commands;
  std::set<std::string> seen_bases, seen_modes;
  for (const char* fine : {"", " --fine-wgrad"}) {
    SCOPED_TRACE(fine);
    CliRun r = run("tune --ranks 2 --global-batch 4 --memory-budget 2.5 --slices 1,2 --bases " +
                   bases + every_mode + fine + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_GT(expect_plans_reproduce(r.out, commands, &seen_bases, &seen_modes), 40);
  }
  EXPECT_EQ(seen_bases.size(), ps::builtin_generators().size());
  EXPECT_EQ(seen_modes.size(), 6u);
}

TEST(CliTunePlans, SlicedPlansRunUnderEverySlicing) {
  // TransformerCost cuts slices three ways; the slice schedules with their default chunks
  // (slice-pipe's two per rank are stages the --layers list counts) and whole-microbatch
  // schedules beside them, under a budget tight enough for every mode to recompute.
  std::map<std::string, double> commands;
  for (const char* slicing : {"uniform", "balanced", "terapipe"})
    for (const char* fine : {"", " --fine-wgrad"}) {
      SCOPED_TRACE(std::string(slicing) + fine);
      std::set<std::string> modes;
      // The slice schedules' plans cut their slices as tune did, and recompute under the
      // budget.
      const auto& sliced = [&](const std::string& out) {
        int n = 0, recomputing = 0;
        for (const auto& b : ps::test_json::parse_json(out).at("baselines").array) {
          if (!b.find("command")) continue;
          const std::string command = b.at("command").string;
          n += command.find("--slices 2") != std::string::npos &&
               (std::string(slicing) == "uniform" ||
                command.find(std::string("--slicing ") + slicing) != std::string::npos);
          recomputing += b.at("recomputes").number > 0;
        }
        EXPECT_GE(n, 10);
        EXPECT_GE(recomputing, 10);
      };
      CliRun r = run(std::string("tune --ranks 2 --global-batch 4 --model gpt3-1.3b ") +
                     "--device a100-40gb --sequence 512 --microbatch-sizes 1,2 --slices 2 " +
                     "--bases gpipe,seq-1f1b,slice-pipe,1f1b,interleaved-1f1b,zb-h1 " +
                     "--chunks 2 --memory-budget 1GB --slicing " + slicing + every_mode + fine +
                     " --json");
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_GT(expect_plans_reproduce(r.out, commands, nullptr, &modes), 20);
      EXPECT_EQ(modes.size(), 6u);
      sliced(r.out);
    }
}

TEST(CliTunePlans, VocabularyParallelPlansRunWithTheirPasses) {
  // GPT-3 1.3B over 2 ranks: the head split over both shortens the step, so the best plans
  // carry --vocab-parallel; every plan's command gives its step, with and without the passes.
  std::map<std::string, double> commands;
  CliRun r = run(std::string("tune --ranks 2 --global-batch 4 --model gpt3-1.3b ") +
                 "--device a100-40gb --sequence 512 --microbatch-sizes 1 " +
                 "--bases 1f1b,zb-v,interleaved-1f1b --chunks 2 --vocab-parallel" + every_mode +
                 " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(expect_plans_reproduce(r.out, commands), 8);
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  EXPECT_NE(doc.at("best").at("command").string.find(" --vocab-parallel"), std::string::npos);
  EXPECT_TRUE(doc.at("best").at("vocabulary_passes").boolean);
  int split = 0;
  for (const auto& [command, makespan] : commands)
    split += command.find(" --vocab-parallel") != std::string::npos;
  EXPECT_GE(split, 3);
}

TEST(CliTunePlans, ClusterPlansRunWithTheirDataAndTensorDegrees) {
  std::map<std::string, double> commands;
  for (const char* slicing : {"balanced", "terapipe"}) {
    SCOPED_TRACE(slicing);
    CliRun r =
        run(std::string("tune --gpus 8 --gpus-per-node 4 --pp 2 --tp 2 --global-batch 8 ") +
            "--model gpt3-1.3b --device a100-40gb --sequence 512 --microbatch-sizes 1,2 " +
            "--bases slice-pipe,1f1b,interleaved-1f1b --chunks 2 --slices 2 " +
            "--checkpoint none,selective,mario --fine-wgrad --slicing " + slicing + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
    EXPECT_EQ(doc.at("best").at("dp").number, 2);
    EXPECT_EQ(doc.at("best").at("tp").number, 2);
    EXPECT_GT(expect_plans_reproduce(r.out, commands), 8);
  }
}

// ---------------------------------------------------------------------------------------
// The search: chunk counts, the time limit

TEST(CliTunePlans, DefaultChunksFindTheBestCountBeyondFour) {
  // 24 layers over 2 ranks: 12 per rank, cut evenly by 2, 3, 4, 6 and 12 chunks. Few
  // microbatches leave a bubble that more chunks shrink.
  const std::string args =
      "tune --ranks 2 --global-batch 4 --model gpt3-1.3b --device h100 --sequence 512 "
      "--microbatch-sizes 1 --bases interleaved-1f1b --checkpoint none --json";
  CliRun r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json best = ps::test_json::parse_json(r.out).at("best");
  // By brute force: each chunk count alone.
  double fastest = std::numeric_limits<double>::infinity();
  int fastest_chunks = 0;
  for (int c = 1; c <= 12; ++c) {
    CliRun one = run(args + " --chunks " + std::to_string(c));
    ASSERT_EQ(one.code, 0) << one.err;
    const ps::test_json::Json p = ps::test_json::parse_json(one.out).at("best");
    if (p.at("makespan").number < fastest) {
      fastest = p.at("makespan").number;
      fastest_chunks = c;
    }
  }
  EXPECT_GT(fastest_chunks, 4);
  EXPECT_EQ(best.at("chunks").number, fastest_chunks);
  EXPECT_EQ(best.at("makespan").number, fastest);
  // An explicit list is searched as it is.
  r = run(args + " --chunks 2,4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LE(ps::test_json::parse_json(r.out).at("best").at("chunks").number, 4);
}

TEST(TimedCliTune, TimeLimitHoldsWithinSeconds) {
  // Without the limit this search takes minutes on two cores (terapipe cuts, Mario passes).
  const double limit = 2;
  const auto start = std::chrono::steady_clock::now();
  CliRun r =
      run("tune --gpus 32 --global-batch 256 --model llama2-13b --device a100-40gb "
          "--bases 1f1b,interleaved-1f1b,zb-h1,slice-pipe --slices 1,4,8 --fine-wgrad "
          "--slicing terapipe --json --time-limit " +
          std::to_string(limit));
  const double took = seconds_since(start);
  ASSERT_NE(r.code, 2) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  EXPECT_TRUE(doc.at("search").at("cut").boolean);
  EXPECT_LT(doc.at("search").at("candidates").number, doc.at("search").at("total").number);
  EXPECT_LT(took, limit + 3) << "the search ran " << took << " s";
}

// ---------------------------------------------------------------------------------------
// The text report

namespace {

std::size_t widest_line(const std::string& text) {
  std::size_t most = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::size_t n = 0;
    for (char c : line)
      n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    most = std::max(most, n);
  }
  return most;
}

}  // namespace

TEST(CliTunePlans, TextReportFitsInAHundredColumnsAndKeepsItsCommand) {
  for (const char* args :
       {"tune --ranks 16 --global-batch 64 --model gpt3-1.3b --device a100-80gb --sequence 1024 "
        "--bases 1f1b,zb-h1,slice-pipe --slices 1,2 --fine-wgrad --checkpoint "
        "none,selective,mario --microbatch-sizes 1,2 --chunks 2",
        "tune --gpus 8 --gpus-per-node 4 --global-batch 8 --model gpt3-1.3b --device a100-40gb "
        "--sequence 512 --bases 1f1b,slice-pipe --slices 2 --fine-wgrad --checkpoint "
        "none,selective,mario --microbatch-sizes 1 --chunks 2 --slicing terapipe",
        "tune --ranks 4 --global-batch 16 --memory-budget 2 --bases 1f1b,zb-h1,chimera,zb-v "
        "--checkpoint none,selective,mario,full-early,selective-early"}) {
    SCOPED_TRACE(args);
    CliRun r = run(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_LE(widest_line(r.out), 100u) << r.out;
    // The best plan's command, rejoined from its shell continuations, runs and gives its step.
    CliRun j = run(std::string(args) + " --json");
    ASSERT_EQ(j.code, 0) << j.err;
    const ps::test_json::Json best = ps::test_json::parse_json(j.out).at("best");
    std::string joined;
    for (std::size_t at = r.out.find("pipesched simulate"); at < r.out.size();) {
      const std::size_t end = r.out.find('\n', at);
      std::string line = r.out.substr(at, end - at);
      const bool more = line.size() >= 2 && line.compare(line.size() - 2, 2, " \\") == 0;
      if (more) line.resize(line.size() - 2);
      joined += (joined.empty() ? "" : " ") + line.substr(line.find_first_not_of(' '));
      if (!more) break;
      at = end + 1;
    }
    EXPECT_EQ(joined, best.at("command").string);
  }
  // A note as long as several lines wraps, and keeps all its words.
  CliRun r =
      run("tune --ranks 16 --global-batch 64 --model gpt3-1.3b --device a100-80gb --sequence 1024 "
          "--bases 1f1b,zb-h1,slice-pipe --slices 1,2 --fine-wgrad --microbatch-sizes 1,2 "
          "--chunks 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nnote: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n      "), std::string::npos) << r.out;
}

TEST(CliTunePlans, CheckpointedPlansSayHowManyRecomputes) {
  // No budget pressure: Mario and selective keep the base (0 recomputes), full recomputes all.
  const std::string args =
      "tune --ranks 2 --global-batch 4 --cost f=1,b=2 --bases 1f1b --checkpoint "
      "none,selective,mario,full";
  CliRun r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("mario (0 recomputes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("selective (0 recomputes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("full (8 recomputes)"), std::string::npos) << r.out;
  // Under a budget, the JSON's count is the R actions of the plan's schedule, and the text
  // says the same count.
  r =
      run("tune --ranks 4 --global-batch 8 --memory-budget 2 --bases 1f1b --checkpoint mario "
          "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json best = ps::test_json::parse_json(r.out).at("best");
  std::istringstream text(best.at("schedule_text").string);
  const int counted = recomputes(ps::read_text(text));
  EXPECT_GT(counted, 0);
  EXPECT_EQ(best.at("recomputes").number, counted);
  r = run("tune --ranks 4 --global-batch 8 --memory-budget 2 --bases 1f1b --checkpoint mario");
  EXPECT_NE(r.out.find("mario (" + std::to_string(counted) + " recomputes)"), std::string::npos)
      << r.out;
}

}  // namespace test_cli_tune_plans
