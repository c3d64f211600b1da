// What a user types or writes into a file that is out of its range or malformed reaches the
// command as a refusal: exit 2 with one sentence saying what was wrong and what is right,
// never inf or nan as a result, a silent partial node, an overflow or a long loop.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_support.hpp"

namespace test_cli_inputs {

namespace {

using namespace cli_test;

// No figure of a result is printed as inf or nan.
void expect_no_inf_nan(const CliRun& r) {
  for (const char* bad : {"inf ", "inf,", "nan", "-nan", "inf%"}) {
    EXPECT_EQ(r.out.find(bad), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find(std::string("makespan ") + bad), std::string::npos) << r.err;
  }
}

TEST(CliInputs, ADeviceFigureOutOfItsPhysicalRangeIsRefusedWithUnitAndRange) {
  // 1e-300 FLOP/s made "makespan inf s, bubble -nan%" and exit 0.
  const std::string tiny = write("tiny.json", R"({"base": "h100", "peak_flops": 1e-300})");
  CliRun r =
      run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b "
          "--device '" +
          tiny + "'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  expect_no_inf_nan(r);
  EXPECT_NE(r.err.find("field \"peak_flops\" is 1e-300; give a figure in FLOP/s from 1e9 to "
                       "1e17"),
            std::string::npos)
      << r.err;
  r = run("tune --ranks 4 --global-batch 8 --model gpt3-1.3b --device '" + tiny + "'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  expect_no_inf_nan(r);
  EXPECT_NE(r.err.find("peak_flops"), std::string::npos) << r.err;
  // TFLOP/s typed as FLOP/s: the message says what it looks like.
  const std::string tera = write("tera.json", R"({"base": "h100", "peak_flops": 989.4})");
  r = run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device '" +
          tera + "'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("989.4 looks like TFLOP/s: in FLOP/s that is 9.894e14"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("makespan"), std::string::npos) << r.out;
}

TEST(CliInputs, HugeModelDimensionsAndNodeSizesAreRefusedAtOnce) {
  // hidden 536,870,912 overflowed 4 × hidden in int: "MFU -38.6% … memory 0 B".
  const std::string wide =
      write("wide.json", R"({"layers": 2, "hidden": 536870912, "heads": 8, "sequence": 1024,
                            "vocabulary": 50257})");
  CliRun r = run("tune --ranks 2 --global-batch 4 --model '" + wide + "' --device h100");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("field \"hidden\" is 536870912; the model width is from 1 to 1048576"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("MFU"), std::string::npos) << r.out;
  // ranks_per_node 2^31 - 1 drove a loop over every node size for a minute.
  const std::string node =
      write("node.json", R"({"base": "h100", "ranks_per_node": 2147483647, "gpus": 8})");
  const auto t0 = std::chrono::steady_clock::now();
  r = run("tune --model gpt3-1.3b --cluster '" + node + "' --global-batch 8");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(r.err.find("field \"ranks_per_node\" is 2147483647; a node holds from 1 to 1024"),
            std::string::npos)
      << r.err;
  r =
      run("tune --gpus 8 --gpus-per-node 2147483647 --model gpt3-1.3b --device h100 "
          "--global-batch 8");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--gpus-per-node needs a whole number from 1 to 1024"), std::string::npos)
      << r.err;
}

TEST(CliInputs, ListsWithEmptyItemsOrBlanksAreRefused) {
  const std::string base = "tune --ranks 2 --global-batch 8 --model gpt3-1.3b --device h100 ";
  CliRun r = run(base + "--microbatch-sizes 1,,2");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--microbatch-sizes 1,,2: item 2 of '1,,2' is empty"), std::string::npos)
      << r.err;
  r = run(base + "--microbatch-sizes 1,2,");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("item 3 of '1,2,' is empty"), std::string::npos) << r.err;
  r = run(base + "--microbatch-sizes ' 1, 2'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--microbatch-sizes: item 1 of ' 1, 2', ' 1', holds a blank"),
            std::string::npos)
      << r.err;
  r = run(base + "--bases 1f1b,,zb-h1");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("item 2 of '1f1b,,zb-h1' is empty; give the items separated by single "
                       "commas: 1f1b,zb-h1"),
            std::string::npos)
      << r.err;
}

TEST(CliInputs, WholeNumbersAreDigitsWithoutASignOrBlanks) {
  for (const char* ranks : {"+4", "' 4'", "'4 '"}) {
    SCOPED_TRACE(ranks);
    const CliRun r = run(std::string("simulate --schedule 1f1b --ranks ") + ranks +
                         " --microbatches 8 --cost f=1,b=2");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("--ranks needs a whole number from 1 to"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --cost f=1,b=2").code, 0);
}

TEST(CliInputs, AClusterThatLeavesAPartialNodeIsRefused) {
  CliRun r =
      run("tune --gpus 16 --gpus-per-node 3 --model gpt3-1.3b --device h100 "
          "--global-batch 16");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("16 GPUs (--gpus 16) do not fill whole nodes of 3 (--gpus-per-node 3): "
                       "the last of 6 nodes would hold 1 GPU; give a multiple of the node size "
                       "(15 or 18 GPUs)"),
            std::string::npos)
      << r.err;
  // Fewer GPUs than a node holds are one node, partly used: searched as before.
  r =
      run("tune --gpus 4 --model gpt3-1.3b --device h100 --global-batch 8 --threads 1 "
          "--bases 1f1b --checkpoint none");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(CliInputs, APipelineSizeThatCannotBeUsedSaysWhy) {
  const CliRun r = run("tune --gpus 8 --pp 3 --model gpt3-1.3b --device h100 --global-batch 8");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--pp 3 does not divide the 8 GPUs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1, 2, 4, 8"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("check --pp and --tp"), std::string::npos) << r.err;
}

TEST(CliInputs, AMemoryBudgetListSaysPerRankBudgetsAreNotTaken) {
  for (const std::string& command :
       {std::string("simulate --schedule 1f1b --ranks 4 --microbatches 8 --cost f=1,b=2 "
                    "--checkpoint full --memory-budget 2,2,2,2"),
        std::string("tune --ranks 4 --global-batch 8 --memory-budget 2,2,2,2")}) {
    SCOPED_TRACE(command);
    const CliRun r = run(command);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("memory budget '2,2,2,2' is a list; a budget is one amount that holds "
                         "for every rank"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("unknown unit"), std::string::npos) << r.err;
  }
}

// A header with more replicas than Chimera's two exited 1 (a schedule missing two million
// actions) plainly and 2 (too large to checkpoint) with --checkpoint full; both are now the
// reader's one refusal.
TEST(CliInputs, AReplicaCountBeyondTwoIsTheSameRefusalOnEveryPath) {
  const std::string file = write("replicas.txt",
                                 "ranks 1 stages 1048575 microbatches 1048575 replicas 1048575\n"
                                 "placement interleaved\nrank 0: 0F0 0B0\n");
  std::string first;
  for (const char* extra :
       {"", " --checkpoint full", " --checkpoint selective --memory-budget 1"}) {
    SCOPED_TRACE(extra);
    const CliRun r = run("simulate '" + file + "' --cost f=1,b=2" + extra);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("line 1, column 54: replicas = 1048575 is out of range; use 1 for one "
                         "pipeline, or 2 for Chimera's two pipelines"),
              std::string::npos)
        << r.err;
    if (first.empty()) first = r.err;
    EXPECT_EQ(r.err, first);
  }
  EXPECT_EQ(run("validate '" + file + "'").code, 2);
}

}  // namespace

}  // namespace test_cli_inputs
