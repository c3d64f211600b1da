// Action strings: PyTorch's exact forms, pipesched's extensions, and the errors for
// malformed tokens.
#include <gtest/gtest.h>

#include <climits>
#include <ostream>
#include <string>
#include <vector>

#include "pipesched/io/action_string.hpp"
#include "pipesched/io/layout.hpp"

namespace pipesched::test_action_string {
namespace {

struct Spelled {
  Action action;
  std::string text;
};

// Every kind in both directions; the first rows are PyTorch's own spellings.
std::vector<Spelled> spelled_actions() {
  return {
      {Action::make(OpKind::F, 2, 0), "2F0"},
      {Action::make(OpKind::I, 0, 1), "0I1"},
      {Action::make(OpKind::W, 1, 3), "1W3"},
      {Action::make(OpKind::B, 7, 12), "7B12"},
      {Action::make(OpKind::SendF, 3, 1), "3SEND_F1"},
      {Action::make(OpKind::RecvF, 2, 0), "2RECV_F0"},
      {Action::make(OpKind::SendB, 0, 5), "0SEND_B5"},
      {Action::make(OpKind::RecvB, 1, 9), "1RECV_B9"},
      {Action::overlap(Action::make(OpKind::F, 0, 7), Action::make(OpKind::B, 7, 3)),
       "(0F7;7B3)OVERLAP_F_B"},
      {Action::make(OpKind::R, 2, 0), "2R0"},
      {Action::make(OpKind::F, 2, 0, 3), "2F0.3"},
      {Action::make(OpKind::B, 4, 1, 2), "4B1.2"},
      {Action::make(OpKind::I, 4, 1, 7), "4I1.7"},
      {Action::make(OpKind::R, 5, 6, 1), "5R6.1"},
      {Action::late_recompute(2, 0), "2RL0"},
      {Action::late_recompute(5, 6, 1), "5RL6.1"},
      {Action::make(OpKind::SendB, 3, 2, 1), "3SEND_B2.1"},
      {Action::make(OpKind::W, 2, 0, 3, 1), "2W0.3:1"},
      {Action::make(OpKind::W, 2, 0, 0, 1), "2W0:1"},
      {Action::make(OpKind::W, 2, 0, 4, 0), "2W0.4"},
      {Action::overlap(Action::make(OpKind::F, 0, 7, 1), Action::make(OpKind::B, 7, 3, 1)),
       "(0F7.1;7B3.1)OVERLAP_F_B"},
      {Action::overlap(Action::make(OpKind::F, 0, 7, 2), Action::make(OpKind::B, 7, 3, 0)),
       "(0F7.2;7B3)OVERLAP_F_B"},
      {Action::make(OpKind::F, INT_MAX, INT_MAX, INT_MAX), "2147483647F2147483647.2147483647"},
      // PyTorch 2.15's lowered kinds: send waits, and the actions on a whole stage.
      {Action::make(OpKind::WaitSendF, 2, 0), "2WAIT_SEND_F0"},
      {Action::make(OpKind::WaitSendB, 3, 11), "3WAIT_SEND_B11"},
      {Action::make(OpKind::WaitSendB, 3, 1, 2), "3WAIT_SEND_B1.2"},
      {Action::make(OpKind::Unshard, 1, 0), "1UNSHARD"},
      {Action::make(OpKind::Reshard, 12, 0), "12RESHARD"},
      {Action::make(OpKind::ReduceGrad, 0, 0), "0REDUCE_GRAD"},
      {Action::make(OpKind::WaitReduceGrad, 2, 0), "2WAIT_REDUCE_GRAD"},
      // pipesched's offload: a unit's activations to host memory and back.
      {Action::make(OpKind::Offload, 2, 0), "2OFFLOAD0"},
      {Action::make(OpKind::Reload, 11, 7), "11RELOAD7"},
      {Action::make(OpKind::Offload, 1, 3, 2), "1OFFLOAD3.2"},
  };
}

TEST(ActionString, FormatWritesExactSpelling) {
  for (const Spelled& c : spelled_actions()) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(format_action(c.action), c.text);
  }
}

TEST(ActionString, ParseReadsExactSpelling) {
  for (const Spelled& c : spelled_actions()) {
    SCOPED_TRACE(c.text);
    Action a = parse_action(c.text);
    EXPECT_EQ(a, c.action);
    EXPECT_EQ(a.kind, c.action.kind);
  }
}

TEST(ActionString, EveryKindRoundTripsOverAGrid) {
  const OpKind kinds[] = {OpKind::F,     OpKind::B,     OpKind::I,     OpKind::W,    OpKind::R,
                          OpKind::SendF, OpKind::RecvF, OpKind::SendB, OpKind::RecvB};
  int checked = 0;
  for (OpKind k : kinds)
    for (int stage : {0, 1, 13})
      for (int mb : {0, 4, 100})
        for (int slice : {0, 2})
          for (int part : {0, 3}) {
            if (part != 0 && k != OpKind::W) continue;
            Action a = Action::make(k, stage, mb, slice, part);
            std::string text = format_action(a);
            SCOPED_TRACE(text);
            EXPECT_EQ(parse_action(text), a);
            EXPECT_EQ(text.find('.') != std::string::npos, slice != 0);
            EXPECT_EQ(text.find(':') != std::string::npos, part != 0);
            ++checked;
          }
  for (int fs : {0, 3})
    for (int bs : {0, 1}) {
      Action a =
          Action::overlap(Action::make(OpKind::F, 1, 2, fs), Action::make(OpKind::B, 6, 0, bs));
      std::string text = format_action(a);
      SCOPED_TRACE(text);
      Action back = parse_action(text);
      EXPECT_EQ(back, a);
      EXPECT_EQ(back.forward_half(), a.forward_half());
      EXPECT_EQ(back.backward_half(), a.backward_half());
      ++checked;
    }
  EXPECT_EQ(checked, 8 * 3 * 3 * 2 + 3 * 3 * 2 * 2 + 4);
}

TEST(ActionString, BwIsReadAsFullBackwardAndWrittenBackAsBw) {
  EXPECT_EQ(parse_action("2BW0"), Action::make(OpKind::B, 2, 0));
  EXPECT_TRUE(parse_action("2BW0").spelled_bw);
  EXPECT_FALSE(parse_action("2B0").spelled_bw);
  EXPECT_EQ(format_action(parse_action("2BW0")), "2BW0");
  EXPECT_EQ(format_action(parse_action("2B0")), "2B0");
  EXPECT_EQ(format_action(Action::make(OpKind::B, 2, 0)), "2B0");
  EXPECT_EQ(parse_action("3BW1.2"), Action::make(OpKind::B, 3, 1, 2));
  EXPECT_EQ(format_action(parse_action("3BW1.2")), "3BW1.2");
  Action o = parse_action("(0F1;5BW2)OVERLAP_F_B");
  EXPECT_EQ(o.kind, OpKind::Overlap);
  EXPECT_EQ(o.backward_half(), Action::make(OpKind::B, 5, 2));
  EXPECT_TRUE(o.backward_half().spelled_bw);
  EXPECT_EQ(format_action(o), "(0F1;5BW2)OVERLAP_F_B");
  EXPECT_EQ(format_action(parse_action("(0F1;5B2)OVERLAP_F_B")), "(0F1;5B2)OVERLAP_F_B");
  // BW is not a kind of its own: no other kind takes the W.
  EXPECT_THROW((void)parse_action("2FW0"), parse_error);
}

TEST(ActionString, IdleFormatsAsEmptyString) {
  EXPECT_EQ(format_action(Action::idle()), "");
}

TEST(ActionString, BlanksAroundTokenAreIgnored) {
  EXPECT_EQ(parse_action("  2F0\t"), Action::make(OpKind::F, 2, 0));
  EXPECT_EQ(parse_action(" (0F7;7B3)OVERLAP_F_B \r\n"),
            Action::overlap(Action::make(OpKind::F, 0, 7), Action::make(OpKind::B, 7, 3)));
  // Columns count from the token as passed, leading blanks included.
  try {
    parse_action("   2X0");
    FAIL() << "2X0 was accepted";
  } catch (const parse_error& e) {
    EXPECT_EQ(e.line(), 0);
    EXPECT_EQ(e.column(), 5);
  }
}

struct Malformed {
  std::string token;
  int column;                         // 1-based, within the token as passed
  std::vector<std::string> mentions;  // what a user needs to read in the message

  friend void PrintTo(const Malformed& m, std::ostream* os) { *os << '"' << m.token << '"'; }
};

class MalformedAction : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedAction, ThrowsParseErrorSayingWhatWasExpected) {
  const Malformed& c = GetParam();
  try {
    Action a = parse_action(c.token);
    FAIL() << "accepted \"" << c.token << "\" as " << format_action(a);
  } catch (const parse_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.line(), 0);
    EXPECT_EQ(e.column(), c.column) << msg;
    EXPECT_NE(msg.find("\"" + c.token + "\""), std::string::npos) << "token not named: " << msg;
    for (const std::string& m : c.mentions)
      EXPECT_NE(msg.find(m), std::string::npos) << "missing \"" << m << "\" in: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokens, MalformedAction,
    ::testing::Values(
        Malformed{"2X0", 2, {"unknown kind \"X\"", "F, B, BW, I, W, R, RL, SEND_F"}},
        Malformed{"2RL0:1", 5, {"only allowed on W"}},
        Malformed{"2rl0", 2, {"case-sensitive", "\"RL\""}},
        Malformed{"(0RL1;1B0)OVERLAP_F_B", 3, {"recompute cannot be part of an overlap"}},
        Malformed{"F0", 1, {"expected the stage", "found 'F'"}},
        Malformed{"2F", 3, {"expected the microbatch", "end of the action", "2F0"}},
        Malformed{"-1F0", 1, {"negative", "non-negative"}},
        Malformed{"(0F1;1B0)", 10, {"missing OVERLAP_F_B", "(0F7;7B3)OVERLAP_F_B"}},
        Malformed{"(0F1 1B0)OVERLAP_F_B", 5, {"expected ';'", "found a blank"}},
        Malformed{"(0F1;1B0)OVERLAP", 10, {"expected OVERLAP_F_B", "\"OVERLAP\""}},
        Malformed{"(0F1;1B0", 9, {"expected ')'"}},
        Malformed{"(0B1;1B0)OVERLAP_F_B", 2, {"must be a forward (F)", "found B"}},
        Malformed{"(0F1;1I0)OVERLAP_F_B", 6, {"must be a full backward (B)", "found I"}},
        Malformed{"(0F1:1;1B0)OVERLAP_F_B", 5, {"only allowed on W", "overlap"}},
        Malformed{"2F0.", 5, {"expected the slice", "2F0.1"}},
        Malformed{"2W0:", 5, {"expected the part", "2W0:1"}},
        Malformed{"2B0:1", 4, {"only allowed on W"}}, Malformed{"2F0x", 4, {"unexpected 'x'"}},
        Malformed{"2F0.1.2", 6, {"unexpected '.'"}},
        Malformed{"99999999999F0", 1, {"too large", "2147483647"}},
        Malformed{"2F2147483648", 3, {"microbatch 2147483648 is too large"}},
        Malformed{"2f0", 2, {"case-sensitive", "\"F\""}},
        Malformed{"2send_f0", 2, {"case-sensitive", "\"SEND_F\""}},
        Malformed{"2IDLE0", 2, {"unknown kind \"IDLE\""}},
        Malformed{"2OVERLAP_F_B0", 2, {"(<F action>;<B action>)OVERLAP_F_B"}},
        Malformed{"", 1, {"empty"}},
        Malformed{"1UNSHARD0", 9, {"whole stage", "no microbatch", "write 1UNSHARD"}},
        Malformed{"0REDUCE_GRAD.1", 13, {"whole stage", "write 0REDUCE_GRAD"}},
        Malformed{"1unshard", 2, {"case-sensitive", "\"UNSHARD\""}},
        Malformed{"(1UNSHARD;1B0)OVERLAP_F_B", 3, {"cannot be part of an overlap"}},
        Malformed{"2WAIT_SEND0", 2, {"unknown kind \"WAIT_SEND\"", "WAIT_SEND_F"}}));

TEST(ActionString, StageActionsWithAMicrobatchCannotBeWritten) {
  EXPECT_THROW(format_action(Action::make(OpKind::Unshard, 1, 3)), invalid_schedule);
  EXPECT_THROW(format_action(Action::make(OpKind::ReduceGrad, 1, 0, 2)), invalid_schedule);
}

TEST(ActionString, BlankOnlyTokenIsAnError) {
  EXPECT_THROW(parse_action("   "), parse_error);
}

TEST(ActionString, FormatRefusesActionsNoStringCanCarry) {
  auto expect_refused = [](const Action& a, const std::string& mention) {
    try {
      std::string s = format_action(a);
      FAIL() << "wrote \"" << s << "\"";
    } catch (const invalid_schedule& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  expect_refused(Action::make(OpKind::F, -1, 0), "stage = -1");
  expect_refused(Action::make(OpKind::B, 0, -2), "microbatch = -2");
  expect_refused(Action::make(OpKind::F, 0, 0, -3), "slice = -3");
  expect_refused(Action::make(OpKind::B, 0, 0, 0, 1), "only W actions have parts");
  Action late_forward = Action::make(OpKind::F, 0, 0);
  late_forward.late = true;
  expect_refused(late_forward, "only a recompute (R) can be late");
  expect_refused(Action::make(OpKind::W, 0, 0, 0, -1), "part = -1");
  expect_refused(Action::overlap(Action::make(OpKind::F, 0, 0), Action::make(OpKind::B, -4, 0)),
                 "b_stage = -4");
}

// ---- Layouts: Megatron-core's grammar, read and written ----

TEST(Layout, MegatronsGrammarReadsIntoStagesAndWritesBack) {
  // Megatron-core's DeepSeek-V3 example with a layer where its MTP unit stands (pipesched's
  // models have none): 32 stages, for pp 16 × 2 chunks.
  const Layout l = parse_layout("Et*3|(tt|)*29,t|L");
  ASSERT_EQ(l.stages.size(), 32u);
  EXPECT_EQ(l.stages.front(), (LayoutStage{.embedding = true, .layers = 3}));
  for (std::size_t s = 1; s <= 29; ++s)
    EXPECT_EQ(l.stages[s], (LayoutStage{.layers = 2})) << s;
  EXPECT_EQ(l.stages[30], (LayoutStage{.layers = 1}));
  EXPECT_EQ(l.stages[31], (LayoutStage{.loss = true}));
  EXPECT_EQ(l.layers(), 62);
  EXPECT_NO_THROW(l.check(62, 16));
  // Written back, read again: the same layout, runs of equal stages as groups.
  EXPECT_EQ(to_string(l), "Et*3|(t*2|)*29t|L");
  EXPECT_EQ(parse_layout(to_string(l)), l);
  // Commas and a trailing '|' are for the eye; nested groups unroll.
  EXPECT_EQ(parse_layout("E,t|t,L|"), parse_layout("Et|tL"));
  EXPECT_EQ(parse_layout("E((t|)*2)*2tL").stages.size(), 5u);
  for (const char* text : {"EtL", "Et|tL", "Et*4|t*4|t*4|t*4L", "E|(t*2|)*3L"}) {
    SCOPED_TRACE(text);
    const Layout x = parse_layout(text);
    EXPECT_EQ(parse_layout(to_string(x)), x);
  }
}

TEST(Layout, BadLayoutsAreRefusedInOneSentenceSayingWhatIsWrong) {
  auto refused = [](const char* text, const char* says) {
    try {
      (void)parse_layout(text);
      ADD_FAILURE() << "'" << text << "' was read";
    } catch (const invalid_problem& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(says), std::string::npos) << text << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  refused("Et*3|x|L", "'x' is not part of a layout");
  refused("Et|m|L", "multi-token-prediction");
  refused("Et||tL", "stage 1 is empty");
  refused("t|EtL", "E can only open the first stage");
  refused("tE|tL", "after other units");
  refused("Et|L|t", "L must end the last stage");
  refused("EtLL", "L stands twice");
  refused("EtLt", "a layer follows L");
  refused("t|tL", "E is missing");
  refused("Et|t", "L is missing");
  refused("Et*|L", "'*' needs a count");
  refused("Et*0|L", "a count of 0");
  refused("E(t|L", "'(' is not closed");
  refused("Et)|L", "')' closes no '('");
  refused("E(t|)L", "a group needs its count");
  refused("*2EtL", "'*' follows no unit");
  refused("E|t|*3L", "'|' cannot repeat");
  // A control byte in the text is shown as \xNN: the sentence stays one line, whole.
  refused("Et|\nL", "'\\x0a' is not part of a layout");
  try {
    (void)parse_layout(std::string_view("Et\0|L", 6));
    ADD_FAILURE() << "a NUL byte was read";
  } catch (const invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("\\x00"), std::string::npos) << e.what();
  }
  // Nothing huge is built: the expansion is bounded before it is made.
  refused("E(((t*4096)*4096)*4096)L", "expands to more than");
  refused("Et*99999999999999999999L", "a count is above");
  refused(std::string(70, '(').append("t)").c_str(), "nest more than 64 deep");
  // A layout against its model and ranks.
  const Layout l = parse_layout("Et*2|t*2|t*2|t*2L");
  EXPECT_NO_THROW(l.check(8, 4));
  EXPECT_NO_THROW(l.check(8, 2));  // 2 chunks per rank
  EXPECT_THROW(l.check(9, 4), invalid_problem);
  EXPECT_THROW(l.check(8, 3), invalid_problem);
  try {
    l.check(8, 3);
  } catch (const invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("4 stages on 3 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipesched::test_action_string
