// The pipesched command: help texts, units, the tune command and its cluster plans.
#include "cli_support.hpp"

namespace test_cli_tune {

using namespace cli_test;

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
  // A note wraps within 100 columns, its further lines indented: joined, one note each.
  std::vector<std::string> notes;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("note: ", 0) == 0)
      notes.push_back(line);
    else if (!notes.empty() && line.rfind("      ", 0) == 0)
      notes.back() += " " + line.substr(6);
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
                          "step_time_s", "peak_memory_bytes", "mfu", "mfu_usual", "command"})
    EXPECT_NE(best.find(key), nullptr) << key;
  EXPECT_EQ(best.at("pp").number * best.at("dp").number * best.at("tp").number, 8);
  double layers = 0;
  for (const auto& n : best.at("layers_per_stage").array)
    layers += n.number;
  EXPECT_EQ(layers, 24);
  EXPECT_GT(best.at("mfu").number, 0);
  EXPECT_LT(best.at("mfu").number, 1);
  EXPECT_GT(best.at("mfu_usual").number, best.at("mfu").number);  // attention in full
  EXPECT_LE(best.at("peak_memory_bytes").number, 40.0 * 1024 * 1024 * 1024);
  const auto& search = doc.at("search");
  EXPECT_GT(search.at("candidates").number, 0);
  EXPECT_GE(search.at("seconds").number, 0);
  EXPECT_FALSE(search.at("cut").boolean);
  // The library's search gives the same best step.
  ps::tuning::ClusterRequest req;
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
  const ps::tuning::Result lib =
      ps::tune_cluster(req, model, ps::presets::find_device("a100-40gb"));
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

TEST(CliTune, JsonPlansCarryTheirScheduleAndRunAsTheyAre) {
  CliRun r = run(std::string(small_cluster_tune) + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  // The whole output reads as its best plan, with the grid and schedule the tuner chose.
  const ps::tuning::Plan plan = ps::read_plan(r.out, "tune.json");
  const auto& best = doc.at("best");
  EXPECT_EQ(plan.grid().pipeline, best.at("pp").number);
  EXPECT_EQ(plan.data, best.at("dp").number);
  EXPECT_EQ(plan.tensor, best.at("tp").number);
  EXPECT_EQ(plan.grid().size(), 8);
  EXPECT_EQ(plan.zero, best.at("zero").number);
  EXPECT_EQ(plan.sequence_parallel, best.at("sequence_parallel").boolean);
  EXPECT_EQ(plan.microbatch_size, best.at("microbatch_size").number);
  ASSERT_EQ(plan.layers_per_stage.size(), best.at("layers_per_stage").array.size());
  EXPECT_EQ(ps::to_text(plan.schedule), best.at("schedule_text").string);
  EXPECT_EQ(plan.memory_unit, ps::MemoryUnit::Bytes);
  EXPECT_EQ(plan.makespan, best.at("step_time_s").number);
  // The plan file carries its cost model: the schedule simulates to the step time again.
  EXPECT_DOUBLE_EQ(ps::simulate(plan.schedule, ps::cost_of<ps::TransformerCost>(plan)).makespan,
                   plan.makespan);
  // Every plan's schedule is the one its command builds (`generate` with the same flags).
  int generated = 0;
  for (const auto& b : doc.at("baselines").array) {
    if (b.at("step_time_s").type == ps::test_json::Json::Null) continue;
    std::string command = b.at("command").string;
    SCOPED_TRACE(command);
    const std::string simulate = "pipesched simulate ";
    ASSERT_EQ(command.rfind(simulate, 0), 0u);
    CliRun g = run("generate " + command.substr(simulate.size()) + " --format text");
    ASSERT_EQ(g.code, 0) << g.err;
    EXPECT_EQ(g.out, b.at("schedule_text").string);
    ++generated;
  }
  EXPECT_EQ(generated, 8);
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
           Case{"tune --gpus 8 --global-batch 8",
                "give --model NAME|FILE (or --profile FILE) and --device NAME|FILE or --cluster "
                "FILE"},
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
                "--layers gives 3 stages but schedule '1f1b' has 4"},
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

// pipesched profile, then tune and simulate from the profile (--profile FILE).

namespace {

// The toy GPT's layers measured on a small grid (once per test program).
const std::string& toy_profile() {
  static const std::string path = [] {
    const std::string file = (scratch() / "toy_profile.json").string();
    const CliRun r =
        run("profile --layers 4 --hidden 16 --heads 4 --vocabulary 32 --sequence 16 --tokens "
            "4,8,16 --prefixes 0,8,12 --microbatch-sizes 1,2 --tp 1,2 --repeats 1 -o '" +
            file + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    return file;
  }();
  return path;
}

}  // namespace

TEST(CliProfile, ClusterPlansFromAProfileReproduceTheirStepTimes) {
  const std::string profile = toy_profile();
  const std::string cluster = write(
      "sixteen.json",
      R"({"format": "pipesched-cluster", "base": "a100-80gb", "ranks_per_node": 8, "gpus": 16})");
  CliRun r = run("tune --gpus 16 --profile '" + profile + "' --cluster '" + cluster +
                 "' --global-batch 32 --bases 1f1b,zb-h1 --slices 1,2 --microbatch-sizes 1,2 "
                 "--checkpoint none,selective --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const auto& best = doc.at("best");
  EXPECT_EQ(best.at("pp").number * best.at("dp").number * best.at("tp").number, 16);
  EXPECT_LE(best.at("tp").number, 2);  // the profile measured degrees 1 and 2
  EXPECT_FALSE(best.at("sequence_parallel").boolean);
  // The plan file carries its profile: read back, it simulates to its step time.
  const ps::tuning::Plan plan = ps::read_plan(r.out, "tune.json");
  const auto* cost = std::any_cast<ps::TransformerCost>(&plan.cost);
  ASSERT_NE(cost, nullptr);
  ASSERT_NE(cost->measured, nullptr);
  EXPECT_DOUBLE_EQ(ps::simulate(plan.schedule, *cost).makespan, best.at("step_time_s").number);
  int reproduced = 0;
  for (const auto& b : doc.at("baselines").array) {
    if (b.at("step_time_s").type == ps::test_json::Json::Null) continue;
    const std::string command = b.at("command").string;
    SCOPED_TRACE(command);
    EXPECT_NE(command.find("--profile "), std::string::npos);
    CliRun s = run(command.substr(std::string("pipesched ").size()) + " --json");
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_DOUBLE_EQ(json_field(s.out, "makespan"), b.at("step_time_s").number);
    ++reproduced;
  }
  EXPECT_EQ(reproduced, 4);
  // Asked for a degree the profile has not: one note says so.
  r = run("tune --gpus 16 --profile '" + profile + "' --cluster '" + cluster +
          "' --global-batch 32 --bases 1f1b --tp 1,4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("no samples at tensor degree 4 (it measured 1, 2)"), std::string::npos)
      << r.out;
}

TEST(CliProfile, WhatTheProfileCannotAnswerIsOneSentenceAndExitTwo) {
  const std::string profile = toy_profile();
  const std::string base =
      "simulate --profile '" + profile + "' --device a100-80gb --ranks 2 --microbatches 4";
  EXPECT_EQ(run(base + " --schedule 1f1b").code, 0);
  // 16 tokens in 8 slices: 2-token slices, below the grid's 4.
  CliRun r = run(base + " --schedule seq-1f1b --slices 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("slice length of 2 lies outside the layer profile's grid"),
            std::string::npos)
      << r.err;
  r = run(base + " --schedule 1f1b --sequence 64");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("slice length of 64"), std::string::npos) << r.err;
  r = run(base + " --schedule 1f1b --model gpt3-1.3b");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("measured on another model"), std::string::npos) << r.err;
  r = run(base + " --schedule 1f1b --tp 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("tensor degree 4"), std::string::npos) << r.err;
  r = run(base + " --schedule 1f1b --tp 2 --sp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("without sequence parallelism"), std::string::npos) << r.err;
  const std::string bad = write("bad_profile.json", "{\"format\": \"pipesched-layer-profile\"}");
  r = run("simulate --profile '" + bad +
          "' --device a100-80gb --schedule 1f1b --ranks 2 "
          "--microbatches 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--profile: " + bad + ": line 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("field \"model\" is missing"), std::string::npos) << r.err;
  const std::string huge = (scratch() / "huge_profile.json").string();
  {
    std::ofstream f(huge);
    f << "{\"samples\": [" << std::string(17u << 20, ' ') << "]}";
  }
  r = run("simulate --profile '" + huge +
          "' --device a100-80gb --schedule 1f1b --ranks 2 "
          "--microbatches 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--profile"), std::string::npos) << r.err;
  r = run("profile --tokens 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tokens"), std::string::npos) << r.err;
  r = run("profile --heads 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not divide --hidden 64"), std::string::npos) << r.err;
}

TEST(CliTune, AnOverlappedReductionIsInThePlanAndItsCommand) {
  CliRun r =
      run("tune --gpus 8 --gpus-per-node 4 --pp 2 --tp 1 --global-batch 16 --model gpt3-1.3b "
          "--device a100-40gb --sequence 512 --bases interleaved-1f1b --chunks 2 "
          "--microbatch-sizes 1 --checkpoint none --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const auto& best = doc.at("best");
  const std::string command = best.at("command").string;
  EXPECT_NE(command.find(" --overlap-reduction"), std::string::npos) << command;
  EXPECT_NE(best.at("schedule_text").string.find("REDUCE_GRAD"), std::string::npos);
  CliRun s = run(command.substr(std::string("pipesched ").size()) + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_DOUBLE_EQ(json_field(s.out, "makespan"), best.at("step_time_s").number);
  // Without the flag the same schedule ends with the serial all-reduce: a longer step.
  std::string serial = command.substr(std::string("pipesched ").size());
  serial.erase(serial.find(" --overlap-reduction"), std::string(" --overlap-reduction").size());
  CliRun t = run(serial + " --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_GT(json_field(t.out, "makespan"), best.at("step_time_s").number);
}

}  // namespace test_cli_tune
