// plan<...>: policy traits, defaults, knob order, compile-time combination rules seen from
// the accepted side, generate() for every order, with and without checkpointing, and
// slice-level plans with the slice lengths they give a cost model.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/policy/policy.hpp"
#include "pipesched/policy/registry.hpp"

namespace pipesched::test_plan {
namespace {

void expect_invalid_problem(const std::function<void()>& f,
                            const std::vector<std::string>& fragments);

// ---------------------------------------------------------------------------------------
// Traits

struct NotAPolicy {};
struct RefinedOrder : order::OneFOneB {};  // a refined policy stays in its family

template <class T>
int families() {
  return int{is_order_v<T>} + int{is_placement_v<T>} + int{is_checkpoint_v<T>} +
         int{is_slicing_v<T>} + int{is_wgrad_v<T>};
}

// Every type in `Ts` is in the family `Is` and in no other.
template <template <class> class Is, class... Ts>
void expect_family() {
  (
      [] {
        SCOPED_TRACE(std::string(Ts::name));
        EXPECT_TRUE(Is<Ts>::value);
        EXPECT_EQ(families<Ts>(), 1);
        EXPECT_TRUE(policy<Ts>);
      }(),
      ...);
}

TEST(PolicyTraits, EveryTagBelongsToExactlyOneFamily) {
  expect_family<is_order, order::GPipe, order::OneFOneB, order::Interleaved1F1B, order::LoopedBFS,
                order::ZeroBubbleH1, order::ZeroBubbleH2, order::ZeroBubbleV, order::DualPipeV,
                order::SeqOneFOneB, order::SlicePipe, order::SlicePipeWarmup<3>, RefinedOrder>();
  expect_family<is_placement, placement::Linear, placement::Interleaved<1>,
                placement::Interleaved<3>, placement::VShape<>, placement::VShape<4>>();
  expect_family<is_checkpoint, checkpoint::None, checkpoint::Full, checkpoint::Selective,
                checkpoint::Mario>();
  expect_family<is_slicing, slicing::Whole, slicing::Uniform<1>, slicing::Uniform<4>,
                slicing::Balanced<2>>();
  expect_family<is_wgrad, wgrad::Fused, wgrad::Split>();
  // The concepts say the same as the traits.
  EXPECT_TRUE(order_policy<order::DualPipeV>);
  EXPECT_TRUE(placement_policy<placement::VShape<>>);
  EXPECT_TRUE(checkpoint_policy<checkpoint::None>);
  EXPECT_TRUE(slicing_policy<slicing::Whole>);
  EXPECT_TRUE(wgrad_policy<wgrad::Split>);
  EXPECT_FALSE(order_policy<wgrad::Split>);
  EXPECT_FALSE(placement_policy<order::ZeroBubbleV>);
}

TEST(PolicyTraits, OtherTypesAreNoPolicies) {
  EXPECT_EQ(families<int>(), 0);
  EXPECT_EQ(families<NotAPolicy>(), 0);
  EXPECT_EQ(families<Problem>(), 0);
  EXPECT_EQ(families<Schedule>(), 0);
  EXPECT_EQ((families<std::integral_constant<int, 2>>()), 0);
  // Qualified and reference forms, and the family tags themselves, are not knobs.
  EXPECT_EQ(families<const order::GPipe>(), 0);
  EXPECT_EQ(families<volatile wgrad::Split>(), 0);
  EXPECT_EQ(families<order::GPipe&>(), 0);
  EXPECT_EQ(families<order::GPipe*>(), 0);
  EXPECT_EQ(families<detail::OrderTag>(), 0);
  EXPECT_EQ(families<detail::PlacementTag>(), 0);
  EXPECT_FALSE(policy<void>);
}

TEST(PolicyTraits, OrderNamesAreDistinctAndKnownToTheRegistry) {
  const std::vector<std::string_view> names = {
      order::GPipe::name,       order::OneFOneB::name,     order::Interleaved1F1B::name,
      order::LoopedBFS::name,   order::ZeroBubbleH1::name, order::ZeroBubbleH2::name,
      order::ZeroBubbleV::name, order::DualPipeV::name,    order::SeqOneFOneB::name,
      order::SlicePipe::name};
  EXPECT_EQ(std::set<std::string_view>(names.begin(), names.end()).size(), names.size());
  for (std::string_view n : names) {
    SCOPED_TRACE(std::string(n));
    EXPECT_NO_THROW(find_generator(n));
  }
}

TEST(PolicyTraits, PlacementPoliciesBuildTheCoreMaps) {
  for (int ranks : {1, 2, 3, 5}) {
    SCOPED_TRACE("ranks = " + std::to_string(ranks));
    EXPECT_EQ(placement::Linear::build(ranks), Placement::linear(ranks));
    EXPECT_EQ(placement::Interleaved<1>::build(ranks), Placement::linear(ranks));
    EXPECT_EQ(placement::Interleaved<3>::build(ranks), Placement::interleaved(ranks, 3));
    EXPECT_EQ(placement::VShape<>::build(ranks), Placement::v_shape(ranks, 2));
    EXPECT_EQ(placement::VShape<4>::build(ranks), Placement::v_shape(ranks, 4));
    // The compile-time kind and chunk count describe what build() returns.
    EXPECT_EQ(placement::Linear::build(ranks).kind(), placement::Linear::kind);
    EXPECT_EQ(placement::Interleaved<1>::build(ranks).kind(), placement::Interleaved<1>::kind);
    EXPECT_EQ(placement::Interleaved<3>::build(ranks).kind(), placement::Interleaved<3>::kind);
    EXPECT_EQ(placement::VShape<4>::build(ranks).kind(), placement::VShape<4>::kind);
    EXPECT_EQ(placement::Interleaved<3>::build(ranks).chunks(), placement::Interleaved<3>::chunks);
    EXPECT_EQ(placement::VShape<4>::build(ranks).chunks(), placement::VShape<4>::chunks);
  }
  EXPECT_EQ(placement::VShape<>::chunks, 2);
}

TEST(PolicyTraits, CheckpointTagsNameTheirModeAndWhereTheyRun) {
  auto expect_tag = [](std::string_view name, CheckpointMode mode, bool needs_budget,
                       std::string_view tag_name, CheckpointMode tag_mode, bool tag_needs) {
    SCOPED_TRACE(std::string(name));
    EXPECT_EQ(tag_name, name);
    EXPECT_EQ(tag_mode, mode);
    EXPECT_EQ(std::string_view(to_string(tag_mode)), tag_name);
    EXPECT_EQ(tag_needs, needs_budget);
  };
  using namespace checkpoint;
  expect_tag("none", CheckpointMode::None, false, None::name, None::mode, None::needs_budget);
  expect_tag("full", CheckpointMode::Full, false, Full::name, Full::mode, Full::needs_budget);
  expect_tag("selective", CheckpointMode::Selective, true, Selective::name, Selective::mode,
             Selective::needs_budget);
  expect_tag("mario", CheckpointMode::Mario, true, Mario::name, Mario::mode, Mario::needs_budget);
  // Mario runs on the one-forward-one-backward orders (and refinements of them) only.
  EXPECT_TRUE(Mario::runs_on<order::OneFOneB>);
  EXPECT_TRUE(Mario::runs_on<order::Interleaved1F1B>);
  EXPECT_TRUE(Mario::runs_on<order::ZeroBubbleH1>);
  EXPECT_TRUE(Mario::runs_on<RefinedOrder>);
  EXPECT_FALSE(Mario::runs_on<order::GPipe>);
  EXPECT_FALSE(Mario::runs_on<order::LoopedBFS>);
  EXPECT_FALSE(Mario::runs_on<order::ZeroBubbleH2>);
  EXPECT_FALSE(Mario::runs_on<order::ZeroBubbleV>);
  EXPECT_FALSE(Mario::runs_on<order::DualPipeV>);
  EXPECT_TRUE(Full::runs_on<order::DualPipeV>);
  EXPECT_TRUE(Selective::runs_on<order::GPipe>);
  EXPECT_TRUE(None::runs_on<order::ZeroBubbleV>);
}

// ---------------------------------------------------------------------------------------
// Defaults, per order: (order, default placement, default wgrad).

template <class Order, class DefaultPlacement, class DefaultWGrad>
struct OrderCase {
  using order = Order;
  using placement = DefaultPlacement;
  using wgrad = DefaultWGrad;
};

using OrderCases =
    ::testing::Types<OrderCase<order::GPipe, placement::Linear, wgrad::Fused>,
                     OrderCase<order::OneFOneB, placement::Linear, wgrad::Fused>,
                     OrderCase<order::Interleaved1F1B, placement::Interleaved<2>, wgrad::Fused>,
                     OrderCase<order::LoopedBFS, placement::Interleaved<2>, wgrad::Fused>,
                     OrderCase<order::ZeroBubbleH1, placement::Linear, wgrad::Split>,
                     OrderCase<order::ZeroBubbleH2, placement::Linear, wgrad::Split>,
                     OrderCase<order::ZeroBubbleV, placement::VShape<2>, wgrad::Split>,
                     OrderCase<order::DualPipeV, placement::VShape<2>, wgrad::Split>,
                     OrderCase<order::SeqOneFOneB, placement::Linear, wgrad::Fused>,
                     OrderCase<order::SlicePipe, placement::Interleaved<2>, wgrad::Fused>>;

template <class Case>
class PlanPerOrder : public ::testing::Test {};
TYPED_TEST_SUITE(PlanPerOrder, OrderCases);

TYPED_TEST(PlanPerOrder, MissingKnobsTakeTheOrdersDefaults) {
  using Order = typename TypeParam::order;
  using P = plan<Order>;
  EXPECT_TRUE((std::is_same_v<typename P::order, Order>));
  EXPECT_TRUE((std::is_same_v<typename P::placement, typename TypeParam::placement>));
  EXPECT_TRUE((std::is_same_v<typename P::wgrad, typename TypeParam::wgrad>));
  EXPECT_TRUE((std::is_same_v<typename P::checkpoint, checkpoint::None>));
  EXPECT_TRUE((std::is_same_v<typename P::slicing, slicing::Whole>));
}

TYPED_TEST(PlanPerOrder, DefaultsAgreeWithTheGeneratorRegistry) {
  using Order = typename TypeParam::order;
  const GeneratorInfo& g = find_generator(Order::name);
  EXPECT_EQ(g.placement, TypeParam::placement::kind);
  EXPECT_EQ(g.default_chunks, TypeParam::placement::chunks);
  EXPECT_EQ(g.default_wgrad, TypeParam::wgrad::splits ? WGradMode::Split : WGradMode::Fused);
  EXPECT_EQ(g.fused, !Order::needs_split_wgrad);
  EXPECT_EQ(g.slices, Order::takes_slices);
}

// One forward and one backward (B, or I and W) for every stage and microbatch, each on the
// rank that holds its stage. Overlap counts as its two halves.
void expect_complete(const Schedule& s, bool split) {
  const int stages = s.problem.stages;
  const int microbatches = s.problem.microbatches;
  std::map<std::tuple<OpKind, int, int>, int> seen;
  for (int r = 0; r < s.rank_count(); ++r) {
    for (const Action& a : s.ranks[static_cast<std::size_t>(r)]) {
      std::vector<Action> parts = {a};
      if (a.kind == OpKind::Overlap) parts = {a.forward_half(), a.backward_half()};
      for (const Action& x : parts) {
        ASSERT_TRUE(is_compute(x.kind)) << "rank " << r << " holds " << to_string(x.kind);
        ASSERT_GE(x.stage, 0);
        ASSERT_LT(x.stage, stages);
        EXPECT_EQ(s.placement.rank_of(x.stage), r) << to_string(x.kind) << " of stage " << x.stage;
        ++seen[{x.kind, x.stage, x.microbatch}];
      }
    }
  }
  for (int st = 0; st < stages; ++st) {
    for (int m = 0; m < microbatches; ++m) {
      SCOPED_TRACE("stage " + std::to_string(st) + ", microbatch " + std::to_string(m));
      EXPECT_EQ((seen[{OpKind::F, st, m}]), 1);
      const int b = seen[{OpKind::B, st, m}];
      const int i = seen[{OpKind::I, st, m}];
      const int w = seen[{OpKind::W, st, m}];
      EXPECT_TRUE((b == 1 && i == 0 && w == 0) || (b == 0 && i == 1 && w == 1))
          << "B " << b << ", I " << i << ", W " << w;
      if (!split) {
        EXPECT_EQ(b, 1);
      }
    }
  }
}

// The run-time generator an order stands for, called directly.
template <class Order>
Schedule direct(Problem p, WGradMode mode) {
  return find_generator(Order::name).generate(p, mode);
}

TYPED_TEST(PlanPerOrder, GenerateMatchesTheGeneratorOnAGrid) {
  using Order = typename TypeParam::order;
  using P = plan<Order>;
  const WGradMode mode = P::wgrad::splits ? WGradMode::Split : WGradMode::Fused;
  for (int ranks : {1, 2, 3, 4}) {
    for (int factor : {2, 4}) {
      const Problem p{.ranks = ranks, .microbatches = factor * ranks};
      SCOPED_TRACE(P::describe() + ", ranks = " + std::to_string(ranks) +
                   ", microbatches = " + std::to_string(p.microbatches));
      const Schedule s = P::generate(p);
      EXPECT_EQ(s.name, Order::name);
      EXPECT_EQ(s.problem.stages, ranks * P::placement::chunks);
      EXPECT_EQ(s.placement, P::placement::build(ranks));
      EXPECT_EQ(s.rank_count(), ranks);
      EXPECT_EQ(s, direct<Order>(p, mode));
      EXPECT_EQ(s.has_split_backward(), P::wgrad::splits);
      expect_complete(s, P::wgrad::splits);
      // Giving the stage count the plan derives changes nothing.
      Problem explicit_stages = p;
      explicit_stages.stages = ranks * P::placement::chunks;
      EXPECT_EQ(P::generate(explicit_stages), s);
    }
  }
}

TYPED_TEST(PlanPerOrder, WrongStageCountIsRefusedWithTheExpectedValue) {
  using P = plan<typename TypeParam::order>;
  const int chunks = P::placement::chunks;
  const Problem p{.ranks = 4, .stages = 4 * chunks + 4, .microbatches = 16};
  try {
    P::generate(p);
    FAIL() << "stages = " << p.stages << " was accepted";
  } catch (const invalid_problem& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stages = " + std::to_string(p.stages)), std::string::npos) << what;
    EXPECT_NE(what.find("expected stages = " + std::to_string(4 * chunks)), std::string::npos)
        << what;
  }
}

TYPED_TEST(PlanPerOrder, GeneratorErrorsReachTheCaller) {
  // One microbatch on 3 ranks is too few for DualPipeV and odd for Interleaved 1F1B; the
  // others accept it. Either way plan and generator agree.
  using Order = typename TypeParam::order;
  using P = plan<Order>;
  const Problem p{.ranks = 3, .microbatches = 1};
  Problem resolved = p;
  resolved.stages = 3 * P::placement::chunks;
  const WGradMode mode = P::wgrad::splits ? WGradMode::Split : WGradMode::Fused;
  bool direct_threw = false;
  try {
    direct<Order>(resolved, mode);
  } catch (const invalid_problem&) {
    direct_threw = true;
  }
  if (direct_threw) {
    EXPECT_THROW(P::generate(p), invalid_problem);
  } else {
    EXPECT_EQ(P::generate(p), direct<Order>(resolved, mode));
  }
}

// ---------------------------------------------------------------------------------------
// Checkpoint policies, per order.

MemoryBudget budget_of(double all) {
  MemoryBudget b;
  b.all = all;
  return b;
}

int recomputes(const Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind == OpKind::R;
  return n;
}

// The schedule validates and every rank's simulated peak is within the budget.
template <class Cost>
void expect_valid_within(const Schedule& s, const Cost& cost, const MemoryBudget& b) {
  const ValidationReport rep = check(s);
  EXPECT_TRUE(rep.ok()) << rep.summary();
  const SimulationResult r = simulate(s, cost);
  for (int q = 0; q < s.rank_count(); ++q)
    EXPECT_LE(r.ranks[static_cast<std::size_t>(q)].peak_memory, b.of(q) + 1e-9) << "rank " << q;
}

// A budget halfway between what the schedule holds with every forward checkpointed and
// with none: feasible, and tight enough that something must be recomputed.
template <class Cost>
MemoryBudget halfway_budget(const Schedule& base, const Cost& cost) {
  const double none = simulate(base, cost).peak_memory_max;
  const double full = simulate(checkpoint_full(base), cost).peak_memory_max;
  return budget_of((none + full) / 2);
}

TYPED_TEST(PlanPerOrder, FullAndSelectiveCheckpointingRunOnEveryOrder) {
  using Order = typename TypeParam::order;
  using Plain = plan<Order>;
  using Full = plan<checkpoint::Full, Order>;
  using Selective = plan<Order, checkpoint::Selective>;
  EXPECT_NE(Full::describe().find("checkpoint full"), std::string::npos) << Full::describe();
  const UniformCost cost{.w_memory = 0.5};
  for (int ranks : {2, 4}) {
    const Problem p{.ranks = ranks, .microbatches = 3 * ranks};
    SCOPED_TRACE(Plain::describe() + ", ranks = " + std::to_string(ranks));
    const Schedule base = Plain::generate(p);
    const Schedule full = Full::generate(p);
    EXPECT_EQ(full, checkpoint_full(base));
    EXPECT_EQ(recomputes(full), base.problem.stages * base.problem.microbatches);
    EXPECT_EQ(Full::generate(p, cost, MemoryBudget{}), full);
    expect_valid_within(full, cost, MemoryBudget{});

    const MemoryBudget b = halfway_budget(base, cost);
    const Schedule sel = Selective::generate(p, cost, b);
    EXPECT_EQ(sel, checkpoint_selective(base, cost, b));
    EXPECT_GT(recomputes(sel), 0);
    EXPECT_LT(recomputes(sel), recomputes(full));
    expect_valid_within(sel, cost, b);

    // Without checkpointing, an order with a memory-bounded generator (the Zero Bubble orders,
    // slice-pipe) first fits itself to the budget. A budget the schedule still exceeds is
    // refused by None and named with the plan; one it met is refused below one unit's
    // activations.
    constexpr bool bounded = detail::budget_generating_order<Order, UniformCost>;
    Schedule fitted = base;
    if constexpr (bounded)
      fitted = Order::generate(base.problem, detail::wgrad_mode_v<typename Plain::wgrad>, cost, b);
    const bool fitted_fits = simulate(fitted, cost).peak_memory_max <= b.all * (1 + 1e-12);
    if (!bounded) {
      EXPECT_FALSE(fitted_fits);  // the halfway budget is below its peak
    }
    if constexpr (std::is_base_of_v<order::ZeroBubbleH1, Order> ||
                  std::is_base_of_v<order::ZeroBubbleV, Order>) {
      EXPECT_TRUE(fitted_fits) << "deferring fewer weight gradients meets the budget";
    }
    const MemoryBudget refused = fitted_fits ? budget_of(1e-6) : b;
    if (fitted_fits) {
      EXPECT_EQ(Plain::generate(p, cost, b), fitted);
      expect_valid_within(fitted, cost, b);
    }
    expect_invalid_problem([&] { Plain::generate(p, cost, refused); },
                           {"plan<" + Plain::describe() + ">", "without checkpointing",
                            "over the budget " + pipesched::detail::format_general(refused.all)});
    EXPECT_EQ(Plain::generate(p, cost, MemoryBudget{}), base);
  }
}

template <class Order>
class MarioPlan : public ::testing::Test {};
using MarioOrders = ::testing::Types<order::OneFOneB, order::Interleaved1F1B, order::ZeroBubbleH1>;
TYPED_TEST_SUITE(MarioPlan, MarioOrders);

TYPED_TEST(MarioPlan, MeetsTheBudgetAsTheMarioPassDoes) {
  using Order = TypeParam;
  using Plain = plan<Order>;
  using Mario = plan<checkpoint::Mario, Order>;
  EXPECT_NE(Mario::describe().find("checkpoint mario"), std::string::npos) << Mario::describe();
  const UniformCost cost;
  for (int ranks : {2, 4}) {
    const Problem p{.ranks = ranks, .microbatches = 2 * ranks};
    SCOPED_TRACE(Mario::describe() + ", ranks = " + std::to_string(ranks));
    const Schedule base = Plain::generate(p);
    const MemoryBudget b = halfway_budget(base, cost);
    const Schedule mario = Mario::generate(p, cost, b);
    EXPECT_EQ(mario, checkpoint_mario(base, cost, b));
    EXPECT_GT(recomputes(mario), 0);
    expect_valid_within(mario, cost, b);
    // Under a budget even full checkpointing exceeds, the plan names itself and the pass.
    const double least = simulate(checkpoint_full(base), cost).peak_memory_max;
    expect_invalid_problem([&] { Mario::generate(p, cost, budget_of(least / 2)); },
                           {"plan<" + Mario::describe() + ">", "Mario"});
  }
}

// ---------------------------------------------------------------------------------------
// Explicit knobs, in any order.

TEST(Plan, NoKnobsIsOneFOneB) {
  EXPECT_TRUE((std::is_same_v<plan<>::order, order::OneFOneB>));
  EXPECT_TRUE((std::is_same_v<plan<>::placement, placement::Linear>));
  EXPECT_TRUE((std::is_same_v<plan<>::wgrad, wgrad::Fused>));
  EXPECT_TRUE((std::is_same_v<plan<>::checkpoint, checkpoint::None>));
  EXPECT_TRUE((std::is_same_v<plan<>::slicing, slicing::Whole>));
  EXPECT_EQ(plan<>::describe(),
            "1f1b, linear (1 chunk per rank), checkpoint none, slicing "
            "whole, wgrad fused");
}

template <class P>
void expect_full_interleaved_plan() {
  SCOPED_TRACE(P::describe());
  EXPECT_TRUE((std::is_same_v<typename P::order, order::Interleaved1F1B>));
  EXPECT_TRUE((std::is_same_v<typename P::placement, placement::Interleaved<4>>));
  EXPECT_TRUE((std::is_same_v<typename P::checkpoint, checkpoint::None>));
  EXPECT_TRUE((std::is_same_v<typename P::slicing, slicing::Whole>));
  EXPECT_TRUE((std::is_same_v<typename P::wgrad, wgrad::Split>));
}

TEST(Plan, KnobsInAnyOrderGiveTheSamePlan) {
  using O = order::Interleaved1F1B;
  using L = placement::Interleaved<4>;
  using C = checkpoint::None;
  using S = slicing::Whole;
  using W = wgrad::Split;
  expect_full_interleaved_plan<plan<O, L, C, S, W>>();
  expect_full_interleaved_plan<plan<W, S, C, L, O>>();
  expect_full_interleaved_plan<plan<L, O, W, C, S>>();
  expect_full_interleaved_plan<plan<C, W, O, S, L>>();
  expect_full_interleaved_plan<plan<S, L, W, O, C>>();
  expect_full_interleaved_plan<plan<L, W, O>>();  // the rest defaults to the same
  EXPECT_EQ((plan<W, L, O>::generate(Problem{.ranks = 2, .microbatches = 4})),
            (plan<O, L, W>::generate(Problem{.ranks = 2, .microbatches = 4})));
}

TEST(Plan, ExplicitKnobsOverrideTheDefaults) {
  EXPECT_TRUE((std::is_same_v<plan<order::DualPipeV, wgrad::Fused>::wgrad, wgrad::Fused>));
  EXPECT_TRUE((std::is_same_v<plan<wgrad::Split>::wgrad, wgrad::Split>));
  EXPECT_TRUE((std::is_same_v<plan<wgrad::Split>::order, order::OneFOneB>));
  EXPECT_TRUE(
      (std::is_same_v<plan<placement::Linear, order::LoopedBFS>::placement, placement::Linear>));
  EXPECT_TRUE((std::is_same_v<plan<order::GPipe, placement::Interleaved<1>>::placement,
                              placement::Interleaved<1>>));
  EXPECT_TRUE((std::is_same_v<plan<RefinedOrder>::order, RefinedOrder>));
  EXPECT_TRUE((std::is_same_v<plan<RefinedOrder>::placement, placement::Linear>));
}

// Non-default placements and weight-gradient modes reach the generator.
template <class P>
void expect_generates(const Problem& p, PlacementKind kind, int chunks) {
  SCOPED_TRACE(P::describe());
  const Schedule s = P::generate(p);
  EXPECT_EQ(s.placement.kind(), kind);
  EXPECT_EQ(s.placement.chunks(), chunks);
  EXPECT_EQ(s.problem.stages, p.ranks * chunks);
  EXPECT_EQ(s.has_split_backward(), P::wgrad::splits);
  expect_complete(s, P::wgrad::splits);
}

TEST(Plan, OtherPlacementsAndWGradModesReachTheGenerator) {
  const Problem p{.ranks = 3, .microbatches = 6};
  expect_generates<plan<order::Interleaved1F1B, placement::Interleaved<3>>>(
      p, PlacementKind::Interleaved, 3);
  expect_generates<plan<order::Interleaved1F1B, placement::Linear, wgrad::Split>>(
      p, PlacementKind::Linear, 1);
  expect_generates<plan<order::LoopedBFS, placement::Interleaved<4>>>(p, PlacementKind::Interleaved,
                                                                      4);
  expect_generates<plan<order::GPipe, placement::Interleaved<1>, wgrad::Split>>(
      p, PlacementKind::Linear, 1);
  expect_generates<plan<order::OneFOneB, wgrad::Split>>(p, PlacementKind::Linear, 1);
  expect_generates<plan<order::DualPipeV, wgrad::Fused>>(p, PlacementKind::VShape, 2);
}

// ---------------------------------------------------------------------------------------
// Problems the plan refuses before calling the generator.

void expect_invalid_problem(const std::function<void()>& f,
                            const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no invalid_problem thrown";
  } catch (const invalid_problem& e) {
    const std::string what = e.what();
    for (const std::string& x : fragments)
      EXPECT_NE(what.find(x), std::string::npos) << "'" << x << "' missing from: " << what;
  }
}

TEST(Plan, RefusesProblemsThatDoNotFit) {
  using Looped = plan<order::LoopedBFS>;
  expect_invalid_problem([] { Looped::generate(Problem{.ranks = 4, .stages = 6}); },
                         {"stages = 6", "ranks = 4", "expected stages = 8", "0"});
  expect_invalid_problem([] { plan<>::generate(Problem{.ranks = 0}); }, {"ranks = 0", "1f1b"});
  expect_invalid_problem([] { plan<>::generate(Problem{.ranks = 2, .microbatches = 0}); },
                         {"microbatches = 0"});
  expect_invalid_problem([] { plan<>::generate(Problem{.ranks = 2, .slices = 4}); },
                         {"slices = 4", "whole", "slices = 1"});
  expect_invalid_problem([] { Looped::generate(Problem{.ranks = INT_MAX}); },
                         {"ranks = " + std::to_string(INT_MAX), "overflow"});
}

// ---------------------------------------------------------------------------------------
// Slice-level plans: orders that take K > 1 slices, with uniform and balanced slicing.

template <class Order, class Slicing>
struct SliceCase {
  using order = Order;
  using slicing = Slicing;
};

using SliceCases = ::testing::Types<SliceCase<order::GPipe, slicing::Uniform<3>>,
                                    SliceCase<order::GPipe, slicing::Balanced<4>>,
                                    SliceCase<order::SeqOneFOneB, slicing::Uniform<4>>,
                                    SliceCase<order::SeqOneFOneB, slicing::Balanced<2>>,
                                    SliceCase<order::SlicePipe, slicing::Uniform<2>>,
                                    SliceCase<order::SlicePipe, slicing::Balanced<4>>>;

template <class Case>
class SlicedPlan : public ::testing::Test {};
TYPED_TEST_SUITE(SlicedPlan, SliceCases);

// A Llama-2-7B-like cost with a short sequence, on the rtx-4090 preset.
TransformerCost llama_cost(int sequence) {
  TransformerCost c{presets::find_model("llama2-7b"), presets::find_device("rtx-4090"), {}};
  c.model.sequence = sequence;
  return c;
}

TYPED_TEST(SlicedPlan, GenerateRunsTheSlicesOfThePolicy) {
  using Order = typename TypeParam::order;
  using Slicing = typename TypeParam::slicing;
  using P = plan<Order, Slicing>;
  constexpr int K = Slicing::slices;
  const TransformerCost base = llama_cost(512);
  for (const WGradMode mode : {WGradMode::Fused, WGradMode::Split}) {
    for (int ranks : {1, 2, 4}) {
      const Problem p{.ranks = ranks, .microbatches = 2 * ranks};
      SCOPED_TRACE(P::describe() + ", ranks = " + std::to_string(ranks) + ", " + to_string(mode));
      EXPECT_NE(P::describe().find("slicing " + std::string(Slicing::name) + " (" +
                                   std::to_string(K) + " slices)"),
                std::string::npos);
      Schedule s;
      if (mode == WGradMode::Fused) {
        s = P::generate(p, base, MemoryBudget{});
      } else {
        s = plan<Order, Slicing, wgrad::Split>::generate(p, base, MemoryBudget{});
      }
      EXPECT_EQ(s.problem.slices, K);
      Problem resolved = p;
      resolved.slices = K;
      resolved.stages = ranks * P::placement::chunks;
      EXPECT_EQ(s, direct<Order>(resolved, mode));
      const ValidationReport rep = check(s);
      EXPECT_TRUE(rep.ok()) << rep.summary();
      // Every slice of every unit runs, the last one included.
      int last_slice = 0;
      for (const auto& list : s.ranks)
        for (const Action& a : list)
          last_slice = std::max(last_slice, a.slice);
      EXPECT_EQ(last_slice, K - 1);
      // Giving the slice count the plan sets changes nothing.
      if (mode == WGradMode::Fused) {
        EXPECT_EQ(P::generate(resolved, base, MemoryBudget{}), s);
      }
    }
  }
}

TYPED_TEST(SlicedPlan, SlicedCostCarriesThePoliciesLengths) {
  using P = plan<typename TypeParam::order, typename TypeParam::slicing>;
  constexpr int K = TypeParam::slicing::slices;
  const TransformerCost base = llama_cost(1000);
  const std::vector<int> expected = slice_lengths(base, TypeParam::slicing::mode, K);
  EXPECT_EQ(P::slice_lengths(base), expected);
  const TransformerCost sliced = P::sliced_cost(base);
  EXPECT_EQ(sliced.slice_lengths, expected);
  EXPECT_EQ(P::sliced_cost(sliced).slice_lengths, expected);  // applying it twice is once
  // Lengths a caller set are replaced by the policy's.
  TransformerCost given = base;
  given.slice_lengths = std::vector<int>(static_cast<std::size_t>(K), 1);
  given.slice_lengths.back() = 1000 - (K - 1);
  EXPECT_EQ(P::sliced_cost(given).slice_lengths, expected);
  // Other cost models split a microbatch evenly and come back as they were.
  const UniformCost uniform{.f = 2, .b = 3, .w = 1};
  const UniformCost same = P::sliced_cost(uniform);
  EXPECT_EQ(same.f, 2);
  EXPECT_EQ(same.b, 3);
  // A sequence shorter than the slice count is refused, naming the plan.
  expect_invalid_problem([] { P::slice_lengths(llama_cost(K - 1 + (K == 1))); },
                         K > 1 ? std::vector<std::string>{"plan<" + P::describe() + ">",
                                                          "slices = " + std::to_string(K)}
                               : std::vector<std::string>{});
}

TYPED_TEST(SlicedPlan, CheckpointingPlansWithTheSlicedCost) {
  using Order = typename TypeParam::order;
  using Slicing = typename TypeParam::slicing;
  using Plain = plan<Order, Slicing>;
  using Selective = plan<Order, Slicing, checkpoint::Selective>;
  const TransformerCost base = llama_cost(1024);
  const TransformerCost sliced = Plain::sliced_cost(base);
  const Problem p{.ranks = 4, .microbatches = 8};
  const Schedule plain = Plain::generate(p, base, MemoryBudget{});
  const MemoryBudget b = halfway_budget(plain, sliced);
  const Schedule sel = Selective::generate(p, base, b);
  EXPECT_EQ(sel, checkpoint_selective(plain, sliced, b));
  EXPECT_GT(recomputes(sel), 0);
  expect_valid_within(sel, sliced, b);
}

TEST(SlicedPlan, BalancedSlicesShortenTheStepOfLongSequences) {
  // Llama 2 7B at 8192 tokens: uniform slices leave the later, dearer slices on the
  // critical path; balanced ones even them out. On a device without wave quantisation
  // (sm_count 0): with it, uniform slices of whole waves can outrun balanced ones whose
  // GEMMs end in partly used waves (docs/cost-model.md).
  TransformerCost base = llama_cost(8192);
  base.device.sm_count = 0;
  const Problem p{.ranks = 4, .microbatches = 8};
  auto makespan = [&](auto plan_tag) {
    using P = decltype(plan_tag);
    return simulate(P::generate(p, base, MemoryBudget{}), P::sliced_cost(base)).makespan;
  };
  const double uniform = makespan(plan<order::SeqOneFOneB, slicing::Uniform<4>>{});
  const double balanced = makespan(plan<order::SeqOneFOneB, slicing::Balanced<4>>{});
  EXPECT_LT(balanced, uniform * 0.99);
  const double uniform_svpp = makespan(plan<order::SlicePipe, slicing::Uniform<4>>{});
  const double balanced_svpp = makespan(plan<order::SlicePipe, slicing::Balanced<4>>{});
  EXPECT_LT(balanced_svpp, uniform_svpp * 0.99);
}

TEST(SlicedPlan, SliceCountsThatDoNotFitAreRefused) {
  using P = plan<order::SeqOneFOneB, slicing::Uniform<4>>;
  expect_invalid_problem(
      [] { P::generate(Problem{.ranks = 2, .microbatches = 4, .slices = 2}); },
      {"plan<" + P::describe() + ">", "slices = 2", "uniform", "slices = 4", "leave it at 1"});
  // Uniform<1> is whole sequences by another name, on any order.
  EXPECT_EQ((plan<order::ZeroBubbleV, slicing::Uniform<1>>::generate(
                Problem{.ranks = 2, .microbatches = 4})),
            (plan<order::ZeroBubbleV>::generate(Problem{.ranks = 2, .microbatches = 4})));
  // The slicing policies' own traits.
  EXPECT_EQ(slicing::Whole::slices, 1);
  EXPECT_EQ(slicing::Uniform<4>::slices, 4);
  EXPECT_EQ(slicing::Balanced<8>::slices, 8);
  EXPECT_FALSE(slicing::Uniform<4>::needs_cost);
  EXPECT_TRUE(slicing::Balanced<4>::needs_cost);
  EXPECT_EQ(slicing::Balanced<4>::mode, SlicingMode::Balanced);
  EXPECT_TRUE(order::SlicePipe::takes_slices);
  EXPECT_TRUE(order::GPipe::takes_slices);
  EXPECT_FALSE(order::Interleaved1F1B::takes_slices);
  EXPECT_FALSE(RefinedOrder::takes_slices);
}

TEST(SlicedPlan, SlicePipeWarmupReachesTheGenerator) {
  const Problem p{.ranks = 4, .microbatches = 4, .slices = 4};
  Problem resolved = p;
  resolved.stages = 8;
  using Default = plan<order::SlicePipe, slicing::Uniform<4>>;
  EXPECT_EQ(Default::generate(p), schedule::slice_pipe(resolved));
  const int most = schedule::detail::slice_warmup(4, 2, 4, 0);
  using Fewer = plan<order::SlicePipeWarmup<9>, slicing::Uniform<4>>;
  ASSERT_LT(9, most);
  const Schedule s = Fewer::generate(p);
  EXPECT_EQ(s, schedule::slice_pipe(resolved, WGradMode::Fused, {.warmup = 9}));
  EXPECT_NE(s, Default::generate(p));
  EXPECT_TRUE(check(s).ok());
  EXPECT_TRUE((std::is_same_v<Fewer::placement, placement::Interleaved<2>>));
  // A warm-up too small to run is refused.
  EXPECT_THROW((plan<order::SlicePipeWarmup<1>, slicing::Uniform<4>>::generate(p)),
               invalid_problem);
}

}  // namespace
}  // namespace pipesched::test_plan
