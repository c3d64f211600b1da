// check_pytorch_runnable: what PyTorch 2.15's runtime cannot run as pipesched does is refused
// with the rank, the position and the rule (the last stage's forwards out of microbatch order,
// idle slots or sends without a wait in a lowered file, BW as written), and every generator's
// schedules that PyTorch can run pass, lowered or not.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_pytorch_runnable {

namespace ps = pipesched;

namespace {

ps::Schedule csv(const std::string& text) {
  std::istringstream in(text);
  return ps::read_csv(in, "t");
}

// The message check_pytorch_runnable throws for `s`, or "" when it takes it.
std::string refusal(const ps::Schedule& s, bool as_written = false) {
  try {
    ps::check_pytorch_runnable(s, as_written);
  } catch (const ps::invalid_schedule& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PyTorchRunnable, OffloadsAreRefused) {
  ps::Schedule s;
  s.name = "offloading";
  s.problem = {.ranks = 1, .stages = 1, .microbatches = 2};
  s.placement = ps::Placement::linear(1);
  using ps::Action;
  using ps::OpKind;
  s.ranks = {{Action::make(OpKind::F, 0, 0), Action::make(OpKind::Offload, 0, 0),
              Action::make(OpKind::F, 0, 1), Action::make(OpKind::B, 0, 1),
              Action::make(OpKind::Reload, 0, 0), Action::make(OpKind::B, 0, 0)}};
  ps::validate(s);
  try {
    ps::check_pytorch_runnable(s);
    ADD_FAILURE() << "an OFFLOAD was accepted";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("0OFFLOAD0 (rank 0 position 1)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("without --offload"), std::string::npos) << e.what();
  }
}

TEST(PyTorchRunnable, LastStageForwardsRunInMicrobatchOrder) {
  // Valid for pipesched: rank 1 (the last stage) may run microbatch 1 first. PyTorch would give
  // microbatch 0's backward the loss of microbatch 1.
  const ps::Schedule s = csv("0F0,0F1,0B0,0B1\n1F1,1B1,1F0,1B0\n");
  ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  const std::string why = refusal(s);
  EXPECT_NE(why.find("1F1 (rank 1 position 0)"), std::string::npos) << why;
  EXPECT_NE(why.find("microbatch order"), std::string::npos) << why;
  EXPECT_EQ(refusal(csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")), "");
  // An overlap's forward half counts: here it runs microbatch 2 of the last stage before 1.
  const ps::Schedule o = csv("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,(1F2;1B0)OVERLAP_F_B,1F1,1B1,1B2\n");
  ASSERT_TRUE(ps::check(o).ok()) << ps::check(o).summary();
  const std::string why_o = refusal(o);
  EXPECT_NE(why_o.find("(rank 1 position 1)"), std::string::npos) << why_o;
  EXPECT_NE(why_o.find("runs microbatch 2"), std::string::npos) << why_o;
  // Stages other than the last may run microbatches in any order.
  EXPECT_EQ(refusal(csv("0F1,0F0,0B0,0B1\n1F0,1F1,1B0,1B1\n")), "");
}

TEST(PyTorchRunnable, LoweredFilesNeedAWaitForEverySendAndNoIdleSlot) {
  const ps::Schedule s = csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  const ps::Schedule low = ps::lower_communication(s);
  EXPECT_EQ(refusal(low), "");
  const ps::Schedule no_waits = ps::lower_communication(s, {.wait_sends = false});
  ASSERT_TRUE(ps::check(no_waits).ok()) << ps::check(no_waits).summary();
  const std::string why = refusal(no_waits);
  EXPECT_NE(why.find("0SEND_F0 (rank 0 position 1)"), std::string::npos) << why;
  EXPECT_NE(why.find("WAIT_SEND"), std::string::npos) << why;
  // An idle slot: fine in a compute-only file, refused in a lowered one.
  ps::Schedule idle = s;
  idle.ranks[1].insert(idle.ranks[1].begin(), ps::Action::idle());
  EXPECT_EQ(refusal(idle), "");
  ps::Schedule idle_low = low;
  idle_low.ranks[1].insert(idle_low.ranks[1].begin() + 1, ps::Action::idle());
  const std::string why_idle = refusal(idle_low);
  EXPECT_NE(why_idle.find("the idle slot (rank 1 position 1)"), std::string::npos) << why_idle;
}

TEST(PyTorchRunnable, BwIsRefusedAsWrittenAndRespelledB) {
  const ps::Schedule s = csv("0F0,1F0,(0F1;1BW0)OVERLAP_F_B,0BW0,1F1,1BW1,0B1\n");
  ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  EXPECT_EQ(refusal(s), "");  // the schedule itself is PyTorch's
  const std::string why = refusal(s, true);
  EXPECT_NE(why.find("(0F1;1BW0)OVERLAP_F_B (rank 0 position 2)"), std::string::npos) << why;
  EXPECT_NE(why.find("BW"), std::string::npos) << why;
  const ps::Schedule b = ps::spelled_for_pytorch(s);
  EXPECT_EQ(ps::to_csv(b), "0F0,1F0,(0F1;1B0)OVERLAP_F_B,0B0,1F1,1B1,0B1\n");
  EXPECT_EQ(refusal(b, true), "");
  EXPECT_EQ(b, s);  // the same actions, spelled otherwise
}

TEST(PyTorchRunnable, EveryGeneratorsPyTorchSchedulesPass) {
  int checked = 0;
  for (const ps::GeneratorInfo& g : ps::generators()) {
    if (g.name == "chimera") continue;  // two replicas: refused on purpose
    for (int p : {2, 3, 4})
      for (int m : {1, 4, 9}) {
        ps::Schedule s;
        try {
          s = g.generate({.ranks = p, .stages = p * g.default_chunks, .microbatches = m},
                         g.default_wgrad);
        } catch (const ps::invalid_problem&) {
          continue;
        }
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        EXPECT_EQ(refusal(s, true), "");
        EXPECT_EQ(refusal(ps::lower_communication(s), true), "");
        EXPECT_EQ(refusal(ps::lower_communication(s, {.max_outstanding_sends = 1}), true), "");
        ++checked;
      }
  }
  EXPECT_GT(checked, 80);
}

}  // namespace test_pytorch_runnable
