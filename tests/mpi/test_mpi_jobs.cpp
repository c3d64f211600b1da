// Jobs over MPI, run by ctest under `mpirun -np 2` and `-np 4` with the other MPI tests: the
// groups of a pp × dp × tp grid; data-parallel replicas of a pipeline, whose gradients the
// schedule's REDUCE_GRAD actions average (equal to sequential training of the global batch,
// the reduction overlapping the cooldown); and random faults in any action, reduction or
// optimizer, after which every process of every replica has rolled the step back (the
// retried step's loss is the fault-free run's).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "../unit/exec/exec_support.hpp"
#include "mpi_support.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/exec/shard_optimizer.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace {

using namespace mpi_test;

using CountingGpt = exec_test::Counting<toy::GptStage<double>>;

}  // namespace

// Random faults in any compute action of any stage, in any call that reaches a stage's
// gradients (a data-parallel reduction packing or unpacking them, the optimizer), or in one
// rank's snapshot (std::bad_alloc: that rank's optimizer never runs, and it must not be rolled
// back to an older snapshot) or optimizer (before or after it updated), each in one random
// step of a 3-step run of
// the job `grid` over MPI, on one replica: every process throws the same error saying the step
// was rolled back, and after a retry of the failed step every step's loss and this process's
// parameters equal the fault-free run's, bit for bit. The draws come from one seed, so every
// process draws the same. With `zero` 1 or 2, or with `reducer_steps`, the optimizer is the
// reducer's shard step (SGD with momentum, so a rolled-back step must also restore the shards'
// state; with ZeRO-0 the shard is the whole tensor), and an optimizer fault hits one replica's
// rank only; else it is the executor's hooks (toy::use_sgd). With a tensor group, a layer's
// fault hits one member.

void mpi_test::expect_mpi_faults_roll_back(const char* name, const ps::ProcessGrid& grid,
                                           int trials, unsigned seed, int zero,
                                           bool reducer_steps) {
  reducer_steps = reducer_steps || zero > 0;
  if (grid.size() != world_size()) return;
  const ps::mpi::Groups groups(grid);
  const ps::Schedule s = generated(name, grid.pipeline, 2 * grid.pipeline);
  SCOPED_TRACE(s.name + " on " + grid.describe());
  constexpr int steps = 3;
  const toy::GptConfig config = config_for(s.problem.stages);
  const auto global = toy::make_gpt_data<double>(config, grid.data * s.problem.microbatches, 3);
  const auto part = share(global, groups.coordinates().data, grid.data);
  const auto training = toy::training_data(part);  // refers to `part`
  const int n = s.problem.stages, rank = groups.coordinates().pipeline;
  auto make = [&] {
    std::vector<CountingGpt> v;
    for (int st = 0; st < n; ++st)
      v.emplace_back(config, st, n, ps::TensorShard{groups.coordinates().tensor, grid.tensor});
    return v;
  };
  auto mine = [&](const std::vector<CountingGpt>& all) {
    std::vector<double> flat;
    for (int st : s.placement.stages_of(rank))
      for (const auto& t : all[static_cast<std::size_t>(st)].parameters())
        flat.insert(flat.end(), t.data.begin(), t.data.end());
    return flat;
  };
  ps::ExecutorOptions base;
  base.receive_timeout = std::chrono::seconds(30);
  std::vector<double> clean_loss;
  std::vector<int> calls_per_step(static_cast<std::size_t>(n), 0);  // of this process's stages
  std::vector<int> reaches_per_step(static_cast<std::size_t>(n), 0);
  std::vector<double> clean_params;
  ps::mpi::ReducerOptions sharded;
  sharded.zero = zero;
  if (reducer_steps) sharded.optimizer = ps::sgd_shards(learning_rate, 0.9);
  {
    auto stages = make();
    ps::ExecutorOptions options = base;
    if (!reducer_steps) toy::use_sgd(options, s.placement, stages, learning_rate);
    ps::mpi::Pipeline<CountingGpt> pipe(s, stages, groups,
                                        {.executor = options, .reducer = sharded});
    for (int k = 0; k < steps; ++k)
      clean_loss.push_back(pipe.step(training).loss);
    for (int st = 0; st < n; ++st) {
      calls_per_step[static_cast<std::size_t>(st)] =
          stages[static_cast<std::size_t>(st)].calls / steps;
      reaches_per_step[static_cast<std::size_t>(st)] =
          stages[static_cast<std::size_t>(st)].reaches / steps;
    }
    clean_params = mine(stages);
  }
  std::mt19937 rng(seed);
  for (int t = 0; t < trials; ++t) {
    auto stages = make();
    ps::ExecutorOptions options = base;
    if (!reducer_steps) toy::use_sgd(options, s.placement, stages, learning_rate);
    const unsigned kind = rng() % 4;  // 0: an optimizer, 1: a gradients() call, else compute
    const bool in_optimizer = kind == 0, in_gradients = kind == 1;
    const int bad_rank = static_cast<int>(rng() % static_cast<unsigned>(s.rank_count()));
    const int bad_replica = static_cast<int>(rng() % static_cast<unsigned>(grid.data));
    const unsigned phase = rng() % 3;  // 0: in the snapshot, 1: before, 2: after the update
    // ZeRO's shard optimizer keeps its own state: no snapshot hook to break there.
    const bool in_snapshot = phase == 0 && !reducer_steps, after_update = phase == 2;
    const int faulty_step = static_cast<int>(rng() % steps);
    const int stage = static_cast<int>(rng() % static_cast<unsigned>(n));
    const double where = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    // With a tensor group, one member fails: the others are then inside its all-reduces.
    const int bad_member =
        grid.tensor > 1 ? static_cast<int>(rng() % static_cast<unsigned>(grid.tensor)) : 0;
    const bool here = s.placement.rank_of(stage) == rank &&
                      groups.coordinates().data == bad_replica &&
                      groups.coordinates().tensor == bad_member;
    bool armed = false;
    ps::mpi::ReducerOptions faulty = sharded;
    if (!reducer_steps) {
      auto sgd = options.optimizer;
      options.optimizer = [&, sgd](int r) {
        if (armed && r == bad_rank && phase == 1) throw std::runtime_error("optimizer fault");
        sgd(r);
        if (armed && r == bad_rank && after_update) throw std::runtime_error("optimizer fault");
      };
      options.snapshot = [&, keep = options.snapshot](int r) {
        if (armed && r == bad_rank && in_snapshot) throw std::bad_alloc();
        keep(r);
      };
    } else {
      const bool mine_fails = rank == bad_rank && groups.coordinates().data == bad_replica;
      faulty.optimizer.step = [&, mine_fails, rule = sharded.optimizer.step](
                                  std::span<double> w, std::span<const double> g,
                                  std::span<double> state) {
        if (armed && mine_fails && !after_update) throw std::runtime_error("optimizer fault");
        rule(w, g, state);
        if (armed && mine_fails && after_update) throw std::runtime_error("optimizer fault");
      };
    }
    ps::mpi::Pipeline<CountingGpt> pipe(s, stages, groups,
                                        {.executor = options, .reducer = faulty});
    SCOPED_TRACE(
        "trial " + std::to_string(t) + ": step " + std::to_string(faulty_step) +
        (in_optimizer
             ? ", rank " + std::to_string(bad_rank) + (in_snapshot ? "'s snapshot" : "'s optimizer")
             : std::string(in_gradients ? ", the gradients of" : ", a call of") + " stage " +
                   std::to_string(stage) + " on replica " + std::to_string(bad_replica)));
    auto pick = [&](int count) { return 1 + std::min(count - 1, static_cast<int>(where * count)); };
    for (int k = 0; k < steps; ++k) {
      for (CountingGpt& st : stages)
        st.calls = st.reaches = 0;
      if (k == faulty_step) {
        CountingGpt& target = stages[static_cast<std::size_t>(stage)];
        if (in_optimizer)
          armed = true;
        else if (here && in_gradients)
          target.reach_target = pick(reaches_per_step[static_cast<std::size_t>(stage)]);
        else if (here)
          target.target = pick(calls_per_step[static_cast<std::size_t>(stage)]);
        const std::vector<double> before = mine(stages);
        try {
          pipe.step(training);
          ADD_FAILURE() << "the injected fault did not fail the step";
        } catch (const ps::execution_error& e) {
          // This process's parameters are those it had before the step.
          EXPECT_EQ(mine(stages), before);
          EXPECT_TRUE(e.rolled_back()) << e.what();
          EXPECT_NE(std::string(e.what()).find("the step was rolled back"), std::string::npos)
              << e.what();
          EXPECT_EQ(e.rank(), in_optimizer ? bad_rank : s.placement.rank_of(stage)) << e.what();
          // With replicas the error names the failing one (the lowest, when all failed).
          if (grid.data > 1) {
            const int replica = in_optimizer && !reducer_steps ? 0 : bad_replica;
            EXPECT_EQ(std::string(e.what()).rfind("replica " + std::to_string(replica) + " of " +
                                                      std::to_string(grid.data) + ": rank ",
                                                  0),
                      0u)
                << e.what();
          }
        }
        armed = false;
        for (CountingGpt& st : stages)
          st.disarm();
      }
      EXPECT_EQ(pipe.step(training).loss, clean_loss[static_cast<std::size_t>(k)]) << "step " << k;
    }
    EXPECT_EQ(mine(stages), clean_params);
    EXPECT_EQ(pipe.transport().pending(), 0u);
  }
}

namespace {

TEST(MpiFaults, RandomFaultsRollBackOneFOneB) {
  expect_mpi_faults_roll_back("1f1b", {world_size(), 1, 1}, 100, 11);
}

TEST(MpiFaults, RandomFaultsRollBackZeroBubble) {
  expect_mpi_faults_roll_back("zb-h1", {world_size(), 1, 1}, 100, 12);
}

// With replicas a fault may also hit a reduction; every replica rolls back.
TEST(MpiFaults, RandomFaultsRollBackEveryReplica) {
  const int n = world_size();
  expect_mpi_faults_roll_back("1f1b", {1, n, 1}, 60, 13);
  expect_mpi_faults_roll_back("zb-h1", {2, n / 2, 1}, 60, 14);
}

// ZeRO: a fault in a shard's optimizer (before or after it updated the shard and its
// momentum) or anywhere else rolls back every shard; the next steps match the clean run's.
TEST(MpiFaults, RandomFaultsRollBackZeroShards) {
  const int n = world_size();
  expect_mpi_faults_roll_back("1f1b", {2, n / 2, 1}, 60, 15, 1);
  expect_mpi_faults_roll_back("zb-h1", {1, n, 1}, 60, 16, 2);
  expect_mpi_faults_roll_back("1f1b", {2, n / 2, 1}, 40, 17, 0, true);  // ZeRO-0, the same rule
}

// Every grid of the job's size: each communicator of mpi::Groups holds exactly the processes
// ProcessGrid puts in that group, ranked along it.
TEST(MpiGroups, CommunicatorsHoldTheGridsGroups) {
  const int n = world_size();
  int grids = 0;
  for (int p = 1; p <= n; ++p)
    for (int d = 1; d <= n; ++d)
      for (int t = 1; t <= n; ++t) {
        if (p * d * t != n) continue;
        const ps::ProcessGrid grid{p, d, t};
        SCOPED_TRACE(grid.describe());
        ++grids;
        const ps::mpi::Groups groups(grid);
        EXPECT_EQ(groups.coordinates(), grid.coordinates(world_rank()));
        auto members = [](MPI_Comm c) {
          int size = 0, me = world_rank();
          MPI_Comm_size(c, &size);
          std::vector<int> all(static_cast<std::size_t>(size));
          MPI_Allgather(&me, 1, MPI_INT, all.data(), 1, MPI_INT, c);
          return all;
        };
        EXPECT_EQ(members(groups.pipeline()), grid.pipeline_group(world_rank()));
        EXPECT_EQ(members(groups.data()), grid.data_group(world_rank()));
        EXPECT_EQ(members(groups.tensor()), grid.tensor_group(world_rank()));
      }
  EXPECT_GE(grids, 3);
}

TEST(MpiGroups, AGridOfAnotherSizeIsRefusedOnEveryProcess) {
  const ps::ProcessGrid grid{world_size(), 2, 1};
  try {
    const ps::mpi::Groups groups(grid);
    ADD_FAILURE() << "a grid of " << grid.size() << " processes was accepted";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np " + std::to_string(grid.size())),
              std::string::npos)
        << e.what();
  }
}

// ---- data parallelism: pipelines of a pp × dp job -------------------------------------------

// Trains `name` on `grid` (every process of the job) for two steps, each replica on its share
// of the global batch, its gradients reduced by the schedule's REDUCE_GRAD actions; the global
// loss (the replicas' mean), this process's reduced gradients and its updated parameters must
// equal sequential training on the whole global batch (double, 1e-12). With several pipeline
// ranks, the last rank's reduction starts (measured) before the first rank's list ends in at
// least one of the two steps: a process the machine's load holds back can miss it in one.
void expect_data_parallel(const char* name, const ps::ProcessGrid& grid, int slices = 1) {
  if (grid.size() != world_size()) return;
  SCOPED_TRACE(std::string(name) + " on " + grid.describe());
  const ps::mpi::Groups groups(grid);
  const int d = grid.data, rank = groups.coordinates().pipeline;
  const ps::Schedule s = generated(name, grid.pipeline, 4, slices);
  const toy::GptConfig config = config_for(s.problem.stages);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 17);
  const auto mine = share(global, groups.coordinates().data, d);
  auto ref = make_stages<double>(config, s.problem.stages);
  auto procs = make_stages<double>(config, s.problem.stages);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  toy::use_sgd(options, s.placement, procs, learning_rate);
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, procs, groups, {.executor = options});
  const auto training = toy::training_data(mine, slices);
  int overlapped = 0;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    const auto ref_grads = toy::flat_gradients(stages_of(s, ref, rank));
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.data());
    loss /= d;
    EXPECT_LE(std::abs(loss - ref_loss), 1e-12 * std::abs(ref_loss));
    EXPECT_LE(toy::max_relative_error(toy::flat_gradients(stages_of(s, procs, rank)), ref_grads),
              1e-12);
    EXPECT_LE(toy::max_relative_error(toy::flat_parameters(stages_of(s, procs, rank)),
                                      toy::flat_parameters(stages_of(s, ref, rank))),
              1e-12);
    if (d > 1 && grid.pipeline > 1) {
      const int last = grid.pipeline - 1;
      const auto& list = r.executed.ranks[static_cast<std::size_t>(last)];
      double reduce_start = -1;
      for (std::size_t i = 0; i < list.size() && reduce_start < 0; ++i)
        if (list[i].kind == ps::OpKind::ReduceGrad)
          reduce_start = r.ranks[static_cast<std::size_t>(last)].timing[i].start;
      EXPECT_GE(reduce_start, 0);
      overlapped += reduce_start < r.ranks[0].end;
    }
  }
  if (d > 1 && grid.pipeline > 1) {
    EXPECT_GE(overlapped, 1) << "the reduction waited for the whole pipeline in both steps";
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

TEST(MpiDataParallel, MatchesSequentialTrainingOfTheGlobalBatch) {
  const int n = world_size();
  for (const ps::ProcessGrid grid :
       {ps::ProcessGrid{1, n, 1}, ps::ProcessGrid{2, n / 2, 1}, ps::ProcessGrid{n, 1, 1}}) {
    expect_data_parallel("1f1b", grid);
    expect_data_parallel("zb-h1", grid);
    expect_data_parallel("slice-pipe", grid, 2);
    if (grid.pipeline > 1) expect_data_parallel("interleaved-1f1b", grid);
  }
}

// ---- ZeRO: sharded optimizer state (1) and gradients (2) ------------------------------------

inline constexpr double momentum = 0.9;

// Sequential training's update of `stages` with SGD and momentum (PyTorch's form), one
// velocity per parameter value in `velocity` (one vector per stage, grown on first use).
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

// One stage's gradient values, flat.
std::vector<double> flat(const toy::GptStage<double>& stage) {
  return toy::flat_gradients(std::vector<toy::GptStage<double>>{stage});
}

// Trains `name` on `grid` with ZeRO-`zero` for three steps, SGD with momentum stepped by the
// reducer shard by shard: the global loss, this replica's shard of every reduced gradient (one
// bucket per stage: the j-th of d equal parts of the stage's values, padded; with ZeRO-0 the
// whole bucket) and the whole all-gathered weights equal sequential training of the global
// batch with momentum (double, 1e-12); with ZeRO-2 the gradients outside the shard are zero.
void expect_zero(const char* name, const ps::ProcessGrid& grid, int zero, int slices = 1) {
  if (grid.size() != world_size()) return;
  SCOPED_TRACE(std::string(name) + " with ZeRO-" + std::to_string(zero) + " on " + grid.describe());
  const ps::mpi::Groups groups(grid);
  const int d = grid.data, j = groups.coordinates().data, rank = groups.coordinates().pipeline;
  const ps::Schedule s = generated(name, grid.pipeline, 4, slices);
  const toy::GptConfig config = config_for(s.problem.stages);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 21);
  const auto mine = share(global, j, d);
  auto ref = make_stages<double>(config, s.problem.stages);
  auto procs = make_stages<double>(config, s.problem.stages);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::mpi::ReducerOptions zero_options;
  zero_options.zero = zero;
  zero_options.optimizer = ps::sgd_shards(learning_rate, momentum);
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, procs, groups,
                                                {.executor = options, .reducer = zero_options});
  const auto training = toy::training_data(mine, slices);
  std::vector<std::vector<double>> velocity;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    std::vector<std::vector<double>> ref_grads;
    for (const auto& st : ref)
      ref_grads.push_back(flat(st));
    momentum_update(ref, velocity);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.data());
    EXPECT_LE(std::abs(loss / d - ref_loss), 1e-12 * std::abs(ref_loss));
    for (int st : s.placement.stages_of(rank)) {
      const std::vector<double> got = flat(procs[static_cast<std::size_t>(st)]);
      const std::vector<double>& want = ref_grads[static_cast<std::size_t>(st)];
      const std::size_t n = want.size(), c = zero == 0 ? n : (n + d - 1) / d;
      const std::size_t lo = zero == 0 ? 0 : std::min(n, c * j), hi = std::min(n, lo + c);
      EXPECT_LE(toy::max_relative_error(std::vector<double>(got.begin() + lo, got.begin() + hi),
                                        std::vector<double>(want.begin() + lo, want.begin() + hi)),
                1e-12)
          << "stage " << st << "'s shard";
      if (zero == 2) {
        for (std::size_t i = 0; i < n; ++i) {
          if (i < lo || i >= hi) {
            EXPECT_EQ(got[i], 0.0) << "stage " << st << " value " << i;
          }
        }
      }
    }
    EXPECT_LE(toy::max_relative_error(toy::flat_parameters(stages_of(s, procs, rank)),
                                      toy::flat_parameters(stages_of(s, ref, rank))),
              1e-12);
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

TEST(MpiZero, MatchesSequentialTrainingWithMomentum) {
  const int n = world_size();
  expect_zero("1f1b", {2, n / 2, 1}, 1);
  expect_zero("zb-h1", {2, n / 2, 1}, 2);
  expect_zero("interleaved-1f1b", {2, n / 2, 1}, 1);
  expect_zero("slice-pipe", {2, n / 2, 1}, 1, 2);
  expect_zero("1f1b", {1, n, 1}, 2);
  // ZeRO-0 with the same optimizer: every replica steps the whole weights, with or without
  // replicas (one optimizer for every ZeRO stage).
  expect_zero("1f1b", {2, n / 2, 1}, 0);
  expect_zero("zb-h1", {n, 1, 1}, 0);
}

TEST(MpiZero, OptionsAreCheckedOnEveryProcess) {
  const ps::ProcessGrid grid{1, world_size(), 1};
  const ps::mpi::Groups groups(grid);
  const ps::Schedule s = generated("1f1b", 1, 2);
  auto stages = make_stages<double>(config_for(1), 1);
  auto refused = [&](ps::ExecutorOptions options, ps::mpi::ReducerOptions zero, const char* says) {
    try {
      ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, groups,
                                                    {.executor = options, .reducer = zero});
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  ps::mpi::ReducerOptions three;
  three.zero = 3;
  refused({}, three, "give 0 (all-reduce), 1");
  ps::mpi::ReducerOptions no_rule;
  no_rule.zero = 1;
  refused({}, no_rule, "mpi::ReducerOptions.optimizer is empty");
  ps::mpi::ReducerOptions both;
  both.zero = 2;
  both.optimizer = ps::sgd_shards(0.1);
  ps::ExecutorOptions with_optimizer;
  toy::use_sgd(with_optimizer, s.placement, stages, 0.1);
  refused(with_optimizer, both, "leave those empty");
  ps::mpi::ReducerOptions whole;  // ZeRO-0 with the reducer's optimizer: the hooks stay empty
  whole.optimizer = ps::sgd_shards(0.1);
  refused(with_optimizer, whole, "or leave mpi::ReducerOptions::optimizer empty with ZeRO-0");
  ps::mpi::ReducerOptions negative;
  negative.optimizer = ps::sgd_shards(0.1);
  negative.optimizer.state_per_value = -1;
  refused({}, negative, "state_per_value = -1 is negative");
}

}  // namespace
