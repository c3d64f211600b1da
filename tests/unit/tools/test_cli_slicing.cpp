// The pipesched command: slices, slice lengths and fine weight gradients; size limits,
// numbers, JSON, lists and the words of its messages.
#include "cli_support.hpp"

namespace test_cli_slicing {

using namespace cli_test;

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
    EXPECT_GT(sim.makespan, 0.0);
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
  EXPECT_NE(r.err.find("unknown option '--all'; validate accepts --format"), std::string::npos)
      << r.err;
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
           Case{"tune --ranks 4 --global-batch 8 --bases ,", "tune",
                "--bases ,: item 1 of ',' is empty; give at least one item"},
           Case{"tune --ranks 4 --global-batch 8 --bases 2f2b", "tune",
                "--bases: unknown schedule '2f2b'"},
           Case{"tune --ranks 4 --global-batch 8 --microbatch-sizes 3" + model, "tune",
                "none of --microbatch-sizes 3 divides --global-batch 8"},
           Case{"tune --ranks 4 --global-batch 8 --checkpoint ,", "tune",
                "--checkpoint ,: item 1 of ',' is empty; give at least one item"},
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

}  // namespace test_cli_slicing
