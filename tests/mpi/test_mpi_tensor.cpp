// Tensor parallelism over MPI, run by ctest under `mpirun -np 2`, `-np 4` and (the tests of a
// pp × dp × tp grid of 8) `-np 8`: the toy GPT's blocks split over a tensor group (Megatron's
// column- then row-parallel linears, the four all-reduces per block), in pipelines with and
// without data-parallel replicas; the global batch's loss, every process's shard of the
// gradients and of the updated weights equal sequential training of the whole model (double,
// 1e-12); random faults in any action or optimizer roll the step back on every process.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_support.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace {

using namespace mpi_test;

// This pipeline rank's stages of `all`, flat, cut to `shard` (`gradients`: their gradients).
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

// Trains `name` on `grid` for two steps with SGD: each process holds its tensor shard of its
// pipeline rank's stages, each replica its share of the global batch. The global loss, this
// process's gradients and updated weights equal sequential training of the whole model on the
// whole batch, cut to this process's shard (double, 1e-12).
void expect_tensor_parallel(const char* name, const ps::ProcessGrid& grid, int slices = 1) {
  if (grid.size() != world_size()) return;
  SCOPED_TRACE(std::string(name) + " on " + grid.describe());
  const ps::mpi::Groups groups(grid);
  const auto at = groups.coordinates();
  const ps::TensorShard shard{at.tensor, grid.tensor};
  const int d = grid.data;
  const ps::Schedule s = generated(name, grid.pipeline, 4, slices);
  const toy::GptConfig config = config_for(s.problem.stages);
  const auto global = toy::make_gpt_data<double>(config, d * s.problem.microbatches, 23);
  const auto mine = share(global, at.data, d);
  auto ref = make_stages<double>(config, s.problem.stages);
  std::vector<toy::GptStage<double>> procs;
  for (int st = 0; st < s.problem.stages; ++st)
    procs.emplace_back(config, st, s.problem.stages, shard);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(60);
  toy::use_sgd(options, s.placement, procs, learning_rate);
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, procs, groups, {.executor = options});
  const auto training = toy::training_data(mine, slices);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double ref_loss = toy::sequential_step(ref, global);
    const auto ref_grads = shard_values(s, ref, at.pipeline, shard, true);
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, groups.data());
    EXPECT_LE(std::abs(loss / d - ref_loss), 1e-12 * std::abs(ref_loss));
    std::vector<double> grads;
    for (int st : s.placement.stages_of(at.pipeline))
      for (const auto& g : procs[static_cast<std::size_t>(st)].gradients())
        grads.insert(grads.end(), g.data.begin(), g.data.end());
    EXPECT_LE(toy::max_relative_error(grads, ref_grads), 1e-12);
    std::vector<double> params;
    for (int st : s.placement.stages_of(at.pipeline))
      for (const auto& p : procs[static_cast<std::size_t>(st)].parameters())
        params.insert(params.end(), p.data.begin(), p.data.end());
    EXPECT_LE(toy::max_relative_error(params, shard_values(s, ref, at.pipeline, shard, false)),
              1e-12);
  }
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

// pp × tp grids of the job's size (pp2 × tp2 on 4 processes; tp2 alone on 2).
TEST(MpiTensorParallel, MatchesSequentialTrainingOfTheWholeModel) {
  const int n = world_size();
  if (n > 4) GTEST_SKIP() << "the pp × tp grids run on 2 and 4 processes";
  const ps::ProcessGrid grid{n / 2, 1, 2};
  expect_tensor_parallel("1f1b", grid);
  expect_tensor_parallel("zb-h1", grid);
  expect_tensor_parallel("slice-pipe", grid, 2);
  if (grid.pipeline > 1) expect_tensor_parallel("interleaved-1f1b", grid);
}

// pp2 × dp2 × tp2 on 8 processes: pipeline, replicas and tensor shards together.
TEST(MpiTensorParallel, WithReplicasMatchesSequentialTraining) {
  if (world_size() != 8) GTEST_SKIP() << "pp2 × dp2 × tp2 runs on 8 processes";
  const ps::ProcessGrid grid{2, 2, 2};
  expect_tensor_parallel("1f1b", grid);
  expect_tensor_parallel("zb-h1", grid);
  expect_tensor_parallel("interleaved-1f1b", grid);
  expect_tensor_parallel("slice-pipe", grid, 2);
}

// A fault anywhere — in a layer between its all-reduces, an optimizer — rolls back every
// process; the tensor group's half-done all-reduces are completed, so the retried step matches.
TEST(MpiTensorParallel, RandomFaultsRollBack) {
  const int n = world_size();
  if (n > 4) GTEST_SKIP() << "runs on 2 and 4 processes";
  expect_mpi_faults_roll_back("1f1b", {n / 2, 1, 2}, 60, 17);
}

// Stages built for another shard, or a grid with tp > 1 and whole stages, are refused on every
// process with what to build.
TEST(MpiTensorParallel, StagesOfAnotherShardAreRefused) {
  const int n = world_size();
  const ps::ProcessGrid grid{n / 2, 1, 2};
  const ps::mpi::Groups groups(grid);
  const ps::Schedule s = generated("1f1b", grid.pipeline, 2);
  const toy::GptConfig config = config_for(s.problem.stages);
  auto whole = make_stages<double>(config, s.problem.stages);
  try {
    ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, whole, groups);
    ADD_FAILURE() << "whole stages were accepted on a tp 2 grid";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("TensorShard{coordinates().tensor, grid().tensor}"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
