// Validation: hand-made valid and invalid schedules, each rejected with the right rule.
#include <gtest/gtest.h>

#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/lower_communication.hpp"

namespace test_validate {

namespace ps = pipesched;
using ps::Action;
using ps::OpKind;

namespace {

Action F(int s, int m, int k = 0) {
  return Action::make(OpKind::F, s, m, k);
}
Action B(int s, int m, int k = 0) {
  return Action::make(OpKind::B, s, m, k);
}
Action I(int s, int m, int k = 0) {
  return Action::make(OpKind::I, s, m, k);
}
Action W(int s, int m, int k = 0, int part = 0) {
  return Action::make(OpKind::W, s, m, k, part);
}
Action R(int s, int m, int k = 0) {
  return Action::make(OpKind::R, s, m, k);
}

// A 2-rank, 2-stage, 2-microbatch 1F1B written by hand.
ps::Schedule two_rank_1f1b() {
  ps::Schedule s;
  s.name = "hand-1f1b";
  s.problem = {.ranks = 2, .stages = 2, .microbatches = 2};
  s.placement = ps::Placement::linear(2);
  s.ranks = {{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}, {F(1, 0), B(1, 0), F(1, 1), B(1, 1)}};
  return s;
}

// Checks that `s` breaks `rule` with a message holding `text`, and returns the first
// violation of that rule (an empty one when there is none: the failure is already recorded,
// and callers can read the result without crashing the test program).
ps::Violation expect_rule(const ps::Schedule& s, const std::string& rule, const std::string& text) {
  ps::ValidationReport rep = ps::check(s);
  EXPECT_FALSE(rep.ok()) << "expected a '" << rule << "' violation";
  EXPECT_TRUE(rep.has(rule)) << rep.summary();
  EXPECT_NE(rep.summary(rep.violations.size()).find(text), std::string::npos) << rep.summary();
  EXPECT_THROW(ps::validate(s), ps::invalid_schedule);
  for (const ps::Violation& v : rep.violations)
    if (v.rule == rule) return v;
  return {};
}

}  // namespace

TEST(Validate, AcceptsHandMade1F1B) {
  ps::Schedule s = two_rank_1f1b();
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  EXPECT_NO_THROW(ps::validate(s));
}

TEST(Validate, AcceptsSplitBackwardRecomputeAndIdle) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks = {{F(0, 0), F(0, 1), Action::idle(), R(0, 0), I(0, 0), W(0, 0), I(0, 1), W(0, 1)},
             {F(1, 0), I(1, 0), F(1, 1), I(1, 1), W(1, 1), W(1, 0)}};
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
}

TEST(Validate, AcceptsWeightGradientParts) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[1] = {F(1, 0), I(1, 0), F(1, 1), W(1, 0, 0, 1), I(1, 1), W(1, 0, 0, 0), W(1, 1)};
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  s.ranks[1].pop_back();
  expect_rule(s, "missing", "1W1");
  s.ranks[1].push_back(W(1, 1, 0, 2));  // parts 0 and 1 of 1W1 missing
  expect_rule(s, "missing", "parts 0..1 never run");
  s.ranks[1].push_back(W(1, 1, 0, 0));  // now only part 1
  expect_rule(s, "missing", "but part 1 never runs");
  s.ranks[1].push_back(W(1, 1, 0, 1));
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  s.ranks[1].push_back(W(1, 1, 0, 1));
  expect_rule(s, "duplicate", "W part 1 of 1F1 appears 2 times");
}

// OFFLOAD and RELOAD: each offloaded unit is reloaded once, after its offload and before its
// backward; a unit is not both recomputed and offloaded; offloading is of whole microbatches.
TEST(Validate, OffloadsAreReloadedBeforeTheirBackward) {
  const Action off = Action::make(OpKind::Offload, 0, 0), back = Action::make(OpKind::Reload, 0, 0);
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0] = {F(0, 0), off, F(0, 1), back, B(0, 0), B(0, 1)};
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();

  s.ranks[0] = {F(0, 0), off, F(0, 1), B(0, 0), B(0, 1)};
  expect_rule(s, "missing", "no 0RELOAD0 brings them back");
  s.ranks[0] = {F(0, 0), F(0, 1), back, B(0, 0), B(0, 1)};
  expect_rule(s, "missing", "no 0OFFLOAD0 moved to host memory");
  s.ranks[0] = {F(0, 0), off, F(0, 1), B(0, 0), back, B(0, 1)};
  expect_rule(s, "order", "0B0 at rank 0 position 3 needs 0RELOAD0");
  s.ranks[0] = {off, F(0, 0), F(0, 1), back, B(0, 0), B(0, 1)};
  expect_rule(s, "order", "0OFFLOAD0 at rank 0 position 0 needs 0F0");
  s.ranks[0] = {F(0, 0), off, off, F(0, 1), back, B(0, 0), B(0, 1)};
  expect_rule(s, "duplicate", "0OFFLOAD0 appears 2 times");
  s.ranks[0] = {F(0, 0), off, F(0, 1), back, R(0, 0), B(0, 0), B(0, 1)};
  expect_rule(s, "offload", "also recomputed");
  s.ranks[1] = {F(1, 0), Action::make(OpKind::Offload, 0, 1), B(1, 0), F(1, 1), B(1, 1)};
  s.ranks[0] = {F(0, 0), off, F(0, 1), back, B(0, 0), B(0, 1)};
  expect_rule(s, "placement", "puts on rank 0");

  ps::Schedule sliced;
  sliced.name = "sliced";
  sliced.problem = {.ranks = 1, .stages = 1, .microbatches = 1, .slices = 2};
  sliced.placement = ps::Placement::linear(1);
  sliced.ranks = {{F(0, 0, 0), F(0, 0, 1), Action::make(OpKind::Offload, 0, 0, 1),
                   Action::make(OpKind::Reload, 0, 0, 1), B(0, 0, 1), B(0, 0, 0)}};
  expect_rule(sliced, "offload", "offloading is of whole microbatches");
}

TEST(Validate, MissingBackward) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0].pop_back();
  expect_rule(s, "missing", "never runs the backward of stage 0 microbatch 1");
}

TEST(Validate, MissingWeightGradientAfterI) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0][3] = I(0, 1);
  expect_rule(s, "missing", "never its weight gradient 0W1");
}

TEST(Validate, BackwardBeforeItsForward) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[1] = {B(1, 0), F(1, 0), F(1, 1), B(1, 1)};
  ps::Violation v = expect_rule(s, "order", "1B0 at rank 1 position 0 needs 1F0");
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.position, 0);
  EXPECT_EQ(v.action, B(1, 0));
  // The same rule for a split backward and for a weight gradient before its I.
  s.ranks[1] = {I(1, 0), F(1, 0), W(1, 0), F(1, 1), B(1, 1)};
  expect_rule(s, "order", "1I0 at rank 1 position 0 needs 1F0");
  s.ranks[1] = {F(1, 0), W(1, 0), I(1, 0), F(1, 1), B(1, 1)};
  expect_rule(s, "order", "1W0 at rank 1 position 1 needs 1I0");
}

TEST(Validate, RecomputeAfterItsBackward) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0] = {F(0, 0), F(0, 1), B(0, 0), R(0, 0), B(0, 1)};
  expect_rule(s, "order", "0R0");
}

TEST(Validate, StageOnTwoRanks) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0][1] = F(1, 1);  // stage 1 belongs to rank 1
  s.ranks[1][2] = F(0, 1);
  expect_rule(s, "placement", "which the placement (linear) puts on rank 1");
}

TEST(Validate, OutOfRangeIndex) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0][1] = F(0, 7);
  expect_rule(s, "index-range", "0F7 at rank 0 position 1 is out of range");
  s = two_rank_1f1b();
  s.ranks[1][0] = F(2, 0);
  expect_rule(s, "index-range", "stages run 0..1");
}

TEST(Validate, Duplicates) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0].push_back(F(0, 1));
  expect_rule(s, "duplicate", "0F1 appears 2 times");
  // A recompute twice, a full backward twice, a B beside an I: each one a duplicate.
  s = two_rank_1f1b();
  s.ranks[0] = {F(0, 0), F(0, 1), R(0, 0), R(0, 0), B(0, 0), B(0, 1)};
  EXPECT_EQ(expect_rule(s, "duplicate", "0R0 appears 2 times").action, F(0, 0));
  s = two_rank_1f1b();
  s.ranks[0].push_back(B(0, 1));
  expect_rule(s, "duplicate", "the backward of 0F1 appears 2 times (2 B, 0 I)");
  s = two_rank_1f1b();
  s.ranks[0] = {F(0, 0), F(0, 1), B(0, 0), I(0, 1), B(0, 1), W(0, 1)};
  expect_rule(s, "duplicate", "the backward of 0F1 appears 2 times (1 B, 1 I)");
  s = two_rank_1f1b();
  s.ranks[0].push_back(W(0, 1));
  expect_rule(s, "duplicate", "0W1 runs although the backward is the full 0B1");
}

TEST(Validate, CrossRankDeadlockNamesWhatEachRankWaitsFor) {
  // Rank 0 wants the gradient of microbatch 1 before it has sent microbatch 1's forward.
  ps::Schedule s = two_rank_1f1b();
  s.ranks[0] = {F(0, 0), B(0, 1), F(0, 1), B(0, 0)};
  // 0B1 needs 0F1 later on the same rank: an order error, not a deadlock. Make it cross-rank:
  s.ranks[0] = {F(0, 0), B(0, 0), F(0, 1), B(0, 1)};
  s.ranks[1] = {F(1, 1), F(1, 0), B(1, 0), B(1, 1)};
  // Rank 1 waits for 0F1 (rank 0 position 2); rank 0 waits for 1B0 (rank 1 position 2).
  ps::ValidationReport rep = ps::check(s);
  ASSERT_TRUE(rep.has("deadlock")) << rep.summary();
  const std::string msg = rep.summary();
  EXPECT_NE(msg.find("rank 0 is stuck at position 1 (0B0), waiting for 1B0 (rank 1 position 2)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1 is stuck at position 0 (1F1), waiting for 0F1 (rank 0 position 2)"),
            std::string::npos)
      << msg;
}

TEST(Validate, InconsistentShape) {
  ps::Schedule s = two_rank_1f1b();
  s.ranks.pop_back();
  expect_rule(s, "shape", "it has 1 rank lists");
}

TEST(Validate, OverlapCountsAsForwardAndBackward) {
  // Rank 0 holds stages 0 and 3 (V-shape, 2 ranks); microbatch 0 runs through, then
  // microbatch 1's first forward overlaps microbatch 0's last-stage backward.
  ps::Schedule s;
  s.name = "overlap";
  s.problem = {.ranks = 2, .stages = 4, .microbatches = 2};
  s.placement = ps::Placement::v_shape(2);
  s.ranks = {
      {F(0, 0), F(3, 0), Action::overlap(F(0, 1), B(3, 0)), F(3, 1), B(3, 1), B(0, 0), B(0, 1)},
      {F(1, 0), F(2, 0), F(1, 1), B(2, 0), F(2, 1), B(1, 0), B(2, 1), B(1, 1)}};
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  s.ranks[0][2] = Action::overlap(F(0, 1), B(3, 1));  // 3B1 before 3F1
  expect_rule(s, "order", "needs 3F1");
}

TEST(Validate, ExplicitCommunication) {
  ps::Schedule s = ps::lower_communication(two_rank_1f1b());
  ASSERT_TRUE(s.has_comm());
  EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  // Drop rank 1's first receive: its forward now uses data it never received.
  ps::Schedule broken = s;
  ASSERT_EQ(broken.ranks[1][0].kind, OpKind::RecvF);
  broken.ranks[1].erase(broken.ranks[1].begin());
  expect_rule(broken, "missing-receive", "no 1RECV_F0 comes before it on rank 1");
  // Drop rank 0's first send: the receive has nothing to match.
  broken = s;
  ASSERT_EQ(broken.ranks[0][1].kind, OpKind::SendF);
  broken.ranks[0].erase(broken.ranks[0].begin() + 1);
  expect_rule(broken, "unmatched-comm", "has no matching 0SEND_F0");
}

TEST(LowerCommunication, PlacesReceivesBeforeConsumersAndSendsAfterProducers) {
  ps::Schedule s = ps::lower_communication(two_rank_1f1b());
  auto str = [](const std::vector<Action>& l) {
    std::string out;
    for (const Action& a : l)
      out += (out.empty() ? "" : ",") + ps::to_string(a);
    return out;
  };
  // Each send has its wait: a forward output's after the unit's backward, a gradient's at the end.
  EXPECT_EQ(str(s.ranks[0]),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1");
  EXPECT_EQ(str(s.ranks[1]),
            "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1");
  const ps::Schedule bare = ps::lower_communication(two_rank_1f1b(), {.wait_sends = false});
  EXPECT_EQ(str(bare.ranks[0]), "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1");
  EXPECT_EQ(str(bare.ranks[1]), "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1");
  // Lowering is idempotent.
  EXPECT_EQ(ps::lower_communication(s), s);
}

}  // namespace test_validate
