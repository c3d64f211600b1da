// Simulator: transfers beside the rank's compute. Data-parallel gradient reductions as actions:
// a REDUCE_GRAD is a transfer on its rank's data-parallel link that overlaps the rest of the
// list; its WAIT_REDUCE_GRAD waits for it; a rank's reductions serialize; a cost without
// `reduce_seconds` charges nothing; and TransformerCost's per-stage reductions never make a
// step slower than its step_tail. Copies of offloaded activations: an OFFLOAD waits for the copy
// its forward started on the link to host memory, a RELOAD's copy back runs on the other
// direction while the rank computes, and the backward waits for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_simulate_reduction {

namespace ps = pipesched;
using ps::Action;
using ps::OpKind;

namespace {

constexpr double eps = 1e-9;

// UniformCost plus a reduction time per stage.
struct ReducingCost : ps::UniformCost {
  std::map<int, double> reduce;  // by stage; absent = 0
  double reduce_seconds(const ps::CostContext&, int, int stage) const {
    auto it = reduce.find(stage);
    return it == reduce.end() ? 0.0 : it->second;
  }
};
static_assert(ps::has_reduce_seconds<ReducingCost>);
static_assert(!ps::has_reduce_seconds<ps::UniformCost>);

// Where `kind` of `stage` sits in rank r's list.
std::size_t position_of(const ps::Schedule& s, int r, OpKind kind, int stage) {
  const auto& list = s.ranks[static_cast<std::size_t>(r)];
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == kind && list[i].stage == stage) return i;
  ADD_FAILURE() << "no " << static_cast<int>(kind) << " of stage " << stage << " on rank " << r;
  return 0;
}

// One rank holding two stages (each action takes half the rank's time: F 0.5, B 1).
ps::Schedule two_stages_on_one_rank(std::vector<Action> list) {
  ps::Schedule s;
  s.name = "two-stages";
  s.problem = {.ranks = 1, .stages = 2, .microbatches = 1};
  s.placement = ps::Placement::interleaved(1, 2);
  s.ranks = {std::move(list)};
  return s;
}

}  // namespace

// 1F1B on 2 ranks, f = 1, b = 2: rank 1's last backward ends 2 before rank 0's. Its reduction
// hides in that cooldown when shorter, and lengthens the step by exactly the excess when longer.
TEST(SimulateReduction, OverlapsTheCooldownAndChargesOnlyTheExcess) {
  const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4});
  const ps::Schedule s = ps::add_gradient_reduction(base);
  ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  const ps::SimulationResult plain = ps::simulate(base);
  ASSERT_NEAR(plain.ranks[0].end - plain.ranks[1].end, 2.0, eps);

  ReducingCost cost;
  cost.reduce[1] = 1.5;  // ends 0.5 before rank 0's list
  ps::SimulationResult hidden = ps::simulate(s, cost);
  ASSERT_FALSE(hidden.deadlock);
  EXPECT_NEAR(hidden.makespan, plain.makespan, eps);
  EXPECT_NEAR(hidden.ranks[1].end, plain.ranks[1].end + 1.5, eps);
  EXPECT_NEAR(hidden.ranks[1].busy, plain.ranks[1].busy, eps);  // the link, not the rank

  cost.reduce[1] = 3.0;  // 1 beyond rank 0's end
  cost.reduce[0] = 0.25;
  const ps::SimulationResult longer = ps::simulate(s, cost);
  EXPECT_NEAR(longer.makespan, plain.makespan + 1.0, eps);
  EXPECT_NEAR(longer.ranks[0].end, plain.ranks[0].end + 0.25, eps);
  // The wait starts once the reduction is in.
  const std::size_t wait = position_of(s, 1, OpKind::WaitReduceGrad, 1);
  EXPECT_NEAR(longer.timing[1][wait].start, plain.ranks[1].end + 3.0, eps);
  // Lowered to sends and receives, the same.
  const ps::Schedule lowered = ps::add_gradient_reduction(ps::lower_communication(base));
  EXPECT_NEAR(ps::simulate(lowered, cost).makespan, longer.makespan, eps);
}

// F0 F1 B1 REDUCE(1) B0 WAIT(1) REDUCE(0) WAIT(0): the wait holds the rank until stage 1's
// reduction (3, from t = 2) is in; stage 0's then runs from 5.
TEST(SimulateReduction, WaitHoldsTheRankUntilTheReductionEnds) {
  const ps::Schedule s = ps::add_gradient_reduction(
      two_stages_on_one_rank({Action::make(OpKind::F, 0, 0), Action::make(OpKind::F, 1, 0),
                              Action::make(OpKind::B, 1, 0), Action::make(OpKind::B, 0, 0)}));
  ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  ASSERT_EQ(ps::to_string(s.ranks[0][3]), "1REDUCE_GRAD");
  ReducingCost cost;
  cost.reduce = {{0, 0.25}, {1, 3.0}};
  const ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_NEAR(r.timing[0][4].start, 2.0, eps);  // B0 runs during stage 1's reduction
  EXPECT_NEAR(r.timing[0][4].end, 3.0, eps);
  EXPECT_NEAR(r.timing[0][position_of(s, 0, OpKind::WaitReduceGrad, 1)].start, 5.0, eps);
  EXPECT_NEAR(r.timing[0][position_of(s, 0, OpKind::WaitReduceGrad, 0)].start, 5.25, eps);
  EXPECT_NEAR(r.makespan, 5.25, eps);
  EXPECT_NEAR(r.ranks[0].busy, 3.0, eps);
}

// Two reductions open at once on one rank share its link: the second starts when the first
// ends, not when it is reached.
TEST(SimulateReduction, ARanksReductionsSerializeOnItsLink) {
  const ps::Schedule s = two_stages_on_one_rank(
      {Action::make(OpKind::F, 0, 0), Action::make(OpKind::F, 1, 0), Action::make(OpKind::B, 1, 0),
       Action::make(OpKind::ReduceGrad, 1, 0), Action::make(OpKind::B, 0, 0),
       Action::make(OpKind::ReduceGrad, 0, 0), Action::make(OpKind::WaitReduceGrad, 1, 0),
       Action::make(OpKind::WaitReduceGrad, 0, 0)});
  ReducingCost cost;
  cost.reduce = {{0, 0.25}, {1, 3.0}};
  const ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_NEAR(r.timing[0][6].start, 5.0, eps);   // stage 1's: 2 to 5
  EXPECT_NEAR(r.timing[0][7].start, 5.25, eps);  // stage 0's: reached at 3, runs 5 to 5.25
  EXPECT_NEAR(r.makespan, 5.25, eps);
  // Without waits the rank still ends when its gradients are reduced.
  ps::Schedule unwaited = s;
  unwaited.ranks[0].resize(6);
  EXPECT_NEAR(ps::simulate(unwaited, cost).makespan, 5.25, eps);
}

// Costs without the hook (and ProfiledCost without figures) time a schedule with reductions
// as they time it without: the whole-stage actions take no time. Every order's schedule with
// its reductions validates, Chimera's (whose replica-1 stages reduce too) included.
TEST(SimulateReduction, CostsWithoutTheHookAreUnchanged) {
  for (const ps::GeneratorInfo& g : ps::generators()) {
    SCOPED_TRACE(g.name);
    const ps::Schedule base = g.generate({.ranks = 4, .microbatches = 8}, g.default_wgrad);
    for (const ps::Schedule& b : {base, ps::lower_communication(base)}) {
      const ps::Schedule s = ps::add_gradient_reduction(b);
      ASSERT_TRUE(s.has_gradient_reduction());
      EXPECT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
      EXPECT_NO_THROW(ps::validate(s));
      const ps::UniformCost uniform{.comm = 0.25};
      ps::ProfiledCost profiled;
      profiled.stages.assign(static_cast<std::size_t>(s.problem.stages),
                             {.forward = 1, .backward_input = 1.5, .backward_weight = 0.5});
      profiled.transfer = 0.1;
      for (int which = 0; which < 2; ++which) {
        const ps::SimulationResult a = which ? ps::simulate(b, profiled) : ps::simulate(b, uniform);
        const ps::SimulationResult r = which ? ps::simulate(s, profiled) : ps::simulate(s, uniform);
        ASSERT_FALSE(r.deadlock);
        EXPECT_NEAR(r.makespan, a.makespan, eps);
        for (int k = 0; k < s.rank_count(); ++k) {
          EXPECT_NEAR(r.ranks[k].end, a.ranks[k].end, eps);
          EXPECT_NEAR(r.ranks[k].busy, a.ranks[k].busy, eps);
        }
      }
    }
  }
}

// ProfiledCost carries a measured reduction per stage: the same timeline as a cost that
// gives the same seconds.
TEST(SimulateReduction, ProfiledCostCarriesMeasuredReductions) {
  const ps::Schedule s =
      ps::add_gradient_reduction(ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4}));
  ps::ProfiledCost profiled;
  profiled.stages.assign(2, {.forward = 1, .backward_input = 1, .backward_weight = 1});
  profiled.stages[0].gradient_reduction = 0.25;
  profiled.stages[1].gradient_reduction = 3.0;
  ReducingCost same;
  same.reduce = {{0, 0.25}, {1, 3.0}};
  EXPECT_NEAR(ps::simulate(s, profiled).makespan, ps::simulate(s, same).makespan, eps);
  EXPECT_GT(
      ps::simulate(s, profiled).makespan,
      ps::simulate(ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 4}), profiled).makespan);
}

// TransformerCost: each stage's reduction is its share of the rank's gradient bytes on the
// same link; the rank's stages together pay the ring's latency once each.
TEST(SimulateReduction, TransformerCostReducesEachStagesShare) {
  ps::TransformerCost c{ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("h100"), {}};
  c.parallel.data = 4;
  const ps::Problem p{.ranks = 4, .stages = 8, .microbatches = 8};
  const ps::Placement pl = ps::Placement::interleaved(4, 2);
  const ps::CostContext ctx{p, pl, 1};
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int stage : pl.stages_of(r)) {
      const double t = c.reduce_seconds(ctx, r, stage);
      EXPECT_NEAR(t, c.data_parallel_allreduce(r, 2 * c.stage_parameters(ctx, stage)), 1e-15);
      sum += t;
    }
    const double latency = 2.0 * (4 - 1) * c.device.link_latency;  // one ring's, per stage
    EXPECT_NEAR(sum, c.gradient_sync_seconds(ctx, r) + latency, 1e-12);
  }
  // With the reduction as actions, step_tail leaves the all-reduce out.
  c.parallel.whole_step = true;
  ps::CostContext scheduled = ctx;
  scheduled.scheduled_reduction = true;
  EXPECT_EQ(c.step_tail(scheduled, 1), c.optimizer_seconds(ctx, 1));
  EXPECT_GT(c.step_tail(ctx, 1), c.step_tail(scheduled, 1));
  EXPECT_THROW((void)c.reduce_seconds(ctx, 0, 8), ps::invalid_schedule);
  EXPECT_THROW((void)c.reduce_seconds(ctx, 4, 0), ps::invalid_problem);
}

// The step with the reduction as actions is never longer than with it in step_tail, equal for
// one replica, and shorter where a rank holds a stage that finishes its backward early.
TEST(SimulateReduction, TransformerCostActionsAreNoSlowerThanTheStepTail) {
  for (int d : {1, 8}) {
    for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b", "zb-v", "chimera"}) {
      SCOPED_TRACE(std::string(name) + " d=" + std::to_string(d));
      ps::TransformerCost c{
          ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("h100"), {}};
      c.parallel.data = d;
      c.parallel.whole_step = true;
      const ps::GeneratorInfo& g = ps::find_generator(name);
      const ps::Schedule base = g.generate({.ranks = 4, .microbatches = 8}, g.default_wgrad);
      const ps::SimulationResult tail = ps::simulate(base, c);
      const ps::Schedule reduced = ps::add_gradient_reduction(base);
      EXPECT_NO_THROW(ps::validate(reduced));
      const ps::SimulationResult actions = ps::simulate(reduced, c);
      ASSERT_FALSE(actions.deadlock);
      if (d == 1) {
        EXPECT_NEAR(actions.makespan, tail.makespan, 1e-12 * tail.makespan);
        continue;
      }
      EXPECT_LE(actions.makespan, tail.makespan * (1 + 1e-12));
      if (std::string(name) == "chimera") continue;  // two replicas' stages per rank
      if (std::string(name) == "interleaved-1f1b" || std::string(name) == "zb-v")
        EXPECT_LT(actions.makespan, tail.makespan);
      else  // one stage per rank: its reduction starts at the list's end, as step_tail's
        EXPECT_NEAR(actions.makespan, tail.makespan, 1e-9 * tail.makespan);
    }
  }
}

namespace {

Action off(int m) {
  return Action::make(OpKind::Offload, 0, m);
}
Action back(int m) {
  return Action::make(OpKind::Reload, 0, m);
}
Action one(OpKind k, int m) {
  return Action::make(k, 0, m);
}

// One rank, one stage: F takes 1, B 2, a copy `copy` (UniformCost's unit share is 1).
ps::Schedule one_rank(std::vector<Action> list, int microbatches) {
  ps::Schedule s;
  s.name = "offloading";
  s.problem = {.ranks = 1, .stages = 1, .microbatches = microbatches};
  s.placement = ps::Placement::linear(1);
  s.ranks = {std::move(list)};
  return s;
}

}  // namespace

TEST(SimulateOffload, TheRankWaitsAtTheOffloadAndTheBackwardForTheReload) {
  const ps::Schedule s = one_rank(
      {one(OpKind::F, 0), off(0), one(OpKind::F, 1), one(OpKind::B, 1), back(0), one(OpKind::B, 0)},
      2);
  ps::validate(s);
  const ps::SimulationResult r = ps::simulate(s, ps::UniformCost{.copy = 3});
  // F0 0-1; its copy 1-4, so OFFLOAD0 at 4; F1 4-5; B1 5-7; RELOAD0 at 7, its copy 7-10; B0
  // 10-12.
  EXPECT_NEAR(r.timing[0][1].start, 4, eps);
  EXPECT_NEAR(r.timing[0][2].start, 4, eps);
  EXPECT_NEAR(r.timing[0][4].start, 7, eps);
  EXPECT_NEAR(r.timing[0][5].start, 10, eps);
  EXPECT_NEAR(r.makespan, 12, eps);
  EXPECT_NEAR(r.ranks[0].busy, 6, eps);  // copies do not occupy the rank
  EXPECT_NEAR(r.ranks[0].host_copy_seconds, 6, eps);
  // One microbatch's activations at a time on the device (two without the offload), one in
  // host memory.
  EXPECT_NEAR(r.ranks[0].peak_memory, 1, eps);
  EXPECT_NEAR(r.ranks[0].peak_host_memory, 1, eps);
  EXPECT_NEAR(r.peak_host_memory_max, 1, eps);
  const ps::Schedule kept =
      one_rank({one(OpKind::F, 0), one(OpKind::F, 1), one(OpKind::B, 1), one(OpKind::B, 0)}, 2);
  EXPECT_NEAR(ps::simulate(kept, ps::UniformCost{}).peak_memory_max, 2, eps);
  EXPECT_NEAR(ps::simulate(kept, ps::UniformCost{}).peak_host_memory_max, 0, eps);
  // Copies of no time: the compute's step; the rank waits at the OFFLOAD for what is left of
  // its copy (F0 ended at 1, the copy at 2), the backward for its RELOAD's (5 to 6).
  EXPECT_NEAR(ps::simulate(s, ps::UniformCost{.copy = 0}).makespan, 6, eps);
  EXPECT_NEAR(ps::simulate(s, ps::UniformCost{.copy = 1}).makespan, 8, eps);
}

TEST(SimulateOffload, CopiesOfOneDirectionRunOneAfterAnother) {
  const ps::Schedule s = one_rank({one(OpKind::F, 0), one(OpKind::F, 1), off(0), off(1), back(1),
                                   back(0), one(OpKind::B, 1), one(OpKind::B, 0)},
                                  2);
  ps::validate(s);
  const ps::SimulationResult r = ps::simulate(s, ps::UniformCost{.copy = 3});
  // Copies to host: 1-4 and 4-7 (F1 ended at 2, the link was busy); OFFLOAD1 at 7. Copies
  // back, both posted at 7: 7-10 and 10-13; B1 10-12, B0 13-15.
  EXPECT_NEAR(r.timing[0][2].start, 4, eps);
  EXPECT_NEAR(r.timing[0][3].start, 7, eps);
  EXPECT_NEAR(r.timing[0][6].start, 10, eps);
  EXPECT_NEAR(r.timing[0][7].start, 13, eps);
  EXPECT_NEAR(r.makespan, 15, eps);
  EXPECT_NEAR(r.ranks[0].peak_host_memory, 2, eps);
}

TEST(SimulateOffload, CostsTimeTheCopiesFromTheirBytes) {
  const ps::Schedule s = one_rank({one(OpKind::F, 0), off(0), back(0), one(OpKind::B, 0)}, 1);
  ps::ProfiledCost p;
  p.stages = {{.forward = 1, .backward_input = 1, .backward_weight = 1, .activation_bytes = 6e9}};
  EXPECT_NEAR(ps::simulate(s, p).makespan, 3, eps);  // no bandwidth: copies take no time
  p.host_link_bandwidth = 2e9;
  EXPECT_NEAR(ps::simulate(s, p).makespan, 3 + 3 + 3, eps);
  // TransformerCost: the unit's activations over the GPU's PCIe link (H100: PCIe 5.0 x16 at
  // NCCL's 48 GB/s; peer-to-peer, so no staging latency).
  ps::TransformerCost c{ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("h100"), {}};
  const ps::Problem problem{.ranks = 1, .microbatches = 1};
  const ps::Placement pl = ps::Placement::linear(1);
  const ps::CostContext ctx{problem, pl, 1};
  const double bytes = c.memory_delta(ctx, one(OpKind::F, 0), false);
  EXPECT_GT(bytes, 0);
  EXPECT_DOUBLE_EQ(c.host_copy_seconds(ctx, off(0)), bytes / 48e9);
  EXPECT_DOUBLE_EQ(c.host_copy_seconds(ctx, one(OpKind::F, 0)), 0.0);
  c.device.host_link_bandwidth = 0;
  try {
    (void)c.host_copy_seconds(ctx, back(0));
    ADD_FAILURE() << "a copy was timed without a host link";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "DeviceSpec.host_link_bandwidth");
    EXPECT_NE(std::string(e.what()).find("gives no host_link_bandwidth"), std::string::npos);
  }
}

}  // namespace test_simulate_reduction
