// pipesched's text form: exact round trips, hand-written input, consistency errors with
// positions, and the file helpers that pick a form.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"

namespace pipesched::test_text {
namespace {

Schedule from_text(const std::string& text, const std::string& source = "text") {
  std::istringstream in(text);
  return read_text(in, source);
}

std::string data_path(const std::string& file) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + file;
}

Action act(OpKind k, int stage, int mb, int slice = 0, int part = 0) {
  return Action::make(k, stage, mb, slice, part);
}

// Idle slots, overlaps, slices, parts, recompute, communication, an empty rank list and a
// placement of no known shape.
Schedule custom_schedule() {
  Schedule s;
  s.name = "custom";
  s.problem = Problem{.ranks = 3, .stages = 4, .microbatches = 3, .slices = 2};
  s.placement = Placement::from_map({2, 0, 0, 1}, 3);
  s.ranks = {
      {act(OpKind::F, 1, 0, 1), Action::idle(), act(OpKind::R, 2, 2, 1), act(OpKind::W, 2, 1, 1, 3),
       Action::overlap(act(OpKind::F, 1, 2, 1), act(OpKind::B, 2, 0, 1)), act(OpKind::SendF, 1, 0)},
      {},
      {Action::idle(), act(OpKind::RecvB, 0, 1, 1), act(OpKind::I, 0, 1, 1),
       act(OpKind::W, 0, 1, 0, 1), Action::idle()},
  };
  return s;
}

std::vector<Schedule> schedules_to_round_trip() {
  std::vector<Schedule> all;
  for (const char* f : {"zb1p_2rank_2stagep_compute.csv", "zb1p_2rank_2stagep_comms.csv",
                        "dualpipev_4rank_10mb.csv"})
    all.push_back(read_csv_file(data_path(f)));
  all.push_back(custom_schedule());
  Schedule linear;  // the smallest schedule, and a name needing cleanup
  linear.name = "  two\nlines  ";
  linear.problem = Problem{.ranks = 1, .stages = 1, .microbatches = 1, .slices = 1};
  linear.placement = Placement::linear(1);
  linear.ranks = {{act(OpKind::F, 0, 0), act(OpKind::B, 0, 0)}};
  all.push_back(linear);
  Schedule v;  // unused microbatches and slices stay declared: nothing is inferred
  v.name = "v";
  v.problem = Problem{.ranks = 2, .stages = 4, .microbatches = 9, .slices = 5};
  v.placement = Placement::v_shape(2);
  v.ranks = {{act(OpKind::F, 0, 0)}, {act(OpKind::F, 1, 0)}};
  all.push_back(v);
  return all;
}

TEST(Text, RoundTripsSchedulesExactly) {
  for (const Schedule& s : schedules_to_round_trip()) {
    SCOPED_TRACE(s.name);
    std::string text = to_text(s);
    Schedule back = from_text(text);
    EXPECT_EQ(back, s) << text;
    EXPECT_EQ(back.placement.kind(), s.placement.kind());
    EXPECT_EQ(to_text(back), text);
    std::ostringstream out;
    write_text(out, s);
    EXPECT_EQ(out.str(), text);
  }
}

// A file with CRLF line ends is written back with them, as a CSV is; one with LF stays LF.
TEST(Text, KeepsTheLineEndsOfItsInput) {
  for (const Schedule& s : schedules_to_round_trip()) {
    SCOPED_TRACE(s.name);
    const std::string lf = to_text(s);
    ASSERT_EQ(lf.find('\r'), std::string::npos);
    std::string crlf;
    for (char c : lf)
      crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    const Schedule a = from_text(lf), b = from_text(crlf);
    EXPECT_EQ(a, b);
    EXPECT_FALSE(a.crlf);
    EXPECT_TRUE(b.crlf);
    EXPECT_EQ(to_text(a), lf);
    EXPECT_EQ(to_text(b), crlf);
  }
  // The first line decides, as for CSV; a CSV read with CRLF is written as CRLF text too.
  EXPECT_TRUE(from_text("ranks 1 stages 1 microbatches 1\r\nplacement linear\nrank 0: 0F0\n").crlf);
  EXPECT_FALSE(from_text("ranks 1 stages 1 microbatches 1\nplacement linear\r\nrank 0:\r\n").crlf);
  std::istringstream csv("0F0,0B0\r\n");
  const std::string text = to_text(read_csv(csv, "c"));
  EXPECT_NE(text.find("rank 0: 0F0 0B0\r\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\n"), text.find("\r\n") + 1);
}

TEST(Text, KeepsTheNameAndFallsBackToTheSource) {
  Schedule s = custom_schedule();
  EXPECT_EQ(from_text(to_text(s)).name, "custom");
  s.name = "  two\nlines  ";
  EXPECT_EQ(from_text(to_text(s)).name, "two lines");
  s.name = "";
  EXPECT_EQ(to_text(s).find("name"), std::string::npos);
  EXPECT_EQ(from_text(to_text(s), "from-here").name, "from-here");
  // A '#' in a name belongs to it.
  s.name = "run #3";
  EXPECT_EQ(from_text(to_text(s)).name, "run #3");
  EXPECT_EQ(from_text("name#7\nranks 1 stages 1 microbatches 1\nplacement linear\nrank 0:\n").name,
            "#7");
}

TEST(Text, WritesTheDocumentedForm) {
  EXPECT_EQ(to_text(custom_schedule()),
            "# pipesched schedule\n"
            "name custom\n"
            "ranks 3 stages 4 microbatches 3 slices 2\n"
            "placement 2 0 0 1  # custom\n"
            "rank 0: 1F0.1 - 2R2.1 2W1.1:3 (1F2.1;2B0.1)OVERLAP_F_B 1SEND_F0\n"
            "rank 1:\n"
            "rank 2: - 0RECV_B1.1 0I1.1 0W1:1 -\n");
}

TEST(Text, ReadsHandWrittenInput) {
  const std::string text =
      "\n"
      "  # a comment line, then the header in another order\r\n"
      "slices 1\tmicrobatches 2   # sizes may share or split lines\n"
      "stages 4 ranks 2\n"
      "placement interleaved\n"
      "\n"
      "rank 1 :  1F0 3F0 3B0 1B0\t1F1 3F1 3B1 1B1\n"
      "rank 0:0F0 2F0 - 2B0 0B0 0F1 2F1 2B1 0BW1  # BW reads as B\n";
  Schedule s = from_text(text, "hand.txt");
  EXPECT_EQ(s.name, "hand.txt");
  EXPECT_EQ(s.problem, (Problem{.ranks = 2, .stages = 4, .microbatches = 2, .slices = 1}));
  EXPECT_EQ(s.placement, Placement::interleaved(2, 2));
  EXPECT_EQ(s.placement.kind(), PlacementKind::Interleaved);
  ASSERT_EQ(s.ranks[0].size(), 9u);
  EXPECT_EQ(s.ranks[0][2].kind, OpKind::Idle);
  EXPECT_EQ(s.ranks[0][8], act(OpKind::B, 0, 1));
  EXPECT_EQ(s.ranks[1].front(), act(OpKind::F, 1, 0));
  EXPECT_EQ(s.ranks[1].back(), act(OpKind::B, 1, 1));
}

TEST(Text, NamedPlacementsMatchTheirMaps) {
  struct Named {
    std::string word;
    int ranks, stages;
    Placement expected;
  };
  for (const Named& n : {Named{"linear", 3, 3, Placement::linear(3)},
                         Named{"interleaved", 2, 6, Placement::interleaved(2, 3)},
                         Named{"v-shape", 4, 8, Placement::v_shape(4, 2)},
                         Named{"v-shape", 2, 8, Placement::v_shape(2, 4)}}) {
    SCOPED_TRACE(n.word + " " + std::to_string(n.ranks) + "/" + std::to_string(n.stages));
    std::string text = "ranks " + std::to_string(n.ranks) + " stages " + std::to_string(n.stages) +
                       " microbatches 1\nplacement " + n.word + "\n";
    for (int r = 0; r < n.ranks; ++r)
      text += "rank " + std::to_string(r) + ":\n";
    Schedule s = from_text(text);
    EXPECT_EQ(s.placement, n.expected);
    EXPECT_EQ(s.placement.kind(), n.expected.kind());
    // Written back, the map is spelled out and reads as the same placement.
    EXPECT_EQ(from_text(to_text(s)).placement, n.expected);
  }
}

struct BadText {
  std::string label;
  std::string text;
  int line, column;
  std::vector<std::string> mentions;

  friend void PrintTo(const BadText& b, std::ostream* os) { *os << b.label; }
};

class BadTextInput : public ::testing::TestWithParam<BadText> {};

TEST_P(BadTextInput, ParseErrorSaysWhereAndWhy) {
  const BadText& c = GetParam();
  try {
    from_text(c.text, "s.txt");
    FAIL() << "accepted:\n" << c.text;
  } catch (const parse_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.line(), c.line) << msg;
    EXPECT_EQ(e.column(), c.column) << msg;
    EXPECT_EQ(msg.rfind("s.txt: ", 0), 0u) << msg;
    for (const std::string& m : c.mentions)
      EXPECT_NE(msg.find(m), std::string::npos) << "missing \"" << m << "\" in: " << msg;
  }
}

const std::string header = "ranks 2 stages 2 microbatches 1 slices 1\nplacement 0 1\n";

INSTANTIATE_TEST_SUITE_P(
    Inputs, BadTextInput,
    ::testing::Values(
        BadText{"bad action",
                header + "rank 0: 0F0 0X0\nrank 1:\n",
                3,
                13,
                {"line 3, column 13", "\"0X0\"", "unknown kind"}},
        BadText{"rank out of range",
                header + "rank 0:\nrank 2: 1F0\n",
                4,
                6,
                {"rank 2 is out of range", "0 to 1"}},
        BadText{"rank repeated", header + "rank 0:\nrank 0:\n", 4, 6, {"listed twice", "line 3"}},
        BadText{"rank missing", header + "rank 1: 1F0\n", 0, 0, {"rank 0 has no `rank 0:` line"}},
        BadText{"no colon", header + "rank 0 0F0\n", 3, 8, {"expected ':'"}},
        BadText{"no rank number", header + "rank : 0F0\n", 3, 6, {"expected a rank number"}},
        BadText{"placement too short",
                "ranks 2 stages 3 microbatches 1\nplacement 0 1\nrank 0:\n",
                2,
                1,
                {"lists 2 ranks but stages = 3"}},
        BadText{"placement rank too large",
                "ranks 2 stages 2 microbatches 1\nplacement 0 5\n",
                2,
                13,
                {"stage 1 on rank 5"}},
        BadText{"placement missing",
                "ranks 1 stages 1 microbatches 1\nrank 0:\n",
                2,
                1,
                {"does not give `placement`"}},
        BadText{"unknown placement",
                "ranks 1 stages 1 microbatches 1\nplacement zigzag\n",
                2,
                11,
                {"unknown placement \"zigzag\""}},
        BadText{"linear needs stages = ranks",
                "ranks 2 stages 4 microbatches 1\nplacement linear\nrank 0:\n",
                2,
                1,
                {"linear placement needs stages = ranks"}},
        BadText{"v-shape odd chunks",
                "ranks 2 stages 6 microbatches 1\nplacement v-shape\n",
                2,
                1,
                {"even number"}},
        BadText{"stages below ranks",
                "ranks 3 stages 2 microbatches 1\nplacement 0 1\n",
                1,
                16,
                {"stages = 2", ">= ranks = 3"}},
        BadText{"zero microbatches",
                "ranks 1 stages 1 microbatches 0\nplacement 0\n",
                1,
                31,
                {"microbatches = 0"}},
        BadText{"sizes missing", "placement 0\nrank 0: 0F0\n", 2, 1, {"does not give `ranks`"}},
        BadText{"empty input", "", 0, 0, {"does not give `ranks`"}},
        BadText{"key twice", "ranks 1 stages 1\nstages 1\n", 2, 1, {"`stages` is given twice"}},
        BadText{"value missing", "ranks 1 stages\n", 1, 15, {"expected a number after `stages`"}},
        BadText{"value not a number", "ranks x\n", 1, 7, {"\"x\""}},
        BadText{"unknown key in sizes", "ranks 1 layers 3\n", 1, 9, {"\"layers\""}},
        BadText{"huge count", "ranks 99999999999\n", 1, 7, {"beyond"}},
        BadText{"unknown keyword",
                "# pipesched schedule\nschedule 1f1b\n",
                2,
                1,
                {"unknown keyword \"schedule\""}},
        BadText{"header after ranks",
                header + "rank 0:\nrank 1:\nslices 2\n",
                5,
                1,
                {"comes after the first `rank` line"}},
        BadText{"stage beyond declared",
                header + "rank 0: 0F0 2F0\nrank 1:\n",
                3,
                13,
                {"names stage 2", "stages = 2"}},
        BadText{"microbatch beyond declared",
                header + "rank 0: (0F0;1B1)OVERLAP_F_B\n",
                3,
                9,
                {"names microbatch 1", "microbatches = 1"}},
        BadText{"slice beyond declared", header + "rank 0: 0F0.1\n", 3, 9, {"names slice 1"}}));

TEST(Text, WriterRefusesInconsistentSchedules) {
  Schedule s = custom_schedule();
  s.ranks.pop_back();
  EXPECT_THROW(to_text(s), invalid_schedule);
  s = custom_schedule();
  s.ranks[1].push_back(act(OpKind::F, 0, 3));  // microbatch 3 of 3
  EXPECT_THROW(to_text(s), invalid_schedule);
  s = custom_schedule();
  s.problem.stages = 5;
  EXPECT_THROW(to_text(s), invalid_schedule);
}

class ScheduleFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipesched_io_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  static std::string bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void put(const std::string& p, const std::string& content) {
    std::ofstream(p, std::ios::binary) << content;
  }
  std::filesystem::path dir_;
};

TEST_F(ScheduleFile, ChoosesTheFormByExtensionAndDetectsItOnRead) {
  const Schedule pytorch = read_csv_file(data_path("dualpipev_4rank_10mb.csv"));
  for (const Schedule& s : {pytorch, custom_schedule()}) {
    SCOPED_TRACE(s.name);
    write_schedule_file(path("a.csv"), s);
    write_schedule_file(path("b.CSV"), s);
    write_schedule_file(path("c.txt"), s);
    write_schedule_file(path("d"), s);
    EXPECT_EQ(bytes(path("a.csv")), to_csv(s));
    EXPECT_EQ(bytes(path("b.CSV")), to_csv(s));
    EXPECT_EQ(bytes(path("c.txt")), to_text(s));
    EXPECT_EQ(bytes(path("d")), to_text(s));
    EXPECT_EQ(read_schedule_file(path("c.txt")), s);
    EXPECT_EQ(read_schedule_file(path("d")), s);
    EXPECT_EQ(read_schedule_file(path("a.csv")).ranks, s.ranks);
  }
  // The CSV form infers the placement again, so a PyTorch schedule comes back whole.
  write_schedule_file(path("a.csv"), pytorch);
  EXPECT_EQ(read_schedule_file(path("a.csv")), pytorch);
  EXPECT_EQ(read_schedule_file(data_path("zb1p_2rank_2stagep_comms.csv")),
            read_csv_file(data_path("zb1p_2rank_2stagep_comms.csv")));
}

TEST_F(ScheduleFile, DetectsTheTextFormByItsFirstNonBlankLine) {
  const std::string body = "ranks 1 stages 1 microbatches 1\nplacement linear\nrank 0: 0F0 0B0\n";
  put(path("keyword"), "\n\n" + body);
  put(path("comment"), "# my own notes\n" + body);
  put(path("csv"), "\n0F0,0B0\n");
  for (const char* f : {"keyword", "comment"}) {
    SCOPED_TRACE(f);
    Schedule s = read_schedule_file(path(f));
    EXPECT_EQ(s.name, f);
    EXPECT_EQ(s.ranks,
              (std::vector<std::vector<Action>>{{act(OpKind::F, 0, 0), act(OpKind::B, 0, 0)}}));
  }
  // Read as CSV: a leading empty row is a rank with no actions, and so with no stage.
  try {
    read_schedule_file(path("csv"));
    ADD_FAILURE() << "a CSV whose first rank holds no stage was accepted";
  } catch (const parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0) runs no action"), std::string::npos) << e.what();
  }
}

TEST_F(ScheduleFile, ErrorsNameTheFileAndThePath) {
  put(path("bad.txt"), "ranks 1 stages 1 microbatches 1\nplacement linear\nrank 0: 0F0 0Z0\n");
  try {
    read_schedule_file(path("bad.txt"));
    FAIL() << "accepted";
  } catch (const parse_error& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 13);
    EXPECT_EQ(std::string(e.what()).rfind("bad.txt: line 3, column 13", 0), 0u) << e.what();
  }
  const std::string missing = path("missing.txt");
  try {
    read_schedule_file(missing);
    FAIL() << "read a missing file";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  try {
    write_schedule_file(path("no-such-dir/out.txt"), custom_schedule());
    FAIL() << "wrote into a missing directory";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/out.txt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipesched::test_text
