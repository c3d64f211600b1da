// One plan assembly: plan<>, the tuner and the pipesched command build the same schedule for
// the same knobs, over a grid of every built-in order x W mode (the order's own, fine) x
// checkpoint policy x budget (none, limited), under UniformCost, and over a smaller grid under
// TransformerCost (cost-aware generators, per-GEMM W parts, budgets in bytes).
#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "pipesched/io/text.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/plan.hpp"
#include "pipesched/tune/tune.hpp"

#include "cli_support.hpp"

namespace test_assemble_grid {

namespace {

namespace ps = pipesched;
using cli_test::run;

constexpr int kRanks = 4;

// Points of the grid where plan<> built a schedule, and where the tuner found a plan: the
// agreement is checked on schedules, not only on refusals.
int planned_points = 0;
int tuned_points = 0;
constexpr int kMicrobatches = 8;

// One point of the grid and what each entry point made of it.
struct Point {
  std::string order;
  bool fine = false;
  ps::CheckpointMode mode = ps::CheckpointMode::None;
  std::optional<double> budget;  // none: no limit
  std::string label() const {
    return order + (fine ? " fine" : "") + " checkpoint " + std::string(ps::to_string(mode)) +
           " budget " + (budget ? std::to_string(*budget) : std::string("none"));
  }
};

ps::MemoryBudget budget_of(const Point& pt) {
  ps::MemoryBudget b;
  if (pt.budget) b.all = *pt.budget;
  return b;
}

// The schedule the command writes for `pt` (its --format text), or nullopt where it refuses.
std::optional<ps::Schedule> from_command(const Point& pt, int slices, const std::string& cost,
                                         const std::string& budget_text) {
  std::string args = "generate --schedule " + pt.order + " --ranks " + std::to_string(kRanks) +
                     " --microbatches " + std::to_string(kMicrobatches) + " --checkpoint " +
                     std::string(ps::to_string(pt.mode)) + " --format text " + cost;
  if (slices > 1) args += " --slices " + std::to_string(slices);
  if (pt.fine)
    args += cost.empty() ? " --wgrad fine --wgrad-parts 4" : " --wgrad fine --wgrad-parts gemm";
  if (pt.budget) args += " --memory-budget " + budget_text;
  const cli_test::CliRun r = run(args);
  if (r.code != 0) return std::nullopt;
  std::istringstream in(r.out);
  return ps::read_text(in);
}

// The tuner's plan for `pt` alone (one base, one mode, its fine W or not), or nullopt where it
// finds none; `same` is assemble_plan's schedule under the plan's own recipe (fitted or not,
// fine or not), for comparison.
template <class Cost, class Tune>
std::optional<ps::Schedule> from_tuner(const Point& pt, int slices, const Cost& cost,
                                       Tune&& tune_with, std::optional<ps::Schedule>& same) {
  const ps::GeneratorInfo& g = ps::find_generator(pt.order);
  ps::tuning::Request req;
  req.ranks = kRanks;
  req.global_batch = kMicrobatches;
  req.bases = {pt.order};
  req.chunks = {g.default_chunks};
  req.microbatch_sizes = {1};
  req.slices = {slices};
  req.checkpoints = {pt.mode};
  req.full_fallback = false;
  req.fine_wgrad = pt.fine;
  req.wgrad_parts = std::is_same_v<Cost, ps::UniformCost> ? 4 : 0;
  req.threads = 1;
  if (pt.budget) req.budget = budget_of(pt);
  const ps::tuning::Result r = tune_with(req);
  if (!r.best) return std::nullopt;
  const ps::tuning::Plan& p = *r.best;
  const ps::Problem problem{.ranks = kRanks,
                            .stages = kRanks * g.default_chunks,
                            .microbatches = kMicrobatches,
                            .slices = slices};
  const ps::PlanRecipe recipe{.wgrad = p.wgrad,
                              .fine_wgrad = p.fine_wgrad,
                              .wgrad_parts = req.wgrad_parts,
                              .fit = p.fitted ? ps::FitOrder::Fitted : ps::FitOrder::Own};
  ps::MemoryBudget budget = budget_of(pt);
  if (!p.budget_per_rank.empty()) budget.per_rank = p.budget_per_rank;
  try {
    same = ps::assemble_plan(g, problem, cost, budget, recipe,
                             ps::find_checkpoint(ps::to_string(pt.mode)))
               .schedule;
  } catch (const ps::invalid_problem&) {
    same.reset();
  }
  return p.schedule;
}

// Checks that the three entry points agree on `pt`; `planned` is plan<>'s schedule (nullopt
// where it refused).
template <class Cost, class Tune>
void expect_agreement(const Point& pt, int slices, const Cost& cost,
                      const std::optional<ps::Schedule>& planned, const std::string& cost_args,
                      const std::string& budget_text, Tune&& tune_with) {
  SCOPED_TRACE(pt.label());
  const std::optional<ps::Schedule> command = from_command(pt, slices, cost_args, budget_text);
  ASSERT_EQ(planned.has_value(), command.has_value())
      << "plan<> " << (planned ? "built a schedule" : "refused") << ", the command "
      << (command ? "built one" : "refused");
  if (planned) {
    EXPECT_TRUE(*planned == *command) << "plan<> and the command differ";
    ++planned_points;
  }
  std::optional<ps::Schedule> same;
  const std::optional<ps::Schedule> tuned = from_tuner(pt, slices, cost, tune_with, same);
  if (tuned) {
    ASSERT_TRUE(same.has_value()) << "the tuner found a plan assemble_plan refuses";
    EXPECT_TRUE(*tuned == *same) << "the tuner's plan differs from assemble_plan's";
  }
  // Where plan<> (fitting only where it must) finds a plan, so does the tuner (which tries
  // the order fitted and not).
  if (planned) {
    EXPECT_TRUE(tuned.has_value()) << "plan<> found a plan the tuner did not";
  }
  if (tuned) ++tuned_points;
}

// plan<Order, Checkpoint, WGrad, Slicing>::generate under `cost`, or nullopt where it refuses.
template <class Plan, class Cost>
std::optional<ps::Schedule> from_plan(const Cost& cost, const ps::MemoryBudget& budget) {
  try {
    return Plan::generate(ps::Problem{.ranks = kRanks, .microbatches = kMicrobatches}, cost,
                          budget);
  } catch (const ps::invalid_problem&) {
    return std::nullopt;
  }
}

template <class Order>
using SlicingOf =
    std::conditional_t<Order::takes_slices, ps::slicing::Uniform<2>, ps::slicing::Whole>;

template <class Order, class Checkpoint, class WGrad>
void uniform_point(bool fine, std::optional<double> budget) {
  using P = ps::plan<Order, Checkpoint, WGrad, SlicingOf<Order>>;
  const Point pt{std::string(Order::name), fine, Checkpoint::mode, budget};
  const ps::UniformCost cost;
  const std::optional<ps::Schedule> planned = from_plan<P>(cost, budget_of(pt));
  expect_agreement(pt, P::slicing::slices, cost, planned, "",
                   budget ? std::to_string(*budget) : std::string(),
                   [&](const ps::tuning::Request& r) { return ps::tune(r, cost); });
}

template <class Order, class WGrad>
void uniform_modes(bool fine) {
  for (std::optional<double> budget : {std::optional<double>{}, std::optional<double>{2.5}}) {
    uniform_point<Order, ps::checkpoint::None, WGrad>(fine, budget);
    uniform_point<Order, ps::checkpoint::Full, WGrad>(fine, budget);
    uniform_point<Order, ps::checkpoint::FullEarly, WGrad>(fine, budget);
    if (budget) {  // selective and Mario choose from a budget
      uniform_point<Order, ps::checkpoint::Selective, WGrad>(fine, budget);
      uniform_point<Order, ps::checkpoint::SelectiveEarly, WGrad>(fine, budget);
      if constexpr (Order::mario_applies)
        uniform_point<Order, ps::checkpoint::Mario, WGrad>(fine, budget);
    }
  }
}

template <class... Orders>
void uniform_grid(ps::order_list<Orders...>) {
  (uniform_modes<Orders, typename Orders::default_wgrad>(false), ...);
  (uniform_modes<Orders, ps::wgrad::Fine<4>>(true), ...);
}

TEST(AssemblePlan, PlanTunerAndCommandBuildTheSameScheduleUnderUniformCost) {
  planned_points = tuned_points = 0;
  uniform_grid(ps::builtin_orders{});
  EXPECT_GE(planned_points, 200);
  EXPECT_GE(tuned_points, 200);
}

// Under TransformerCost: the cost-aware generators (V-Half, V-Min, Chimera), fitting in bytes
// and W cut per weight GEMM.
template <class Order, class Checkpoint, class WGrad>
void transformer_point(bool fine, std::optional<double> budget_gb) {
  using P = ps::plan<Order, Checkpoint, WGrad>;
  const ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  const ps::DeviceSpec device = ps::presets::find_device("h100");
  ps::TransformerCost cost;
  cost.model = model;
  cost.device = device;
  cost.model.microbatch_size = 1;
  const Point pt{std::string(Order::name), fine, Checkpoint::mode,
                 budget_gb ? std::optional<double>(*budget_gb * 1e9) : std::nullopt};
  std::optional<ps::Schedule> planned;
  if constexpr (WGrad::fills) {
    // Fine<N> takes a fixed part count; one per weight GEMM goes through the recipe.
    const ps::GeneratorInfo& g = ps::find_generator(pt.order);
    const ps::PlanRecipe recipe{
        .wgrad = ps::WGradMode::Split, .fine_wgrad = true, .wgrad_parts = 0};
    try {
      planned = ps::assemble_plan(g,
                                  ps::Problem{.ranks = kRanks,
                                              .stages = kRanks * g.default_chunks,
                                              .microbatches = kMicrobatches},
                                  cost, budget_of(pt), recipe,
                                  ps::find_checkpoint(ps::to_string(pt.mode)))
                    .schedule;
    } catch (const ps::invalid_problem&) {
    }
  } else {
    planned = from_plan<P>(cost, budget_of(pt));
  }
  expect_agreement(pt, 1, cost, planned, "--model gpt3-1.3b --device h100",
                   budget_gb ? std::to_string(static_cast<int>(*budget_gb)) + "GB" : std::string(),
                   [&](const ps::tuning::Request& r) { return ps::tune(r, model, device); });
}

template <class Order>
void transformer_modes() {
  using Own = typename Order::default_wgrad;
  for (std::optional<double> gb : {std::optional<double>{}, std::optional<double>{8.0}}) {
    transformer_point<Order, ps::checkpoint::None, Own>(false, gb);
    if (gb) {
      transformer_point<Order, ps::checkpoint::Selective, Own>(false, gb);
      transformer_point<Order, ps::checkpoint::Selective, ps::wgrad::Fine<4>>(true, gb);
      if constexpr (Order::mario_applies)
        transformer_point<Order, ps::checkpoint::Mario, Own>(false, gb);
    }
  }
}

TEST(AssemblePlan, PlanTunerAndCommandBuildTheSameScheduleUnderTransformerCost) {
  planned_points = tuned_points = 0;
  transformer_modes<ps::order::OneFOneB>();
  transformer_modes<ps::order::ZeroBubbleH1>();
  transformer_modes<ps::order::VHalf>();
  transformer_modes<ps::order::Chimera>();
  EXPECT_GE(planned_points, 15);
  EXPECT_GE(tuned_points, 15);
}

// The steps run in one order: W parts are placed before checkpointing, so the recomputes
// see where the W's went (plan<> used to checkpoint first).
TEST(AssemblePlan, PlacesWeightGradientPartsBeforeCheckpointing) {
  const ps::UniformCost cost;
  ps::MemoryBudget budget;
  budget.all = 2.5;
  const ps::Problem p{.ranks = kRanks, .microbatches = kMicrobatches};
  const ps::Schedule s =
      ps::plan<ps::order::OneFOneB, ps::checkpoint::Selective, ps::wgrad::Fine<4>>::generate(
          p, cost, budget);
  const ps::Schedule split = ps::plan<ps::order::OneFOneB, ps::wgrad::Split>::generate(p);
  // 1F1B holds 4 microbatches on rank 0, over the budget whatever the W placement: the parts
  // are placed for speed, and checkpointing then brings the memory down.
  EXPECT_THROW((void)ps::fill_weight_gradients(split, cost, budget, 4), ps::invalid_problem);
  const ps::Schedule placed = ps::fill_weight_gradients(split, cost, ps::MemoryBudget{}, 4);
  const ps::Schedule expected =
      ps::apply_checkpoint(placed, ps::CheckpointMode::Selective, cost, budget);
  EXPECT_TRUE(s == expected);
}

TEST(AssemblePlan, RefusesARecipeItCannotCarryOut) {
  const ps::GeneratorInfo& one = ps::find_generator("1f1b");
  const ps::UniformCost cost;
  const ps::Problem p{.ranks = 2, .stages = 2, .microbatches = 4};
  const ps::CheckpointInfo& none = ps::find_checkpoint("none");
  auto message = [&](const ps::GeneratorInfo& g, const ps::PlanRecipe& r,
                     const ps::MemoryBudget& b) {
    try {
      (void)ps::assemble_plan(g, p, cost, b, r, none);
    } catch (const ps::invalid_problem& e) {
      return e.message().text();
    }
    return std::string("no error");
  };
  EXPECT_NE(message(one, {.fine_wgrad = true}, {}).find("PlanRecipe.wgrad"), std::string::npos);
  EXPECT_NE(message(one, {.fit = ps::FitOrder::Fitted}, {}).find("has none"), std::string::npos);
  EXPECT_NE(message(one, {.warmup = 2}, {}).find("PlanRecipe.warmup"), std::string::npos);
  EXPECT_NE(message(ps::find_generator("zb-h1"),
                    {.wgrad = ps::WGradMode::Split, .fit = ps::FitOrder::Fitted}, {})
                .find("no limit"),
            std::string::npos);
  // One per weight GEMM needs a cost model that counts them.
  EXPECT_NE(message(one, {.wgrad = ps::WGradMode::Split, .fine_wgrad = true, .wgrad_parts = 0}, {})
                .find("per_gemm_wgrad_cost"),
            std::string::npos);
}

}  // namespace

}  // namespace test_assemble_grid
