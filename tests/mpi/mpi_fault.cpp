// A training program that fails on purpose, for the fault tests of tests/mpi/run_fault.sh:
// under `mpirun -np P mpi_fault MODE`, rank P/2 (its stage's third forward) throws (`throw`),
// kills its own process (`kill`) or stops answering (`hang`); or it stops itself with SIGSTOP
// between steps 0 and 1 (`stop`); or its snapshot hook throws std::bad_alloc in step 1
// (`snapshot`); or it never builds its pipeline, so it never joins the start-up agreement on
// the schedule (`absent`: the others' 5 s startup_timeout names that agreement). Every rank
// prints what it saw: a thrown step ends every process with exit code
// 3 after a clean MPI_Finalize; a lost peer ends the job through MPI_Abort (exit code 4). In
// `snapshot` mode each process checks its own parameters: unchanged by the failed step, and
// after the retried step changed and equal to a fault-free run's; it exits 0 when they are, 5
// when not.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

enum class Mode { Throw, Kill, Hang, Stop, Snapshot, Absent };

struct Faulty : toy::GptStage<float> {
  using Base = toy::GptStage<float>;
  using Base::Base;
  using Base::forward;
  Mode mode = Mode::Throw;
  bool armed = false;
  int seen = 0;
  tensor_type forward(const tensor_type& x, stash_type& st) {
    if (armed && seen++ == 2) {
      if (mode == Mode::Throw) throw std::runtime_error("injected fault");
      if (mode == Mode::Kill) std::raise(SIGKILL);
      std::this_thread::sleep_for(std::chrono::minutes(10));  // hangs; MPI_Abort ends it
    }
    return Base::forward(x, st);
  }
};

std::vector<Faulty> make_stages(const toy::GptConfig& config, int p) {
  std::vector<Faulty> stages;
  for (int st = 0; st < p; ++st)
    stages.emplace_back(config, st, p);
  return stages;
}

// The parameters of the stages process `rank` holds.
std::vector<float> mine(const ps::Schedule& s, const std::vector<Faulty>& stages, int rank) {
  std::vector<float> flat;
  for (int st : s.placement.stages_of(rank))
    for (const auto& t : stages[static_cast<std::size_t>(st)].parameters())
      flat.insert(flat.end(), t.data.begin(), t.data.end());
  return flat;
}

constexpr int steps = 3;

// `snapshot` mode: trains 2 steps with SGD, rank `bad`'s snapshot throwing in step 1, which is
// then retried; returns what went wrong on this process (empty when nothing did). Few steps,
// so that the job stays short on a loaded machine, where every message waits for a core.
std::string snapshot_fault(const ps::Schedule& s, const toy::GptConfig& config,
                           const ps::TrainingData<Faulty::tensor_type>& training,
                           const ps::ExecutorOptions& base, int rank, int bad) {
  std::vector<float> clean;
  {
    auto stages = make_stages(config, s.problem.stages);
    ps::ExecutorOptions options = base;
    toy::use_sgd(options, s.placement, stages, 0.05);
    ps::mpi::Pipeline<Faulty> pipe(s, stages, MPI_COMM_WORLD, options);
    pipe.step(training);
    pipe.step(training);
    clean = mine(s, stages, rank);
  }
  auto stages = make_stages(config, s.problem.stages);
  ps::ExecutorOptions options = base;
  toy::use_sgd(options, s.placement, stages, 0.05);
  bool armed = false;
  options.snapshot = [&, keep = options.snapshot](int r) {
    if (armed && r == bad) throw std::bad_alloc();
    keep(r);
  };
  ps::mpi::Pipeline<Faulty> pipe(s, stages, MPI_COMM_WORLD, options);
  pipe.step(training);
  const std::vector<float> before = mine(s, stages, rank);
  armed = true;
  std::string wrong;  // the first thing found wrong; every process runs every step regardless
  try {
    pipe.step(training);
    return "the snapshot fault did not fail step 1";  // on every process alike
  } catch (const ps::execution_error& e) {
    std::printf("rank %d: step 1 failed on rank %d: %s\n", rank, e.rank(), e.what());
    if (!e.rolled_back() || e.rank() != bad)
      wrong =
          "step 1's error does not name rank " + std::to_string(bad) + " and a rolled-back step";
  }
  armed = false;
  if (wrong.empty() && mine(s, stages, rank) != before)
    wrong = "the parameters after the failed step 1 differ from those before it";
  pipe.step(training);  // step 1 again
  if (wrong.empty() && mine(s, stages, rank) == before) wrong = "the retried step kept no update";
  if (wrong.empty() && mine(s, stages, rank) != clean)
    wrong = "the parameters after the retried step differ from a fault-free run's";
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  const std::string mode_name = argc > 1 ? argv[1] : "";
  Mode mode;
  if (mode_name == "throw") {
    mode = Mode::Throw;
  } else if (mode_name == "kill") {
    mode = Mode::Kill;
  } else if (mode_name == "hang") {
    mode = Mode::Hang;
  } else if (mode_name == "stop") {
    mode = Mode::Stop;
  } else if (mode_name == "snapshot") {
    mode = Mode::Snapshot;
  } else if (mode_name == "absent") {
    mode = Mode::Absent;
  } else {
    if (session.rank() == 0)
      std::fprintf(stderr,
                   "usage: mpirun -np P mpi_fault throw|kill|hang|stop|snapshot|absent [TOKEN]\n");
    return 2;
  }
  const int p = session.size(), bad = p / 2;
  // The snapshot fault needs no microbatch past the warm-up: p of them keep its steps short.
  const ps::Schedule s =
      ps::schedule::one_f_one_b({.ranks = p, .microbatches = mode == Mode::Snapshot ? p : 2 * p});
  const toy::GptConfig config{.blocks = p};
  // Long enough for a peer that is merely slow on a loaded machine (ctest -j beside other
  // jobs); a silent process is named after about this long per wait that gives up.
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(5);
  const auto data = toy::make_gpt_data<float>(config, s.problem.microbatches, 1);
  const auto training = toy::training_data(data);
  try {
    if (mode == Mode::Snapshot) {
      const std::string wrong = snapshot_fault(s, config, training, options, session.rank(), bad);
      if (!wrong.empty()) {
        std::printf("rank %d: FAILED: %s\n", session.rank(), wrong.c_str());
        return 5;
      }
      std::printf("rank %d: parameters kept through the failed step, updated by the retried one\n",
                  session.rank());
      return 0;
    }
    std::vector<Faulty> stages = make_stages(config, p);
    stages[static_cast<std::size_t>(bad)].mode = mode;
    stages[static_cast<std::size_t>(bad)].armed = mode != Mode::Stop && mode != Mode::Absent;
    if (mode == Mode::Absent && session.rank() == bad)
      std::this_thread::sleep_for(std::chrono::minutes(10));  // MPI_Abort ends it
    // The start-up agreement waits as long as a receive would.
    ps::mpi::TransportOptions transport;
    transport.startup_timeout = options.receive_timeout;
    ps::mpi::Pipeline<Faulty> pipe(s, stages, MPI_COMM_WORLD, options, transport);
    for (int step = 0; step < steps; ++step) {
      if (mode == Mode::Stop && step == 1 && session.rank() == bad) std::raise(SIGSTOP);
      pipe.step(training);
    }
    std::printf("rank %d: no fault happened\n", session.rank());
    return 0;
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(4);
  } catch (const ps::execution_error& e) {
    std::fprintf(stderr, "rank %d: step failed on rank %d at %s: %s\n", session.rank(), e.rank(),
                 ps::to_string(e.action()).c_str(), e.what());
    return 3;
  }
}
