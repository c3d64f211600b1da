// The proof that matters most: the toy GPT and MLP, trained for two steps through the
// executor with every schedule family (fused and split backward; Chimera's two replicas with
// their gradients summed) on 1, 2 and 4 ranks, give
// the loss and the gradient of every parameter that one sequential pass gives, and hold
// exactly the activation bytes the simulator predicts from the models' own byte counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/layout.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/tune/layout_search.hpp"

#include "exec_support.hpp"

namespace test_toy_numerics {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

using namespace exec_test;

// The simulator's prediction for these stage models: their analytic stash sizes.
template <class Stage>
ps::ProfiledCost cost_of(const std::vector<Stage>& stages) {
  ps::ProfiledCost c;
  for (const Stage& s : stages)
    c.stages.push_back({.forward = 1,
                        .backward_input = 1,
                        .backward_weight = 1,
                        .activation_bytes = double(s.activation_bytes()),
                        .wgrad_bytes = double(s.wgrad_bytes())});
  return c;
}

// Runs `schedule` for two steps (an SGD step between them, from the executor's optimizer
// hook on each rank) and compares every step with the sequential reference. With several
// model replicas (Chimera) every replica's copy of a stage starts from the sequential model's
// weights; after the step the copies' gradients are summed (the replicas' all-reduce) and each
// copy must hold the sequential gradients and, after the update, its parameters.
// With replicas, every copy's gradient is the sum of the replicas' partial gradients, each
// rounded to T on its own (as an all-reduce of T values adds them), where the sequential pass
// rounds the whole sum once. `partials` are those partial gradients (from a sequential pass
// over each replica's microbatches); an element may differ from the sequential gradient by
// tolerance<T>() relative (as any schedule) plus the rounding of adding them: 2 units in the
// last place of T for each partial's magnitude.
template <class T>
double worst_excess(const std::vector<T>& got, const std::vector<T>& want,
                    const std::vector<std::vector<T>>& partials) {
  double scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    scale = std::max({scale, std::abs(double(got[i])), std::abs(double(want[i]))});
  const double ulp = std::numeric_limits<T>::epsilon();
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double magnitude = 0;
    for (const auto& p : partials)
      magnitude += std::abs(double(p[i]));
    const double denominator =
        std::max({std::abs(double(got[i])), std::abs(double(want[i])), 1e-3 * scale});
    const double allowed = tolerance<T>() * denominator + 2 * ulp * magnitude;
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) / allowed);
  }
  return worst;  // <= 1 when every element is within its allowance
}

template <class Stage, class Config, class Data>
void expect_matches_sequential(const ps::Schedule& schedule, const Config& config, const Data& data,
                               const ps::ProfiledCost* cost = nullptr) {
  using T = typename Stage::tensor_type::value_type;
  const int stages = schedule.problem.stages;
  const int replicas = schedule.problem.replicas;
  const int model_stages = stages / replicas;
  std::vector<Stage> ref, piped;
  for (int s = 0; s < model_stages; ++s)
    ref.emplace_back(config, s, model_stages);
  for (int s = 0; s < stages; ++s)
    piped.emplace_back(config, s % model_stages, model_stages);
  ps::ExecutorOptions options;
  if (replicas == 1)
    options.optimizer = toy::sgd_optimizer(schedule.placement, piped, learning_rate);
  ps::inproc::Pipeline<Stage> pipe(schedule, piped, options);
  const ps::SimulationResult predicted = ps::simulate(schedule, cost ? *cost : cost_of(piped));
  const auto training = toy::training_data(data);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, data);
    const auto ref_grads = toy::flat_gradients(ref);
    toy::sgd_update(ref, learning_rate);
    ps::StepResult r = pipe.step(training);
    EXPECT_LE(std::abs(r.loss - ref_loss), tolerance<T>() * std::abs(ref_loss));
    if (replicas > 1) {
      // Each replica's partial gradients, from a sequential pass over its microbatches alone.
      std::vector<std::vector<T>> partials;
      for (int q = 0; q < replicas; ++q) {
        std::vector<Stage> part;
        for (int s = 0; s < model_stages; ++s)
          part.emplace_back(config, s, model_stages);
        for (int s = 0; s < model_stages; ++s) {  // the weights before this step's update
          auto to = part[static_cast<std::size_t>(s)].parameters();
          auto from = piped[static_cast<std::size_t>(s)].parameters();
          auto f = from.begin();
          for (auto t = to.begin(); t != to.end(); ++t, ++f)
            (*t).data = (*f).data;
        }
        toy::sequential_replica_step(part, data, replicas, q);
        partials.push_back(toy::flat_gradients(part));
      }
      toy::sum_replica_gradients(piped, replicas);
      toy::sgd_update(piped, learning_rate);
      std::vector<T> summed = partials.front();  // the all-reduce of the partials, in T
      for (std::size_t q = 1; q < partials.size(); ++q)
        for (std::size_t i = 0; i < summed.size(); ++i)
          summed[i] += partials[q][i];
      for (int q = 0; q < replicas; ++q) {
        SCOPED_TRACE("replica " + std::to_string(q));
        const auto got = toy::flat_replica_gradients(piped, replicas, q);
        EXPECT_LE(toy::max_relative_error(got, summed), tolerance<T>());
        // Against the sequential pass over all microbatches. After a float step the replicas'
        // weights differ from the sequential model's by the rounding of that step's sum, so a
        // float run is held to it at the first step, where both start from the same weights.
        if (std::is_same_v<T, double> || step == 0) {
          EXPECT_LE(worst_excess(got, ref_grads, partials), 1.0);
        }
        EXPECT_LE(toy::max_relative_error(toy::flat_replica_parameters(piped, replicas, q),
                                          toy::flat_parameters(ref)),
                  tolerance<T>());
      }
    } else {
      // Relative error per value, judged against at least 1e-3 of the largest gradient: a
      // schedule that accumulates microbatches in another order (Looped BFS runs backwards in
      // decreasing microbatch order) changes sums that cancel to almost zero by rounding.
      EXPECT_LE(toy::max_relative_error(toy::flat_gradients(piped), ref_grads), tolerance<T>());
      EXPECT_LE(toy::max_relative_error(toy::flat_parameters(piped), toy::flat_parameters(ref)),
                tolerance<T>());
      // Where every stage accumulates its microbatches in increasing order, as the sequential
      // pass does, the arithmetic is the same operation for operation: bit-identical results.
      if (accumulates_in_order(schedule)) {
        EXPECT_EQ(r.loss, ref_loss);
        EXPECT_TRUE(toy::flat_gradients(piped) == ref_grads);
      }
    }
    for (int rank = 0; rank < schedule.rank_count(); ++rank) {
      EXPECT_EQ(r.ranks[rank].peak_bytes, predicted.ranks[rank].peak_memory) << "rank " << rank;
      EXPECT_EQ(r.ranks[rank].peak_host_bytes, predicted.ranks[rank].peak_host_memory)
          << "rank " << rank;
    }
  }
}

template <class T>
class ToyNumerics : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(ToyNumerics, Precisions);

template <class Fn>
void for_every_family(Fn&& fn) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p : {1, 2, 4})
      for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
        if ((wg == ps::WGradMode::Fused && !g.fused) || (wg == ps::WGradMode::Split && !g.split))
          continue;
        SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " " + ps::to_string(wg));
        fn(g.generate({.ranks = p, .microbatches = 2 * p}, wg));
      }
}

}  // namespace

TYPED_TEST(ToyNumerics, GptThroughEveryScheduleFamily) {
  const toy::GptConfig config{.blocks = 8};
  for_every_family([&](const ps::Schedule& s) {
    const auto data = toy::make_gpt_data<TypeParam>(config, s.problem.microbatches, 7);
    expect_matches_sequential<toy::GptStage<TypeParam>>(s, config, data);
  });
}

TYPED_TEST(ToyNumerics, MlpThroughEveryScheduleFamily) {
  const toy::MlpConfig config{.blocks = 8};
  for_every_family([&](const ps::Schedule& s) {
    const auto data = toy::make_mlp_data<TypeParam>(config, s.problem.microbatches, 11);
    expect_matches_sequential<toy::MlpStage<TypeParam>>(s, config, data);
  });
}

// A layout cuts the toy GPT as it says, an end stage with no block included (the embedding
// alone, the head alone), and trains as the sequential model does: hand-written layouts under
// 1F1B and ZB-V, and the one the automatic search finds for GPT-3 1.3B (24 layers) under ZB-V
// within 1F1B's memory, run with 24 blocks.
TYPED_TEST(ToyNumerics, GptThroughLayouts) {
  const ps::TransformerCost cost{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("rtx-4090"), {}};
  for (int p : {2, 4}) {
    const ps::GeneratorInfo& one = ps::find_generator("1f1b");
    const ps::GeneratorInfo& v = ps::find_generator("zb-v");
    const ps::Problem problem{.ranks = p, .microbatches = 2 * p};
    ps::MemoryBudget budget;
    budget.all = ps::simulate(one.generate(problem, ps::WGradMode::Fused), cost).peak_memory_max;
    const ps::LayoutSearchResult found = ps::search_plan_layout(
        v, problem, cost, budget, {.wgrad = v.default_wgrad}, ps::find_checkpoint("none"));
    ASSERT_TRUE(std::isfinite(found.step));
    std::vector<int> linear(static_cast<std::size_t>(p), 3);
    linear.front() = 0;
    linear.back() = p > 2 ? 0 : 3;
    std::vector<int> vee(static_cast<std::size_t>(2 * p), 2);
    vee.front() = 0;
    vee.back() = 0;
    for (const auto& [g, layout] :
         {std::pair{&one, linear}, std::pair{&v, vee}, std::pair{&v, found.layers}}) {
      SCOPED_TRACE(std::string(g->name) + " p=" + std::to_string(p) + " layout " +
                   ps::to_string(ps::Layout::of_stage_layers(layout)));
      toy::GptConfig config{.blocks = 0, .stage_blocks = layout};
      for (int n : layout)
        config.blocks += n;
      const ps::Schedule s = g->generate(problem, g->default_wgrad);
      const toy::GptStage<TypeParam> first(config, 0, s.problem.stages);
      EXPECT_EQ(first.blocks().size(), static_cast<std::size_t>(layout.front()));
      const auto data = toy::make_gpt_data<TypeParam>(config, s.problem.microbatches, 5);
      expect_matches_sequential<toy::GptStage<TypeParam>>(s, config, data);
    }
  }
}

// Activations offloaded to host memory (OFFLOAD after the forward, RELOAD before the
// backward) train as the sequential model does, under 1F1B and ZB-H1 at 2 and 4 ranks, within
// half of the rank's own peak: by offloading alone, and by offloading one unit per rank and
// recomputing the rest (checkpoint_selective after apply_offload with max_per_rank 1). The
// bytes each rank holds on the device, and those it holds in host memory, are the simulator's.
// The budget is half of each rank's peak, or 1.5 units' activations where that is more (within
// one unit's, recomputing cannot fit 1F1B's rank 0 at p = 2: a unit's recompute and the other's
// kept input are more).
TYPED_TEST(ToyNumerics, GptWithActivationsOffloaded) {
  const toy::GptConfig config{.blocks = 8};
  for (int p : {2, 4})
    for (const char* name : {"1f1b", "zb-h1"}) {
      const ps::GeneratorInfo& g = ps::find_generator(name);
      const ps::Problem problem{.ranks = p, .microbatches = 2 * p};
      const ps::Schedule base = g.generate(problem, g.default_wgrad);
      std::vector<toy::GptStage<TypeParam>> stages;
      for (int st = 0; st < p; ++st)
        stages.emplace_back(config, st, p);
      const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages);  // with the kept inputs' bytes
      const ps::SimulationResult own = ps::simulate(base, cost);
      ps::MemoryBudget budget;
      for (int r = 0; r < p; ++r)  // half the peak, at least 1.5 units' activations
        budget.per_rank.push_back(
            std::max(0.5 * own.ranks[r].peak_memory, 1.5 * double(stages[r].activation_bytes())));
      const ps::Schedule offloaded = ps::apply_offload(base, cost, budget);
      // Within what recomputing can reach (ZB-H1's deferred weight gradients hold more than half
      // its peak whatever is recomputed).
      const ps::SimulationResult full = ps::simulate(ps::checkpoint_full(base), cost);
      ps::MemoryBudget within = budget;
      for (int r = 0; r < p; ++r)
        within.per_rank[r] = std::max(budget.per_rank[r], full.ranks[r].peak_memory);
      const ps::Schedule mixed = ps::checkpoint_selective(
          ps::apply_offload(base, cost, within, {.max_per_rank = 1}), cost, within);
      EXPECT_GT(mixed.count(ps::OpKind::R), 0u);
      for (const ps::Schedule* s : {&offloaded, &mixed}) {
        SCOPED_TRACE(s->name + " p=" + std::to_string(p));
        EXPECT_GT(s->count(ps::OpKind::Offload), 0u);
        ps::validate(*s);
        // Offloading alone may leave a rank over the budget; with recomputes it fits.
        if (s == &mixed) {
          const ps::SimulationResult sim = ps::simulate(*s, cost);
          for (int r = 0; r < p; ++r) {
            EXPECT_LE(sim.ranks[r].peak_memory, within.of(r)) << "rank " << r;
          }
        }
        const auto data = toy::make_gpt_data<TypeParam>(config, problem.microbatches, 13);
        expect_matches_sequential<toy::GptStage<TypeParam>>(*s, config, data, &cost);
      }
    }
}

// Vocabulary parallelism: the head's W split by rows over the ranks (toy::GptVocabularyShard), the
// last stage ending at the final LayerNorm, the passes placed by add_vocabulary_passes into 1F1B,
// ZB-V, interleaved 1F1B, DualPipe-V (overlapped F&B) and slice-level schedules on 1, 2 and 4
// ranks. Two SGD steps give the loss, every gradient and every parameter of the unsplit
// sequential model — to 1e-12 in double; in float to the rounding of another formula for the
// last stage's input gradient (the merged shares against the logits' gradient times W: float
// itself is 6.5e-5 from double here) — and every rank holds the bytes the simulator predicts
// with the shards' figures. With the input embedding split too (input shards of the token
// table, the first stage's embedding holding the position table alone, EMBED_F and EMBED_B
// passes), the same under 1F1B, ZB-H1, ZB-V, interleaved 1F1B, DualPipe-V and slice-level
// schedules.
TYPED_TEST(ToyNumerics, GptWithVocabularyParallelism) {
  using T = TypeParam;
  const double allowed = std::is_same_v<T, double> ? 1e-12 : 1e-3;
  const toy::GptConfig config{.blocks = 8};
  struct Case {
    const char* name;
    int ranks, slices;
    bool input = false;
  };
  for (const Case c :
       {Case{"1f1b", 1, 1}, Case{"1f1b", 2, 1}, Case{"1f1b", 4, 1}, Case{"zb-v", 1, 1},
        Case{"zb-v", 2, 1}, Case{"zb-v", 4, 1}, Case{"interleaved-1f1b", 2, 1},
        Case{"dualpipe-v", 4, 1}, Case{"slice-pipe", 2, 2}, Case{"seq-1f1b", 4, 4},
        Case{"1f1b", 1, 1, true}, Case{"1f1b", 2, 1, true}, Case{"1f1b", 4, 1, true},
        Case{"zb-h1", 4, 1, true}, Case{"zb-v", 2, 1, true}, Case{"zb-v", 4, 1, true},
        Case{"interleaved-1f1b", 2, 1, true}, Case{"dualpipe-v", 4, 1, true},
        Case{"slice-pipe", 2, 2, true}}) {
    SCOPED_TRACE(std::string(c.name) + " p=" + std::to_string(c.ranks) +
                 " slices=" + std::to_string(c.slices) + (c.input ? ", input split" : ""));
    toy::GptConfig split = config;
    split.split_output = true;
    split.split_input = c.input;
    const ps::GeneratorInfo& g = ps::find_generator(c.name);
    const ps::Problem problem{.ranks = c.ranks, .microbatches = 2 * c.ranks, .slices = c.slices};
    const ps::Schedule base = g.generate(problem, g.default_wgrad);
    const int stages = base.problem.stages;
    std::vector<toy::GptStage<T>> ref, piped;
    for (int st = 0; st < stages; ++st) {
      ref.emplace_back(config, st, stages);
      piped.emplace_back(split, st, stages);
    }
    auto shards = vocabulary_shards<T>(config, c.ranks);
    std::vector<toy::GptInputShard<T>> inputs;
    if (c.input)
      for (int j = 0; j < c.ranks; ++j)
        inputs.emplace_back(config, j, c.ranks);
    const ps::ProfiledCost head_cost = toy::gpt_profiled_cost(piped, c.slices);
    const ps::ProfiledCost cost =
        c.input ? toy::with_vocabulary_shards(head_cost, shards, inputs, config)
                : toy::with_vocabulary_shards(head_cost, shards, config);
    const ps::Schedule s = ps::add_vocabulary_passes(base, cost);
    const std::size_t units = std::size_t(c.ranks * problem.microbatches * c.slices);
    ASSERT_EQ(s.count(ps::OpKind::VocabF), units);
    ASSERT_EQ(s.count(ps::OpKind::EmbedF), c.input ? units : 0u);
    const ps::SimulationResult predicted = ps::simulate(s, cost);
    ps::ExecutorOptions options;
    options.optimizer = [stage_step = toy::sgd_optimizer(s.placement, piped, learning_rate),
                         &shards, &inputs](int rank) {
      stage_step(rank);
      toy::sgd_update_stage(shards[static_cast<std::size_t>(rank)], learning_rate);
      if (!inputs.empty())
        toy::sgd_update_stage(inputs[static_cast<std::size_t>(rank)], learning_rate);
    };
    ps::inproc::Pipeline<toy::GptStage<T>> pipe(s, piped, options);
    const auto data = toy::make_gpt_data<T>(config, problem.microbatches, 7);
    auto training = toy::training_data(data, c.slices);
    training.vocabulary =
        c.input ? toy::vocabulary_passes(std::span(shards), std::span(inputs), data, c.slices)
                : toy::vocabulary_passes(std::span(shards), data, c.slices);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const double ref_loss = toy::sequential_step(ref, data);
      const auto ref_grads = toy::flat_gradients(ref);
      toy::sgd_update(ref, learning_rate);
      const ps::StepResult r = pipe.step(training);
      EXPECT_LE(std::abs(r.loss - ref_loss), allowed * std::abs(ref_loss));
      EXPECT_LE(toy::max_relative_error(gradients_with(piped, shards, inputs), ref_grads), allowed);
      EXPECT_LE(toy::max_relative_error(parameters_with(piped, shards, inputs),
                                        toy::flat_parameters(ref)),
                allowed);
      for (int rank = 0; rank < c.ranks; ++rank) {
        EXPECT_EQ(r.ranks[rank].peak_bytes, predicted.ranks[rank].peak_memory) << "rank " << rank;
      }
    }
  }
}

TYPED_TEST(ToyNumerics, GptThroughPyTorchDualPipeVFile) {
  const ps::Schedule s =
      ps::read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/dualpipev_4rank_10mb.csv");
  const toy::GptConfig config{.blocks = 8};
  const auto data = toy::make_gpt_data<TypeParam>(config, s.problem.microbatches, 3);
  expect_matches_sequential<toy::GptStage<TypeParam>>(s, config, data);
}

}  // namespace test_toy_numerics
