// The NCCL transport and pipeline, run under mpirun (one process per rank, one GPU each). Without
// a GPU: the transport's interface, NCCL errors named with call, file and line, a wrong process
// count named with the `mpirun -np` to use, a missing GPU named. With a GPU: a 1-rank
// NcclPipeline runs synthetic GPU stages through 1F1B with the simulator's peak bytes; with a
// GPU per process and 2 or more processes: payloads of every size arrive by key in any order,
// pipelines of every rank match the simulator, and a layer that throws on one rank makes every
// process throw the same error, after which the next step runs cleanly. Tests that need GPUs
// or processes they do not have skip with the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "../mpi/mpi_test_main.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/schedule/registry.hpp"
#include "pipesched/toy/cuda/synthetic.cuh"
#include "pipesched/transport/nccl/nccl_pipeline.cuh"
#include "pipesched/transport/nccl/nccl_transport.cuh"

namespace ps = pipesched;
namespace gpu = pipesched::toy::gpu;

using Float = ps::DeviceTensor<float>;
static_assert(ps::transport<ps::NcclTransport<Float>, Float>);
static_assert(ps::check_transport<ps::NcclTransport<Float>, Float>());
static_assert(ps::transport<ps::NcclTransport<ps::DeviceTensor<double>>, ps::DeviceTensor<double>>);
static_assert(!std::is_copy_constructible_v<ps::NcclTransport<Float>>);

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Where this process's GPU is: its rank among the processes of its node, modulo the GPUs the
// node has (-1 without a GPU); whether every process has a GPU, and one of its own; why not.
struct GpuPlace {
  int ordinal = -1;
  bool everywhere = false;  // every process has a GPU
  bool own_each = false;    // ... and no two processes of a node share one
  std::string missing;      // why not, when not (what the test skips with)
};

// Decided together: a test that one process skips and another runs would leave the runner
// waiting in a collective call.
GpuPlace gpu_place() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, locals = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &locals);
  MPI_Comm_free(&node);
  const ps::GpuStatus status = ps::gpu_status();
  GpuPlace p;
  std::string why;
  if (!status.available()) {
    why = status.reason;
  } else {
    p.ordinal = local % status.devices;
    if (locals > status.devices)
      why = std::to_string(locals) + " processes on this node share " +
            std::to_string(status.devices) + " GPU(s); NCCL needs one GPU per rank";
  }
  int mine[2] = {status.available() ? 1 : 0, why.empty() ? 1 : 0}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  p.everywhere = all[0] == 1;
  p.own_each = all[1] == 1;
  p.missing = !why.empty() ? why : !p.own_each ? "another process has no GPU of its own" : "";
  return p;
}

// Skips (on every process) unless every process has a GPU; `own_gpu_each` asks for one GPU per
// process (what NCCL needs between ranks).
#define PIPESCHED_NEEDS_GPU(place, own_gpu_each)                                   \
  const GpuPlace place = gpu_place();                                              \
  do {                                                                             \
    if (!place.everywhere || ((own_gpu_each) && !place.own_each))                  \
      GTEST_SKIP() << (place.missing.empty() ? std::string("a process has no GPU") \
                                             : place.missing);                     \
  } while (0)

#define PIPESCHED_NEEDS_PROCESSES(n)                                                   \
  do {                                                                                 \
    if (world_size() < (n))                                                            \
      GTEST_SKIP() << "needs " << (n) << " processes (mpirun -np " << (n) << "), has " \
                   << world_size();                                                    \
  } while (0)

ps::Schedule generated(const char* name, int ranks, int microbatches) {
  const ps::GeneratorInfo& g = ps::find_generator(name);
  return g.generate({.ranks = ranks, .microbatches = microbatches}, g.default_wgrad);
}

// The first `n` processes of the job (MPI_COMM_NULL on the others).
MPI_Comm first_processes(int n) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < n ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

TEST(NcclCheck, AFailingCallIsNamedWithFileAndLine) {
  // Fails with or without a GPU: there is no communicator to count.
  try {
    PIPESCHED_NCCL_CHECK(ncclCommCount(nullptr, nullptr));
    ADD_FAILURE() << "no error";
  } catch (const ps::cuda_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ncclCommCount(nullptr, nullptr)"), std::string::npos) << what;
    EXPECT_NE(what.find("test_nccl.cu:"), std::string::npos) << what;
    EXPECT_NE(what.find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos) << what;
  }
}

TEST(NcclTransport, WrongProcessCountNamesMpirun) {
  // Refused before any GPU is touched, so this runs without one.
  for (int ranks : {world_size() + 1, world_size() + 3}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const ps::Schedule s = generated("1f1b", ranks, 2 * ranks);
    try {
      ps::NcclTransport<Float> t(s, 0);
      ADD_FAILURE() << "no error";
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np " + std::to_string(ranks)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(NcclTransport, NeedsAGpuAndLinksOnlyNeighbours) {
  const GpuPlace place = gpu_place();
  const ps::Schedule s = generated("1f1b", world_size(), 2 * world_size());
  if (!place.everywhere) {
    // Every process throws (none is left waiting for another); the GPU-less one says why.
    const bool here = place.ordinal >= 0;
    try {
      ps::NcclTransport<Float> t(s, here ? place.ordinal : 0);
      ADD_FAILURE() << "no error";
    } catch (const ps::cuda_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(here ? "another process" : "needs a GPU"), std::string::npos) << what;
    }
    return;
  }
  if (!place.own_each) GTEST_SKIP() << place.missing;
  ps::NcclTransport<Float> t(s, place.ordinal);
  EXPECT_EQ(t.rank(), world_rank());
  EXPECT_EQ(t.ranks(), world_size());
  std::vector<int> neighbours;
  if (t.rank() > 0) neighbours.push_back(t.rank() - 1);
  if (t.rank() + 1 < t.ranks()) neighbours.push_back(t.rank() + 1);
  EXPECT_EQ(t.peers(), neighbours);
  EXPECT_EQ(t.pending(), 0u);
}

// Synthetic GPU actions (spinning kernels of set durations, set stash bytes) through a
// generated schedule on `comm`'s processes: two steps, each with every rank's figures on every
// process and every rank's measured peak equal to the simulated one.
void expect_runs_as_simulated(const char* name, int ranks, int microbatches, MPI_Comm comm,
                              int ordinal) {
  const ps::Schedule s = generated(name, ranks, microbatches);
  const ps::toy::SyntheticCost cost{.forward = 2e-4,
                                    .backward_input = 2e-4,
                                    .backward_weight = 2e-4,
                                    .activation_bytes = 1 << 20,
                                    .wgrad_bytes = 1 << 19};
  ps::ProfiledCost predicted;
  predicted.stages.assign(s.problem.stages, {.forward = cost.forward,
                                             .backward_input = cost.backward_input,
                                             .backward_weight = cost.backward_weight,
                                             .activation_bytes = double(cost.activation_bytes),
                                             .wgrad_bytes = double(cost.wgrad_bytes)});
  const ps::SimulationResult sim = ps::simulate(s, predicted);
  ps::CudaDevice device(ordinal);
  std::vector<gpu::SyntheticStage> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(cost, device);
  ps::NcclPipeline<gpu::SyntheticStage> pipe(s, device, stages, comm);
  ps::TrainingData<Float> data;
  data.input = [&](int, int) { return gpu::SyntheticStage::sample_input(device); };
  data.loss = [](const Float& y, int, int, double&) { return y.clone(y.stream()); };
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(std::string(name) + ", step " + std::to_string(step));
    const ps::StepResult r = pipe.step(data);
    ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(ranks));
    for (int k = 0; k < ranks; ++k) {
      EXPECT_EQ(r.ranks[k].rank, k);
      EXPECT_EQ(r.ranks[k].timing.size(), r.executed.ranks[k].size());
      EXPECT_EQ(r.ranks[k].peak_bytes, sim.ranks[k].peak_memory) << "rank " << k;
    }
    // The kernels really ran for their durations: no rank's timeline can beat the simulator's
    // critical path by more than the skew between the ranks' start events.
    EXPECT_GE(r.seconds, 0.9 * sim.makespan);
    EXPECT_EQ(pipe.transport().pending(), 0u);
  }
}

TEST(NcclPipeline, OneRankRunsOneFOneBAsSimulated) {
  PIPESCHED_NEEDS_GPU(place, false);
  // Each process runs a pipeline of its own (a 1-rank communicator), whatever -np is.
  expect_runs_as_simulated("1f1b", 1, 4, MPI_COMM_SELF, place.ordinal);
}

TEST(NcclPipeline, EveryRankRunsAsSimulated) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NEEDS_GPU(place, true);
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"})
    expect_runs_as_simulated(name, world_size(), 2 * world_size(), MPI_COMM_WORLD, place.ordinal);
}

TEST(NcclTransport, PayloadsOfEverySizeArriveByKeyInAnyOrder) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NEEDS_GPU(place, true);
  MPI_Comm pair = first_processes(2);
  if (pair == MPI_COMM_NULL) return;  // processes beyond the first two sit this one out
  {
    const ps::Schedule s = generated("1f1b", 2, 4);
    ps::NcclTransport<Float> t(s, place.ordinal, pair);
    const cudaStream_t compute = t.device().compute();
    // Microbatch m's message has m·3 elements (none for m = 0) of values 100·m + i, negated
    // for the gradients.
    auto values = [](int m, float sign) {
      std::vector<float> v(static_cast<std::size_t>(3 * m));
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = sign * static_cast<float>(100 * m + static_cast<int>(i));
      return v;
    };
    auto tensor = [&](int m, float sign) {
      return Float::from_host({3 * m}, values(m, sign), compute);
    };
    const auto timeout = std::chrono::seconds(30);
    const int me = t.rank();
    if (me == 0) {
      for (int m = 0; m < 4; ++m)
        t.send(0, 1, {1, m, 0, ps::Direction::Forward}, tensor(m, 1.0f));
      for (int m : {3, 1, 2, 0}) {  // not the order they were sent in
        SCOPED_TRACE("gradient " + std::to_string(m));
        Float x = t.receive(0, {0, m, 0, ps::Direction::Backward}, timeout);
        EXPECT_EQ(x.stream(), compute);
        EXPECT_EQ(x.to_host(), values(m, -1.0f));
      }
    } else {
      for (int m : {2, 0, 3, 1}) {
        SCOPED_TRACE("activation " + std::to_string(m));
        Float x = t.receive(1, {1, m, 0, ps::Direction::Forward}, timeout);
        EXPECT_EQ(x.stream(), compute);
        EXPECT_EQ(x.shape(), std::vector<int>{3 * m});
        EXPECT_EQ(x.to_host(), values(m, 1.0f));
        t.send(1, 0, {0, m, 0, ps::Direction::Backward}, tensor(m, -1.0f));
      }
      EXPECT_FALSE(t.try_receive(1, {1, 0, 0, ps::Direction::Forward}).has_value());
    }
    EXPECT_EQ(t.pending(), 0u);
    MPI_Barrier(pair);  // both sides have taken everything before either ends its links
  }
  MPI_Comm_free(&pair);
}

// A GPU synthetic stage that throws in the forward of one microbatch.
struct Faulty : gpu::SyntheticStage {
  using gpu::SyntheticStage::forward;
  using gpu::SyntheticStage::SyntheticStage;
  int fail_microbatch = -1;
  int seen = 0;
  tensor_type forward(const tensor_type& x, stash_type& st) {
    if (seen++ == fail_microbatch) throw std::runtime_error("injected fault");
    return gpu::SyntheticStage::forward(x, st);
  }
};

TEST(NcclPipeline, ExceptionOnOneRankStopsEveryRankWithItsNameAndTheNextStepRuns) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NEEDS_GPU(place, true);
  const int p = world_size();
  const ps::Schedule s = generated("1f1b", p, 2 * p);
  const ps::toy::SyntheticCost cost{.forward = 2e-4,
                                    .backward_input = 2e-4,
                                    .backward_weight = 2e-4,
                                    .activation_bytes = 1000,
                                    .wgrad_bytes = 500};
  ps::CudaDevice device(place.ordinal);
  std::vector<Faulty> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(cost, device);
  const int bad_stage = p - 1;  // the last rank fails in its third forward
  stages[bad_stage].fail_microbatch = 2;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(20);
  ps::NcclPipeline<Faulty> pipe(s, device, stages, MPI_COMM_WORLD, options);
  ps::TrainingData<Float> data;
  data.input = [&](int, int) { return gpu::SyntheticStage::sample_input(device); };
  data.loss = [](const Float& y, int, int, double&) { return y.clone(y.stream()); };
  const auto t0 = std::chrono::steady_clock::now();
  bool threw = false;
  try {
    pipe.step(data);
  } catch (const ps::execution_error& e) {
    threw = true;
    EXPECT_EQ(e.rank(), s.placement.rank_of(bad_stage));
    EXPECT_EQ(e.action().kind, ps::OpKind::F);
    EXPECT_EQ(e.action().stage, bad_stage);
    EXPECT_EQ(e.action().microbatch, 2);
    EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // NCCL and MPI are clean: the next step runs, with every message taken.
  stages[bad_stage].fail_microbatch = -1;
  const ps::StepResult r = pipe.step(data);
  EXPECT_EQ(r.ranks.size(), static_cast<std::size_t>(p));
  EXPECT_EQ(pipe.transport().pending(), 0u);
}

}  // namespace

int main(int argc, char** argv) {
  return pipesched::testing_support::run_mpi_tests(argc, argv, 1);
}
