// The MPI transport, run by ctest under `mpirun -np 2` and `-np 4` (one pipeline rank per
// process). The toy GPT trained through 1F1B, interleaved 1F1B, ZB-H1, a Mario plan and a
// slice-pipe plan gives the sequential reference's loss and gradients and, bit for bit, what
// the in-process pipeline gives for the same plan (Chimera's two replicas too, their gradients
// summed across processes; vocabulary-parallel 1F1B, ZB-V and slice-pipe with the head split
// over the processes); the measured peak of held bytes equals the
// simulator's; dynamic filling runs; a layer that throws on one rank (a std::exception or
// not), or an optimizer hook that throws, makes every process throw the same error naming that
// rank and its action or optimizer step, after which the next step runs cleanly; a receive
// timeout too long for the clock means no deadline; and processes given different schedules
// are all refused when their pipelines are built, naming two ranks that differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../unit/exec/exec_support.hpp"
#include "mpi_support.hpp"
#include "mpi_test_main.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#include "pipesched/tune/layout_search.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

static_assert(ps::transport<ps::mpi::Transport<toy::Tensor<float>>, toy::Tensor<float>>);
static_assert(ps::process_transport<ps::mpi::Transport<toy::Tensor<float>>, MPI_Request>);
static_assert(ps::wire_tensor<toy::Tensor<double>>);

namespace {

using namespace mpi_test;

// Trains `s` for two steps over MPI, in-process and sequentially (unsliced); compares this
// process's stages. `exact` asks for bit equality with the in-process run.
template <class T>
void expect_same_as_inproc(const ps::Schedule& s, ps::ExecutorOptions options = {},
                           bool exact = true, const std::vector<int>& layout = {}) {
  toy::GptConfig config = config_for(s.problem.stages);
  if (!layout.empty()) {  // the blocks of each stage, as a layout gives them
    config.stage_blocks = layout;
    config.blocks = 0;
    for (int n : layout)
      config.blocks += n;
  }
  const auto data = toy::make_gpt_data<T>(config, s.problem.microbatches, 11);
  auto ref = make_stages<T>(config, s.problem.stages);
  auto threads = make_stages<T>(config, s.problem.stages);
  auto procs = make_stages<T>(config, s.problem.stages);
  const ps::SimulationResult predicted =
      ps::simulate(s, toy::gpt_profiled_cost(ref, s.problem.slices));
  ps::ExecutorOptions inproc_options = options;
  inproc_options.optimizer = toy::sgd_optimizer(s.placement, threads, learning_rate);
  options.optimizer = toy::sgd_optimizer(s.placement, procs, learning_rate);
  ps::inproc::Pipeline<toy::GptStage<T>> inproc(s, threads, inproc_options);
  ps::mpi::Pipeline<toy::GptStage<T>> mpi(s, procs, MPI_COMM_WORLD, options);
  ASSERT_EQ(mpi.rank(), world_rank());
  const auto training = toy::training_data(data, s.problem.slices);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ", rank " + std::to_string(world_rank()));
    const double ref_loss = toy::sequential_step(ref, data);
    const auto ref_grads = toy::flat_gradients(own(s, ref));
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult a = inproc.step(training);
    const ps::StepResult b = mpi.step(training);
    EXPECT_LE(std::abs(b.loss - ref_loss), tolerance<T>() * std::abs(ref_loss));
    EXPECT_LE(toy::max_relative_error(toy::flat_gradients(own(s, procs)), ref_grads),
              tolerance<T>());
    EXPECT_LE(toy::max_relative_error(toy::flat_parameters(own(s, procs)),
                                      toy::flat_parameters(own(s, ref))),
              tolerance<T>());
    if (exact) {
      EXPECT_EQ(b.loss, a.loss);
      EXPECT_TRUE(toy::flat_gradients(own(s, procs)) == toy::flat_gradients(own(s, threads)));
      EXPECT_TRUE(toy::flat_parameters(own(s, procs)) == toy::flat_parameters(own(s, threads)));
    }
    ASSERT_EQ(b.ranks.size(), static_cast<std::size_t>(s.rank_count()));
    for (int r = 0; r < s.rank_count(); ++r) {
      EXPECT_EQ(b.ranks[r].rank, r);
      EXPECT_EQ(b.ranks[r].timing.size(), b.executed.ranks[r].size());
      if (!options.fill_waits) {
        EXPECT_EQ(b.ranks[r].peak_bytes, predicted.ranks[r].peak_memory) << "rank " << r;
        EXPECT_EQ(b.ranks[r].peak_host_bytes, predicted.ranks[r].peak_host_memory) << "rank " << r;
      }
    }
    EXPECT_EQ(mpi.transport().pending(), 0u);
  }
}

ps::Schedule mario_plan(int ranks) {
  const ps::Schedule base = generated("1f1b", ranks, 2 * ranks);
  const toy::GptConfig config = config_for(base.problem.stages);
  const auto stages = make_stages<double>(config, base.problem.stages);
  const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages);
  const double peak = ps::simulate(base, cost).peak_memory_max;
  return ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = 0.6 * peak});
}

template <class T>
class MpiNumerics : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MpiNumerics, Precisions);

TYPED_TEST(MpiNumerics, OneFOneB) {
  expect_same_as_inproc<TypeParam>(generated("1f1b", world_size(), 2 * world_size()));
}

TYPED_TEST(MpiNumerics, Interleaved) {
  expect_same_as_inproc<TypeParam>(generated("interleaved-1f1b", world_size(), 2 * world_size()));
}

TYPED_TEST(MpiNumerics, ZeroBubbleH1) {
  expect_same_as_inproc<TypeParam>(generated("zb-h1", world_size(), 2 * world_size()));
}

// The layout the automatic search finds for GPT-3 1.3B (24 layers) on `P` RTX 4090s under
// ZB-V within 1F1B's memory: the toy GPT runs it with 24 blocks.
std::vector<int> searched_layout(int P) {
  const ps::TransformerCost cost{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("rtx-4090"), {}};
  ps::MemoryBudget budget;
  budget.all = ps::simulate(generated("1f1b", P, 2 * P), cost).peak_memory_max;
  const ps::GeneratorInfo& g = ps::find_generator("zb-v");
  return ps::search_plan_layout(g, {.ranks = P, .microbatches = 2 * P}, cost, budget,
                                {.wgrad = g.default_wgrad}, ps::find_checkpoint("none"))
      .layers;
}

// Layouts: the embedding alone on the first stage and the head alone on the last (Megatron's
// "E|...|L"), under 1F1B and ZB-V; and the layout the automatic search finds.
TYPED_TEST(MpiNumerics, LayoutsWithStagesOfNoBlockAndASearchedOne) {
  const int P = world_size();
  std::vector<int> linear(static_cast<std::size_t>(P), 2);
  if (P > 1) linear.front() = 0;
  if (P > 2) linear.back() = 0;
  expect_same_as_inproc<TypeParam>(generated("1f1b", P, 2 * P), {}, true, linear);
  std::vector<int> v(static_cast<std::size_t>(2 * P), 1);
  v.front() = 0;
  v.back() = 0;
  v[1] = 3;
  expect_same_as_inproc<TypeParam>(generated("zb-v", P, 2 * P), {}, true, v);
  const std::vector<int> searched = searched_layout(P);
  ASSERT_EQ(searched.size(), static_cast<std::size_t>(2 * P));
  expect_same_as_inproc<TypeParam>(generated("zb-v", P, 2 * P), {}, true, searched);
}

// Activations offloaded to host memory where half of each rank's peak (at least one unit's)
// asks, under 1F1B and ZB-H1: device and host bytes as the simulator predicts them.
TYPED_TEST(MpiNumerics, ActivationsOffloadedUnder1F1BAndZbH1) {
  const int P = world_size();
  for (const char* name : {"1f1b", "zb-h1"}) {
    SCOPED_TRACE(name);
    const ps::Schedule base = generated(name, P, 2 * P);
    const toy::GptConfig config = config_for(base.problem.stages);
    const auto stages = make_stages<double>(config, base.problem.stages);
    const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages);
    const ps::SimulationResult own = ps::simulate(base, cost);
    ps::MemoryBudget budget;
    for (int r = 0; r < P; ++r)
      budget.per_rank.push_back(
          std::max(0.5 * own.ranks[r].peak_memory, cost.stages[r].activation_bytes));
    const ps::Schedule s = ps::apply_offload(base, cost, budget);
    if (P > 1) {
      EXPECT_GT(s.count(ps::OpKind::Offload), 0u);
    }
    expect_same_as_inproc<TypeParam>(s);
  }
}

// Vocabulary parallelism over MPI: the head's W split by rows over the processes (one
// toy::GptVocabularyShard each), the last stage's output sent to every process, the partials to
// every other; under 1F1B and ZB-V (whose last stage is on rank 0), whole microbatches and
// slices. Each process's stages and shard end bit for bit as the in-process pipeline's, the
// loss is the sequential one, and each rank holds the bytes the simulator predicts. With
// `input`, the token table is split too (one toy::GptInputShard per process): each process's
// lookups go to the first stage's rank, its input gradient to every process.
template <class T>
void expect_vocabulary_same_as_inproc(const ps::Schedule& base, bool input = false) {
  const int P = world_size();
  const int slices = base.problem.slices;
  const toy::GptConfig config = config_for(base.problem.stages);
  toy::GptConfig split = config;
  split.split_output = true;
  split.split_input = input;
  const auto data = toy::make_gpt_data<T>(config, base.problem.microbatches, 11);
  auto ref = make_stages<T>(config, base.problem.stages);
  auto threads = make_stages<T>(split, base.problem.stages);
  auto procs = make_stages<T>(split, base.problem.stages);
  auto thread_shards = exec_test::vocabulary_shards<T>(config, P);
  auto proc_shards = exec_test::vocabulary_shards<T>(config, P);
  std::vector<toy::GptInputShard<T>> thread_inputs, proc_inputs;
  for (int j = 0; input && j < P; ++j) {
    thread_inputs.emplace_back(config, j, P);
    proc_inputs.emplace_back(config, j, P);
  }
  const ps::ProfiledCost head_cost = toy::gpt_profiled_cost(threads, slices);
  const ps::ProfiledCost cost =
      input ? toy::with_vocabulary_shards(head_cost, thread_shards, thread_inputs, config)
            : toy::with_vocabulary_shards(head_cost, thread_shards, config);
  const ps::Schedule s = ps::add_vocabulary_passes(base, cost);
  EXPECT_EQ(s.has_input_vocabulary(), input);
  const ps::SimulationResult predicted = ps::simulate(s, cost);
  auto sgd = [&s](std::vector<toy::GptStage<T>>& stages,
                  std::vector<toy::GptVocabularyShard<T>>& shards,
                  std::vector<toy::GptInputShard<T>>& inputs) {
    return [step = toy::sgd_optimizer(s.placement, stages, learning_rate), &shards,
            &inputs](int rank) {
      step(rank);
      toy::sgd_update_stage(shards[static_cast<std::size_t>(rank)], learning_rate);
      if (!inputs.empty())
        toy::sgd_update_stage(inputs[static_cast<std::size_t>(rank)], learning_rate);
    };
  };
  ps::ExecutorOptions inproc_options, options;
  inproc_options.optimizer = sgd(threads, thread_shards, thread_inputs);
  options.optimizer = sgd(procs, proc_shards, proc_inputs);
  ps::inproc::Pipeline<toy::GptStage<T>> inproc(s, threads, inproc_options);
  ps::mpi::Pipeline<toy::GptStage<T>> mpi(s, procs, MPI_COMM_WORLD, options);
  auto passes = [&](std::vector<toy::GptVocabularyShard<T>>& shards,
                    std::vector<toy::GptInputShard<T>>& inputs) {
    return input ? toy::vocabulary_passes(std::span(shards), std::span(inputs), data, slices)
                 : toy::vocabulary_passes(std::span(shards), data, slices);
  };
  auto thread_data = toy::training_data(data, slices);
  thread_data.vocabulary = passes(thread_shards, thread_inputs);
  auto proc_data = toy::training_data(data, slices);
  proc_data.vocabulary = passes(proc_shards, proc_inputs);
  const auto mine = static_cast<std::size_t>(world_rank());
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ", rank " + std::to_string(world_rank()));
    const double ref_loss = toy::sequential_step(ref, data);
    const auto ref_grads = toy::flat_gradients(ref);
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult a = inproc.step(thread_data);
    const ps::StepResult b = mpi.step(proc_data);
    EXPECT_LE(std::abs(b.loss - ref_loss), tolerance<T>() * std::abs(ref_loss));
    EXPECT_EQ(b.loss, a.loss);
    if (std::is_same_v<T, double>) {
      EXPECT_LE(toy::max_relative_error(
                    exec_test::gradients_with(threads, thread_shards, thread_inputs), ref_grads),
                tolerance<T>());
    }
    EXPECT_TRUE(toy::flat_gradients(own(s, procs)) == toy::flat_gradients(own(s, threads)));
    EXPECT_TRUE(toy::flat_parameters(own(s, procs)) == toy::flat_parameters(own(s, threads)));
    EXPECT_TRUE(proc_shards[mine].gradients()[0].data == thread_shards[mine].gradients()[0].data);
    EXPECT_TRUE(proc_shards[mine].parameters()[0].data == thread_shards[mine].parameters()[0].data);
    if (input) {
      EXPECT_TRUE(proc_inputs[mine].gradients()[0].data == thread_inputs[mine].gradients()[0].data);
      EXPECT_TRUE(proc_inputs[mine].parameters()[0].data ==
                  thread_inputs[mine].parameters()[0].data);
    }
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(b.ranks[r].peak_bytes, predicted.ranks[r].peak_memory) << "rank " << r;
    }
    EXPECT_EQ(mpi.transport().pending(), 0u);
  }
}

TYPED_TEST(MpiNumerics, VocabularyParallel1F1BAndZbV) {
  const int P = world_size();
  for (const char* name : {"1f1b", "zb-v"}) {
    SCOPED_TRACE(name);
    expect_vocabulary_same_as_inproc<TypeParam>(generated(name, P, 2 * P));
  }
  SCOPED_TRACE("slice-pipe, 2 slices");
  expect_vocabulary_same_as_inproc<TypeParam>(
      ps::schedule::slice_pipe({.ranks = P, .microbatches = 4, .slices = 2}));
}

// The same with the input embedding split too (EMBED_F, EMBED_B).
TYPED_TEST(MpiNumerics, VocabularyParallelWithTheInputEmbeddingSplit) {
  const int P = world_size();
  for (const char* name : {"1f1b", "zb-h1", "zb-v"}) {
    SCOPED_TRACE(name);
    expect_vocabulary_same_as_inproc<TypeParam>(generated(name, P, 2 * P), true);
  }
  SCOPED_TRACE("slice-pipe, 2 slices");
  expect_vocabulary_same_as_inproc<TypeParam>(
      ps::schedule::slice_pipe({.ranks = P, .microbatches = 4, .slices = 2}), true);
}

// The baselines: Zero Bubble over looped chunks, and the V-shapes of controllable memory.
TYPED_TEST(MpiNumerics, InterleavedZeroBubbleAndControllableMemoryV) {
  for (const char* name : {"interleaved-zb", "v-half", "v-min"}) {
    SCOPED_TRACE(name);
    expect_same_as_inproc<TypeParam>(generated(name, world_size(), 2 * world_size() + 1));
  }
}

TYPED_TEST(MpiNumerics, MarioPlan) {
  const ps::Schedule s = mario_plan(world_size());
  EXPECT_GT(exec_test::count_recomputes(s), 0);
  expect_same_as_inproc<TypeParam>(s);
}

TYPED_TEST(MpiNumerics, SlicePipe) {
  for (int slices : {2, 4}) {
    SCOPED_TRACE(std::to_string(slices) + " slices");
    expect_same_as_inproc<TypeParam>(
        ps::schedule::slice_pipe({.ranks = world_size(), .microbatches = 4, .slices = slices}));
  }
}

// Chimera over MPI: each process holds one stage of each of the two replicas (model stages r
// and D − 1 − r). After a step the replicas' gradients are summed across processes (an
// all-reduce over one buffer of the whole model, in double: each element gets exactly its two
// replicas' values, added once) and both copies take the sum; the copies then hold the
// sequential gradients (double) and, in both precisions, bit for bit what the in-process
// pipeline with toy::sum_replica_gradients gives.
template <class T>
void expect_chimera_matches(int microbatches) {
  const ps::Schedule s = generated("chimera", world_size(), microbatches);
  ASSERT_EQ(s.problem.replicas, 2);
  const int D = s.problem.replica_stages();
  const toy::GptConfig config = config_for(D);
  const auto data = toy::make_gpt_data<T>(config, s.problem.microbatches, 13);
  auto ref = make_stages<T>(config, D);
  std::vector<toy::GptStage<T>> threads, procs;
  for (int st = 0; st < s.problem.stages; ++st) {  // both replicas start from equal weights
    threads.push_back(ref[st % D]);
    procs.push_back(ref[st % D]);
  }
  ps::inproc::Pipeline<toy::GptStage<T>> inproc(s, threads);
  ps::mpi::Pipeline<toy::GptStage<T>> mpi(s, procs, MPI_COMM_WORLD);
  // Offsets of each model stage's values in the whole model's flat gradient.
  std::vector<std::size_t> offset(D + 1, 0);
  for (int st = 0; st < D; ++st)
    offset[st + 1] = offset[st] + toy::flat_gradients(std::vector{ref[st]}).size();
  const auto training = toy::training_data(data);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ", rank " + std::to_string(world_rank()));
    const double ref_loss = toy::sequential_step(ref, data);
    const auto ref_grads = toy::flat_gradients(ref);
    toy::sgd_update(ref, learning_rate);
    inproc.step(training);
    toy::sum_replica_gradients(threads, 2);
    toy::sgd_update(threads, learning_rate);
    const ps::StepResult b = mpi.step(training);
    EXPECT_LE(std::abs(b.loss - ref_loss), tolerance<T>() * std::abs(ref_loss));
    std::vector<double> sum(offset[D], 0.0);
    for (int st : s.placement.stages_of(world_rank())) {
      std::size_t i = offset[st % D];
      for (const auto& t : procs[st].gradients())
        for (std::size_t k = 0; k < t.size(); ++k)
          sum[i++] += static_cast<double>(t.data[k]);
    }
    MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    for (int st : s.placement.stages_of(world_rank())) {
      std::size_t i = offset[st % D];
      for (auto& t : procs[st].gradients())
        for (std::size_t k = 0; k < t.size(); ++k)
          t.data[k] = static_cast<T>(sum[i++]);
      toy::sgd_update_stage(procs[st], learning_rate);
    }
    for (int st : s.placement.stages_of(world_rank())) {
      const int model = st % D;
      const std::vector<T> want(ref_grads.begin() + static_cast<std::ptrdiff_t>(offset[model]),
                                ref_grads.begin() + static_cast<std::ptrdiff_t>(offset[model + 1]));
      const auto got = toy::flat_gradients(std::vector{procs[st]});
      if constexpr (std::is_same_v<T, double>) {
        EXPECT_LE(toy::max_relative_error(got, want), tolerance<T>()) << "stage " << st;
      }
      EXPECT_TRUE(got == toy::flat_gradients(std::vector{threads[st]})) << "stage " << st;
      EXPECT_TRUE(toy::flat_parameters(std::vector{procs[st]}) ==
                  toy::flat_parameters(std::vector{threads[st]}))
          << "stage " << st;
    }
    EXPECT_EQ(mpi.transport().pending(), 0u);
  }
}

TYPED_TEST(MpiNumerics, Chimera) {
  for (int m : {2 * world_size(), 2 * world_size() + 1}) {
    SCOPED_TRACE(std::to_string(m) + " microbatches");
    expect_chimera_matches<TypeParam>(m);
  }
}

// Stages of different types (embedding / blocks / head as one StageVariant) over MPI processes
// train as the whole model does sequentially.
TEST(MpiHeterogeneous, EmbeddingBlockHeadStagesMatchSequentialTraining) {
  using Mixed = toy::GptPipelineStage<double>;
  for (const ps::Schedule& s :
       {generated("zb-h1", world_size(), 2 * world_size()),
        ps::schedule::slice_pipe({.ranks = world_size(), .microbatches = 4, .slices = 2})}) {
    SCOPED_TRACE(s.name + ", rank " + std::to_string(world_rank()));
    const toy::GptConfig config = config_for(s.problem.stages);
    const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 11);
    auto ref = make_stages<double>(config, s.problem.stages);
    std::vector<Mixed> procs = toy::make_gpt_pipeline_stages<double>(config, s.problem.stages);
    ps::ExecutorOptions options;
    options.optimizer = toy::sgd_optimizer(s.placement, procs, learning_rate);
    ps::mpi::Pipeline<Mixed> mpi(s, procs, MPI_COMM_WORLD, options);
    const auto training = toy::training_data(data, s.problem.slices);
    for (int step = 0; step < 2; ++step) {
      const double ref_loss = toy::sequential_step(ref, data);
      toy::sgd_update(ref, learning_rate);
      const ps::StepResult b = mpi.step(training);
      EXPECT_LE(std::abs(b.loss - ref_loss), tolerance<double>() * std::abs(ref_loss));
    }
    std::vector<Mixed> mine;
    std::vector<toy::GptStage<double>> theirs;
    for (int st : s.placement.stages_of(world_rank())) {
      mine.push_back(procs[static_cast<std::size_t>(st)]);
      theirs.push_back(ref[static_cast<std::size_t>(st)]);
    }
    EXPECT_LE(toy::max_relative_error(toy::flat_parameters(mine), toy::flat_parameters(theirs)),
              tolerance<double>());
  }
}

// Dynamic filling on MPI: pending recomputes and W's run while a receive has not arrived;
// the numerics stay within the tolerance (W's may add up in another order).
TEST(MpiFilling, MarioAndZeroBubbleFillWaits) {
  ps::ExecutorOptions options;
  options.fill_waits = true;
  expect_same_as_inproc<double>(mario_plan(world_size()), options, /*exact=*/false);
  expect_same_as_inproc<float>(generated("zb-h1", world_size(), 2 * world_size()), options,
                               /*exact=*/false);
  // Late recomputes (Megatron-LM's full checkpointing) wait for their gradient over MPI too,
  // and are never filled into a wait.
  const ps::Schedule late = ps::checkpoint_full(
      ps::schedule::one_f_one_b({.ranks = world_size(), .microbatches = 2 * world_size()}));
  expect_same_as_inproc<double>(late, options, /*exact=*/true);
}

// With 1 ms synthetic actions, rank 0 waits several ms for its first gradient: the pending
// recomputes of a fully checkpointed 1F1B run in that wait, over MPI as on threads.
TEST(MpiFilling, RankZeroRunsRecomputesWhileWaiting) {
  const int p = world_size();
  const ps::Schedule s = ps::checkpoint_full(
      ps::schedule::one_f_one_b({.ranks = p, .microbatches = 2 * p}), ps::RecomputeTiming::Early);
  const toy::SyntheticCost cost{.forward = 1e-3,
                                .backward_input = 1e-3,
                                .backward_weight = 1e-3,
                                .activation_bytes = 1000,
                                .wgrad_bytes = 500};
  std::vector<toy::SyntheticStage> stages(p, toy::SyntheticStage(cost));
  ps::ExecutorOptions options;
  options.fill_waits = true;
  ps::mpi::Pipeline<toy::SyntheticStage> pipe(s, stages, MPI_COMM_WORLD, options);
  const ps::StepResult r = pipe.step(toy::synthetic_training_data());
  EXPECT_GT(r.ranks[0].filled, 0);
}

// A stage model that throws in the forward of one (stage, microbatch).
template <class T>
struct Faulty : toy::GptStage<T> {
  using Base = toy::GptStage<T>;
  using Base::Base;
  using Base::forward;
  int fail_microbatch = -1;
  int seen = 0;
  std::function<void()> fault = [] { throw std::runtime_error("injected fault"); };
  typename Base::tensor_type forward(const typename Base::tensor_type& x,
                                     typename Base::stash_type& st) {
    if (seen++ == fail_microbatch) fault();
    return Base::forward(x, st);
  }
};

TEST(MpiFaults, ExceptionOnOneRankStopsEveryRankWithItsName) {
  const int p = world_size();
  const ps::Schedule s = generated("1f1b", p, 2 * p);
  const int bad_stage = p - 1;  // the last rank fails in its third forward
  const toy::GptConfig config = config_for(s.problem.stages);
  std::vector<Faulty<double>> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(config, st, s.problem.stages);
  stages[bad_stage].fail_microbatch = 2;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(20);
  ps::mpi::Pipeline<Faulty<double>> pipe(s, stages, MPI_COMM_WORLD, options);
  const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 3);
  const auto training = toy::training_data(data);
  const auto t0 = std::chrono::steady_clock::now();
  bool threw = false;
  try {
    pipe.step(training);
  } catch (const ps::execution_error& e) {
    threw = true;
    EXPECT_EQ(e.rank(), s.placement.rank_of(bad_stage));
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().stage, bad_stage);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(p - 1)), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(threw);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // The communicator is clean: the next step runs and matches a fault-free run's loss.
  stages[bad_stage].fail_microbatch = -1;
  const ps::StepResult r = pipe.step(training);
  std::vector<toy::GptStage<double>> ref = make_stages<double>(config, s.problem.stages);
  EXPECT_EQ(r.loss, toy::sequential_step(ref, data));
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

// A layer that throws something not derived from std::exception is attached like any other
// failure: every process gets the failing rank's execution_error, and the next step runs.
TEST(MpiFaults, NonStandardExceptionIsAttached) {
  const int p = world_size();
  const ps::Schedule s = generated("1f1b", p, 2 * p);
  const int bad_stage = p - 1;
  const toy::GptConfig config = config_for(s.problem.stages);
  std::vector<Faulty<double>> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(config, st, s.problem.stages);
  stages[bad_stage].fail_microbatch = 2;
  stages[bad_stage].fault = [] { throw 42; };
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(20);
  ps::mpi::Pipeline<Faulty<double>> pipe(s, stages, MPI_COMM_WORLD, options);
  const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 3);
  const auto training = toy::training_data(data);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(training);
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), s.placement.rank_of(bad_stage));
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().stage, bad_stage);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(std::string(e.what()).find(
                  "rank " + std::to_string(p - 1) + " failed at position " +
                  std::to_string(e.position()) + " (" + std::to_string(bad_stage) +
                  "F2): a non-standard exception (not derived from std::exception)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  stages[bad_stage].fail_microbatch = -1;
  EXPECT_NO_THROW(pipe.step(training));
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

// An optimizer hook that throws on one rank stops every process with that rank's
// execution_error, placed at its optimizer step (the position after its list).
TEST(MpiFaults, OptimizerExceptionIsAttached) {
  const int p = world_size();
  const ps::Schedule s = generated("1f1b", p, 2 * p);
  const toy::GptConfig config = config_for(s.problem.stages);
  auto stages = make_stages<double>(config, s.problem.stages);
  const int bad = p / 2;
  bool armed = true;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(20);
  options.optimizer = [&](int rank) {
    if (armed && rank == bad) throw std::runtime_error("optimizer boom");
  };
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, MPI_COMM_WORLD, options);
  const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 3);
  const auto training = toy::training_data(data);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(training);
    ADD_FAILURE() << "the step did not fail";
  } catch (const ps::execution_error& e) {
    EXPECT_EQ(e.rank(), bad);
    EXPECT_EQ(e.position(), static_cast<int>(pipe.schedule().ranks[bad].size()));
    EXPECT_EQ(e.action().kind, ps::OpKind::Idle);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(bad) +
                                         " failed in its optimizer step: optimizer boom"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  armed = false;
  EXPECT_NO_THROW(pipe.step(training));
}

// A receive timeout too long for the clock means no deadline: the step runs (it used to fail
// at once, and the agreement then reported a lost peer).
TEST(MpiTimeouts, ForeverTimeoutStepSucceeds) {
  const int p = world_size();
  const ps::Schedule s = generated("1f1b", p, 2 * p);
  const toy::GptConfig config = config_for(s.problem.stages);
  const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 3);
  auto ref = make_stages<double>(config, s.problem.stages);
  const double ref_loss = toy::sequential_step(ref, data);
  for (const std::chrono::duration<double> timeout :
       {std::chrono::duration<double>(std::chrono::hours::max()),
        std::chrono::duration<double>(std::numeric_limits<double>::infinity()),
        std::chrono::duration<double>(1e10)}) {
    SCOPED_TRACE("receive_timeout = " + std::to_string(timeout.count()) + " s");
    auto stages = make_stages<double>(config, s.problem.stages);
    ps::ExecutorOptions options;
    options.receive_timeout = timeout;
    ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, MPI_COMM_WORLD, options);
    for (int step = 0; step < 2; ++step) {
      ps::StepResult r;
      ASSERT_NO_THROW(r = pipe.step(toy::training_data(data)));
      EXPECT_EQ(r.loss, ref_loss);
    }
  }
}

// Processes started with different schedules are refused when the pipeline is built, on every
// process, naming a rank that differs and rank 0 — well before the 60 s receive timeout.
void expect_schedules_refused(const ps::Schedule& mine, int odd) {
  const toy::GptConfig config = config_for(mine.problem.stages);
  auto stages = make_stages<double>(config, mine.problem.stages);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ps::mpi::Pipeline<toy::GptStage<double>> pipe(mine, stages);
    ADD_FAILURE() << "different schedules were accepted";
  } catch (const ps::schedule_mismatch& e) {
    EXPECT_EQ(e.first_rank(), 0);
    EXPECT_EQ(e.second_rank(), odd);
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 and rank " + std::to_string(odd) +
                        " were given different schedules (fingerprints "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("start every process with the same schedule"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(MpiErrors, DifferentSchedulesAreRefusedAtOnceOnEveryProcess) {
  const int p = world_size();
  // The last process runs two more microbatches than the others.
  const int odd = p - 1;
  expect_schedules_refused(generated("1f1b", p, world_rank() == odd ? 2 * p + 2 : 2 * p), odd);
  // Rank 1 alone runs another schedule of the same shape.
  expect_schedules_refused(generated(world_rank() == 1 ? "zb-h1" : "1f1b", p, 2 * p), 1);
}

TEST(MpiErrors, ScheduleForAnotherRankCountIsRefusedOnEveryProcess) {
  // One process given a schedule for one rank more: it is the schedules that differ, so every
  // process says so (rather than that process alone refusing the communicator's size while the
  // others wait for it).
  const int p = world_size();
  expect_schedules_refused(generated("1f1b", world_rank() == 1 ? p + 1 : p, 2 * p), 1);
}

// A timeout of 0 or one too short for any receive (1e-300 s) is refused when the pipeline is
// built, naming the field, the value and the accepted range, rather than failing every step.
TEST(MpiErrors, NonPositiveOrTinyTimeoutIsRefusedAtConstruction) {
  const ps::Schedule s = generated("1f1b", world_size(), 2 * world_size());
  auto stages = make_stages<double>(config_for(s.problem.stages), s.problem.stages);
  for (const auto& [timeout, text] :
       {std::pair{std::chrono::duration<double>(0), std::string("0")},
        std::pair{std::chrono::duration<double>(1e-300), std::string("1e-300")}}) {
    ps::ExecutorOptions options;
    options.receive_timeout = timeout;
    try {
      ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, MPI_COMM_WORLD, options);
      ADD_FAILURE() << "a receive_timeout of " << text << " s was accepted";
    } catch (const ps::invalid_problem& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("receive_timeout is " + text + " s; give a timeout of at least 0.001 s"),
                std::string::npos)
          << what;
    }
  }
}

// A poll interval outside 0 to 1 s is refused by the transport, naming the value and range.
TEST(MpiErrors, PollIntervalOutsideItsRangeIsRefused) {
  const ps::Schedule s = generated("1f1b", world_size(), 2 * world_size());
  for (const std::chrono::microseconds interval :
       {std::chrono::microseconds(-1), std::chrono::microseconds(std::chrono::minutes(1))}) {
    try {
      ps::mpi::Transport<toy::GptStage<double>::tensor_type> t(s, MPI_COMM_WORLD,
                                                               {.poll_interval = interval});
      ADD_FAILURE() << "a poll_interval of " << interval.count() << " µs was accepted";
    } catch (const ps::invalid_problem& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("poll_interval is " + std::to_string(interval.count()) +
                          " µs; give 0 to 1000000 µs (1 s)"),
                std::string::npos)
          << what;
    }
  }
}

// A start-up timeout under 1 ms (zero, NaN) is refused before the agreement it bounds, on
// every process alike, naming the value and the range.
TEST(MpiErrors, StartupTimeoutUnderAMillisecondIsRefused) {
  const ps::Schedule s = generated("1f1b", world_size(), 2 * world_size());
  for (const double seconds : {0.0, 1e-4, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      ps::mpi::Transport<toy::Tensor<float>> t(
          s, MPI_COMM_WORLD, {.startup_timeout = std::chrono::duration<double>(seconds)});
      ADD_FAILURE() << "a startup_timeout of " << seconds << " s was accepted";
    } catch (const ps::invalid_problem& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("mpi::Transport: startup_timeout is " +
                          ps::detail::seconds_text(seconds) + " s; give at least 0.001 s (1 ms)"),
                std::string::npos)
          << what;
    }
  }
}

// The reducers' one bucket rule: tensors fill a bucket until the next would take it past the
// cap; a tensor larger than the cap gets a bucket of its own, and the next starts another.
TEST(MpiReducer, BucketRuleOfBothReducers) {
  ps::detail::Buckets buckets(4 * sizeof(double), sizeof(double));  // 4 values a bucket
  const auto first = buckets.add(3), second = buckets.add(1), large = buckets.add(6),
             last = buckets.add(2);
  EXPECT_EQ(first.bucket, 0u);
  EXPECT_EQ(second.bucket, 0u);
  EXPECT_EQ(second.offset, 3u);
  EXPECT_EQ(large.bucket, 1u);
  EXPECT_EQ(large.offset, 0u);
  EXPECT_EQ(last.bucket, 2u);
  EXPECT_EQ(last.offset, 0u);
  EXPECT_EQ(buckets.sizes(), (std::vector<std::size_t>{4, 6, 2}));
  // A cap under one value still holds one value a bucket.
  ps::detail::Buckets tiny(1, sizeof(double));
  tiny.add(1);
  tiny.add(1);
  EXPECT_EQ(tiny.sizes(), (std::vector<std::size_t>{1, 1}));
}

TEST(MpiErrors, WrongProcessCountIsNamed) {
  const ps::Schedule s = generated("1f1b", world_size() + 1, 4);
  try {
    ps::mpi::Transport<toy::Tensor<float>> t(s);
    ADD_FAILURE() << "no error";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np " + std::to_string(world_size() + 1)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  return pipesched::testing_support::run_mpi_tests(argc, argv, 2);
}
