// NCCL groups and the NCCL data-parallel reducer, in the NCCL test program (under mpirun). Without
// a GPU: a grid of another size than the job is refused naming the mpirun to use, the ZeRO
// options are checked as MPI's are, the GPU toy stages expose device gradients and parameters.
// With a GPU (nccl.np1): the
// nccl::Groups of every grid of the job's size hold exactly the grid's groups (ncclAllGather of
// each member's process number); pp2 × dp1 on one GPU through cuda-local with an
// nccl::GradientReducer per rank (a one-rank communicator each, buckets small enough to pack
// several tensors and to reduce others in place) equals sequential training. With a GPU per
// process and 2 processes (suite NcclRanks, nccl.np2): nccl::Pipeline built from nccl::Groups on
// pp1 × dp2 and pp2 × dp1 equals sequential training of the global batch (double, 1e-12); a
// replica that fails rolls every replica back and the retried step equals sequential training.
// ZeRO-1/2 (one process on nccl.np1; pp1 × dp2 and pp2 × dp1 on nccl.np2; pp1 × dp4, pp4 × dp1
// and pp2 × dp2 on nccl.np4): three steps of SGD
// with momentum stepped shard by shard equal sequential training with momentum (loss and
// weights, double, 1e-12; this replica's shard of each reduced gradient, the rest zero with
// ZeRO-2), and a shard optimizer that throws on one replica rolls every replica back, weights
// and momentum, so that the retried step equals sequential training. Tensor parallelism with
// ZeRO-1 (tp2 on nccl.np2; pp2 × tp2 and dp2 × tp2 on nccl.np4; pp2 × dp2 × tp2 on nccl.np8):
// the GPU GPT's blocks split over an nccl::TensorGroup; the global loss and each process's shard
// of the weights equal sequential training of the whole model with momentum (double, 1e-12);
// whole stages, or stages without a tensor group, are refused on a tp2 grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test.hpp"
#include "nccl_test.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/toy/cuda/compare.cuh"
#include "pipesched/toy/cuda/data.cuh"
#include "pipesched/toy/cuda/gpt.cuh"
#include "pipesched/toy/cuda/mlp.cuh"
#include "pipesched/toy/cuda/synthetic.cuh"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"
#include "pipesched/transport/nccl/nccl_gradient_reducer.cuh"
#include "pipesched/transport/nccl/nccl_groups.cuh"
#include "pipesched/transport/nccl/nccl_pipeline.cuh"

namespace gpu = pipesched::toy::gpu;
namespace toy = pipesched::toy;

static_assert(pipesched::device_reducible_stage<gpu::GptStage<float>>);
static_assert(pipesched::device_reducible_stage<gpu::GptStage<double>>);
static_assert(pipesched::device_reducible_stage<gpu::MlpStage<float>>);
static_assert(!pipesched::device_reducible_stage<gpu::SyntheticStage>);
static_assert(pipesched::device_shardable_stage<gpu::GptStage<float>>);
static_assert(pipesched::device_shardable_stage<gpu::GptStage<double>>);
static_assert(pipesched::device_shardable_stage<gpu::MlpStage<double>>);
static_assert(!pipesched::device_shardable_stage<gpu::SyntheticStage>);
static_assert(pipesched::tensor_parallel_stage<gpu::GptStage<double>>);
static_assert(!pipesched::tensor_parallel_stage<gpu::MlpStage<double>>);
static_assert(!std::is_copy_constructible_v<pipesched::nccl::Groups>);

namespace {

using namespace nccl_test;
using Gpt = gpu::GptStage<double>;

// The toy GPT, a replica's share of a global batch and the learning rate of the host MPI tests.
using mpi_test::config_for;
using mpi_test::learning_rate;
using mpi_test::share;

// The gradients (or parameters) of pipeline rank `rank`'s host stages, flat.
std::vector<double> values_of(const ps::Schedule& s, const std::vector<toy::GptStage<double>>& all,
                              int rank, bool gradients) {
  std::vector<toy::GptStage<double>> mine;
  for (int st : s.placement.stages_of(rank))
    mine.push_back(all[static_cast<std::size_t>(st)]);
  const auto flat = gradients ? toy::flat_gradients(mine) : toy::flat_parameters(mine);
  return {flat.begin(), flat.end()};
}

// The same of its GPU stages (copied to the host).
std::vector<double> values_of(const ps::Schedule& s, const std::vector<Gpt>& all, int rank,
                              bool gradients) {
  std::vector<double> out;
  for (int st : s.placement.stages_of(rank)) {
    const Gpt& stage = all[static_cast<std::size_t>(st)];
    for (const auto& t : gradients ? stage.host_gradients() : stage.host_parameters())
      out.insert(out.end(), t.data.begin(), t.data.end());
  }
  return out;
}

TEST(NcclGroups, AGridOfAnotherSizeIsRefusedNamingMpirun) {
  // No GPU needed: the size is checked (by mpi::Groups) before any GPU is touched.
  const ps::ProcessGrid grid{world_size(), 2, 1};
  try {
    const ps::nccl::Groups groups(grid, 0);
    ADD_FAILURE() << "a grid of " << grid.size() << " processes was accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np " + std::to_string(grid.size())),
              std::string::npos)
        << e.what();
  }
}

TEST(NcclReducerOptions, ZeroStagesAreCheckedAsOverMpi) {
  ps::nccl::ReducerOptions o;
  EXPECT_NO_THROW(o.validate());
  auto refused = [](const ps::nccl::ReducerOptions& bad, const char* says) {
    try {
      bad.validate();
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const ps::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  for (int zero : {1, 2}) {
    o.zero = zero;
    refused(o, "ReducerOptions.optimizer is empty; set it (e.g. sgd_shards(0.01))");
    o.optimizer = ps::sgd_shards(0.1, 0.9);
    EXPECT_NO_THROW(o.validate()) << "ZeRO-" << zero;
    o.optimizer = {};
  }
  o.zero = 3;
  refused(o, "ReducerOptions.zero = 3 is not a ZeRO stage pipesched runs; give 0");
  o.zero = -1;
  refused(o, "ReducerOptions.zero = -1 is not a ZeRO stage");
  o.zero = 1;
  o.optimizer = ps::sgd_shards(0.1);
  o.optimizer.state_per_value = -1;
  refused(o, "ShardOptimizer.state_per_value = -1 is negative");
  o = {};
  o.bucket_bytes = 0;
  refused(o, "ReducerOptions.bucket_bytes = 0 is out of range");
}

// The members of `comm` (their process numbers), gathered on the GPU by NCCL.
std::vector<int> members(ncclComm_t comm, const ps::CudaDevice& device) {
  int size = 0;
  PIPESCHED_NCCL_CHECK(ncclCommCount(comm, &size));
  const cudaStream_t s = device.compute();
  const auto me = ps::DeviceTensor<int>::from_host({1}, {world_rank()}, s);
  auto all = ps::DeviceTensor<int>::zeros({size}, s);
  PIPESCHED_NCCL_CHECK(ncclAllGather(me.data(), all.data(), 1, ncclInt32, comm, s));
  return all.to_host();
}

TEST(NcclGroups, HoldTheGridsGroupsForEveryGridOfTheJob) {
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int n = world_size();
  int grids = 0;
  for (int p = 1; p <= n; ++p)
    for (int d = 1; d <= n; ++d)
      for (int t = 1; t <= n; ++t) {
        if (p * d * t != n) continue;
        const ps::ProcessGrid grid{p, d, t};
        SCOPED_TRACE(grid.describe());
        ++grids;
        const ps::nccl::Groups groups(grid, place.ordinal);
        const int g = world_rank();
        EXPECT_EQ(groups.coordinates(), grid.coordinates(g));
        EXPECT_EQ(members(groups.job(), groups.device()).size(), static_cast<std::size_t>(n));
        EXPECT_EQ(members(groups.pipeline(), groups.device()), grid.pipeline_group(g));
        EXPECT_EQ(members(groups.data(), groups.device()), grid.data_group(g));
        EXPECT_EQ(members(groups.tensor(), groups.device()), grid.tensor_group(g));
        int rank = -1;
        PIPESCHED_NCCL_CHECK(ncclCommUserRank(groups.data(), &rank));
        EXPECT_EQ(rank, grid.coordinates(g).data);
      }
  EXPECT_GE(grids, 1);
}

TEST(NcclReducer, CudaLocalTwoRanksOneReplicaMatchesSequentialTraining) {
  // pp2 × dp1 on one GPU: cuda-local runs both ranks, each rank's stages reduced by an NCCL
  // reducer of its own over a one-rank communicator (the mean of one replica is its gradient,
  // so the run must equal sequential training exactly as without the reducer).
  PIPESCHED_NCCL_NEEDS_GPUS(place, false);
  const ps::Schedule s = generated("1f1b", 2, 4);
  const int n = s.problem.stages;
  const toy::GptConfig config = config_for(n);
  auto devices = ps::cuda_local::Pipeline<Gpt>::devices_for(s, place.ordinal);
  std::vector<toy::GptStage<double>> ref;
  std::vector<Gpt> piped;
  for (int st = 0; st < n; ++st) {
    ref.emplace_back(config, st, n);
    piped.emplace_back(config, st, n, devices[static_cast<std::size_t>(s.placement.rank_of(st))]);
  }
  const ps::Schedule executed = ps::add_gradient_reduction(ps::lower_communication(s));
  std::vector<ps::detail::nccl::Link> parents(devices.size());
  std::vector<std::unique_ptr<ps::nccl::GradientReducer<Gpt>>> reducers;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    devices[r].activate();
    ncclUniqueId id;
    PIPESCHED_NCCL_CHECK(ncclGetUniqueId(&id));
    PIPESCHED_NCCL_CHECK(ncclCommInitRank(parents[r].out(), 1, id, 0));
    // 64 doubles a bucket: small tensors share one (packed), larger ones go alone (in place).
    reducers.push_back(std::make_unique<ps::nccl::GradientReducer<Gpt>>(
        parents[r].get(), MPI_COMM_SELF, devices[r], std::span<Gpt>(piped), executed.ranks[r],
        std::function<void()>(), std::chrono::seconds(30),
        ps::nccl::ReducerOptions{.bucket_bytes = 64 * sizeof(double)}));
    EXPECT_EQ(reducers.back()->replicas(), 1);
  }
  std::vector<int> started(static_cast<std::size_t>(n), 0);
  ps::ExecutorOptions options;
  gpu::use_sgd(options, s.placement, piped, learning_rate);
  options.reduce_gradients.start = [&](int stage) {
    ++started[static_cast<std::size_t>(stage)];
    reducers[static_cast<std::size_t>(s.placement.rank_of(stage))]->start(stage);
  };
  options.reduce_gradients.wait = [&](int stage) {
    reducers[static_cast<std::size_t>(s.placement.rank_of(stage))]->wait(stage);
  };
  ps::cuda_local::Pipeline<Gpt> pipe(s, devices, piped, options);
  const auto data = toy::make_gpt_data<double>(config, s.problem.microbatches, 17);
  const auto training = gpu::training_data(data, devices.front(), devices.back());
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (auto& r : reducers)
      r->begin_step();
    const double ref_loss = toy::sequential_step(ref, data);
    const auto ref_grads = toy::flat_gradients(ref);
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult r = pipe.step(training);
    EXPECT_LE(std::abs(r.loss - ref_loss), 1e-12 * std::abs(ref_loss));
    EXPECT_LE(toy::max_relative_error(gpu::flat_values(piped, true),
                                      std::vector<double>(ref_grads.begin(), ref_grads.end())),
              1e-12);
    const auto ref_params = toy::flat_parameters(ref);
    EXPECT_LE(toy::max_relative_error(gpu::flat_values(piped, false),
                                      std::vector<double>(ref_params.begin(), ref_params.end())),
              1e-12);
  }
  EXPECT_EQ(started, std::vector<int>(static_cast<std::size_t>(n), 2));
}

// Trains `name` on `grid` (every process of the job, a GPU each) through nccl::Pipeline built
// from nccl::Groups for two steps, each replica on its share of the global batch, its gradients
// averaged by the NCCL reducer; the global loss, this process's reduced gradients and its
// updated parameters must equal sequential training of the whole global batch (double, 1e-12).
void expect_data_parallel(const char* name, const ps::ProcessGrid& grid, int ordinal) {
  if (grid.size() != world_size()) return;
  SCOPED_TRACE(std::string(name) + " on " + grid.describe());
  const ps::nccl::Groups groups(grid, ordinal);
  const int d = grid.data, rank = groups.coordinates().pipeline;
  const ps::Schedule s = generated(name, grid.pipeline, 4);
  const int n = s.problem.stages;
  const toy::GptConfig config = config_for(n);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 17);
  const auto mine = share(global, groups.coordinates().data, d);
  std::vector<toy::GptStage<double>> ref;
  std::vector<Gpt> procs;
  for (int st = 0; st < n; ++st) {
    ref.emplace_back(config, st, n);
    procs.emplace_back(config, st, n, groups.device());
  }
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  gpu::use_sgd(options, s.placement, procs, learning_rate);
  ps::nccl::Pipeline<Gpt> pipe(s, procs, groups,
                               {.executor = options, .reducer = {.bucket_bytes = 256}});
  const auto training = gpu::training_data(mine, groups.device(), groups.device());
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    const auto ref_grads = values_of(s, ref, rank, true);
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.mpi().data());
    loss /= d;
    EXPECT_LE(std::abs(loss - ref_loss), 1e-12 * std::abs(ref_loss));
    EXPECT_LE(toy::max_relative_error(values_of(s, procs, rank, true), ref_grads), 1e-12);
    EXPECT_LE(
        toy::max_relative_error(values_of(s, procs, rank, false), values_of(s, ref, rank, false)),
        1e-12);
    const bool reduces =
        std::any_of(r.executed.ranks[static_cast<std::size_t>(rank)].begin(),
                    r.executed.ranks[static_cast<std::size_t>(rank)].end(),
                    [](const ps::Action& a) { return a.kind == ps::OpKind::ReduceGrad; });
    EXPECT_EQ(reduces, d > 1);
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

TEST(NcclRanks, DataParallelPipelinesFromGroupsMatchSequentialTrainingOfTheGlobalBatch) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int n = world_size();
  for (const ps::ProcessGrid grid : {ps::ProcessGrid{1, n, 1}, ps::ProcessGrid{n, 1, 1}}) {
    expect_data_parallel("1f1b", grid, place.ordinal);
    expect_data_parallel("zb-h1", grid, place.ordinal);
  }
}

// SGD with momentum on the host stages, as sgd_shards(learning_rate, momentum) steps a shard:
// v ← μ·v + g, w ← w − lr·v, every value with a velocity of its own in `velocity`.
constexpr double momentum = 0.9;
void momentum_update(std::vector<toy::GptStage<double>>& stages,
                     std::vector<std::vector<double>>& velocity) {
  velocity.resize(stages.size());
  for (std::size_t st = 0; st < stages.size(); ++st) {
    std::vector<double>& v = velocity[st];
    std::size_t k = 0;
    auto grads = stages[st].gradients();
    auto g = grads.begin();
    for (auto& p : stages[st].parameters()) {
      for (std::size_t i = 0; i < p.data.size(); ++i, ++k) {
        if (k >= v.size()) v.push_back(0);
        v[k] = momentum * v[k] + (*g).data[i];
        p.data[i] -= learning_rate * v[k];
      }
      ++g;
    }
  }
}

// Trains `name` on `grid` with ZeRO-`zero` through nccl::Pipeline for three steps, SGD with
// momentum stepped shard by shard (`bucket_bytes` 0: one bucket per stage). The global loss and
// the all-gathered weights equal sequential training of the global batch with momentum (double,
// 1e-12). With one bucket per stage, this replica's shard of each stage's reduced gradient
// (the j-th of d equal parts of its values, padded; with ZeRO-0, whose shard is the whole
// tensor, all of them) equals the reference's, and with ZeRO-2
// the gradients outside it are zero. With `fail_replica` ≥ 0 that replica's shard optimizer
// throws (after changing its state) in the first step: the step fails on every process, rolled
// back, and is retried, so the weights and momentum must be as if it never ran. The job is
// `world`'s processes.
void expect_zero(const char* name, const ps::ProcessGrid& grid, int zero, int ordinal,
                 MPI_Comm world, std::size_t bucket_bytes = 0, int fail_replica = -1) {
  int processes = 0;
  MPI_Comm_size(world, &processes);
  if (grid.size() != processes) return;
  SCOPED_TRACE(std::string(name) + " with ZeRO-" + std::to_string(zero) + " on " + grid.describe() +
               (bucket_bytes ? ", small buckets" : "") +
               (fail_replica >= 0 ? ", a failing shard step" : ""));
  const ps::nccl::Groups groups(grid, ordinal, world);
  const int d = grid.data, j = groups.coordinates().data, rank = groups.coordinates().pipeline;
  const ps::Schedule s = generated(name, grid.pipeline, 4);
  const int n = s.problem.stages;
  const toy::GptConfig config = config_for(n);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 21);
  const auto mine = share(global, j, d);
  std::vector<toy::GptStage<double>> ref;
  std::vector<Gpt> procs;
  for (int st = 0; st < n; ++st) {
    ref.emplace_back(config, st, n);
    procs.emplace_back(config, st, n, groups.device());
  }
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::nccl::ReducerOptions zero_options;
  zero_options.zero = zero;
  if (bucket_bytes > 0) zero_options.bucket_bytes = bucket_bytes;
  zero_options.optimizer = ps::sgd_shards(learning_rate, momentum);
  bool fail_now = fail_replica == j;
  const auto step_rule = zero_options.optimizer.step;
  zero_options.optimizer.step = [&fail_now, step_rule](std::span<double> w,
                                                       std::span<const double> g,
                                                       std::span<double> state) {
    step_rule(w, g, state);
    if (fail_now) throw std::runtime_error("injected shard-step fault");
  };
  ps::nccl::Pipeline<Gpt> pipe(s, procs, groups, {.executor = options, .reducer = zero_options});
  const auto training = gpu::training_data(mine, groups.device(), groups.device());
  if (fail_replica >= 0) {
    bool threw = false;
    try {
      pipe.step(training);
    } catch (const ps::execution_error& e) {
      threw = true;
      EXPECT_TRUE(e.rolled_back()) << e.what();
      EXPECT_NE(std::string(e.what()).find("injected shard-step fault"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(threw);
    fail_now = false;
    EXPECT_LE(
        toy::max_relative_error(values_of(s, procs, rank, false), values_of(s, ref, rank, false)),
        0.0)
        << "the rolled-back step changed the weights";
  }
  std::vector<std::vector<double>> velocity;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    std::vector<std::vector<double>> ref_grads;
    for (const auto& st : ref)
      ref_grads.push_back(toy::flat_gradients(std::vector<toy::GptStage<double>>{st}));
    momentum_update(ref, velocity);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.mpi().data());
    EXPECT_LE(std::abs(loss / d - ref_loss), 1e-12 * std::abs(ref_loss));
    EXPECT_LE(
        toy::max_relative_error(values_of(s, procs, rank, false), values_of(s, ref, rank, false)),
        1e-12);
    if (bucket_bytes > 0) continue;
    for (int st : s.placement.stages_of(rank)) {
      std::vector<double> got;
      for (const auto& t : procs[static_cast<std::size_t>(st)].host_gradients())
        got.insert(got.end(), t.data.begin(), t.data.end());
      const std::vector<double>& want = ref_grads[static_cast<std::size_t>(st)];
      ASSERT_EQ(got.size(), want.size());
      const std::size_t count = want.size(), c = zero == 0 ? count : (count + d - 1) / d;
      const std::size_t lo = zero == 0 ? 0 : std::min(count, c * j), hi = std::min(count, lo + c);
      EXPECT_LE(toy::max_relative_error(std::vector<double>(got.begin() + lo, got.begin() + hi),
                                        std::vector<double>(want.begin() + lo, want.begin() + hi)),
                1e-12)
          << "stage " << st << "'s shard";
      if (zero == 2)
        for (std::size_t i = 0; i < count; ++i)
          if (i < lo || i >= hi) EXPECT_EQ(got[i], 0.0) << "stage " << st << " value " << i;
    }
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

TEST(NcclZero, OneProcessMatchesSequentialTrainingWithMomentum) {
  // dp1, each process a job of its own whatever -np is: the shard is the whole bucket;
  // ncclReduceScatter and ncclAllGather on a one-rank communicator, the shard step on the
  // host, and the rollback of a failed shard step.
  PIPESCHED_NCCL_NEEDS_GPUS(place, false);
  expect_zero("1f1b", {1, 1, 1}, 1, place.ordinal, MPI_COMM_SELF);
  expect_zero("zb-h1", {1, 1, 1}, 2, place.ordinal, MPI_COMM_SELF, 256);
  expect_zero("1f1b", {1, 1, 1}, 1, place.ordinal, MPI_COMM_SELF, 0, 0);
  expect_zero("1f1b", {1, 1, 1}, 0, place.ordinal, MPI_COMM_SELF, 0, 0);  // ZeRO-0, same rule
}

TEST(NcclRanks, ZeroMatchesSequentialTrainingWithMomentumAndRollsBackAFailedShardStep) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int n = world_size();
  const MPI_Comm w = MPI_COMM_WORLD;
  expect_zero("1f1b", {1, n, 1}, 1, place.ordinal, w);
  expect_zero("1f1b", {1, n, 1}, 2, place.ordinal, w);
  expect_zero("zb-h1", {1, n, 1}, 1, place.ordinal, w, 256);
  expect_zero("zb-h1", {n, 1, 1}, 2, place.ordinal, w);
  expect_zero("1f1b", {1, n, 1}, 1, place.ordinal, w, 0, n - 1);
  expect_zero("zb-h1", {1, n, 1}, 0, place.ordinal, w, 256, n - 1);  // ZeRO-0, the same rule
  if (n % 2 == 0) {  // pp2 × dp(n/2): on nccl.np4, two pipelines of two GPUs each
    expect_zero("1f1b", {2, n / 2, 1}, 1, place.ordinal, w);
    expect_zero("interleaved-1f1b", {2, n / 2, 1}, 2, place.ordinal, w, 256);
  }
}

// This pipeline rank's host stages of `all`, flat, cut to tensor shard `shard`.
std::vector<double> shard_values(const ps::Schedule& s,
                                 const std::vector<toy::GptStage<double>>& all, int rank,
                                 ps::TensorShard shard, bool gradients) {
  std::vector<double> out;
  for (int st : s.placement.stages_of(rank)) {
    const std::vector<double> v = all[static_cast<std::size_t>(st)].flat_shard(shard, gradients);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Trains `name` on `grid` (tp > 1) with ZeRO-1 for three steps, SGD with momentum stepped
// shard by shard: each process holds its tensor shard of its pipeline rank's GPU stages
// (summing over an nccl::TensorGroup), each replica its share of the global batch. The global
// loss and this process's weights equal sequential training of the whole model on the whole
// batch with momentum, cut to this process's tensor shard (double, 1e-12).
void expect_tensor_parallel_zero(const char* name, const ps::ProcessGrid& grid, int ordinal) {
  if (grid.size() != world_size()) return;
  SCOPED_TRACE(std::string(name) + " with ZeRO-1 on " + grid.describe());
  const ps::nccl::Groups groups(grid, ordinal);
  const auto at = groups.coordinates();
  const ps::TensorShard shard{at.tensor, grid.tensor};
  const int d = grid.data;
  const ps::Schedule s = generated(name, grid.pipeline, 4);
  const int n = s.problem.stages;
  const toy::GptConfig config = config_for(n);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 29);
  const auto mine = share(global, at.data, d);
  std::vector<toy::GptStage<double>> ref;
  std::vector<Gpt> procs;
  for (int st = 0; st < n; ++st) {
    ref.emplace_back(config, st, n);
    procs.emplace_back(config, st, n, groups.device(), shard);
  }
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(60);
  ps::nccl::ReducerOptions zero_options;
  zero_options.zero = 1;
  zero_options.bucket_bytes = 256;
  zero_options.optimizer = ps::sgd_shards(learning_rate, momentum);
  ps::nccl::Pipeline<Gpt> pipe(s, procs, groups, {.executor = options, .reducer = zero_options});
  const auto training = gpu::training_data(mine, groups.device(), groups.device());
  std::vector<std::vector<double>> velocity;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    momentum_update(ref, velocity);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.mpi().data());
    EXPECT_LE(std::abs(loss / d - ref_loss), 1e-12 * std::abs(ref_loss));
    EXPECT_LE(toy::max_relative_error(values_of(s, procs, at.pipeline, false),
                                      shard_values(s, ref, at.pipeline, shard, false)),
              1e-12);
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

TEST(NcclRanks, TensorParallelZeroOneMatchesSequentialTrainingOfTheWholeModel) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int n = world_size();
  for (const ps::ProcessGrid grid : {ps::ProcessGrid{1, 1, 2}, ps::ProcessGrid{2, 1, 2},
                                     ps::ProcessGrid{1, 2, 2}, ps::ProcessGrid{2, 2, 2}}) {
    if (grid.size() != n) continue;
    expect_tensor_parallel_zero("1f1b", grid, place.ordinal);
    if (grid.pipeline > 1) expect_tensor_parallel_zero("zb-h1", grid, place.ordinal);
  }
}

TEST(NcclRanks, TensorParallelStagesOfAnotherShardAreRefusedOnEveryProcess) {
  // tp2 on two processes: whole GPU GPT stages, and stage models that take no tensor group,
  // are refused by every process with what to build.
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int n = world_size();
  const ps::ProcessGrid grid{n / 2, 1, 2};
  if (grid.size() != n) GTEST_SKIP() << "runs on an even number of processes";
  const ps::nccl::Groups groups(grid, place.ordinal);
  const ps::Schedule s = generated("1f1b", grid.pipeline, 2);
  const toy::GptConfig config = config_for(s.problem.stages);
  auto refused = [&](auto& stages, const char* says) {
    using Stage = typename std::remove_cvref_t<decltype(stages)>::value_type;
    try {
      ps::nccl::Pipeline<Stage> pipe(s, stages, groups);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  std::vector<Gpt> whole;
  for (int st = 0; st < s.problem.stages; ++st)
    whole.emplace_back(config, st, s.problem.stages, groups.device());
  refused(whole, "TensorShard{coordinates().tensor, grid().tensor}");
  const toy::MlpConfig mlp{.blocks = s.problem.stages};
  std::vector<gpu::MlpStage<double>> mlps;
  for (int st = 0; st < s.problem.stages; ++st)
    mlps.emplace_back(mlp, st, s.problem.stages, groups.device());
  refused(mlps, "the stage model takes no tensor group (see tensor_parallel_stage)");
}

TEST(NcclZero, AnOptimizerHookBesideZeroIsRefused) {
  // No GPU needed: nccl::Pipeline installs the shard step through the hook check mpi::Pipeline
  // uses (detail::shard_optimizer), shown here on a reducer stand-in.
  ps::ExecutorOptions hooks;
  hooks.optimizer = [](int) {};
  struct Stand {
    int zero() const { return 2; }
    bool steps_weights() const { return true; }
    void step_shards() {}
    void discard_step() {}
  } stand;
  try {
    ps::detail::shard_optimizer("nccl::Pipeline", "nccl::ReducerOptions", hooks, stand);
    ADD_FAILURE() << "an optimizer hook beside ZeRO was accepted";
  } catch (const ps::invalid_problem& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nccl::Pipeline: nccl::ReducerOptions::optimizer steps the weights "
                        "(ZeRO-2), but ExecutorOptions also has"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("leave those empty"), std::string::npos) << what;
  }
  ps::ExecutorOptions empty;
  ps::detail::shard_optimizer("nccl::Pipeline", "nccl::ReducerOptions", empty, stand);
  EXPECT_TRUE(static_cast<bool>(empty.optimizer));
  EXPECT_TRUE(static_cast<bool>(empty.rollback));
  EXPECT_FALSE(static_cast<bool>(empty.snapshot));
}

// A GPU GPT stage whose forward of one microbatch (counted from its first) throws.
struct FaultyGpt : Gpt {
  using Gpt::forward;
  using Gpt::Gpt;
  int fail_microbatch = -1;
  mutable int seen = 0;
  tensor_type forward(const tensor_type& x, Stash& stash) const {
    if (seen++ == fail_microbatch) throw std::runtime_error("injected fault");
    return Gpt::forward(x, stash);
  }
};

TEST(NcclRanks, AFailingReplicaRollsBackEveryReplicaAndTheRetriedStepMatchesSequentialTraining) {
  // pp1 × dp2: the last replica fails in its third forward, before any reduction; the other
  // one reaches its WAIT_REDUCE_GRAD with an all-reduce nobody joins, hears the failure, and
  // drain completes that all-reduce, so the retried step runs on a clean communicator.
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  const int d = world_size();
  const ps::nccl::Groups groups(ps::ProcessGrid{1, d, 1}, place.ordinal);
  const ps::Schedule s = generated("1f1b", 1, 4);
  const toy::GptConfig config = config_for(1);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 23);
  const auto mine = share(global, groups.coordinates().data, d);
  std::vector<toy::GptStage<double>> ref;
  ref.emplace_back(config, 0, 1);
  std::vector<FaultyGpt> procs;
  procs.emplace_back(config, 0, 1, groups.device());
  if (groups.coordinates().data == d - 1) procs[0].fail_microbatch = 2;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(20);
  gpu::use_sgd(options, s.placement, procs, learning_rate);
  ps::nccl::Pipeline<FaultyGpt> pipe(s, procs, groups, {.executor = options});
  const auto training = gpu::training_data(mine, groups.device(), groups.device());
  bool threw = false;
  try {
    pipe.step(training);
  } catch (const ps::execution_error& e) {
    threw = true;
    const std::string what = e.what();
    EXPECT_TRUE(e.rolled_back());
    EXPECT_NE(what.find("replica " + std::to_string(d - 1) + " of " + std::to_string(d)),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("injected fault"), std::string::npos) << what;
  }
  EXPECT_TRUE(threw);
  procs[0].fail_microbatch = -1;
  const double ref_loss = toy::sequential_step(ref, global);
  const auto ref_grads = toy::flat_gradients(ref);
  toy::sgd_update(ref, learning_rate);
  const ps::StepResult r = pipe.step(training);
  double loss = 0;
  MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.mpi().data());
  loss /= d;
  EXPECT_LE(std::abs(loss - ref_loss), 1e-12 * std::abs(ref_loss));
  EXPECT_LE(toy::max_relative_error(gpu::flat_values(procs, true),
                                    std::vector<double>(ref_grads.begin(), ref_grads.end())),
            1e-12);
  const auto ref_params = toy::flat_parameters(ref);
  EXPECT_LE(toy::max_relative_error(gpu::flat_values(procs, false),
                                    std::vector<double>(ref_params.begin(), ref_params.end())),
            1e-12);
}

}  // namespace
