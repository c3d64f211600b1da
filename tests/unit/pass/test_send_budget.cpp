// Communication lowering under a budget of outstanding sends (LowerOptions::
// max_outstanding_sends, PyTorch's max_outstanding_sends): over every generator and a grid of
// sizes, the lowered schedule validates (no deadlock), keeps each rank's compute order, has a
// wait for every send, keeps every channel in order, and never has more than the budget's sends
// open on a rank, counted here on their own from the action lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"

namespace ps = pipesched;

namespace {

using Unit = std::tuple<int, int, int>;  // stage, microbatch, slice

// The most sends a rank has open (posted, its wait not yet reached) right after a send, over
// all ranks; -1 when some send has no wait after it or a wait has no send before it.
int most_open_sends(const ps::Schedule& s) {
  int most = 0;
  for (const auto& list : s.ranks) {
    std::map<std::pair<bool, Unit>, int> open;
    int now = 0;
    for (const ps::Action& a : list) {
      const Unit u{a.stage, a.microbatch, a.slice};
      if (a.kind == ps::OpKind::SendF || a.kind == ps::OpKind::SendB) {
        if (open[{a.kind == ps::OpKind::SendF, u}]++ != 0) return -1;
        most = std::max(most, ++now);
      } else if (ps::is_wait_send(a.kind)) {
        auto it = open.find({a.kind == ps::OpKind::WaitSendF, u});
        if (it == open.end() || it->second != 1) return -1;
        open.erase(it);
        --now;
      }
    }
    if (now != 0) return -1;
  }
  return most;
}

// Per channel (sender rank -> receiver rank), are the receives in the order of the sends?
bool channels_in_order(const ps::Schedule& s) {
  std::map<std::pair<int, int>, std::vector<std::pair<bool, Unit>>> sent, got;
  for (int r = 0; r < s.rank_count(); ++r)
    for (const ps::Action& a : s.ranks[r]) {
      const int mb = a.microbatch, sl = a.slice;
      if (a.kind == ps::OpKind::SendF)
        sent[{r, s.placement.rank_of(a.stage + 1)}].push_back({true, {a.stage, mb, sl}});
      else if (a.kind == ps::OpKind::SendB)
        sent[{r, s.placement.rank_of(a.stage - 1)}].push_back({false, {a.stage, mb, sl}});
      else if (a.kind == ps::OpKind::RecvF)
        got[{s.placement.rank_of(a.stage - 1), r}].push_back({true, {a.stage - 1, mb, sl}});
      else if (a.kind == ps::OpKind::RecvB)
        got[{s.placement.rank_of(a.stage + 1), r}].push_back({false, {a.stage + 1, mb, sl}});
    }
  return sent == got;
}

std::vector<ps::Action> compute_of(const std::vector<ps::Action>& list) {
  std::vector<ps::Action> out;
  for (const ps::Action& a : list)
    if (!ps::is_comm(a.kind) && !ps::is_wait_send(a.kind)) out.push_back(a);
  return out;
}

}  // namespace

TEST(SendBudget, EveryGeneratorOverTheGridKeepsTheBudget) {
  int checked = 0, over_budget_without = 0;
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {2, 3, 4, 6})
      for (int m : {1, 2, 4, 7, 12})
        for (int v : {1, 2, 3})
          for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
            if (!g.chunks_vary && v != g.default_chunks) continue;
            if ((wg == ps::WGradMode::Fused && !g.fused) ||
                (wg == ps::WGradMode::Split && !g.split))
              continue;
            ps::Schedule s;
            try {
              s = g.generate({.ranks = p, .stages = p * v, .microbatches = m}, wg);
            } catch (const ps::invalid_problem&) {
              continue;  // refusals are tested with each generator
            }
            SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " m=" +
                         std::to_string(m) + " v=" + std::to_string(v) + " " + ps::to_string(wg));
            const ps::Schedule plain = ps::lower_communication(s);
            if (most_open_sends(plain) > 1) ++over_budget_without;
            for (int budget : {1, 2, 3}) {
              const ps::Schedule low =
                  ps::lower_communication(s, {.max_outstanding_sends = budget});
              const ps::ValidationReport rep = ps::check(low);
              ASSERT_TRUE(rep.ok()) << "budget " << budget << ": " << rep.summary();
              const int most = most_open_sends(low);
              ASSERT_GE(most, 0) << "budget " << budget << ": a send without its wait";
              EXPECT_LE(most, budget);
              EXPECT_TRUE(channels_in_order(low)) << "budget " << budget;
              for (int r = 0; r < s.rank_count(); ++r)
                ASSERT_EQ(compute_of(low.ranks[r]), compute_of(s.ranks[r])) << "rank " << r;
              // The same messages as without a budget, only placed differently.
              std::size_t comm = 0, plain_comm = 0;
              for (const auto& l : low.ranks)
                comm += l.size();
              for (const auto& l : plain.ranks)
                plain_comm += l.size();
              EXPECT_EQ(comm, plain_comm) << "budget " << budget;
              EXPECT_FALSE(ps::simulate(low).deadlock);
              ++checked;
            }
          }
  EXPECT_GT(checked, 300);
  // Without a budget many schedules have more than one send open: the option changes them.
  EXPECT_GT(over_budget_without, 50);
  std::cout << "[ budget  ] " << checked << " lowerings keep their send budget; "
            << over_budget_without << " schedules had more than one send open without one\n";
}

TEST(SendBudget, OneSendOpenWaitsBeforeTheNextSend) {
  const ps::Schedule s =
      ps::find_generator("gpipe").generate({.ranks = 2, .microbatches = 3}, ps::WGradMode::Fused);
  const ps::Schedule low = ps::lower_communication(s, {.max_outstanding_sends = 1});
  auto text = [](const std::vector<ps::Action>& l) {
    std::string out;
    for (const ps::Action& a : l)
      out += (out.empty() ? "" : ",") + ps::to_string(a);
    return out;
  };
  // Rank 0 waits for each forward send before its next send; a receive is posted as soon as
  // its send is placed, so rank 1's gradients are all posted here before rank 0's first B.
  EXPECT_EQ(text(low.ranks[0]),
            "0F0,0SEND_F0,0F1,0WAIT_SEND_F0,0SEND_F1,0F2,0WAIT_SEND_F1,0SEND_F2,0RECV_B0,0RECV_B1,"
            "0RECV_B2,0B0,0B1,0B2,0WAIT_SEND_F2");
  EXPECT_TRUE(ps::check(low).ok()) << ps::check(low).summary();
}

TEST(SendBudget, BadBudgetsAndDeadlocksAreRefused) {
  const ps::Schedule s =
      ps::find_generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused);
  try {
    (void)ps::lower_communication(s, {.max_outstanding_sends = -1});
    FAIL() << "a negative budget was taken";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "LowerOptions.max_outstanding_sends");
    EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ps::lower_communication(s, {.wait_sends = false, .max_outstanding_sends = 1}),
               ps::invalid_argument);
  // Rank 0 runs its backward first, which needs rank 1's gradient, which needs rank 0's
  // forward: nothing can be placed.
  ps::Schedule stuck = s;
  stuck.ranks[0] = {ps::parse_action("0B0"), ps::parse_action("0F0")};
  stuck.ranks[1] = {ps::parse_action("1F0"), ps::parse_action("1B0")};
  stuck.problem.microbatches = 1;
  try {
    (void)ps::lower_communication(stuck, {.max_outstanding_sends = 1});
    FAIL() << "a deadlocking schedule was lowered";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
}
