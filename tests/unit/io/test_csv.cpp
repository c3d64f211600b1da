// PyTorch's schedule CSV: the files PyTorch wrote load with the right inferred problem and
// placement and write back byte-identical; errors name the line and the column.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"

namespace pipesched::test_csv {
namespace {

std::string data_path(const std::string& file) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + file;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Schedule from_csv(const std::string& text, const std::string& name = "csv") {
  std::istringstream in(text);
  return read_csv(in, name);
}

struct PyTorchFile {
  std::string file;
  int ranks, stages, microbatches;
  PlacementKind kind;
  int chunks;
  bool comm;

  friend void PrintTo(const PyTorchFile& f, std::ostream* os) { *os << f.file; }
};

class PyTorchCsv : public ::testing::TestWithParam<PyTorchFile> {};

TEST_P(PyTorchCsv, LoadsWithInferredProblemAndPlacement) {
  const PyTorchFile& f = GetParam();
  Schedule s = read_csv_file(data_path(f.file));
  EXPECT_EQ(s.name, f.file);
  EXPECT_EQ(s.problem.ranks, f.ranks);
  EXPECT_EQ(s.problem.stages, f.stages);
  EXPECT_EQ(s.problem.microbatches, f.microbatches);
  EXPECT_EQ(s.problem.slices, 1);
  EXPECT_EQ(s.rank_count(), f.ranks);
  EXPECT_EQ(s.placement.kind(), f.kind) << s.placement.describe();
  EXPECT_EQ(s.placement.chunks(), f.chunks);
  EXPECT_EQ(s.placement.stages(), f.stages);
  EXPECT_EQ(s.has_comm(), f.comm);
  EXPECT_TRUE(s.has_split_backward());
  EXPECT_NO_THROW(validate(s));
}

TEST_P(PyTorchCsv, WritesBackByteIdentical) {
  const PyTorchFile& f = GetParam();
  const std::string bytes = file_bytes(data_path(f.file));
  ASSERT_FALSE(bytes.empty());
  Schedule s = read_csv_file(data_path(f.file));
  EXPECT_EQ(to_csv(s), bytes);
  std::ostringstream out;
  write_csv(out, s);
  EXPECT_EQ(out.str(), bytes);
  // The stream reader gives the same schedule as the file reader.
  EXPECT_EQ(from_csv(bytes), s);
}

TEST_P(PyTorchCsv, CrlfLineEndingsReadTheSame) {
  const PyTorchFile& f = GetParam();
  std::string bytes = file_bytes(data_path(f.file)), crlf;
  for (char c : bytes)
    crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  Schedule a = from_csv(bytes), b = from_csv(crlf);
  EXPECT_EQ(a, b);
  // Each is written back with the line ends it was read with.
  EXPECT_FALSE(a.crlf);
  EXPECT_TRUE(b.crlf);
  EXPECT_EQ(to_csv(a), bytes);
  EXPECT_EQ(to_csv(b), crlf);
}

// Every PyTorch file in the test data, and the same file with each full backward spelled BW
// (PyTorch's other spelling), reads and writes back byte-identical, as CSV and through the text
// form.
TEST(PyTorchCsv, EveryDataFileAndItsBwSpellingRoundTrip) {
  int files = 0, bw_cells = 0;
  for (const char* dir : {"/pytorch", "/pytorch215"})
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(PIPESCHED_TEST_DATA_DIR) + dir)) {
      if (e.path().extension() != ".csv") continue;
      SCOPED_TRACE(e.path().string());
      const std::string bytes = file_bytes(e.path().string());
      static const std::regex full_backward("(\\d+)B(\\d)");
      const std::string bw = std::regex_replace(bytes, full_backward, "$1BW$2");
      for (const std::string& content : {bytes, bw}) {
        const Schedule s = from_csv(content);
        EXPECT_EQ(to_csv(s), content);
        std::istringstream text(to_text(s));
        EXPECT_EQ(to_csv(read_text(text)), content);
      }
      EXPECT_EQ(from_csv(bw), from_csv(bytes));  // the spelling is all that differs
      bw_cells += static_cast<int>(bw.size() - bytes.size());
      ++files;
    }
  EXPECT_EQ(files, 17);  // 2 PyTorch files, 3 of PyTorch 2.15 and its 12 reference dumps
  EXPECT_GT(bw_cells, 20);
}

// PyTorch 2.15's dumps of Interleaved 1F1B (2 ranks, 4 stages, 4 microbatches), written with
// CRLF line ends: the compute-only one and the one after PyTorch's lowering passes.
std::string data215(const std::string& file) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch215/" + file;
}

std::size_t count_kind(const Schedule& s, OpKind k) {
  std::size_t n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind == k;
  return n;
}

TEST(PyTorch215Csv, ComputeOnlyDumpRoundTripsByteForByte) {
  const std::string path = data215("interleaved1f1b_2rank_4mb_compute.csv");
  const std::string bytes = file_bytes(path);
  ASSERT_NE(bytes.find("\r\n"), std::string::npos) << "the test vector should have CRLF line ends";
  Schedule s = read_csv_file(path);
  EXPECT_TRUE(s.crlf);
  EXPECT_EQ(s.problem, (Problem{.ranks = 2, .stages = 4, .microbatches = 4, .slices = 1}));
  EXPECT_EQ(s.placement.kind(), PlacementKind::Interleaved);
  EXPECT_EQ(to_csv(s), bytes);
  ValidationReport rep = check(s);
  EXPECT_TRUE(rep.ok()) << rep.summary();
  SimulationResult sim = simulate(s);
  EXPECT_FALSE(sim.deadlock);
  EXPECT_GT(sim.makespan, 0);
}

TEST(PyTorch215Csv, CommsDumpReadsValidatesSimulatesAndRoundTrips) {
  const std::string path = data215("interleaved1f1b_2rank_4mb_comms.csv");
  const std::string bytes = file_bytes(path);
  Schedule s = read_csv_file(path);
  EXPECT_TRUE(s.crlf);
  EXPECT_EQ(s.problem, (Problem{.ranks = 2, .stages = 4, .microbatches = 4, .slices = 1}));
  EXPECT_EQ(to_csv(s), bytes);
  // Every stage is unsharded, resharded and reduced once; every send has its wait.
  EXPECT_EQ(count_kind(s, OpKind::Unshard), 4u);
  EXPECT_EQ(count_kind(s, OpKind::Reshard), 4u);
  EXPECT_EQ(count_kind(s, OpKind::ReduceGrad), 4u);
  EXPECT_EQ(count_kind(s, OpKind::WaitReduceGrad), 4u);
  EXPECT_EQ(count_kind(s, OpKind::WaitSendF), count_kind(s, OpKind::SendF));
  EXPECT_EQ(count_kind(s, OpKind::WaitSendB), count_kind(s, OpKind::SendB));
  EXPECT_EQ(count_kind(s, OpKind::SendF), 12u);
  ValidationReport rep = check(s);
  EXPECT_TRUE(rep.ok()) << rep.summary();
  // Receives are posted ahead and waited for by their consumer: the lowered schedule takes
  // exactly as long as the compute-only one.
  SimulationResult sim = simulate(s);
  ASSERT_FALSE(sim.deadlock) << sim.deadlock_report;
  Schedule compute = read_csv_file(data215("interleaved1f1b_2rank_4mb_compute.csv"));
  EXPECT_DOUBLE_EQ(sim.makespan, simulate(compute).makespan);
  // The same order of compute actions as the compute-only dump.
  for (int r = 0; r < 2; ++r) {
    std::vector<Action> a, b;
    for (const Action& x : s.ranks[r])
      if (is_compute(x.kind)) a.push_back(x);
    for (const Action& x : compute.ranks[r])
      if (is_compute(x.kind)) b.push_back(x);
    EXPECT_EQ(a, b) << "rank " << r;
  }
}

TEST(PyTorch215Csv, GradientReductionsArePaired) {
  Schedule s = read_csv_file(data215("interleaved1f1b_2rank_4mb_comms.csv"));
  // Drop rank 0's first WAIT_REDUCE_GRAD (stage 2's): the next reduction then starts while
  // stage 2's is open.
  auto& list = s.ranks[0];
  for (auto it = list.begin(); it != list.end(); ++it)
    if (it->kind == OpKind::WaitReduceGrad) {
      list.erase(it);
      break;
    }
  ValidationReport rep = check(s);
  ASSERT_TRUE(rep.has("reduce-grad")) << rep.summary();
  EXPECT_NE(rep.summary().find("0REDUCE_GRAD at rank 0"), std::string::npos) << rep.summary();
  EXPECT_NE(rep.summary().find("put 2WAIT_REDUCE_GRAD before it"), std::string::npos);
  EXPECT_NE(rep.summary().find("one gradient reduction at a time"), std::string::npos);
}

TEST(PyTorch215Csv, MixedLineEndsFollowTheFirstLine) {
  EXPECT_TRUE(from_csv("0F0,0B0\r\n1F0,1B0\n").crlf);
  EXPECT_FALSE(from_csv("0F0,0B0\n1F0,1B0\r\n").crlf);
  EXPECT_EQ(to_csv(from_csv("0F0,0B0\r\n1F0,1B0")), "0F0,0B0\r\n1F0,1B0\r\n");
  EXPECT_FALSE(from_csv("0F0,0B0").crlf);
}

INSTANTIATE_TEST_SUITE_P(Files, PyTorchCsv,
                         ::testing::Values(PyTorchFile{"zb1p_2rank_2stagep_compute.csv", 2, 4, 8,
                                                       PlacementKind::Interleaved, 2, false},
                                           PyTorchFile{"zb1p_2rank_2stagep_comms.csv", 2, 4, 8,
                                                       PlacementKind::Interleaved, 2, true},
                                           PyTorchFile{"dualpipev_4rank_10mb.csv", 4, 8, 10,
                                                       PlacementKind::VShape, 2, false}));

TEST(Csv, ComputeFileKeepsIdleSlotsWhereTheBlankCellsAre) {
  Schedule s = read_csv_file(data_path("zb1p_2rank_2stagep_compute.csv"));
  EXPECT_EQ(s.ranks[0][3].kind, OpKind::Idle);
  EXPECT_EQ(s.ranks[1][0].kind, OpKind::Idle);
  EXPECT_EQ(s.ranks[0][2], Action::make(OpKind::F, 2, 0));
  EXPECT_EQ(s.ranks[1][1], Action::make(OpKind::F, 1, 0));
  // 4 stages × 8 microbatches × (F, I, W) actions, plus the two blank cells.
  EXPECT_EQ(s.action_count(), 4u * 8u * 3u);
  EXPECT_EQ(s.ranks[0].size() + s.ranks[1].size(), 4u * 8u * 3u + 2u);
}

TEST(Csv, DualPipeFileReadsOverlapsWithBothHalves) {
  Schedule s = read_csv_file(data_path("dualpipev_4rank_10mb.csv"));
  const Action& a = s.ranks[0][17];
  ASSERT_EQ(a.kind, OpKind::Overlap);
  EXPECT_EQ(a.forward_half(), Action::make(OpKind::F, 0, 7));
  EXPECT_EQ(a.backward_half(), Action::make(OpKind::B, 7, 3));
  EXPECT_EQ(s.placement.rank_of(0), 0);
  EXPECT_EQ(s.placement.rank_of(7), 0);
  EXPECT_EQ(s.placement.rank_of(3), 3);
  EXPECT_EQ(s.placement.rank_of(4), 3);
}

TEST(Csv, TrailingEmptyCellsAreIdleSlotsAndRoundTrip) {
  const std::string text = "0F0,,\n,1F0,\n";
  Schedule s = from_csv(text);
  ASSERT_EQ(s.rank_count(), 2);
  ASSERT_EQ(s.ranks[0].size(), 3u);
  ASSERT_EQ(s.ranks[1].size(), 3u);
  EXPECT_EQ(s.ranks[0][1].kind, OpKind::Idle);
  EXPECT_EQ(s.ranks[0][2].kind, OpKind::Idle);
  EXPECT_EQ(s.ranks[1][2].kind, OpKind::Idle);
  EXPECT_EQ(to_csv(s), text);
}

TEST(Csv, RowsOfNoActionsAndOfOneIdleSlotStayDistinct) {
  // As Python's csv module: an empty line is a rank with no actions, `""` one empty cell.
  Schedule s = from_csv("0F0,0B0\n\n\"\"\n3F0\n");
  ASSERT_EQ(s.rank_count(), 4);
  EXPECT_TRUE(s.ranks[1].empty());
  ASSERT_EQ(s.ranks[2].size(), 1u);
  EXPECT_EQ(s.ranks[2][0].kind, OpKind::Idle);
  EXPECT_EQ(to_csv(s), "0F0,0B0\n\n\"\"\n3F0\n");
  // Quoted cells as spreadsheet tools write them read as their content.
  EXPECT_EQ(from_csv("\"0F0\",\"(0F1;1B0)OVERLAP_F_B\"\n1F0\n").ranks[0][1].kind, OpKind::Overlap);
}

TEST(Csv, InfersSizesFromTheLargestIndicesIncludingOverlapHalves) {
  Schedule s = from_csv("0F0.2,(0F1;3B6)OVERLAP_F_B\n1W0:4\n");
  EXPECT_EQ(s.problem.ranks, 2);
  EXPECT_EQ(s.problem.stages, 4);  // stage 3 only in the backward half
  EXPECT_EQ(s.problem.microbatches, 7);
  EXPECT_EQ(s.problem.slices, 3);
  // Stage 3 first appears on row 0; stage 2 never appears and goes to rank 2 mod 2 = 0.
  EXPECT_EQ(s.placement.rank_of_stage(), (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(s.placement.kind(), PlacementKind::Custom);
  EXPECT_EQ(s.ranks[1][0], Action::make(OpKind::W, 1, 0, 0, 4));
}

TEST(Csv, StageOnTwoRowsIsReadAndLeftToValidation) {
  Schedule s = from_csv("0F0,1F0,1B0,0B0\n1F0,1B0\n");
  EXPECT_EQ(s.placement.rank_of(1), 0);  // the first row it appears on
  EXPECT_EQ(s.ranks[1][0], Action::make(OpKind::F, 1, 0));
  EXPECT_FALSE(check(s).ok());
}

TEST(Csv, LinearPlacementIsRecognised) {
  Schedule s = from_csv("0F0,0B0\n1F0,1B0\n2F0,2B0\n");
  EXPECT_EQ(s.placement.kind(), PlacementKind::Linear);
  EXPECT_EQ(s.problem, (Problem{.ranks = 3, .stages = 3, .microbatches = 1, .slices = 1}));
}

TEST(Csv, ExtendedActionsRoundTrip) {
  Schedule s;
  s.problem = Problem{.ranks = 2, .stages = 4, .microbatches = 2, .slices = 2};
  s.placement = Placement::interleaved(2, 2);
  s.ranks = {{Action::make(OpKind::F, 0, 0, 0), Action::make(OpKind::F, 0, 0, 1), Action::idle(),
              Action::make(OpKind::R, 2, 1, 1), Action::make(OpKind::W, 2, 1, 1, 2)},
             {Action::make(OpKind::SendB, 1, 1, 1),
              Action::overlap(Action::make(OpKind::F, 3, 1, 1), Action::make(OpKind::B, 1, 0, 1)),
              Action::make(OpKind::I, 3, 0, 0)}};
  std::string text = to_csv(s);
  EXPECT_EQ(text, "0F0,0F0.1,,2R1.1,2W1.1:2\n1SEND_B1.1,(3F1.1;1B0.1)OVERLAP_F_B,3I0\n");
  Schedule back = from_csv(text);
  EXPECT_EQ(back, s);
  EXPECT_EQ(to_csv(back), text);
}

struct BadCsv {
  std::string text;
  int line, column;
  std::vector<std::string> mentions;

  friend void PrintTo(const BadCsv& b, std::ostream* os) { *os << '"' << b.text << '"'; }
};

class BadCsvInput : public ::testing::TestWithParam<BadCsv> {};

TEST_P(BadCsvInput, ParseErrorNamesLineColumnAndToken) {
  const BadCsv& c = GetParam();
  try {
    from_csv(c.text, "sched.csv");
    FAIL() << "accepted";
  } catch (const parse_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.line(), c.line) << msg;
    EXPECT_EQ(e.column(), c.column) << msg;
    EXPECT_EQ(msg.rfind("sched.csv", 0), 0u) << msg;
    if (c.line > 0) {
      std::string at = "line " + std::to_string(c.line) + ", column " + std::to_string(c.column);
      EXPECT_NE(msg.find(at), std::string::npos) << msg;
    }
    for (const std::string& m : c.mentions)
      EXPECT_NE(msg.find(m), std::string::npos) << "missing \"" << m << "\" in: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, BadCsvInput,
    ::testing::Values(
        BadCsv{"0F0,0F1\n1F0,1X0\n", 2, 5, {"\"1X0\"", "unknown kind", "expected one of"}},
        BadCsv{"0F0\r\n1F0,,2Q1\r\n", 2, 6, {"\"2Q1\"", "unknown kind"}},
        BadCsv{"0F0, 2F\n", 1, 6, {"\"2F\"", "expected the microbatch"}},
        BadCsv{"0F0,0B0\n1F0,1UNSHARD0\n", 2, 5, {"\"1UNSHARD0\"", "whole stage"}},
        BadCsv{"(0F1 1B0)OVERLAP_F_B\n", 1, 1, {"expected ';'"}},
        BadCsv{"0F0,\"1F0\n", 1, 5, {"closing"}},
        BadCsv{"0F0,\"1F0\"x\n", 1, 10, {"after a quoted cell"}},
        BadCsv{"0F0,0F1\n\n1F0,2000000F0\n", 3, 5, {"stage 2000000", "beyond"}},
        BadCsv{"", 0, 0, {"empty"}}, BadCsv{",,\n,\n", 0, 0, {"no actions"}}));

TEST(Csv, UnreadableFileNamesPathAndReason) {
  const std::string path = "/nonexistent-dir/missing.csv";
  try {
    read_csv_file(path);
    FAIL() << "read a missing file";
  } catch (const parse_error&) {
    FAIL() << "a missing file is not a parse error";
  } catch (const error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  }
}

TEST(Csv, FailedOutputStreamIsReported) {
  Schedule s = from_csv("0F0\n");
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  EXPECT_THROW(write_csv(out, s), error);
}

TEST(Csv, UnwritableActionIsRefused) {
  Schedule s = from_csv("0F0\n");
  s.ranks[0].push_back(Action::make(OpKind::B, 0, 0, 0, 2));
  EXPECT_THROW(to_csv(s), invalid_schedule);
}

}  // namespace
}  // namespace pipesched::test_csv
