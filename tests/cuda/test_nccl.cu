// The NCCL transport and pipeline, run under mpirun (one process per rank, one GPU each). Without
// a GPU: the transport's interface, NCCL errors named with call, file and line, a wrong process
// count named with the `mpirun -np` to use, a missing GPU named, the links a placement needs and
// the one order every rank ends them in. With a GPU: NCCL itself on a one-rank communicator
// (bytes to itself, then finalize and destroy); a 1-rank nccl::Pipeline runs synthetic GPU stages
// through 1F1B with the simulator's peak bytes. With a GPU per process and 2 or more processes
// (suite NcclRanks): payloads of every size arrive by key in any order, pipelines of every rank
// match the simulator, and a layer that throws on one rank makes every process throw the same
// error, after which the next step runs cleanly.
//
// Tests that need GPUs or processes they do not have skip with the reason; with
// PIPESCHED_REQUIRE_GPU=1 a process without a usable GPU fails them instead. With more
// processes on a node than it has GPUs the program runs no test and exits 77 ("not run"); a
// run in which a test skipped and none failed exits 77 too, so ctest never counts it as passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test.hpp"
#include "nccl_test.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/cuda/synthetic.cuh"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/nccl/nccl_pipeline.cuh"
#include "pipesched/transport/nccl/nccl_transport.cuh"

namespace ps = pipesched;
namespace gpu = pipesched::toy::gpu;

using Float = ps::DeviceTensor<float>;
static_assert(ps::transport<ps::nccl::Transport<Float>, Float>);
static_assert(ps::check_transport<ps::nccl::Transport<Float>, Float>());
static_assert(
    ps::transport<ps::nccl::Transport<ps::DeviceTensor<double>>, ps::DeviceTensor<double>>);
static_assert(!std::is_copy_constructible_v<ps::nccl::Transport<Float>>);

namespace {

using namespace nccl_test;

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
      ps::nccl::Transport<Float> t(s, 0);
      ADD_FAILURE() << "no error";
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np " + std::to_string(ranks)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(NcclLinks, OneLinkPerDirectionBetweenNeighbouringRanksInOneSortedOrder) {
  // Each rank joins its links and later finalizes them in this order, so two ranks that share
  // links meet at them in the same order.
  using Links = std::vector<std::pair<int, int>>;
  const Links line{{0, 1}, {1, 0}, {1, 2}, {2, 1}, {2, 3}, {3, 2}};
  EXPECT_EQ(ps::detail::nccl::pipeline_links(generated("1f1b", 4, 8)), line);
  // Interleaved: stage 4 is back on rank 0, after stage 3 on rank 3.
  EXPECT_EQ(ps::detail::nccl::pipeline_links(generated("interleaved-1f1b", 4, 8)),
            (Links{{0, 1}, {0, 3}, {1, 0}, {1, 2}, {2, 1}, {2, 3}, {3, 0}, {3, 2}}));
  // V-shape: the turn's two stages share rank 3, so no link there and none between 3 and 0.
  EXPECT_EQ(ps::detail::nccl::pipeline_links(generated("zb-v", 4, 8)), line);
  EXPECT_TRUE(ps::detail::nccl::pipeline_links(generated("1f1b", 1, 2)).empty());
}

TEST(NcclLink, OneRankCommunicatorSendsToItselfThenFinalizes) {
  // NCCL itself on one GPU: a one-rank communicator, a send and receive to its own rank in one
  // group, then the transport's way of ending a link (finalize, then destroy).
  PIPESCHED_NCCL_NEEDS_GPUS(place, false);
  ps::CudaDevice device(place.ordinal);
  device.activate();
  ncclUniqueId id;
  PIPESCHED_NCCL_CHECK(ncclGetUniqueId(&id));
  ps::detail::nccl::Link link;
  PIPESCHED_NCCL_CHECK(ncclCommInitRank(link.out(), 1, id, 0));
  const cudaStream_t stream = device.send_stream(0);
  const int n = (1 << 20) + 7;  // more than one of NCCL's chunks, and not a round size
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  const auto from = ps::DeviceTensor<unsigned char>::from_host({n}, bytes, stream);
  auto to = ps::DeviceTensor<unsigned char>::zeros({n}, stream);
  PIPESCHED_NCCL_CHECK(ncclGroupStart());
  PIPESCHED_NCCL_CHECK(ncclSend(from.data(), bytes.size(), ncclUint8, 0, link.get(), stream));
  PIPESCHED_NCCL_CHECK(ncclRecv(to.data(), bytes.size(), ncclUint8, 0, link.get(), stream));
  PIPESCHED_NCCL_CHECK(ncclGroupEnd());
  EXPECT_EQ(to.to_host(), bytes);
  EXPECT_TRUE(link.finalize(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  link.destroy();
  EXPECT_EQ(link.get(), nullptr);
}

TEST(NcclTransport, NeedsAGpuAndLinksOnlyNeighbours) {
  const GpuPlace place = gpu_place();
  const ps::Schedule s = generated("1f1b", world_size(), 2 * world_size());
  if (!place.everywhere) {
    // Every process throws (none is left waiting for another); the GPU-less one says why.
    const bool here = place.ordinal >= 0;
    try {
      ps::nccl::Transport<Float> t(s, here ? place.ordinal : 0);
      ADD_FAILURE() << "no error";
    } catch (const ps::cuda_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(here ? "another process" : "needs a GPU"), std::string::npos) << what;
    }
    return;
  }
  if (!place.own_each) GTEST_SKIP() << place.missing;  // too few GPUs: not run
  ps::nccl::Transport<Float> t(s, place.ordinal);
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
  ps::nccl::Pipeline<gpu::SyntheticStage> pipe(s, device, stages, comm);
  const ps::TrainingData<Float> data = gpu::synthetic_training_data(device);
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
  PIPESCHED_NCCL_NEEDS_GPUS(place, false);
  // Each process runs a pipeline of its own (a 1-rank communicator), whatever -np is.
  expect_runs_as_simulated("1f1b", 1, 4, MPI_COMM_SELF, place.ordinal);
}

TEST(NcclRanks, EveryRankRunsAsSimulated) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"})
    expect_runs_as_simulated(name, world_size(), 2 * world_size(), MPI_COMM_WORLD, place.ordinal);
}

TEST(NcclRanks, PayloadsOfEverySizeArriveByKeyInAnyOrder) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
  MPI_Comm pair = first_processes(2);
  if (pair == MPI_COMM_NULL) return;  // processes beyond the first two sit this one out
  {
    const ps::Schedule s = generated("1f1b", 2, 4);
    ps::nccl::Transport<Float> t(s, place.ordinal, pair);
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

TEST(NcclRanks, ExceptionOnOneRankStopsEveryRankWithItsNameAndTheNextStepRuns) {
  PIPESCHED_NEEDS_PROCESSES(2);
  PIPESCHED_NCCL_NEEDS_GPUS(place, true);
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
  ps::nccl::Pipeline<Faulty> pipe(s, device, stages, MPI_COMM_WORLD, options);
  const ps::TrainingData<Float> data = gpu::synthetic_training_data(device);
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

// What ctest reads from the exit status (SKIP_RETURN_CODE): every rank returns the same code.
constexpr int exit_not_run = 77;

// On the ranks other than 0: only failed assertions, prefixed with the rank. The test's name is
// kept from OnTestStart: asking GoogleTest for the current test inside OnTestPartResult takes
// a lock GoogleTest already holds there, and the process would hang at its first failure.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: failure in %s\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                r.line_number(), test_.c_str(), r.message());
    std::fflush(stdout);
  }

 private:
  int rank_;
  std::string test_;
};

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
#ifdef GTEST_FLAG_GET
  const bool listing = GTEST_FLAG_GET(list_tests);
#else
  const bool listing = ::testing::GTEST_FLAG(list_tests);
#endif
  if (!listing && session.size() > 1) {
    // Processes that share a GPU cannot form NCCL links: the tests between ranks need one GPU
    // per process, and a run without them is "not run", neither passed nor failed.
    const GpuPlace place = gpu_place();
    if (place.everywhere && !place.own_each) {
      if (session.rank() == 0)
        std::printf("pipesched_nccl_tests: not run: needs %d GPUs, one per process (%s)\n",
                    session.size(), place.missing.c_str());
      // Out before any process ends: mpirun stops the others once one has exited non-zero.
      std::fflush(stdout);
      return exit_not_run;
    }
  }
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  int mine[2] = {failed != 0 ? 1 : 0, run.skipped_test_count() > 0 ? 1 : 0}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (session.rank() == 0 && all[0] != 0 && mine[0] == 0)
    std::printf("another rank reported failures (see its output above)\n");
  if (all[1] != 0 && all[0] == 0 && session.rank() == 0)
    std::printf("pipesched_nccl_tests: some tests skipped (reasons above), none failed\n");
  std::fflush(stdout);
  return all[0] != 0 ? 1 : all[1] != 0 ? exit_not_run : 0;
}
