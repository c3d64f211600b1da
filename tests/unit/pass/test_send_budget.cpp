// Communication lowering under a budget of outstanding sends (LowerOptions::
// max_outstanding_sends, PyTorch's max_outstanding_sends): over every generator and a grid of
// sizes, the lowered schedule validates (no deadlock), keeps each rank's compute order, has a
// wait for every send, keeps every channel in order, and never has more than the budget's sends
// open on a rank, counted here on their own from the action lists. Under simulate's unit costs
// the budgeted lowering is never slower than PyTorch 2.15's own lowering of the same compute
// order under the same budget (its makespans stored in tests/data/pytorch215).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_send_budget {

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
  // Rank 0 waits for each forward send before its next send. A receive is placed when its send
  // is, in the order the actions start (rank 0's F1 and rank 1's F0 both start at 1: the lower
  // rank first), so rank 1 posts two receives before its first forward, and rank 0 each
  // gradient's receive right before the B it feeds.
  EXPECT_EQ(text(low.ranks[0]),
            "0F0,0SEND_F0,0F1,0WAIT_SEND_F0,0SEND_F1,0F2,0WAIT_SEND_F1,0SEND_F2,0RECV_B0,0B0,"
            "0RECV_B1,0B1,0RECV_B2,0B2,0WAIT_SEND_F2");
  EXPECT_EQ(text(low.ranks[1]),
            "1RECV_F0,1RECV_F1,1F0,1RECV_F2,1F1,1F2,1B0,1SEND_B0,1B1,1WAIT_SEND_B0,1SEND_B1,1B2,"
            "1WAIT_SEND_B1,1SEND_B2,1WAIT_SEND_B2");
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

namespace {

// One row of tests/data/send_budget/pytorch215_makespans.csv (see
// tests/data/send_budget/README.md).
struct BudgetFigure {
  std::string schedule;
  int chunks = 0, ranks = 0, microbatches = 0, budget = 0;
  double compute = 0, pytorch = 0;
};

std::vector<BudgetFigure> budget_figures() {
  const std::string path =
      std::string(PIPESCHED_TEST_DATA_DIR) + "/send_budget/pytorch215_makespans.csv";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<BudgetFigure> out;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream row(line);
    BudgetFigure f;
    row >> f.schedule >> f.chunks >> f.ranks >> f.microbatches >> f.budget >> f.compute >>
        f.pytorch;
    EXPECT_TRUE(row) << "cannot read the line '" << line << "' of " << path;
    if (row) out.push_back(f);
  }
  return out;
}

double budget_makespan(const ps::Schedule& s, int budget) {
  return ps::simulate(ps::lower_communication(s, {.max_outstanding_sends = budget})).makespan;
}

}  // namespace

TEST(SendBudget, NeverSlowerThanPyTorchsOwnLowering) {
  const std::vector<BudgetFigure> figures = budget_figures();
  ASSERT_GT(figures.size(), 400u);
  int kept = 0, pytorch_kept = 0, faster = 0;
  for (const BudgetFigure& f : figures) {
    SCOPED_TRACE(f.schedule + " chunks " + std::to_string(f.chunks) +
                 " p=" + std::to_string(f.ranks) + " m=" + std::to_string(f.microbatches) +
                 " budget " + std::to_string(f.budget));
    const ps::GeneratorInfo& g = ps::find_generator(f.schedule);
    const int v = f.chunks > 0 ? f.chunks : g.default_chunks;
    const ps::Schedule s = g.generate(
        {.ranks = f.ranks, .stages = f.ranks * v, .microbatches = f.microbatches}, g.default_wgrad);
    // The same compute order PyTorch lowered (the figures keep 12 digits).
    const double tolerance = 1e-9 * std::max(1.0, f.compute);
    ASSERT_NEAR(ps::simulate(s).makespan, f.compute, tolerance);
    const double mine = budget_makespan(s, f.budget);
    EXPECT_LE(mine, f.pytorch + tolerance);
    if (f.pytorch <= f.compute + tolerance) {
      ++pytorch_kept;
      EXPECT_LE(mine, f.compute + tolerance) << "PyTorch keeps the makespan, pipesched does not";
    }
    kept += mine <= f.compute + tolerance;
    faster += mine < f.pytorch - tolerance;
  }
  std::cout << "[ budget  ] " << figures.size() << " cases: the budget keeps the makespan in "
            << kept << " (PyTorch's lowering: " << pytorch_kept << "), faster than PyTorch's in "
            << faster << "\n";
}

TEST(SendBudget, LoopedBfsP4M9KeepsItsMakespan) {
  // The smallest case where waiting for the oldest send in a greedy order cost time: 31.5
  // without a budget, and 31.5 with PyTorch's lowering under max_outstanding_sends=1.
  const ps::Schedule s =
      ps::find_generator("looped-bfs")
          .generate({.ranks = 4, .stages = 8, .microbatches = 9}, ps::WGradMode::Fused);
  EXPECT_DOUBLE_EQ(ps::simulate(s).makespan, 31.5);
  EXPECT_DOUBLE_EQ(ps::simulate(ps::lower_communication(s)).makespan, 31.5);
  for (int budget : {1, 2, 3})
    EXPECT_DOUBLE_EQ(budget_makespan(s, budget), 31.5) << "budget " << budget;
}

}  // namespace test_send_budget
