// mpi::PlanRun: a plan of `pipesched tune --json` placed on the job. A plan for another job size
// is refused on every process with the `mpirun -np` to use, and a pp × dp plan with ZeRO, or a
// pp × tp plan, gives mpi::Pipeline what trains like sequential training of the global batch.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_support.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_plan.hpp"

namespace {

using namespace mpi_test;

// The plan object `tune --json` writes for schedule `s` on pp × `dp` × `tp` with ZeRO-`zero`.
std::string plan_json(const ps::Schedule& s, int dp, int tp, int zero) {
  ps::json::Writer w;
  w.begin_object();
  w.key("schedule").value(s.name).key("checkpoint").value("none");
  w.key("pp").value(s.problem.ranks).key("dp").value(dp).key("tp").value(tp);
  w.key("zero").value(zero).key("sequence_parallel").value(false);
  w.key("microbatch_size").value(2).key("microbatches").value(s.problem.microbatches);
  w.key("layers_per_stage").begin_array().end_array();
  w.key("schedule_text").value(ps::to_text(s));
  w.end_object();
  return w.take();
}

// The message mpi::PlanRun throws for `plan`, the same on every process; empty when none.
std::string refusal(const ps::tuning::Plan& plan) {
  try {
    const ps::mpi::PlanRun run(plan, "plan.json");
  } catch (const ps::invalid_problem& e) {
    return e.what();
  }
  return "";
}

TEST(MpiPlan, JobOfAnotherSizeIsRefusedWithTheProcessCountToUse) {
  const int n = world_size();
  const ps::tuning::Plan plan =
      ps::read_plan(plan_json(generated("1f1b", 1, 4), n + 1, 1, 0), "plan.json");
  EXPECT_EQ(refusal(plan), "plan.json is for pp 1 × dp " + std::to_string(n + 1) +
                               " × tp 1 = " + std::to_string(n + 1) +
                               " processes, but the job has " + std::to_string(n) +
                               "; start it with mpirun -np " + std::to_string(n + 1) + ".");
}

// pp 2 × dp n/2 with ZeRO-`zero` (or pp 1 × dp n): the plan's schedule, groups and reducer
// options (one optimizer whatever the ZeRO stage, no executor hooks) train the toy GPT as
// sequential training of the global batch does (SGD, 1e-12).
void expect_plan_trains(int zero) {
  const int n = world_size(), pp = n % 2 == 0 ? 2 : 1, dp = n / pp;
  SCOPED_TRACE("ZeRO-" + std::to_string(zero) + " on pp " + std::to_string(pp));
  const ps::mpi::PlanRun run(
      ps::read_plan(plan_json(generated("zb-h1", pp, 4), dp, 1, zero), "plan.json"), "plan.json");
  EXPECT_EQ(run.coordinates(), run.plan().grid().coordinates(world_rank()));
  EXPECT_EQ(run.zero(), zero);
  EXPECT_EQ(run.global_batch(), dp * 4LL * 2);
  const ps::mpi::ReducerOptions reducer = run.reducer_options(ps::sgd_shards(learning_rate));
  EXPECT_EQ(reducer.zero, zero);
  EXPECT_TRUE(reducer.optimizer);  // every ZeRO stage: the reducer steps the weights
  const ps::Schedule& s = run.schedule();
  ASSERT_EQ(run.stages(), s.problem.stages);
  for (int st = 0; st < run.stages(); ++st)
    EXPECT_EQ(run.holds(st), s.placement.rank_of(st) == run.coordinates().pipeline);

  const toy::GptConfig config = config_for(run.stages());
  auto ref = make_stages<double>(config, run.stages());
  auto stages = make_stages<double>(config, run.stages());
  const auto global = toy::make_gpt_data<double>(config, dp * s.problem.microbatches, 3);
  const auto mine = share(global, run.coordinates().data, dp);
  const auto training = toy::training_data(mine, 1);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, run.groups(),
                                                {.executor = options, .reducer = reducer});
  for (int step = 0; step < 2; ++step) {
    const double want = toy::sequential_step(ref, global);
    toy::sgd_update(ref, learning_rate);
    const ps::StepResult r = pipe.step(training);
    double loss = 0;
    MPI_Allreduce(&r.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, run.groups().data());
    EXPECT_LE(std::abs(loss / dp - want), 1e-12 * std::abs(want)) << "step " << step;
  }
  const int rank = run.coordinates().pipeline;
  EXPECT_LE(toy::max_relative_error(toy::flat_parameters(stages_of(s, stages, rank)),
                                    toy::flat_parameters(stages_of(s, ref, rank))),
            1e-12);
}

TEST(MpiPlan, PlanTrainsLikeSequentialTrainingOfTheGlobalBatch) {
  expect_plan_trains(0);
  expect_plan_trains(1);
  expect_plan_trains(2);
}

// A tensor-parallel plan (pp n/2 × tp 2): stages built for run.tensor_shard() train like the
// whole model, cut to this process's shard; whole stages are refused by the pipeline.
TEST(MpiPlan, TensorParallelPlanTrainsItsShards) {
  const int n = world_size(), pp = n / 2;
  const ps::mpi::PlanRun run(
      ps::read_plan(plan_json(generated("1f1b", pp, 4), 1, 2, 0), "plan.json"), "plan.json");
  EXPECT_EQ(run.tensor_shard(), (ps::TensorShard{world_rank() % 2, 2}));
  const ps::Schedule& s = run.schedule();
  const toy::GptConfig config = config_for(run.stages());
  auto ref = make_stages<double>(config, run.stages());
  std::vector<toy::GptStage<double>> stages;
  for (int st = 0; st < run.stages(); ++st)
    stages.emplace_back(config, st, run.stages(), run.tensor_shard());
  const auto global = toy::make_gpt_data<double>(config, s.problem.microbatches, 5);
  const auto training = toy::training_data(global, 1);
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(30);
  toy::use_sgd(options, s.placement, stages, learning_rate);
  ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, run.groups(), {.executor = options});
  for (int step = 0; step < 2; ++step) {
    const double want = toy::sequential_step(ref, global);
    toy::sgd_update(ref, learning_rate);
    EXPECT_LE(std::abs(pipe.step(training).loss - want), 1e-12 * std::abs(want)) << step;
  }
  for (int st = 0; st < run.stages(); ++st) {
    if (!run.holds(st)) continue;
    std::vector<double> got;
    for (const auto& p : stages[static_cast<std::size_t>(st)].parameters())
      got.insert(got.end(), p.data.begin(), p.data.end());
    EXPECT_LE(toy::max_relative_error(
                  got, ref[static_cast<std::size_t>(st)].flat_shard(run.tensor_shard(), false)),
              1e-12)
        << "stage " << st;
  }
  auto whole = make_stages<double>(config, run.stages());
  EXPECT_THROW(ps::mpi::Pipeline<toy::GptStage<double>>(s, whole, run.groups()),
               ps::invalid_problem);
}

}  // namespace
