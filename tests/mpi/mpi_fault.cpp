// A training program that fails on purpose, for the fault tests of tests/mpi/run_fault.sh:
// under `mpirun -np P mpi_fault MODE`, rank P/2 (its stage's third forward) throws (`throw`),
// kills its own process (`kill`) or stops answering (`hang`). Every rank prints what it
// saw: a thrown step ends every process with exit code 3 after a clean MPI_Finalize; a lost
// peer ends the job through MPI_Abort.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

enum class Mode { Throw, Kill, Hang };

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

}  // namespace

int main(int argc, char** argv) {
  ps::MpiSession session(argc, argv);
  const std::string mode_name = argc > 1 ? argv[1] : "";
  Mode mode;
  if (mode_name == "throw") {
    mode = Mode::Throw;
  } else if (mode_name == "kill") {
    mode = Mode::Kill;
  } else if (mode_name == "hang") {
    mode = Mode::Hang;
  } else {
    if (session.rank() == 0)
      std::fprintf(stderr, "usage: mpirun -np P mpi_fault throw|kill|hang [TOKEN]\n");
    return 2;
  }
  const int p = session.size();
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = p, .microbatches = 2 * p});
  const toy::GptConfig config{.blocks = p};
  std::vector<Faulty> stages;
  for (int st = 0; st < p; ++st)
    stages.emplace_back(config, st, p);
  stages[p / 2].mode = mode;
  stages[p / 2].armed = true;
  ps::ExecutorOptions options;
  options.receive_timeout = std::chrono::seconds(3);
  try {
    ps::MpiPipeline<Faulty> pipe(s, stages, MPI_COMM_WORLD, options);
    const auto data = toy::make_gpt_data<float>(config, s.problem.microbatches, 1);
    const auto training = toy::training_data(data);
    for (int step = 0; step < 3; ++step)
      pipe.step(training);
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
