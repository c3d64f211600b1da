// A checkpoint policy of the program's own, written as a user writes one (checkpoint::Custom,
// with_recomputes): it reaches plan<>, the run-time registry and the command's parsing by name,
// and the executor trains what it returns to the sequential reference's numbers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/plan.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/tune/tune.hpp"

#include "../exec/exec_support.hpp"

namespace test_custom_checkpoint {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

// [custom-checkpoint]
// Recompute the even microbatches, each recompute free to run before its gradient arrives;
// the odd ones keep their activations.
struct EvenMicrobatches : ps::checkpoint::Custom {
  static constexpr std::string_view name = "even-microbatches";
  static constexpr std::string_view summary = "recompute the even microbatches, early";
  template <ps::cost_model Cost>
  static ps::Schedule apply(const ps::Schedule& s, const Cost&, const ps::MemoryBudget&) {
    ps::Schedule out = ps::with_recomputes(
        s, [](int /*stage*/, int microbatch, int /*slice*/) { return microbatch % 2 == 0; },
        ps::RecomputeTiming::Early);
    out.name = s.name + "+even";
    return out;
  }
};
// [custom-checkpoint]

// A policy that asks for a budget and recomputes only where one is given.
struct WhereBudgeted : ps::checkpoint::Custom {
  static constexpr std::string_view name = "where-budgeted";
  static constexpr bool needs_budget = true;
  template <ps::cost_model Cost>
  static ps::Schedule apply(const ps::Schedule& s, const Cost& cost, const ps::MemoryBudget& b) {
    return ps::checkpoint_selective(s, cost, b);
  }
};

int recomputes(const ps::Schedule& s, bool* all_early = nullptr) {
  int n = 0;
  if (all_early) *all_early = true;
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      if (a.kind == ps::OpKind::R) {
        ++n;
        if (all_early && a.late) *all_early = false;
      }
  return n;
}

TEST(CustomCheckpoint, PlanAppliesIt) {
  using Plan = ps::plan<ps::order::Interleaved1F1B, EvenMicrobatches>;
  const ps::Problem p{.ranks = 2, .microbatches = 4};
  const ps::Schedule s = Plan::generate(p);
  ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
  bool early = false;
  // Every stage (2 ranks × 2 chunks) recomputes microbatches 0 and 2.
  EXPECT_EQ(recomputes(s, &early), 4 * 2);
  EXPECT_TRUE(early);
  EXPECT_NE(Plan::describe().find("checkpoint even-microbatches"), std::string::npos);
  // Under a cost model and a budget the plan hands both to apply; the same units result.
  const ps::Schedule c = Plan::generate(p, ps::UniformCost{}, ps::MemoryBudget{});
  EXPECT_EQ(c.ranks, s.ranks);
  // Recomputing half the microbatches holds less than keeping them all.
  const double none =
      ps::simulate(ps::plan<ps::order::Interleaved1F1B>::generate(p)).peak_memory_max;
  EXPECT_LT(ps::simulate(s).peak_memory_max, none);
}

TEST(CustomCheckpoint, BudgetedPolicyGetsTheBudget) {
  using Plan = ps::plan<ps::order::OneFOneB, WhereBudgeted>;
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  EXPECT_EQ(recomputes(Plan::generate(p, ps::UniformCost{}, ps::MemoryBudget{})), 0);
  const ps::Schedule tight = Plan::generate(p, ps::UniformCost{}, ps::MemoryBudget{.all = 2});
  EXPECT_GT(recomputes(tight), 0);
  EXPECT_LE(ps::simulate(tight).peak_memory_max, 2 + 1e-9);
}

// Registered once for the program, as a tool built on the registry would.
void register_even() {
  static const bool registered = [] {
    ps::register_checkpoint<EvenMicrobatches>();
    return true;
  }();
  ASSERT_TRUE(registered);
}

TEST(CustomCheckpoint, RegistryFindsItByName) {
  register_even();
  const ps::CheckpointInfo& c = ps::find_checkpoint("even-microbatches");
  EXPECT_EQ(c.name, "even-microbatches");
  EXPECT_FALSE(c.mode.has_value());
  EXPECT_FALSE(c.needs_budget);
  EXPECT_TRUE(c.runs_on(ps::find_generator("zb-v")));
  const ps::Problem p{.ranks = 2, .microbatches = 4};
  const ps::Schedule base = ps::plan<ps::order::OneFOneB>::generate(p);
  const ps::Schedule via_registry = c.apply(base, ps::UniformCost{}, ps::MemoryBudget{});
  EXPECT_EQ(via_registry.ranks,
            (ps::plan<ps::order::OneFOneB, EvenMicrobatches>::generate(p).ranks));
  // A second policy of the same name is refused; an unknown name lists the program's own.
  EXPECT_THROW(ps::register_checkpoint<EvenMicrobatches>(), ps::invalid_problem);
  try {
    ps::find_checkpoint("odd");
    ADD_FAILURE() << "an unknown policy was found";
  } catch (const ps::parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("also offers: even-microbatches"), std::string::npos)
        << e.what();
  }
  // The built-ins keep their facts.
  EXPECT_TRUE(ps::find_checkpoint("mario").needs_budget);
  EXPECT_FALSE(ps::find_checkpoint("mario").runs_on(ps::find_generator("gpipe")));
  EXPECT_TRUE(ps::find_checkpoint("MARIO").runs_on(ps::find_generator("chimera")));
  EXPECT_EQ(ps::find_checkpoint("full-early").mode, ps::CheckpointMode::FullEarly);
}

// The tuner searches the policy as a pair of its own beside the built-in modes: where keeping
// every activation is over the budget, the policy's plan wins, and its figures are the
// simulator's for the schedule it returns.
TEST(CustomCheckpoint, TunerSearchesIt) {
  register_even();
  ps::tuning::Request req{.ranks = 4, .global_batch = 8};
  req.bases = {"1f1b"};
  req.checkpoints = {ps::CheckpointMode::None};
  req.checkpoint_policies = {"even-microbatches"};
  req.full_fallback = false;
  req.budget = ps::MemoryBudget{.all = 3.5};
  req.threads = 2;
  const ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best.has_value());
  EXPECT_EQ(r.best->checkpoint_policy, "even-microbatches");
  EXPECT_GT(r.best->recomputes, 0);
  EXPECT_NE(ps::describe(*r.best).find("even-microbatches"), std::string::npos);
  const ps::SimulationResult sim = ps::simulate(r.best->schedule, ps::UniformCost{});
  EXPECT_DOUBLE_EQ(sim.makespan, r.best->makespan);
  EXPECT_LE(sim.peak_memory_max, 3.5 + 1e-9);
  const ps::tuning::Baseline* own = r.baseline("1f1b", "even-microbatches");
  ASSERT_NE(own, nullptr);
  ASSERT_TRUE(own->plan.has_value());
  EXPECT_EQ(own->plan->schedule.ranks,
            EvenMicrobatches::apply(ps::plan<ps::order::OneFOneB>::generate(
                                        {.ranks = 4, .microbatches = own->plan->microbatches}),
                                    ps::UniformCost{}, ps::MemoryBudget{})
                .ranks);
  // 1F1B without checkpointing holds 4 microbatches on rank 0: over the budget.
  const ps::tuning::Baseline* none = r.baseline("1f1b", ps::CheckpointMode::None);
  ASSERT_NE(none, nullptr);
  EXPECT_FALSE(none->plan.has_value());
  // Every candidate is settled once: one configuration, two checkpointings.
  EXPECT_EQ(r.candidates_total, 2);
  EXPECT_EQ(r.candidates_tried, r.candidates_total);
  // A name nobody registered, or a built-in one, is refused naming the field.
  req.checkpoint_policies = {"nobody"};
  EXPECT_THROW(ps::tune(req, ps::UniformCost{}), ps::invalid_argument);
  req.checkpoint_policies = {"mario"};
  EXPECT_THROW(ps::tune(req, ps::UniformCost{}), ps::invalid_argument);
}

TEST(CustomCheckpoint, ExecutorTrainsWhatItReturns) {
  using Stage = toy::MlpStage<double>;
  const toy::MlpConfig config{.blocks = 4};
  const auto data = toy::make_mlp_data<double>(config, 4, 3);
  const ps::Schedule s =
      ps::plan<ps::order::OneFOneB, EvenMicrobatches>::generate({.ranks = 2, .microbatches = 4});
  ASSERT_GT(recomputes(s), 0);
  std::vector<Stage> ref = exec_test::make_stages<Stage>(config, s.problem.stages);
  std::vector<Stage> piped = exec_test::make_stages<Stage>(config, s.problem.stages);
  ps::ExecutorOptions options;
  options.optimizer = toy::sgd_optimizer(s.placement, piped, exec_test::learning_rate);
  ps::inproc::Pipeline<Stage> pipe(s, piped, options);
  exec_test::step_against_reference<double>(pipe, piped, ref, data, toy::training_data(data));
}

}  // namespace

}  // namespace test_custom_checkpoint
