// The open extension points of plan<>: refined and user order policies (the order's
// `generate` customization point), schedule facts held once by the order tags and read by
// the registry, run-time registration of a user's generator and the tuner searching it,
// wgrad::Fine<Parts> and checkpoint::SelectiveWithin<N>.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/policy/policy.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/list_schedule.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::test_custom_orders {
namespace {

// A refined built-in: inherits every fact and the generator.
struct MyOneFOneB : order::OneFOneB {};
// A refined built-in with its own name: still 1F1B's generator.
struct RenamedZbH1 : order::ZeroBubbleH1 {
  static constexpr std::string_view name = "renamed-zb-h1";
};

// 1F1B's order, but a rank may run ahead while it holds fewer than `N` microbatches'
// activations (UniformCost: one microbatch of a rank is 1 memory unit).
struct AheadRule {
  double limit;
  int priority(const RankState&, const ReadyAction& a) const {
    return a.action.kind == OpKind::F ? 1 : 0;  // backwards first
  }
  bool admit(const RankState& st, const ReadyAction& a) const {
    return a.action.kind != OpKind::F || st.memory + a.memory <= limit + 1e-9;
  }
};

template <int N>
struct RunAhead : order::Custom {
  static constexpr std::string_view name = "run-ahead";
  static constexpr std::string_view summary = "1F1B that runs ahead within N microbatches";
  using default_wgrad = wgrad::Split;
  static Schedule generate(Problem p, WGradMode w) { return generate(p, w, UniformCost{}); }
  template <cost_model Cost>
  static Schedule generate(Problem p, WGradMode w, const Cost& cost) {
    const Placement placement = Placement::linear(p.ranks);
    return list_schedule({.problem = p, .placement = placement, .wgrad = w, .name = "run-ahead"},
                         AheadRule{double(N)}, cost);
  }
};

TEST(CustomOrder, RefinedBuiltinInheritsItsGeneratorAndFacts) {
  const Problem p{.ranks = 4, .microbatches = 8};
  EXPECT_EQ(plan<MyOneFOneB>::generate(p).ranks, plan<order::OneFOneB>::generate(p).ranks);
  EXPECT_EQ(plan<RenamedZbH1>::generate(p).ranks, plan<order::ZeroBubbleH1>::generate(p).ranks);
  EXPECT_TRUE((std::is_same_v<plan<RenamedZbH1>::wgrad, wgrad::Split>));
  EXPECT_TRUE(checkpoint::Mario::runs_on<MyOneFOneB>);
  EXPECT_NE(plan<RenamedZbH1>::describe().find("renamed-zb-h1"), std::string::npos);
  // A refined order takes Mario as its base does.
  const Schedule m =
      plan<MyOneFOneB, checkpoint::Mario>::generate(p, UniformCost{}, MemoryBudget{.all = 2});
  EXPECT_TRUE(check(m).ok()) << check(m).summary();
}

TEST(CustomOrder, UserRuleOrderRunsThroughPlan) {
  const Problem p{.ranks = 4, .microbatches = 12};
  using P = plan<RunAhead<6>>;
  EXPECT_TRUE((std::is_same_v<P::wgrad, wgrad::Split>));
  const Schedule s = P::generate(p);
  ASSERT_TRUE(check(s).ok()) << check(s).summary();
  const SimulationResult r = simulate(s, UniformCost{});
  ASSERT_FALSE(r.deadlock);
  for (const RankSummary& rank : r.ranks)
    EXPECT_LE(rank.peak_memory, 6 + 1e-9);
  // Holding up to 6 microbatches instead of 1F1B's p − r: no slower than 1F1B with split W.
  const SimulationResult one = simulate(plan<order::OneFOneB, wgrad::Split>::generate(p));
  EXPECT_LE(r.makespan, one.makespan + 1e-9);
  // A tighter cap holds less.
  const SimulationResult tight = simulate(plan<RunAhead<2>>::generate(p));
  for (const RankSummary& rank : tight.ranks)
    EXPECT_LE(rank.peak_memory, 2 + 1e-9);
  EXPECT_GE(tight.makespan, r.makespan - 1e-9);
  // The cost-aware generator is the one plan<> calls with a cost.
  const UniformCost slow_w{.f = 1, .b = 3, .w = 2};
  const Schedule c = P::generate(p, slow_w, MemoryBudget{});
  EXPECT_TRUE(check(c).ok()) << check(c).summary();
  EXPECT_EQ(c.name, "run-ahead");
}

// Promises the default Linear placement and builds an interleaved one.
struct WrongPlacement : order::Custom {
  static constexpr std::string_view name = "wrong";
  static Schedule generate(Problem p, WGradMode w) {
    Problem q = p;
    q.stages = p.ranks * 2;
    return schedule::interleaved_1f1b(q, w);
  }
};

TEST(CustomOrder, PlanRefusesAUserGeneratorThatBreaksThePlacementPromise) {
  try {
    (void)plan<WrongPlacement>::generate({.ranks = 2, .microbatches = 4});
    ADD_FAILURE() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("instead of"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// One source of truth: the registry's built-ins are the order tags' facts

template <class Order>
void expect_registry_agrees() {
  SCOPED_TRACE(std::string(Order::name));
  const GeneratorInfo& g = find_generator(Order::name);
  EXPECT_EQ(g.summary, Order::summary);
  EXPECT_EQ(g.mario, checkpoint::Mario::runs_on<Order>);
  EXPECT_EQ(g.slices, Order::takes_slices);
  EXPECT_EQ(g.fused, !Order::needs_split_wgrad);
  EXPECT_EQ(g.default_chunks, Order::default_placement::chunks);
  EXPECT_EQ(g.placement, Order::default_placement::kind);
  EXPECT_EQ(g.default_wgrad == WGradMode::Split, Order::default_wgrad::splits);
}

template <class... Orders>
void expect_all(order_list<Orders...>) {
  (expect_registry_agrees<Orders>(), ...);
  EXPECT_EQ(builtin_generators().size(), sizeof...(Orders));
}

TEST(ScheduleFacts, RegistryReadsTheOrderTags) {
  expect_all(builtin_orders{});
  // The facts the command line and the tuner act on.
  for (const char* name : {"1f1b", "interleaved-1f1b", "zb-h1"})
    EXPECT_TRUE(find_generator(name).mario) << name;
  for (const char* name : {"gpipe", "looped-bfs", "zb-h2", "zb-v", "dualpipe-v", "seq-1f1b"})
    EXPECT_FALSE(find_generator(name).mario) << name;
  EXPECT_TRUE(static_cast<bool>(find_generator("slice-pipe").generate_with_warmup));
  EXPECT_FALSE(static_cast<bool>(find_generator("1f1b").generate_with_warmup));
}

// ---------------------------------------------------------------------------------------
// Run-time registration

void expect_refused(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected: " << fragment;
  } catch (const invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

struct Registered : RunAhead<4> {
  static constexpr std::string_view name = "test-run-ahead-4";
};

TEST(GeneratorRegistry, RegisteredOrderIsFoundGeneratedAndTuned) {
  static const bool once = [] {
    register_order<Registered>();
    return true;
  }();
  ASSERT_TRUE(once);
  const GeneratorInfo& g = find_generator("test-run-ahead-4");
  EXPECT_EQ(g.summary, Registered::summary);
  EXPECT_FALSE(g.mario);
  const Schedule s = g.generate({.ranks = 4, .microbatches = 8}, WGradMode::Split);
  EXPECT_TRUE(check(s).ok()) << check(s).summary();
  // Named after the generator, as a built-in's are, though RunAhead names it "run-ahead".
  EXPECT_EQ(s.name, "test-run-ahead-4");
  const auto all = generators();
  EXPECT_EQ(all.size(), builtin_generators().size() + 1 +
                            (std::count_if(all.begin(), all.end(), [](const GeneratorInfo& x) {
                              return x.name.starts_with("test-other");
                            })));
  // The tuner searches it beside a built-in; Mario is not run on it (its fact says so).
  tuning::Request req;
  req.ranks = 4;
  req.global_batch = 8;
  req.bases = {"1f1b", "test-run-ahead-4"};
  req.checkpoints = {CheckpointMode::None, CheckpointMode::Mario};
  const tuning::Result r = tune(req, UniformCost{});
  ASSERT_TRUE(r.best.has_value());
  bool searched = false;
  for (const tuning::Note& n : r.notes)
    searched = searched || n.reason.find("test-run-ahead-4") != std::string::npos;
  EXPECT_TRUE(searched) << "no note says Mario was not run on the user's order";
  // With W split and 1F1B's 4 microbatches held on rank 0, it beats fused 1F1B.
  EXPECT_EQ(r.best->base, "test-run-ahead-4");
  EXPECT_GT(r.candidates_refused, 0);
  // The tuner's plans of it read back from their files (they were refused: the schedule in
  // the file was named "run-ahead+...", not after the plan's base).
  int read = 0;
  for (const tuning::Baseline& b : r.baselines) {
    if (!b.plan || b.plan->base != "test-run-ahead-4") continue;
    SCOPED_TRACE(b.plan->schedule.name);
    EXPECT_TRUE(b.plan->schedule.name.starts_with("test-run-ahead-4"));
    const tuning::Plan back = read_plan(plan_json(*b.plan), "plan.json");
    EXPECT_EQ(back.schedule, b.plan->schedule);
    ++read;
  }
  EXPECT_GE(read, 1);
}

TEST(GeneratorRegistry, BadRegistrationsAreRefusedWithTheReason) {
  GeneratorInfo g = generator_info<RunAhead<2>>();
  g.name = "1f1b";
  expect_refused([&] { register_generator(g); }, "a built-in generator has that name");
  g.name = "Bad Name";
  expect_refused([&] { register_generator(g); }, "lower-case letters");
  g.name = "";
  expect_refused([&] { register_generator(g); }, "1 to 64 characters");
  g.name = "test-other-empty";
  g.generate = {};
  expect_refused([&] { register_generator(g); }, "generate is empty");
  g = generator_info<RunAhead<2>>();
  g.name = "test-other-modes";
  g.fused = g.split = false;
  expect_refused([&] { register_generator(g); }, "neither fused nor split");
  g = generator_info<RunAhead<2>>();
  g.name = "test-other-twice";
  // An owned name: the registry copies it, so a temporary string is fine.
  const std::string owned = "test-other-twice";
  g.name = owned;
  register_generator(g);
  expect_refused([&] { register_generator(g); }, "already registered");
  EXPECT_EQ(find_generator("test-other-twice").name, "test-other-twice");
  expect_refused([] { (void)find_generator("no-such"); }, "test-other-twice");
}

// ---------------------------------------------------------------------------------------
// wgrad::Fine<Parts> and checkpoint::SelectiveWithin<N>

TEST(FinePlan, CutsWeightGradientsIntoPartsPlacedInWaits) {
  const Problem p{.ranks = 4, .microbatches = 8};
  const UniformCost cost{.f = 1, .b = 2, .w = 1, .comm = 0.25};
  using Fine = plan<order::OneFOneB, wgrad::Fine<4>>;
  EXPECT_NE(Fine::describe().find("wgrad fine (4 parts)"), std::string::npos) << Fine::describe();
  const Schedule s = Fine::generate(p, cost, MemoryBudget{});
  ASSERT_TRUE(check(s).ok()) << check(s).summary();
  int w_parts = 0, max_part = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::W) {
        ++w_parts;
        max_part = std::max(max_part, int(a.part));
      }
  EXPECT_EQ(w_parts, 4 * p.ranks * p.microbatches);
  EXPECT_EQ(max_part, 3);
  const Schedule split = plan<order::OneFOneB, wgrad::Split>::generate(p);
  EXPECT_LE(simulate(s, cost).makespan, simulate(split, cost).makespan + 1e-9);
}

TEST(SelectiveWithinPlan, HoldsAtMostNMicrobatchesPerRank) {
  const Problem p{.ranks = 4, .microbatches = 8};
  using S = plan<order::OneFOneB, checkpoint::SelectiveWithin<2>>;
  EXPECT_NE(S::describe().find("at most 2 microbatches held"), std::string::npos);
  const Schedule s = S::generate(p);
  ASSERT_TRUE(check(s).ok()) << check(s).summary();
  const SimulationResult r = simulate(s);
  int recomputes = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      recomputes += a.kind == OpKind::R;
  EXPECT_GT(recomputes, 0);
  for (const RankSummary& rank : r.ranks)
    EXPECT_LE(rank.peak_memory, 2 + 1e-9);
  // Rank 3 holds one microbatch in 1F1B: nothing to recompute there.
  for (const Action& a : s.ranks[3])
    EXPECT_NE(a.kind, OpKind::R);
  // Under a cost, within the tighter of the policy's and the given budget.
  const Schedule t = S::generate(p, UniformCost{}, MemoryBudget{.all = 1.5});
  for (const RankSummary& rank : simulate(t).ranks)
    EXPECT_LE(rank.peak_memory, 1.5 + 1e-9);
}

}  // namespace
}  // namespace pipesched::test_custom_orders
