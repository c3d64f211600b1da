// The tuner: its plans fit their budget, are no slower than any candidate built by hand from
// the same search space (so pruning drops nothing), its empty and refused cases, progress
// reporting, and TransformerCost plans that fit the device memory with the weights.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../sanitizer_slowdown.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/tune.hpp"

namespace test_tune {

namespace ps = pipesched;

using ps::CheckpointMode;

namespace {

constexpr double eps = 1e-9;

ps::tuning::Request uniform_request(int ranks, int global_batch, double budget) {
  ps::tuning::Request r{.ranks = ranks, .global_batch = global_batch};
  r.budget = ps::MemoryBudget{.all = budget, .per_rank = {}};
  return r;
}

// The fastest fitting candidate of each kind, built one by one without the tuner: every
// base, chunk count and mode of the default request, each schedule through apply_checkpoint.
struct BruteForce {
  std::optional<double> none, conventional, mario, full;
  double best() const {
    double b = std::numeric_limits<double>::infinity();
    for (const auto& x : {none, conventional, mario})
      if (x) b = std::min(b, *x);
    return b;
  }
};

BruteForce brute_force(const ps::tuning::Request& req, const ps::UniformCost& cost) {
  BruteForce out;
  auto keep = [](std::optional<double>& slot, double t) {
    if (!slot || t < *slot) slot = t;
  };
  for (const std::string& name : req.bases) {
    const ps::GeneratorInfo& g = ps::find_generator(name);
    const std::vector<int> own{g.default_chunks};
    std::vector<bool> fitting{false};
    if (g.generate_within) fitting.push_back(true);
    for (int chunks : g.chunks_vary ? req.chunks : own)
      for (bool fitted : fitting) {
        ps::Schedule base;
        const ps::Problem p{
            .ranks = req.ranks, .stages = req.ranks * chunks, .microbatches = req.global_batch};
        try {
          base = fitted ? g.generate_within(p, g.default_wgrad, cost, *req.budget)
                        : g.generate(p, g.default_wgrad);
        } catch (const ps::invalid_problem&) {
          continue;
        }
        for (CheckpointMode mode : {CheckpointMode::None, CheckpointMode::Selective,
                                    CheckpointMode::Mario, CheckpointMode::Full}) {
          ps::Schedule s;
          try {
            s = ps::apply_checkpoint(base, mode, cost, *req.budget);
          } catch (const ps::invalid_problem&) {
            continue;
          }
          const ps::SimulationResult sim = ps::simulate(s, cost);
          bool fits = !sim.deadlock;
          for (int r = 0; r < req.ranks; ++r)
            fits = fits && sim.ranks[r].peak_memory <= req.budget->of(r) + eps;
          if (!fits) continue;
          if (mode == CheckpointMode::None) keep(out.none, sim.makespan);
          if (mode == CheckpointMode::Selective) keep(out.conventional, sim.makespan);
          if (mode == CheckpointMode::Mario) keep(out.mario, sim.makespan);
          if (mode == CheckpointMode::Full) keep(out.full, sim.makespan);
        }
      }
  }
  return out;
}

// What every plan the tuner returns must satisfy, whatever the cost model.
template <class Cost>
void expect_consistent(const ps::tuning::Plan& p, const ps::tuning::Request& req,
                       const Cost& cost) {
  SCOPED_TRACE(ps::describe(p));
  EXPECT_EQ(p.microbatch_size * p.microbatches, req.global_batch);
  EXPECT_EQ(p.schedule.problem.ranks, req.ranks);
  EXPECT_EQ(p.schedule.problem.microbatches, p.microbatches);
  EXPECT_EQ(p.schedule.problem.chunks(), p.chunks);
  const ps::ValidationReport rep = ps::check(p.schedule);
  EXPECT_TRUE(rep.ok()) << rep.summary();
  const ps::SimulationResult sim = ps::simulate(p.schedule, cost);
  ASSERT_FALSE(sim.deadlock);
  EXPECT_NEAR(sim.makespan, p.makespan, 1e-9 * p.makespan);
  EXPECT_NEAR(p.throughput, req.global_batch / p.makespan, 1e-9 * p.throughput);
  ASSERT_EQ(p.peak_per_rank.size(), static_cast<std::size_t>(req.ranks));
  ASSERT_EQ(p.budget_per_rank.size(), static_cast<std::size_t>(req.ranks));
  int recomputes = 0;
  for (const auto& list : p.schedule.ranks)
    for (const ps::Action& a : list)
      recomputes += a.kind == ps::OpKind::R;
  EXPECT_EQ(p.recomputes, recomputes);
  if (p.checkpoint == CheckpointMode::None) {
    EXPECT_EQ(p.recomputes, 0);
  }
  for (int r = 0; r < req.ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NEAR(sim.ranks[r].peak_memory, p.peak_per_rank[r], 1e-9 * (1 + p.peak_per_rank[r]));
    EXPECT_LE(p.peak_per_rank[r], p.budget_per_rank[r] * (1 + eps));
  }
  // Recomputes only add work: the bound the search prunes with holds for the plan.
  EXPECT_LE(ps::detail::makespan_lower_bound(p.schedule, cost, sim), p.makespan * (1 + eps));
}

const std::vector<ps::tuning::Plan*> plans_of(ps::tuning::Result& r) {
  std::vector<ps::tuning::Plan*> out;
  for (auto* slot : {&r.best, &r.best_without_checkpoint, &r.best_conventional, &r.best_mario})
    if (*slot) out.push_back(&**slot);
  return out;
}

}  // namespace

// The brief's case: p = 4, global batch 16, budget 2 (1F1B's rank 0 holds 4).
TEST(Tune, UniformBudgetTwoFitsAndIsFastest) {
  const ps::tuning::Request req = uniform_request(4, 16, 2.0);
  ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best);
  EXPECT_FALSE(r.best_without_checkpoint) << "budget 2 is below 1F1B's peak of 4";
  ASSERT_TRUE(r.best_conventional);
  ASSERT_TRUE(r.best_mario);
  for (int rank = 0; rank < req.ranks; ++rank)
    EXPECT_LE(r.best->peak_per_rank[rank], 2.0 + eps) << "rank " << rank;
  EXPECT_LE(r.best_mario->makespan, r.best_conventional->makespan + eps);
  for (const ps::tuning::Plan* p : plans_of(r)) {
    EXPECT_LE(r.best->makespan, p->makespan + eps);
    expect_consistent(*p, req, ps::UniformCost{});
  }
  EXPECT_EQ(r.best_mario->checkpoint, CheckpointMode::Mario);
  EXPECT_GT(r.best_mario->recomputes, 0);
  EXPECT_TRUE(r.best_conventional->checkpoint == CheckpointMode::Selective ||
              r.best_conventional->checkpoint == CheckpointMode::Full);
}

// Over a grid, the tuner's bests equal the fastest fitting candidates built one by one: the
// pruning never drops a plan that would have won.
TEST(Tune, BestsMatchExhaustiveSearch) {
  struct Point {
    int ranks, global_batch;
    double budget, comm;
  };
  // With a message latency (comm = 1) the configuration with the lowest bound (interleaved,
  // 4 chunks) is the slowest, so the search order and the pruning are put to the test.
  for (const Point& pt : {Point{4, 16, 2.0, 0}, Point{4, 16, 3.0, 0}, Point{4, 8, 1.5, 0},
                          Point{2, 8, 1.2, 0}, Point{4, 16, 100.0, 0}, Point{4, 16, 2.0, 1},
                          Point{4, 8, 1.5, 1}, Point{8, 16, 2.0, 0.5}}) {
    SCOPED_TRACE("p=" + std::to_string(pt.ranks) + " batch=" + std::to_string(pt.global_batch) +
                 " budget=" + std::to_string(pt.budget) + " comm=" + std::to_string(pt.comm));
    const ps::tuning::Request req = uniform_request(pt.ranks, pt.global_batch, pt.budget);
    const ps::UniformCost cost{.comm = pt.comm};
    ps::tuning::Result r = ps::tune(req, cost);
    const BruteForce bf = brute_force(req, cost);
    ASSERT_TRUE(r.best);
    EXPECT_NEAR(r.best->makespan, bf.best(), eps);
    ASSERT_EQ(r.best_without_checkpoint.has_value(), bf.none.has_value());
    if (bf.none) {
      EXPECT_NEAR(r.best_without_checkpoint->makespan, *bf.none, eps);
    }
    ASSERT_EQ(r.best_mario.has_value(), bf.mario.has_value());
    if (bf.mario) {
      EXPECT_NEAR(r.best_mario->makespan, *bf.mario, eps);
    }
    ASSERT_EQ(r.best_conventional.has_value(), bf.conventional.has_value());
    if (bf.conventional) {
      EXPECT_NEAR(r.best_conventional->makespan, *bf.conventional, eps);
    }
    if (r.best_mario && r.best_conventional) {
      EXPECT_LE(r.best_mario->makespan, r.best_conventional->makespan + eps);
    }
    for (const ps::tuning::Plan* p : plans_of(r))
      expect_consistent(*p, req, cost);
  }
}

// A budget that holds everything: the best plan needs no checkpointing.
TEST(Tune, LargeBudgetPrefersNoCheckpointing) {
  for (double budget : {100.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    ps::tuning::Request req = uniform_request(4, 16, budget);
    ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
    ASSERT_TRUE(r.best);
    ASSERT_TRUE(r.best_without_checkpoint);
    EXPECT_EQ(r.best->checkpoint, CheckpointMode::None);
    EXPECT_EQ(r.best->recomputes, 0);
    EXPECT_NEAR(r.best->makespan, r.best_without_checkpoint->makespan, eps);
    // Mario and selective return the base when it fits: no recompute, same step time.
    ASSERT_TRUE(r.best_mario);
    EXPECT_EQ(r.best_mario->recomputes, 0);
    EXPECT_NEAR(r.best_mario->makespan, r.best->makespan, eps);
    EXPECT_EQ(r.candidates_over_budget, 0);
  }
  // No budget at all: UniformCost implies no limit.
  ps::tuning::Result r =
      ps::tune(ps::tuning::Request{.ranks = 4, .global_batch = 16}, ps::UniformCost{});
  ASSERT_TRUE(r.best_without_checkpoint);
  EXPECT_EQ(r.best->checkpoint, CheckpointMode::None);
  for (double b : r.best->budget_per_rank)
    EXPECT_TRUE(std::isinf(b));
}

// A budget that nothing fits, not even full checkpointing: an empty result, not an error.
TEST(Tune, BudgetTooSmallGivesNoPlan) {
  const ps::tuning::Request req = uniform_request(4, 16, 0.01);
  ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  EXPECT_FALSE(r.best);
  EXPECT_FALSE(r.best_without_checkpoint);
  EXPECT_FALSE(r.best_conventional);
  EXPECT_FALSE(r.best_mario);
  EXPECT_GT(r.candidates_tried, 0);
  EXPECT_EQ(r.candidates_over_budget + r.candidates_refused, r.candidates_tried);
  EXPECT_GT(r.candidates_over_budget, 0);
}

// Configurations a generator refuses are skipped and explained.
TEST(Tune, RefusedConfigurationsAreSkippedWithNotes) {
  // DualPipeV needs at least 2p microbatches: 6 on 4 ranks are refused.
  ps::tuning::Request req = uniform_request(4, 6, 2.0);
  req.bases = {"dualpipe-v"};
  ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  EXPECT_FALSE(r.best);
  EXPECT_EQ(r.candidates_refused, r.candidates_tried);
  EXPECT_EQ(r.candidates_tried, 4);  // its own chunks × modes none, selective, mario, full
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().text().find("dualpipe-v"), std::string::npos) << r.notes.front().text();
  EXPECT_NE(r.notes.front().reason.find("microbatches"), std::string::npos)
      << r.notes.front().text();

  // With 1F1B alongside, the search goes on past the refused configurations.
  req.bases = {"dualpipe-v", "1f1b"};
  r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->base, "1f1b");
  EXPECT_EQ(r.candidates_refused, 4);
}

// A factory that cannot model a microbatch size: that size is skipped, the others searched.
TEST(Tune, FactoryRefusalSkipsThatMicrobatchSize) {
  ps::tuning::Request req = uniform_request(4, 16, 2.0);
  req.bases = {"1f1b"};
  req.microbatch_sizes = {1, 2, 3};  // 3 does not divide 16: left out, not refused
  ps::tuning::Result r = ps::tune(req, ps::tuning::UniformCostFactory{});
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->microbatch_size, 1);
  EXPECT_EQ(r.candidates_tried, 2 * 4);
  EXPECT_EQ(r.candidates_refused, 4);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().reason.find("UniformCost"), std::string::npos)
      << r.notes.front().text();
  // The UniformCost overload searches microbatch size 1 only.
  r = ps::tune(req, ps::UniformCost{});
  EXPECT_EQ(r.candidates_refused, 0);
  EXPECT_EQ(r.best->microbatches, 16);
}

// A request out of range is an error that names the field.
TEST(Tune, InvalidRequestsThrow) {
  struct Case {
    const char* what;
    std::function<void(ps::tuning::Request&)> change;
  };
  const std::vector<Case> cases = {
      {"ranks", [](ps::tuning::Request& r) { r.ranks = 0; }},
      {"global_batch", [](ps::tuning::Request& r) { r.global_batch = 0; }},
      {"bases", [](ps::tuning::Request& r) { r.bases.clear(); }},
      {"unknown schedule", [](ps::tuning::Request& r) { r.bases = {"2f2b"}; }},
      {"chunks", [](ps::tuning::Request& r) { r.chunks = {0}; }},
      {"chunks", [](ps::tuning::Request& r) { r.chunks.clear(); }},
      {"microbatch_sizes",
       [](ps::tuning::Request& r) {
         r.microbatch_sizes = {3, 5};
       }},
      {"microbatch_sizes", [](ps::tuning::Request& r) { r.microbatch_sizes = {0}; }},
      {"checkpoints",
       [](ps::tuning::Request& r) {
         r.checkpoints.clear();
         r.full_fallback = false;
       }},
      {"MemoryBudget.all", [](ps::tuning::Request& r) { r.budget = ps::MemoryBudget{.all = -1}; }},
      {"budget.per_rank",
       [](ps::tuning::Request& r) {
         r.budget = ps::MemoryBudget{.all = 2, .per_rank = {1, 1, 1, 1, 1}};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ps::tuning::Request req = uniform_request(4, 16, 2.0);
    c.change(req);
    try {
      ps::tune(req, ps::tuning::UniformCostFactory{});
      ADD_FAILURE() << "no exception";
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    }
  }
}

// Only the modes asked for are reported; full checkpointing steps in when nothing fits.
TEST(Tune, ModeSubsetsAndFullFallback) {
  ps::tuning::Request req = uniform_request(4, 16, 2.0);
  req.checkpoints = {CheckpointMode::Mario};
  ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->checkpoint, CheckpointMode::Mario);
  EXPECT_FALSE(r.best_conventional) << "full is a fallback only, and Mario fits";
  EXPECT_FALSE(r.best_without_checkpoint);

  // Without checkpointing nothing fits budget 2: the fallback gives a full plan.
  req.checkpoints = {CheckpointMode::None};
  r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->checkpoint, CheckpointMode::Full);
  ASSERT_TRUE(r.best_conventional);
  EXPECT_NEAR(r.best_conventional->makespan, r.best->makespan, eps);
  EXPECT_FALSE(r.best_without_checkpoint);
  expect_consistent(*r.best, req, ps::UniformCost{});

  req.full_fallback = false;
  r = ps::tune(req, ps::UniformCost{});
  EXPECT_FALSE(r.best);

  // Full named as a mode competes on its own footing (and loses to selective).
  req.checkpoints = {CheckpointMode::Full, CheckpointMode::Selective};
  r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->checkpoint, CheckpointMode::Selective);
}

// Progress: one call per candidate, counting up to the total, the best so far never slower.
TEST(Tune, ProgressCountsEveryCandidate) {
  for (double budget : {2.0, 0.01}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const ps::tuning::Request req = uniform_request(4, 16, budget);
    int calls = 0, last_done = 0, last_total = -1;
    double last_best = std::numeric_limits<double>::infinity();
    bool monotone = true;
    ps::tuning::Result r =
        ps::tune(req, ps::UniformCost{}, [&](int done, int total, const ps::tuning::Plan* best) {
          ++calls;
          monotone = monotone && done == last_done + 1;
          if (last_total >= 0) monotone = monotone && total == last_total;
          last_done = done;
          last_total = total;
          if (best) {
            monotone = monotone && best->makespan <= last_best + eps;
            last_best = best->makespan;
          }
        });
    EXPECT_TRUE(monotone);
    // 1f1b, interleaved ×2, ×4, zb-h1 as it is and fitted to the budget, each with none,
    // selective, mario and full (fallback).
    EXPECT_EQ(last_total, 5 * 4);
    EXPECT_EQ(calls, last_total);
    EXPECT_EQ(r.candidates_tried, last_total);
    EXPECT_LE(r.candidates_refused + r.candidates_over_budget + r.candidates_pruned,
              r.candidates_tried);
    EXPECT_GE(r.seconds, 0.0);
    if (r.best) {
      EXPECT_NEAR(last_best, r.best->makespan, eps);
    }
  }
}

// TransformerCost: every plan's activations plus the rank's weights, gradients and optimizer
// state fit the device. GPT-3 1.3B on 4 × A100 40GB fits without checkpointing; Llama 2 7B on
// 8 × RTX 4090 (about 10 GiB left per rank for activations) needs it.
TEST(Tune, TransformerPlanFitsDeviceMemory) {
  struct Case {
    const char* model;
    const char* device;
    int ranks;
    bool needs_checkpointing;
  };
  for (const Case& c :
       {Case{"gpt3-1.3b", "a100-40gb", 4, false}, Case{"llama2-7b", "rtx-4090", 8, true}}) {
    SCOPED_TRACE(std::string(c.model) + " on " + std::to_string(c.ranks) + " x " + c.device);
    const ps::ModelShape model = ps::presets::find_model(c.model);
    const ps::DeviceSpec device = ps::presets::find_device(c.device);
    const ps::tuning::Request req{.ranks = c.ranks, .global_batch = 16};
    ps::tuning::Result r = ps::tune(req, model, device);
    ASSERT_TRUE(r.best);
    EXPECT_LT(r.seconds, 10.0 * sanitizer_slowdown);
    EXPECT_EQ(r.best_without_checkpoint.has_value(), !c.needs_checkpointing);
    if (c.needs_checkpointing) {
      ASSERT_TRUE(r.best_mario);
      ASSERT_TRUE(r.best_conventional);
      EXPECT_GT(r.best->recomputes, 0);
      EXPECT_LE(r.best_mario->makespan, r.best_conventional->makespan * (1 + eps));
    }
    for (ps::tuning::Plan* p : plans_of(r)) {
      SCOPED_TRACE(ps::describe(*p));
      ps::TransformerCost cost{model, device, {}};
      cost.model.microbatch_size = p->microbatch_size;
      expect_consistent(*p, req, cost);
      const ps::CostContext ctx{p->schedule.problem, p->schedule.placement, 1};
      for (int rank = 0; rank < req.ranks; ++rank) {
        const double fixed = cost.static_bytes(ctx, rank);
        EXPECT_NEAR(p->budget_per_rank[rank], device.usable_memory() - fixed, 1.0);
        EXPECT_LE(p->peak_per_rank[rank] + fixed, device.usable_memory() * (1 + eps))
            << "rank " << rank;
      }
    }
  }
}

// A model whose weights alone exceed the devices: every configuration is refused, and the
// notes say why.
TEST(Tune, WeightsOverDeviceMemoryAreRefused) {
  const ps::tuning::Request req{.ranks = 2, .global_batch = 4};
  ps::tuning::Result r =
      ps::tune(req, ps::presets::find_model("llama2-34b"), ps::presets::find_device("rtx-4090"));
  EXPECT_FALSE(r.best);
  EXPECT_EQ(r.candidates_refused, r.candidates_tried);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().reason.find("optimizer state"), std::string::npos)
      << r.notes.front().text();
}

// Configurations refused for the same reason make one note that counts them, however many
// there are; different reasons stay apart, in the order first met.
TEST(Tune, RepeatedRefusalsAreCountedInOneNote) {
  // GPT-3 1.3B has 24 layers: 16 ranks x 2 chunks (32 stages) is too many stages for every
  // microbatch size, and so is x 4 (64 stages), for another reason (the stage count differs).
  ps::tuning::Request req{.ranks = 16, .global_batch = 64};
  req.bases = {"interleaved-1f1b"};
  req.chunks = {2, 4};
  req.microbatch_sizes = {1, 2, 4};  // 64, 32 and 16 microbatches: whole groups of 16
  const ps::tuning::Result r =
      ps::tune(req, ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("a100-80gb"));
  EXPECT_FALSE(r.best);
  ASSERT_EQ(r.notes.size(), 2u);
  int counted = 0;
  for (const ps::tuning::Note& n : r.notes) {
    SCOPED_TRACE(n.text());
    EXPECT_EQ(n.count, 3);  // one per microbatch size
    EXPECT_NE(n.reason.find("24"), std::string::npos);
    EXPECT_NE(n.configuration.find("microbatch size 1 "), std::string::npos);
    counted += n.count;
  }
  EXPECT_NE(r.notes[0].reason.find("32 stages"), std::string::npos) << r.notes[0].reason;
  EXPECT_NE(r.notes[1].reason.find("64 stages"), std::string::npos) << r.notes[1].reason;
  // Every refused configuration is in some note's count (each refuses all its modes).
  EXPECT_EQ(counted * 4, r.candidates_refused);
}

// A memory budget given in bytes overrides the device-derived one.
TEST(Tune, TransformerExplicitBudget) {
  const ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  const ps::DeviceSpec device = ps::presets::find_device("a100-80gb");
  ps::tuning::Request req{.ranks = 4, .global_batch = 16};
  req.bases = {"1f1b"};
  ps::tuning::Result unlimited = ps::tune(req, model, device);
  ASSERT_TRUE(unlimited.best_without_checkpoint);
  // Half of what the fastest plan without checkpointing holds on its busiest rank.
  const ps::tuning::Plan& free_plan = *unlimited.best_without_checkpoint;
  double peak = 0;
  for (double x : free_plan.peak_per_rank)
    peak = std::max(peak, x);
  req.budget = ps::MemoryBudget{.all = peak / 2, .per_rank = {}};
  ps::tuning::Result tight = ps::tune(req, model, device);
  ASSERT_TRUE(tight.best);
  for (int rank = 0; rank < req.ranks; ++rank)
    EXPECT_LE(tight.best->peak_per_rank[rank], peak / 2 * (1 + eps));
  EXPECT_GE(tight.best->makespan, unlimited.best->makespan * (1 - eps));
}

TEST(Tune, SearchesSlicesAndFineWeightGradientsToo) {
  ps::tuning::Request req;
  req.ranks = 4;
  req.global_batch = 16;
  req.bases = {"1f1b", "seq-1f1b", "slice-pipe"};
  req.chunks = {2};
  req.slices = {1, 2, 4};
  req.fine_wgrad = true;
  req.budget = ps::MemoryBudget{.all = 1.5};
  const ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  ASSERT_TRUE(r.best.has_value());
  // 1F1B holds 4 microbatches on rank 0; only slicing (or heavy checkpointing) fits 1.5.
  EXPECT_GT(r.best->slices, 1) << ps::describe(*r.best);
  for (double peak : r.best->peak_per_rank)
    EXPECT_LE(peak, 1.5 + 1e-9);
  EXPECT_TRUE(ps::check(r.best->schedule).ok());
  const ps::SimulationResult sim = ps::simulate(r.best->schedule, ps::UniformCost{});
  EXPECT_DOUBLE_EQ(sim.makespan, r.best->makespan);
  // A sliced plan beats every plan that runs whole microbatches under this budget.
  ps::tuning::Request whole = req;
  whole.slices = {1};
  const ps::tuning::Result w = ps::tune(whole, ps::UniformCost{});
  if (w.best) {
    EXPECT_LT(r.best->makespan, w.best->makespan);
  }
  // Refusals are reported, not thrown.
  req.slices = {0};
  EXPECT_THROW(ps::tune(req, ps::UniformCost{}), ps::invalid_problem);
}

// Offload and recompute planned together: within 2 microbatches of activations, with copies
// half a forward long, the plan that offloads is faster than the best that only recomputes
// (the same search without offloading), and its step, schedule and command agree.
TEST(Tune, OffloadsWhereTheCopiesPayAndRecomputesTheRest) {
  ps::tuning::Request req = uniform_request(4, 8, 2.0);
  req.bases = {"1f1b", "zb-h1"};
  req.checkpoints = {CheckpointMode::None, CheckpointMode::Selective, CheckpointMode::Mario};
  const ps::UniformCost cost{.f = 1, .b = 2, .w = 1, .copy = 0.5};
  const ps::tuning::Result without = ps::tune(req, cost);
  req.offload = true;
  ps::tuning::Result with = ps::tune(req, cost);
  ASSERT_TRUE(without.best && with.best);
  EXPECT_EQ(without.best->offloads, 0);
  EXPECT_GT(with.best->offloads, 0) << ps::describe(*with.best);
  EXPECT_LT(with.best->makespan, without.best->makespan);
  EXPECT_NE(ps::describe(*with.best).find(" offloads"), std::string::npos);
  EXPECT_TRUE(ps::check(with.best->schedule).ok());
  const ps::SimulationResult sim = ps::simulate(with.best->schedule, cost);
  EXPECT_DOUBLE_EQ(sim.makespan, with.best->makespan);
  for (double peak : with.best->peak_per_rank)
    EXPECT_LE(peak, 2.0 + eps);
  // No plan pairs Mario with offloads.
  for (const ps::tuning::Plan* p : plans_of(with))
    EXPECT_FALSE(p->checkpoint == CheckpointMode::Mario && p->offloads > 0) << ps::describe(*p);
}

// Vocabulary parallelism searched (Request::vocabulary): GPT-3 1.3B over 4 A100s, whose 50k-row
// head is about two layers' work on the last stage. The head split over the ranks shortens the
// step; the tuner finds that plan, which carries its passes and a cost model with the head
// split, under which its schedule gives its step exactly, as assemble_plan with
// PlanRecipe::vocabulary builds it; Chimera's two replicas are not tried with it.
TEST(Tune, SearchesVocabularyParallelismAndPlansItAsAssemblePlanDoes) {
  const ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  const ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
  ps::tuning::Request req{.ranks = 4, .global_batch = 8};
  req.bases = {"1f1b", "zb-v", "chimera"};
  req.microbatch_sizes = {1};
  req.checkpoints = {CheckpointMode::None, CheckpointMode::Selective};
  const ps::tuning::Result without = ps::tune(req, model, device);
  req.vocabulary = true;
  ps::tuning::Result with = ps::tune(req, model, device);
  ASSERT_TRUE(without.best && with.best);
  EXPECT_FALSE(without.best->vocabulary);
  EXPECT_TRUE(with.best->vocabulary) << ps::describe(*with.best);
  EXPECT_LT(with.best->makespan, without.best->makespan);
  EXPECT_NE(ps::describe(*with.best).find(", vocabulary parallel"), std::string::npos);
  EXPECT_GT(with.candidates_total, without.candidates_total);
  const ps::tuning::Plan& p = *with.best;
  EXPECT_TRUE(p.schedule.has_vocabulary());
  EXPECT_TRUE(ps::check(p.schedule).ok());
  const auto* cost = std::any_cast<ps::TransformerCost>(&p.cost);
  ASSERT_NE(cost, nullptr);
  EXPECT_TRUE(cost->parallel.vocabulary);
  EXPECT_EQ(ps::simulate(p.schedule, *cost).makespan, p.makespan);
  // assemble_plan (what `pipesched simulate --vocab-parallel` calls) builds the same schedule.
  ps::MemoryBudget budget;
  budget.per_rank = p.budget_per_rank;
  const ps::PlanRecipe recipe{.wgrad = p.wgrad,
                              .fit = p.fitted ? ps::FitOrder::Fitted : ps::FitOrder::Own,
                              .vocabulary = true};
  const auto again = ps::assemble_plan(ps::find_generator(p.base), p.schedule.problem, *cost,
                                       budget, recipe, ps::find_checkpoint(ps::checkpoint_name(p)));
  EXPECT_EQ(ps::to_text(again.schedule), ps::to_text(p.schedule));
  for (const ps::tuning::Plan* q : plans_of(with))
    if (q->base == "chimera") {
      EXPECT_FALSE(q->vocabulary) << ps::describe(*q);
    }
  // The plan file keeps the split: read back, its cost model splits the head.
  const ps::tuning::Plan read = ps::read_plan(ps::plan_json(p), "plan");
  EXPECT_TRUE(read.vocabulary);
  const auto* read_cost = std::any_cast<ps::TransformerCost>(&read.cost);
  ASSERT_NE(read_cost, nullptr);
  EXPECT_TRUE(read_cost->parallel.vocabulary);
}

// ---------------------------------------------------------------------------------------
// The cluster search: pipeline x data x tensor parallelism, layer splits, in parallel.

namespace {

// GPT-3 1.3B on 8 A100 40GB in nodes of 4: small enough to search every way by hand.
ps::tuning::ClusterRequest small_cluster() {
  ps::tuning::ClusterRequest c;
  c.gpus = 8;
  c.gpus_per_node = 4;
  c.global_batch = 16;
  c.search.bases = {"1f1b", "interleaved-1f1b", "zb-h1"};
  c.search.chunks = {2};
  c.search.microbatch_sizes = {1, 2, 4};
  c.search.checkpoints = {CheckpointMode::None, CheckpointMode::Selective, CheckpointMode::Mario};
  return c;
}

ps::ModelShape short_gpt() {
  ps::ModelShape m = ps::presets::find_model("gpt3-1.3b");
  m.sequence = 1024;
  return m;
}

}  // namespace

TEST(TuneCluster, BestIsTheBestOfEveryFactorizationSearchedAlone) {
  const ps::tuning::ClusterRequest req = small_cluster();
  const ps::ModelShape model = short_gpt();
  ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
  const ps::tuning::Result r = ps::tune_cluster(req, model, device);
  ASSERT_TRUE(r.best);
  EXPECT_FALSE(r.cut);
  EXPECT_EQ(r.candidates_tried, r.candidates_total);
  device.ranks_per_node = 4;
  // By hand: every (pp, d, t) with t | 4, every split, each a fixed-pipeline search.
  std::optional<double> best;
  std::map<std::pair<std::string, CheckpointMode>, double> pair_best;
  int factorizations = 0;
  for (int t : {1, 2, 4})
    for (int pp : {1, 2, 4, 8}) {
      if (8 % (t * pp) != 0) continue;
      const int d = 8 / (t * pp);
      for (ps::LayerSplit split : {ps::LayerSplit::Even, ps::LayerSplit::Balanced}) {
        ++factorizations;
        ps::Parallelism par;
        par.tensor = t;
        par.sequence_parallel = t > 1;
        par.data = d;
        par.zero = d > 1 ? 1 : 0;
        par.split = split;
        par.whole_step = true;
        ps::tuning::Request one = req.search;
        one.ranks = pp;
        one.global_batch = req.global_batch / d;
        one.threads = 1;
        const ps::tuning::Result alone =
            ps::tune(one, ps::tuning::TransformerCostFactory{model, device, par});
        if (alone.best && (!best || alone.best->makespan < *best)) best = alone.best->makespan;
        for (const ps::tuning::Baseline& b : alone.baselines) {
          if (!b.plan) continue;
          auto key = std::pair{b.base, b.checkpoint};
          if (!pair_best.count(key) || b.plan->makespan < pair_best[key])
            pair_best[key] = b.plan->makespan;
        }
      }
    }
  EXPECT_GT(factorizations, 10);
  ASSERT_TRUE(best);
  EXPECT_NEAR(r.best->makespan, *best, 1e-12 * *best) << ps::describe(*r.best);
  // Every (base, mode) pair's best is the best of that pair over all factorizations.
  ASSERT_EQ(r.baselines.size(), 3u * 3u);
  for (const ps::tuning::Baseline& b : r.baselines) {
    SCOPED_TRACE(b.base + " " + ps::to_string(b.checkpoint));
    auto it = pair_best.find({b.base, b.checkpoint});
    ASSERT_EQ(b.plan.has_value(), it != pair_best.end());
    if (b.plan) {
      EXPECT_NEAR(b.plan->makespan, it->second, 1e-12 * it->second);
    }
  }
}

TEST(TuneCluster, PlansDescribeTheirClusterAndReproduce) {
  const ps::tuning::ClusterRequest req = small_cluster();
  const ps::ModelShape model = short_gpt();
  const ps::tuning::Result r = ps::tune_cluster(req, model, ps::presets::find_device("a100-40gb"));
  ASSERT_TRUE(r.best);
  for (const ps::tuning::Baseline& b : r.baselines) {
    if (!b.plan) continue;
    const ps::tuning::Plan& p = *b.plan;
    SCOPED_TRACE(ps::describe(p));
    const int pp = p.schedule.problem.ranks;
    EXPECT_EQ(pp * p.data * p.tensor, 8);
    EXPECT_EQ(p.gpus, 8);
    EXPECT_EQ(p.global_batch, 16);
    EXPECT_EQ(p.microbatches * p.microbatch_size * p.data, 16);
    int layers = 0;
    for (int n : p.layers_per_stage)
      layers += n;
    EXPECT_EQ(layers, model.layers);
    EXPECT_EQ(p.zero, p.data > 1 ? 1 : 0);
    EXPECT_EQ(p.sequence_parallel, p.tensor > 1);
    EXPECT_GT(p.mfu, 0.0);
    EXPECT_LT(p.mfu, 0.75);  // no plan beats the GEMM efficiency ceiling
    ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
    device.ranks_per_node = 4;
    EXPECT_LE(p.peak_memory, device.usable_memory() * (1 + 1e-12));
    // The cost model the plan names, with its layers listed, simulates to its step time.
    ps::ModelShape m = model;
    m.microbatch_size = p.microbatch_size;
    ps::TransformerCost cost{m, device, {}};
    cost.parallel.tensor = p.tensor;
    cost.parallel.sequence_parallel = p.sequence_parallel;
    cost.parallel.data = p.data;
    cost.parallel.zero = p.zero;
    cost.parallel.layers = p.layers_per_stage;
    cost.parallel.whole_step = true;
    const ps::SimulationResult sim = ps::simulate(p.schedule, cost);
    EXPECT_DOUBLE_EQ(sim.makespan, p.makespan);
    const double flops = 16 * model.training_flops_per_sequence();
    EXPECT_NEAR(p.mfu, flops / (8 * device.peak_flops * p.makespan), 1e-12);
    // The usual convention: attention in full, so more FLOPs for the same step.
    const double usual = 16 * model.usual_training_flops_per_sequence();
    EXPECT_NEAR(p.mfu_usual, usual / (8 * device.peak_flops * p.makespan), 1e-12);
    EXPECT_GT(p.mfu_usual, p.mfu);
  }
}

TEST(TuneCluster, ThreadsChangeNothingButTheTime) {
  ps::tuning::ClusterRequest req = small_cluster();
  const ps::ModelShape model = short_gpt();
  const ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
  req.search.threads = 1;
  const ps::tuning::Result one = ps::tune_cluster(req, model, device);
  req.search.threads = 3;
  const ps::tuning::Result three = ps::tune_cluster(req, model, device);
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(three.threads, 3);
  ASSERT_TRUE(one.best && three.best);
  EXPECT_EQ(ps::describe(*one.best), ps::describe(*three.best));
  EXPECT_DOUBLE_EQ(one.best->makespan, three.best->makespan);
  ASSERT_EQ(one.baselines.size(), three.baselines.size());
  for (std::size_t i = 0; i < one.baselines.size(); ++i) {
    ASSERT_EQ(one.baselines[i].plan.has_value(), three.baselines[i].plan.has_value());
    if (one.baselines[i].plan) {
      EXPECT_DOUBLE_EQ(one.baselines[i].plan->makespan, three.baselines[i].plan->makespan);
    }
  }
  EXPECT_EQ(one.candidates_total, three.candidates_total);
  EXPECT_EQ(one.candidates_tried, three.candidates_tried);
}

TEST(TuneCluster, TimeLimitCutsTheSearchAndSaysSo) {
  ps::tuning::ClusterRequest req = small_cluster();
  req.gpus = 16;
  req.global_batch = 64;
  req.search.time_limit = 1e-6;
  const ps::tuning::Result r =
      ps::tune_cluster(req, short_gpt(), ps::presets::find_device("a100-40gb"));
  EXPECT_TRUE(r.cut);
  EXPECT_LT(r.candidates_tried, r.candidates_total);
}

TEST(TuneCluster, BatchesThatDoNotSplitAreNotedAndBadRequestsThrow) {
  ps::tuning::ClusterRequest req = small_cluster();
  req.global_batch = 6;  // not over d = 4 or 8 replicas
  req.search.microbatch_sizes = {1};
  const ps::tuning::Result r =
      ps::tune_cluster(req, short_gpt(), ps::presets::find_device("a100-40gb"));
  ASSERT_TRUE(r.best);
  EXPECT_TRUE(6 % r.best->data == 0);
  bool noted = false;
  for (const ps::tuning::Note& n : r.notes)
    noted =
        noted || n.reason.find("does not split over 4 data-parallel replicas") != std::string::npos;
  EXPECT_TRUE(noted);
  auto throws = [](ps::tuning::ClusterRequest bad, const std::string& says) {
    try {
      (void)ps::tune_cluster(bad, short_gpt(), ps::presets::find_device("a100-40gb"));
      ADD_FAILURE() << "accepted: " << says;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  ps::tuning::ClusterRequest bad = small_cluster();
  bad.gpus = 0;
  throws(bad, "tuning::ClusterRequest.gpus = 0");
  bad = small_cluster();
  bad.zero = 3;
  throws(bad, "tuning::ClusterRequest.zero = 3");
  bad = small_cluster();
  bad.tensor = {3};  // divides neither the node nor 8
  throws(bad, "no way to run 8 GPUs");
  bad = small_cluster();
  bad.search.threads = -1;
  throws(bad, "tuning::Request.threads = -1");
}

// ZeRO and tensor parallelism make room: Llama 2 13B's weights alone (16 bytes per
// parameter over 8 pipeline ranks: 26 GiB a rank) do not fit 24 GB GPUs without them.
TEST(TuneCluster, ShardingLetsALargeModelFitSmallGpus) {
  ps::tuning::ClusterRequest req;
  req.gpus = 16;
  req.global_batch = 32;
  req.search.bases = {"1f1b"};
  req.search.microbatch_sizes = {1};
  req.search.checkpoints = {CheckpointMode::None, CheckpointMode::Full};
  req.pipeline = {8};
  const ps::ModelShape model = ps::presets::find_model("llama2-13b");
  const ps::DeviceSpec device = ps::presets::find_device("rtx-4090");
  req.tensor = {1};
  req.zero = 0;
  EXPECT_FALSE(ps::tune_cluster(req, model, device).best);
  req.zero = 2;
  const ps::tuning::Result sharded = ps::tune_cluster(req, model, device);
  ASSERT_TRUE(sharded.best);
  EXPECT_EQ(sharded.best->data, 2);
  EXPECT_EQ(sharded.best->zero, 2);
}

// every_equal_chunks adds the counts that cut the model into equal stages, and the search
// over them finds what each count alone finds; sliced configurations share their cut.
TEST(Tune, EveryEqualChunkCountIsSearchedBesideTheRequestsOwn) {
  EXPECT_EQ(ps::equal_split_chunks(24, 2), (std::vector<int>{2, 3, 4, 6, 12}));
  EXPECT_EQ(ps::equal_split_chunks(24, 5), std::vector<int>{});
  EXPECT_EQ(ps::equal_split_chunks(0, 2), std::vector<int>{});
  ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  model.sequence = 512;
  const ps::DeviceSpec device = ps::presets::find_device("h100");
  ps::tuning::Request req;
  req.ranks = 2;
  req.global_batch = 4;
  req.microbatch_sizes = {1};
  req.bases = {"interleaved-1f1b", "slice-pipe"};
  req.slices = {2};
  req.slicing = ps::SlicingMode::TeraPipe;
  req.checkpoints = {ps::CheckpointMode::None};
  req.chunks = {2};
  req.every_equal_chunks = true;
  const ps::tuning::Result all = ps::tune(req, model, device);
  ASSERT_TRUE(all.best);
  double fastest = std::numeric_limits<double>::infinity();
  for (int c : {2, 3, 4, 6, 12}) {
    ps::tuning::Request one = req;
    one.chunks = {c};
    one.every_equal_chunks = false;
    const ps::tuning::Result r = ps::tune(one, model, device);
    if (r.best) fastest = std::min(fastest, r.best->makespan);
  }
  EXPECT_EQ(all.best->makespan, fastest);
  EXPECT_GT(all.best->chunks, 2);
}

}  // namespace test_tune
