// The pipesched command: subcommands, JSON output equal to the library call, exit codes,
// checkpointing and memory budgets.
#include "cli_support.hpp"

namespace test_cli {

using namespace cli_test;

TEST(Cli, HelpAndList) {
  CliRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("simulate"), std::string::npos);
  r = run("list");
  EXPECT_EQ(r.code, 0);
  for (const auto& g : ps::builtin_generators())
    EXPECT_NE(r.out.find(std::string(g.name)), std::string::npos) << g.name;
  for (const char* mode : {"full", "selective", "mario", "full-early", "selective-early"})
    EXPECT_NE(r.out.find(mode), std::string::npos) << mode;
  for (const char* policy : {"uniform", "balanced", "terapipe", "split|fine", "--slices"})
    EXPECT_NE(r.out.find(policy), std::string::npos) << policy;
  for (const char* sub : {"generate", "validate", "simulate", "render", "convert"}) {
    r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("usage: pipesched " + std::string(sub)), std::string::npos) << r.out;
    if (std::string(sub) == "generate" || std::string(sub) == "simulate" ||
        std::string(sub) == "render") {
      EXPECT_NE(r.out.find("--checkpoint MODE"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("--memory-budget X"), std::string::npos) << r.out;
      for (const char* option :
           {"--slices K", "--slicing MODE", "--warmup N", "--wgrad-parts N", "fused|split|fine"})
        EXPECT_NE(r.out.find(option), std::string::npos) << option << " in " << r.out;
    }
  }
}

// `list` shows where Mario applies from the orders' own facts, in each schedule's row and in
// the --checkpoint mario entry, and `--checkpoint mario` follows the same facts.
TEST(Cli, ListShowsWhereMarioAppliesAsTheOrdersSay) {
  const CliRun r = run("list");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string mario_orders;
  for (const auto& g : ps::builtin_generators()) {
    SCOPED_TRACE(g.name);
    const std::size_t at = r.out.find("  " + std::string(g.name) + " ");
    ASSERT_NE(at, std::string::npos);
    const std::string row = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_EQ(row.find("; mario]") != std::string::npos, g.mario) << row;
    if (g.mario) mario_orders += (mario_orders.empty() ? "" : ", ") + std::string(g.name);
    const CliRun m = run("simulate --schedule " + std::string(g.name) +
                         " --ranks 2 --microbatches 4 --checkpoint mario --memory-budget 1");
    EXPECT_EQ(m.code == 2 && m.err.find("runs on") != std::string::npos, !g.mario) << m.err;
  }
  EXPECT_NE(r.out.find("within --memory-budget (" + mario_orders + ")"), std::string::npos)
      << r.out;
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
                "--cost f needs a finite decimal number"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost q=1",
                "unknown key 'q'"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 2 --model nope --device h100",
                "nope"},
           Case{"validate /nonexistent/file.csv", "/nonexistent/file.csv"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint some",
                "checkpoint mode 'some' is unknown; choose none"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective",
                "give --memory-budget"},
           Case{"render --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint mario",
                "give --memory-budget"},
           Case{"generate --schedule gpipe --ranks 4 --microbatches 8 --checkpoint mario "
                "--memory-budget 2",
                "runs on 1f1b, interleaved-1f1b, zb-h1 and chimera only, not on 'gpipe'"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full "
                "--memory-budget 2XB",
                "memory budget '2XB' has an unknown unit 'XB'"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget -1",
                "is negative"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 0", "is zero"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 24GB",
                "is in bytes, but UniformCost"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 2 --model gpt3-1.3b --device a100-80gb",
                "is a plain number, i.e. in memory units, but --model/--device measure memory "
                "in bytes"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget device",
                "only TransformerCost knows"},
           Case{"simulate --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full "
                "--memory-budget device --model llama2-34b --device rtx-4090",
                "leaving nothing for activations"},
           // Budgets the schedule cannot meet: the library's message, exit code 2.
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 2",
                "without checkpointing rank 0 of '1f1b' holds 4, over the budget 2; use "
                "--checkpoint selective or --checkpoint mario"},
           Case{"generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full "
                "--memory-budget 0.5",
                "still holds 1.15, over the budget 0.5"},
           Case{"simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
                "--memory-budget 0.5",
                "memory budget 0.5 is too small for rank 0"},
           Case{"render --schedule zb-h1 --ranks 4 --microbatches 8 --checkpoint mario "
                "--memory-budget 0.5",
                "Mario: no schedule of 'zb-h1' fits the memory budget"},
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

// convert --format pytorch validates first: a schedule PyTorch's runtime would run wrong or hang
// on is refused and nothing is written; an empty --format is refused, naming the three forms.
TEST(Cli, ConvertForPyTorchValidatesFirst) {
  const auto dir = scratch();
  const auto bad = dir / "deadlock.csv", out = dir / "deadlock_out.csv";
  std::ofstream(bad, std::ios::binary) << "0F0,0B0\n1B0,1F0\n";  // stage 1's B before its F
  std::filesystem::remove(out);
  CliRun r = run("convert '" + bad.string() + "' '" + out.string() + "' --format pytorch");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("deadlock"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // The other forms still convert it: they are for editing, not for PyTorch.
  r = run("convert '" + bad.string() + "' '" + out.string() + "' --format csv");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(out), slurp(bad));
  r = run("convert '" + bad.string() + "' - --format ''");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--format takes csv, pytorch or text, got ''"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// validate --format pytorch refuses what PyTorch's runtime cannot run as it stands (here the
// last stage's forwards out of microbatch order, and BW), naming rank, position and rule;
// convert --format pytorch writes BW as B, and refuses the out-of-order file.
TEST(Cli, ValidateAndConvertForPyTorch) {
  const auto dir = scratch();
  const auto order = dir / "order.csv", bw = dir / "bw.csv", out = dir / "pytorch_out.csv";
  std::ofstream(order, std::ios::binary) << "0F0,0F1,0B0,0B1\n1F1,1B1,1F0,1B0\n";
  std::ofstream(bw, std::ios::binary) << "0F0,0F1,0BW0,0B1\n1F0,1BW0,1F1,1B1\n";
  CliRun r = run("validate '" + order.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  r = run("validate '" + order.string() + "' --format pytorch");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("1F1 (rank 1 position 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("microbatch order"), std::string::npos) << r.err;
  std::filesystem::remove(out);
  r = run("convert '" + order.string() + "' '" + out.string() + "' --format pytorch");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run("validate '" + bw.string() + "' --format pytorch");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("0BW0 (rank 0 position 2)"), std::string::npos) << r.err;
  r = run("convert '" + bw.string() + "' '" + out.string() + "' --format pytorch");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(out), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  r = run("validate '" + out.string() + "' --format pytorch");
  EXPECT_EQ(r.code, 0) << r.err;
  r = run("convert '" + bw.string() + "' '" + out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(out), slurp(bw));  // other forms keep the spelling
  r = run("validate '" + bw.string() + "' --format csv");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--format takes pytorch"), std::string::npos) << r.err;
}

// generate --comm --max-outstanding-sends N: at most N sends of a rank open, counted here.
TEST(Cli, GenerateKeepsTheSendBudget) {
  for (int budget : {1, 2}) {
    CliRun r =
        run("generate --schedule zb-v --ranks 4 --microbatches 8 --comm "
            "--max-outstanding-sends " +
            std::to_string(budget));
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream in(r.out);
    const ps::Schedule s = ps::read_csv(in, "budget");
    EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
    int most = 0;
    for (const auto& list : s.ranks) {
      int open = 0;
      for (const ps::Action& a : list) {
        if (a.kind == ps::OpKind::SendF || a.kind == ps::OpKind::SendB)
          most = std::max(most, ++open);
        if (ps::is_wait_send(a.kind)) --open;
      }
    }
    EXPECT_EQ(most, budget);
  }
  CliRun r = run("generate --schedule 1f1b --ranks 2 --microbatches 4 --max-outstanding-sends 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("give --comm too"), std::string::npos) << r.err;
  r = run("generate --schedule 1f1b --ranks 2 --microbatches 4 --comm --max-outstanding-sends 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--max-outstanding-sends needs a whole number from 1"), std::string::npos)
      << r.err;
}

// ---------------------------------------------------------------------------------------
// Checkpointing and memory budgets

TEST(CliCheckpoint, GenerateFullWritesRecomputesThatValidate) {
  const auto file = scratch() / "full.csv";
  CliRun r = run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full -o '" +
                 file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = slurp(file);
  EXPECT_NE(csv.find("2RL0"), std::string::npos) << csv;  // after its gradient, as Megatron-LM
  const ps::Schedule lib =
      ps::checkpoint_full(ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}));
  EXPECT_EQ(csv, ps::to_csv(lib));
  r = run("validate '" + file.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  // The file simulates as the library's checkpointed schedule.
  r = run("simulate --json '" + file.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "recomputes"), 32);
  EXPECT_DOUBLE_EQ(json_field(r.out, "peak_memory_max"), ps::simulate(lib).peak_memory_max);
  // --comm lowers the checkpointed schedule: recomputes stay, sends and receives appear.
  r =
      run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full --comm "
          "--format text");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2RL0"), std::string::npos);
  EXPECT_NE(r.out.find("SEND_F"), std::string::npos);
  // full-early writes plain recomputes.
  r = run("generate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint full-early");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ps::to_csv(ps::checkpoint_full(
                       ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}),
                       ps::RecomputeTiming::Early)));
  EXPECT_NE(r.out.find("2R0"), std::string::npos);
  EXPECT_EQ(r.out.find("RL"), std::string::npos);
}

TEST(CliCheckpoint, SimulateJsonEqualsTheLibraryForEveryMode) {
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::UniformCost cost;
  struct Case {
    const char* args;
    ps::CheckpointMode mode;
    double budget;  // infinity: none given
  };
  const double none = std::numeric_limits<double>::infinity();
  for (const Case& c : {
           Case{"", ps::CheckpointMode::None, none},
           Case{"--memory-budget 4", ps::CheckpointMode::None, 4},
           Case{"--checkpoint full", ps::CheckpointMode::Full, none},
           Case{"--checkpoint full --memory-budget 1.5", ps::CheckpointMode::Full, 1.5},
           Case{"--checkpoint selective --memory-budget 2", ps::CheckpointMode::Selective, 2},
           Case{"--checkpoint selective --memory-budget=3", ps::CheckpointMode::Selective, 3},
           Case{"--checkpoint mario --memory-budget 2", ps::CheckpointMode::Mario, 2},
           Case{"--checkpoint MARIO --memory-budget 1.5", ps::CheckpointMode::Mario, 1.5},
           Case{"--checkpoint full-early", ps::CheckpointMode::FullEarly, none},
           Case{"--checkpoint selective-early --memory-budget 2",
                ps::CheckpointMode::SelectiveEarly, 2},
       }) {
    SCOPED_TRACE(c.args);
    CliRun r =
        run(std::string("simulate --json --schedule 1f1b --ranks 4 --microbatches 8 ") + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib = ps::apply_checkpoint(base, c.mode, cost, budget_of(c.budget));
    const ps::SimulationResult sim = ps::simulate(lib, cost);
    expect_json_matches(r.out, lib, sim);
    EXPECT_NE(r.out.find(std::string("\"checkpoint\":\"") + ps::to_string(c.mode) + "\""),
              std::string::npos)
        << r.out;
    if (std::isfinite(c.budget)) {
      EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), c.budget);
      EXPECT_LE(sim.peak_memory_max, c.budget + 1e-9);
    } else {
      EXPECT_NE(r.out.find("\"memory_budget\":null"), std::string::npos) << r.out;
    }
    if (ps::is_selective(c.mode) || c.mode == ps::CheckpointMode::Mario) {
      EXPECT_GT(recomputes(lib), 0);
    }
  }
}

TEST(CliCheckpoint, SelectiveAtBudgetTwoStaysWithinIt) {
  CliRun r =
      run("simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint "
          "selective --memory-budget 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const double peak = json_field(r.out, "peak_memory_max");
  EXPECT_LE(peak, 2.0 + 1e-9);
  const ps::Schedule lib = ps::checkpoint_selective(
      ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8}), ps::UniformCost{}, budget_of(2));
  EXPECT_DOUBLE_EQ(peak, ps::simulate(lib).peak_memory_max);
  // The text form says what was done.
  r =
      run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --checkpoint selective "
          "--memory-budget 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint selective, memory budget 2 microbatches per rank, " +
                       std::to_string(recomputes(lib)) + " recomputes"),
            std::string::npos)
      << r.out;
}

TEST(CliCheckpoint, MarioOnEachOfItsBasesEqualsTheLibrary) {
  struct Case {
    const char* args;
    ps::Schedule base;
  };
  const Case cases[] = {
      {"--schedule 1f1b --ranks 4 --microbatches 8",
       ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8})},
      {"--schedule interleaved-1f1b --ranks 4 --microbatches 8",
       ps::schedule::interleaved_1f1b({.ranks = 4, .stages = 8, .microbatches = 8})},
      {"--schedule zb-h1 --ranks 4 --microbatches 8",
       ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 8})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CliRun r = run(std::string("simulate --json --checkpoint mario --memory-budget 2 ") + c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib = ps::checkpoint_mario(c.base, ps::UniformCost{}, budget_of(2));
    const ps::SimulationResult sim = ps::simulate(lib);
    expect_json_matches(r.out, lib, sim);
    EXPECT_LE(sim.peak_memory_max, 2.0 + 1e-9);
  }
  // generate writes the Mario schedule, and it validates.
  const auto file = scratch() / "mario.csv";
  CliRun g =
      run("generate --schedule zb-h1 --ranks 4 --microbatches 8 --checkpoint mario "
          "--memory-budget 2 -o '" +
          file.string() + "'");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(slurp(file),
            ps::to_csv(ps::checkpoint_mario(cases[2].base, ps::UniformCost{}, budget_of(2))));
  EXPECT_EQ(run("validate '" + file.string() + "'").code, 0);
}

TEST(CliCheckpoint, TransformerCostBudgetsAreBytesOrTheDevicesMemory) {
  const std::string common =
      "simulate --json --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device "
      "a100-40gb --checkpoint selective ";
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::TransformerCost cost{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("a100-40gb"), {}};
  // 'device': per-rank budgets of device memory less weights, gradients, optimizer state.
  CliRun r = run(common + "--memory-budget device");
  ASSERT_EQ(r.code, 0) << r.err;
  const ps::MemoryBudget device = ps::device_memory_budget(cost, base.problem, base.placement);
  std::size_t at = r.out.find("\"ranks\":[");
  double least = device.of(0);
  for (int rank = 0; rank < 4; ++rank) {
    at = r.out.find("{\"rank\":" + std::to_string(rank), at);
    ASSERT_NE(at, std::string::npos);
    EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget", at), device.of(rank));
    least = std::min(least, device.of(rank));
  }
  EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), least);
  EXPECT_NE(r.out.find("\"memory_unit\":\"bytes\""), std::string::npos);
  // A byte budget below the plain schedule's peak: recomputes, within the budget, as the
  // library does; every decimal and binary spelling of the same amount agrees.
  for (const char* text : {"2.5GB", "2.5 gb", "2500MB", "2500000000B"}) {
    SCOPED_TRACE(text);
    r = run(common + "--memory-budget '" + text + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    const ps::Schedule lib =
        ps::apply_checkpoint(base, ps::CheckpointMode::Selective, cost, budget_of(2.5e9));
    const ps::SimulationResult sim = ps::simulate(lib, cost);
    expect_json_matches(r.out, lib, sim);
    EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), 2.5e9);
    EXPECT_LE(sim.peak_memory_max, 2.5e9);
    EXPECT_GT(recomputes(lib), 0);
  }
  r = run(common + "--memory-budget 2GiB");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json_field(r.out, "memory_budget"), 2.0 * 1024 * 1024 * 1024);
}

// Under --model a budget the schedule cannot meet is refused with the budget as given and what
// the rank holds in GiB, rounded up: an amount --memory-budget takes and the schedule meets.
TEST(CliCheckpoint, TransformerCostRefusalsSpeakGiBThatTheBudgetOptionTakes) {
  const std::string common =
      "simulate --schedule 1f1b --ranks 4 --microbatches 8 --model gpt3-1.3b --device "
      "a100-40gb ";
  CliRun r = run(common + "--memory-budget 1GB");
  ASSERT_EQ(r.code, 2) << r.err;
  // The budget as the user gave it; what the rank holds in GiB, rounded up.
  EXPECT_NE(r.err.find("over the budget 1GB;"), std::string::npos) << r.err;
  const std::string lead = "give a budget of at least ";
  const std::size_t at = r.err.find(lead);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::size_t end = r.err.find("GiB", at);
  ASSERT_NE(end, std::string::npos) << r.err;
  const std::string amount = r.err.substr(at + lead.size(), end + 3 - at - lead.size());
  EXPECT_EQ(r.err.find("e+"), std::string::npos) << r.err;  // no raw byte counts left
  r = run(common + "--memory-budget " + amount);
  EXPECT_EQ(r.code, 0) << amount << ": " << r.err;
  // Counts in messages about other things stay numbers, and UniformCost's units stay plain.
  r = run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --memory-budget 2");
  EXPECT_NE(r.err.find("holds 4, over the budget 2"), std::string::npos) << r.err;
}

TEST(CliCheckpoint, RenderDrawsTheCheckpointedSchedule) {
  const auto dir = scratch();
  CliRun r = run("render --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full --svg '" +
                 (dir / "ck.svg").string() + "' --trace '" + (dir / "ck.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string trace = slurp(dir / "ck.json");
  EXPECT_NE(trace.find("traceEvents"), std::string::npos);
  EXPECT_NE(trace.find("RL0"), std::string::npos) << trace.substr(0, 400);  // late recomputes
  CliRun plain = run("render --schedule 1f1b --ranks 2 --microbatches 4 --text");
  CliRun full = run("render --schedule 1f1b --ranks 2 --microbatches 4 --checkpoint full --text");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_NE(plain.out, full.out);
}

TEST(Cli, TuneFindsAPlanWithinTheBudget) {
  CliRun r = run("tune --ranks 4 --global-batch 16 --memory-budget 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  ps::tuning::Request req;
  req.ranks = 4;
  req.global_batch = 16;
  req.microbatch_sizes = {1};
  req.budget = ps::MemoryBudget{.all = 2.0};
  const ps::tuning::Result lib = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(lib.best.has_value());
  EXPECT_DOUBLE_EQ(json_field(r.out, "makespan"), lib.best->makespan);
  EXPECT_NE(r.out.find("\"best_without_checkpoint\":null"), std::string::npos) << r.out;
  // A human-readable table by default; nothing fits at all: exit 1.
  r = run("tune --ranks 4 --global-batch 16 --memory-budget 2");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("best Mario:"), std::string::npos) << r.out;
  r = run("tune --ranks 8 --global-batch 16 --memory-budget 0.5");
  EXPECT_EQ(r.code, 1) << r.err;
  r = run("tune --ranks 4 --global-batch 16 --memory-budget 24GB");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("plain number"), std::string::npos) << r.err;
}

}  // namespace test_cli
