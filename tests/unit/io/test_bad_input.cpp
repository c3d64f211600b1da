// Bad schedule input, as a careless or hostile file delivers it: every one gives an error
// sentence (or a report) that names what was wrong, costs what the file's actions cost and not
// what its indices claim, and never reads or allocates without bound.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>
#include <string>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"

namespace pipesched::test_bad_input {
namespace {

Schedule from_csv(const std::string& text) {
  std::istringstream in(text);
  return read_csv(in, "bad.csv");
}

Schedule from_text(const std::string& text) {
  std::istringstream in(text);
  return read_text(in, "bad.txt");
}

std::string data_path(const std::string& file) {
  return std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + file;
}

std::string parse_message(const std::string& csv) {
  try {
    from_csv(csv);
  } catch (const parse_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "reading " << csv << " did not throw";
  return {};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A message to or from a stage that does not exist is its own error, and the message pairing
// check does not look the missing stage up (that read past the placement's table).
TEST(BadInput, CommunicationWithAStageThatDoesNotExist) {
  struct Case {
    const char* csv;
    const char* text;
  };
  for (const Case& c :
       {Case{"0F0,0SEND_F0,0B0\n",
             "sends to the stage after stage 0, which does not exist: stage 0 is the last of "
             "the schedule's 1 stage (0..0)"},
        Case{"0F0,0B0,0SEND_B0\n",
             "sends to the stage before stage 0, which does not exist: stage 0 is the first"},
        Case{"0RECV_F0,0F0,0B0\n", "receives from the stage before stage 0, which does not exist"},
        Case{"0F0,0B0,0RECV_B0\n", "receives from the stage after stage 0, which does not exist"},
        // A WAIT_SEND names its send's unit; a gradient send of stage 0 has nowhere to go.
        Case{"0F0,0B0,0WAIT_SEND_B0\n",
             "waits for a send to the stage before stage 0, which does not exist"}}) {
    SCOPED_TRACE(c.csv);
    Schedule s = from_csv(c.csv);
    ValidationReport rep = check(s);
    ASSERT_FALSE(rep.ok());
    EXPECT_TRUE(rep.has("index-range")) << rep.summary();
    EXPECT_NE(rep.summary().find(c.text), std::string::npos) << rep.summary();
    // Nothing is suggested on a rank that does not exist.
    EXPECT_EQ(rep.summary().find("add "), std::string::npos) << rep.summary();
    EXPECT_THROW(validate(s), invalid_schedule);
  }
}

// No message names a stage by an index that does not exist (stage -1, stage S).
TEST(BadInput, NoStageMinusOneInAnyMessage) {
  for (const char* csv : {"0F0,0B0,0SEND_B0\n", "0F0,0B0,0WAIT_SEND_B0\n", "0RECV_F0,0F0,0B0\n",
                          "0F0,0SEND_F0,0WAIT_SEND_F0,0B0\n"}) {
    SCOPED_TRACE(csv);
    const ValidationReport rep = check(from_csv(csv));
    ASSERT_FALSE(rep.ok());
    EXPECT_EQ(rep.summary().find("stage -1"), std::string::npos) << rep.summary();
    EXPECT_EQ(rep.summary().find("stage 1,"), std::string::npos) << rep.summary();
  }
}

// A recompute given twice is named as it was written: RL (a late recompute) twice is not
// "0R0 appears 2 times", which names an action the schedule does not hold.
TEST(BadInput, ARecomputeGivenTwiceIsNamedAsWritten) {
  std::string text = check(from_csv("0F0,0RL0,0RL0,0B0\n")).summary();
  EXPECT_NE(text.find("0RL0 (a late recompute) appears 2 times"), std::string::npos) << text;
  EXPECT_EQ(text.find("0R0 "), std::string::npos) << text;
  text = check(from_csv("0F0,0R0,0R0,0B0\n")).summary();
  EXPECT_NE(text.find("0R0 appears 2 times"), std::string::npos) << text;
  text = check(from_csv("0F0,0R0,0RL0,0B0\n")).summary();
  EXPECT_NE(text.find("the recompute of 0F0 (1 0R0, 1 0RL0) appears 2 times"), std::string::npos)
      << text;
}

// Tiny files whose indices name huge problems: the report is exact in its count and short in
// its text, and it costs what the actions cost.
TEST(BadInput, HugeIndicesCostWhatTheActionsCost) {
  struct Case {
    std::string input;
    bool text_form;
    std::uint64_t total;  // violations found
    const char* first;    // part of the first message
  };
  const Case cases[] = {
      // 1 stage × 2^20 microbatches: all but the last miss their forward and backward.
      {"0F1048575,0B1048575\n", false, 2 * 1048575ull, "rank 0 never runs 0F0"},
      // 301 stages × 301 microbatches × 301 slices on one rank, one forward.
      {"300F300.300\n", false, 2ull * 301 * 301 * 301 - 1, "never runs 0F0"},
      // 2^20 stages, microbatches and slices (2^60 units), one forward.
      {"1048575F1048575.1048575\n", false, 2 * (std::uint64_t{1} << 60) - 1, "never runs 0F0"},
      // One weight gradient part far beyond the others: one gap, not a count per part.
      {"0F0,0I0,0W0:2147483647\n", false, 1, "parts 0..2147483646 never run"},
      {"0F0,0I0,0W0:100000000\n", false, 1, "parts 0..99999999 never run"},
      // A text-form header declaring 2^40 units.
      {"ranks 1 stages 1 microbatches 1048575 slices 1048575\nplacement linear\n"
       "rank 0: 0F0 0B0\n",
       true, 2 * (1048575ull * 1048575 - 1), "never runs 0F0.1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input);
    const auto t0 = std::chrono::steady_clock::now();
    Schedule s = c.text_form ? from_text(c.input) : from_csv(c.input);
    ValidationReport rep = check(s);
    EXPECT_EQ(rep.total(), c.total);
    EXPECT_LE(rep.violations.size(), ValidationReport::max_recorded);
    ASSERT_FALSE(rep.violations.empty());
    EXPECT_NE(rep.violations.front().message.find(c.first), std::string::npos)
        << rep.violations.front().message;
    const std::string summary = rep.summary();
    if (c.total > 8) {
      EXPECT_NE(summary.find("… and " + detail::group_digits(c.total - 8) + " more"),
                std::string::npos)
          << summary;
    }
    EXPECT_LT(summary.size(), 8u * 400) << "the summary must stay short";
    try {
      validate(s);
      ADD_FAILURE() << "validate did not throw";
    } catch (const invalid_schedule& e) {
      EXPECT_NE(std::string(e.what()).find("(" + detail::group_digits(c.total) + " problem"),
                std::string::npos)
          << e.what();
    }
    // Simulation of the same (invalid) schedule is bounded too, and says what it can.
    try {
      SimulationResult r = simulate(s);
      EXPECT_GE(r.makespan, 0);
    } catch (const invalid_schedule& e) {
      EXPECT_NE(std::string(e.what()).find("cannot simulate"), std::string::npos) << e.what();
    }
    // Generous for sanitizer builds; the dense tables took 7 to 96 s and up to 9 GB here.
    EXPECT_LT(seconds_since(t0), 10.0);
  }
}

TEST(BadInput, GroupDigits) {
  EXPECT_EQ(detail::group_digits(0), "0");
  EXPECT_EQ(detail::group_digits(999), "999");
  EXPECT_EQ(detail::group_digits(1000), "1,000");
  EXPECT_EQ(detail::group_digits(1999990), "1,999,990");
  EXPECT_EQ(detail::group_digits(18446744073709551615ull), "18,446,744,073,709,551,615");
}

// The report keeps max_recorded messages and counts the rest exactly, whichever check found
// them: here a thousand duplicate forwards and two thousand missing backwards.
TEST(BadInput, ReportKeepsTheFirstViolationsAndCountsTheRest) {
  std::string csv;
  for (int m = 0; m < 1500; ++m)
    csv += (m ? "," : "") + std::string("0F") + std::to_string(m) + ",0F" + std::to_string(m);
  ValidationReport rep = check(from_csv(csv + "\n"));
  EXPECT_EQ(rep.violations.size(), ValidationReport::max_recorded);
  EXPECT_EQ(rep.total(), 3000u);  // each microbatch: a duplicate forward, a missing backward
  EXPECT_TRUE(rep.full());
  EXPECT_FALSE(rep.ok());
}

// Regular files above the limit, devices and directories are refused before reading.
class BadFile : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("pipesched_bad_input_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static std::string message_of(const std::string& path) {
    try {
      read_schedule_file(path);
    } catch (const parse_error& e) {
      ADD_FAILURE() << "a file-level refusal is not a parse error: " << e.what();
      return e.what();
    } catch (const error& e) {
      return e.what();
    }
    ADD_FAILURE() << "reading " << path << " did not throw";
    return {};
  }
};

TEST_F(BadFile, DevicesDirectoriesAndOversizedFilesAreRefused) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(message_of("/dev/zero").find("it is a device, not a schedule file"), std::string::npos);
  EXPECT_NE(message_of(dir_.string()).find("it is a directory"), std::string::npos);
  // A sparse file one byte over the limit: refused from its size, without reading it.
  const std::filesystem::path big = dir_ / "big.csv";
  { std::ofstream(big) << "0F0,0B0\n"; }
  std::filesystem::resize_file(big, max_schedule_bytes + 1);
  const std::string m = message_of(big.string());
  EXPECT_NE(m.find("larger than the 64 MiB pipesched reads"), std::string::npos) << m;
  EXPECT_NE(m.find(big.string()), std::string::npos) << m;
  EXPECT_LT(seconds_since(t0), 5.0);
  // At the limit exactly, the size is fine (the content is what it is: NUL bytes).
  std::filesystem::resize_file(big, max_schedule_bytes);
  try {
    read_schedule_file(big.string());
  } catch (const parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("NUL"), std::string::npos) << e.what();
  }
}

// A stream without end (a pipe from /dev/zero) is read up to the limit, not until memory ends.
TEST(BadInput, EndlessStreamIsCutAtTheLimit) {
  struct Zeros : std::streambuf {
    char block[4096] = {};
    int_type underflow() override {
      setg(block, block, block + sizeof block);
      return traits_type::to_int_type(block[0]);
    }
  } zeros;
  std::istream in(&zeros);
  try {
    read_csv(in, "endless");
    FAIL() << "an endless stream was read to its end";
  } catch (const parse_error&) {
    FAIL() << "the stream must be refused for its size, not parsed";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the 64 MiB"), std::string::npos) << e.what();
  }
}

// Blank lines at the end of a CSV are not ranks.
TEST(BadInput, TrailingBlankLinesAreNotRanks) {
  std::ifstream f(data_path("zb1p_2rank_2stagep_compute.csv"), std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  const Schedule original = from_csv(bytes.str());
  ASSERT_EQ(original.rank_count(), 2);
  const double makespan = simulate(original).makespan;
  EXPECT_DOUBLE_EQ(makespan, 24.5);
  for (const char* tail : {"\n", "\n\n", "\r\n", " \n\t\n"}) {
    SCOPED_TRACE(::testing::PrintToString(std::string(tail)));
    Schedule s = from_csv(bytes.str() + tail);
    EXPECT_EQ(s.rank_count(), 2);
    EXPECT_EQ(s, original);
    EXPECT_DOUBLE_EQ(simulate(s).makespan, makespan);
  }
  // A last rank with nothing to do is written as one idle cell, so it survives the trip.
  Schedule s = from_csv("0F0,0B0\n1F0,1B0\n");
  s.ranks[1].clear();
  s.ranks[0] = {Action::make(OpKind::F, 0, 0), Action::make(OpKind::B, 0, 0),
                Action::make(OpKind::F, 1, 0), Action::make(OpKind::B, 1, 0)};
  EXPECT_EQ(to_csv(s), "0F0,0B0,1F0,1B0\n\"\"\n");
}

TEST(BadInput, NulBytesAndControlCharactersAreShownNotCut) {
  const std::string m =
      parse_message(std::string("0F0,0F\0"
                                "1,0B0\n",
                                13));
  EXPECT_NE(m.find("\\x00"), std::string::npos) << m;
  EXPECT_EQ(m.find('\0'), std::string::npos);
  // The message goes on after the NUL: it says what was expected.
  EXPECT_NE(m.find("expected the microbatch"), std::string::npos) << m;
  const std::string bell = parse_message("0F0,0Q\a1\n");
  EXPECT_NE(bell.find("\\x07"), std::string::npos) << bell;
}

TEST(BadInput, ByteOrderMarkIsAccepted) {
  const std::string bom = "\xEF\xBB\xBF";
  EXPECT_EQ(from_csv(bom + "0F0,0B0\n"), from_csv("0F0,0B0\n"));
  const std::string text =
      "# pipesched schedule\nranks 1 stages 1 microbatches 1\n"
      "placement linear\nrank 0: 0F0 0B0\n";
  EXPECT_TRUE(detail::io::looks_like_text_form(bom + text));
  EXPECT_EQ(from_text(bom + text), from_text(text));
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("pipesched_bom_" + std::to_string(::getpid()) + ".txt");
  { std::ofstream(p, std::ios::binary) << bom << text; }
  EXPECT_EQ(read_schedule_file(p.string()), from_text(text));  // read as text, not as CSV
  std::filesystem::remove(p);
}

// Rows without actions that leave a rank with no stage are refused when read, with the reason
// (the text writer used to fail on them later, as if the schedule were invalid).
TEST(BadInput, RowsThatHoldNoStageAreRefusedWithTheReason) {
  for (const char* csv : {"0F0,0B0\n,,,\n", "0F0,0B0\n\n1F0\n,\n", "\n0F0,0B0\n"}) {
    SCOPED_TRACE(csv);
    const std::string m = parse_message(csv);
    EXPECT_NE(m.find("holds no stage"), std::string::npos) << m;
    EXPECT_NE(m.find("every rank needs a stage"), std::string::npos) << m;
  }
  // An empty row that still holds a stage (one no action names) stays a rank.
  Schedule s = from_csv("0F0,0B0\n\n2F0,2B0\n");
  EXPECT_EQ(s.rank_count(), 3);
  EXPECT_TRUE(s.ranks[1].empty());
  EXPECT_NO_THROW(to_text(s));
}

TEST(BadInput, ActionsPrintAsActionStrings) {
  EXPECT_EQ(::testing::PrintToString(Action::make(OpKind::W, 2, 0, 3, 1)), "2W0.3:1");
  EXPECT_EQ(::testing::PrintToString(Action::idle()), "idle");
  EXPECT_EQ(::testing::PrintToString(OpKind::SendF), "SEND_F");
}

}  // namespace
}  // namespace pipesched::test_bad_input
