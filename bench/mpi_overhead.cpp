// Executor overhead on the MPI transport: run under `mpirun -np P mpi_overhead [STEPS]`.
// Synthetic stages whose actions sleep for set times (1 ms forward, 1 ms input gradient, 1 ms
// weight gradient), 1F1B and Zero Bubble H1, 16 microbatches, one rank per process. Rank 0
// prints, per schedule, the mean measured step time, the simulated makespan for the same costs
// and their ratio (1.0 would be an executor and transport that add nothing), and the same
// ratio for the in-process pipeline (threads) measured in the same run, for comparison.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

constexpr double action_seconds = 1e-3;

template <class Pipe>
double mean_step(Pipe& pipe, const ps::TrainingData<toy::SyntheticStage::tensor_type>& data,
                 int steps) {
  pipe.step(data);  // warm up: connections, allocations, page faults
  double total = 0;
  for (int i = 0; i < steps; ++i)
    total += pipe.step(data).seconds;
  return total / steps;
}

}  // namespace

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  if (steps < 1) {
    if (session.rank() == 0) std::fprintf(stderr, "usage: mpirun -np P mpi_overhead [STEPS>=1]\n");
    return 2;
  }
  const int ranks = session.size();
  const toy::SyntheticCost cost{.forward = action_seconds,
                                .backward_input = action_seconds,
                                .backward_weight = action_seconds,
                                .activation_bytes = 1 << 20,
                                .wgrad_bytes = 1 << 19};
  const auto data = toy::synthetic_training_data();
  if (session.rank() == 0)
    std::printf(
        "%d ranks as MPI processes, 16 microbatches, 1 ms actions, %d steps each\n\n"
        "%-8s %13s %13s %8s %14s\n",
        ranks, steps, "schedule", "measured ms", "simulated ms", "ratio", "inproc ratio");
  try {
    for (const char* name : {"1f1b", "zb-h1"}) {
      const ps::GeneratorInfo& g = ps::find_generator(name);
      const ps::Schedule s = g.generate({.ranks = ranks, .microbatches = 16}, g.default_wgrad);
      const ps::ProfiledCost predicted = toy::synthetic_profiled_cost(cost, s.problem.stages);
      const double makespan = ps::simulate(s, predicted).makespan;
      std::vector<toy::SyntheticStage> stages(s.problem.stages, toy::SyntheticStage(cost));
      ps::mpi::Pipeline<toy::SyntheticStage> mpi(s, stages);
      const double measured = mean_step(mpi, data, steps);
      // The in-process pipeline on rank 0 alone, while the other processes wait at a barrier.
      double inproc = 0;
      if (session.rank() == 0) {
        std::vector<toy::SyntheticStage> local(s.problem.stages, toy::SyntheticStage(cost));
        ps::inproc::Pipeline<toy::SyntheticStage> threads(s, local);
        inproc = mean_step(threads, data, steps);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (session.rank() == 0)
        std::printf("%-8s %13.2f %13.2f %8.3f %14.3f\n", name, measured * 1e3, makespan * 1e3,
                    measured / makespan, inproc / makespan);
    }
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(1);
  } catch (const ps::error& e) {
    std::fprintf(stderr, "mpi_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
