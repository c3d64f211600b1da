// The fidelity benchmark over MPI (docs/benchmarks.md, "Fidelity"): run under
// `mpirun -np P mpi_fidelity [--rounds N] [--repeats N] [--poll-us N] [--quick]`. The same
// profile -> plan -> run -> compare as bench/fidelity.cpp, with each pipeline rank a process
// and its messages sent by the MPI transport (--poll-us: its receives' wait between two tests
// of a message, mpi::TransportOptions::poll_interval; default 20):
// 1. Profile: rank 0 measures the toy GPT's layers at both sizes over the same grid, and the
//    link between ranks 0 and 1 with bench/mpi_links.cpp's measurement (one way over message
//    sizes up to the largest message a configuration sends, the better fitting of the direct
//    and the host path's formulas).
// 2. Plan: each configuration on P ranks (bench/fidelity_common.hpp) is simulated under
//    TransformerCost with the measured layers and the measured link, the cores shared
//    (SharedCompute) when there are more processes than cores.
// 3. Run: the same schedule trains the toy GPT over MPI (mpi::Pipeline); a step's time is the
//    slowest process's.
// 4. Compare: measured / simulated, the median and worst error and Kendall's τ. As in
//    bench/fidelity.cpp the profile and the runs are repeated in rounds (--rounds, default 3),
//    and the fastest estimates (each profile figure and each step the fastest over the rounds)
//    are compared beside the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fidelity_common.hpp"
#include "mpi_link_measure.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;
using namespace pipesched::bench::fidelity;
using pipesched::bench::median;

namespace {

// This machine's processes as a device: one node of `ranks`, messages on the measured link
// (direct or staged through host memory, whichever formula fitted).
ps::DeviceSpec processes_device(int ranks, const ps::bench::links::Fit& link) {
  return machine_device("mpi-processes", ranks, link.bandwidth, link.latency, link.staged);
}

// The slowest process's seconds.
double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  const bool root = session.rank() == 0;
  int rounds = 3, repeats = 3, poll_us = -1;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--poll-us" && i + 1 < argc) {
      poll_us = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else {
      if (root)
        std::fprintf(stderr,
                     "usage: mpirun -np P mpi_fidelity [--rounds N] [--repeats N] [--poll-us N] "
                     "[--quick]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  repeats = std::clamp(repeats, 1, 1000);
  rounds = std::clamp(rounds, 1, 100);
  // A receive's wait between two tests of its message (mpi::TransportOptions::poll_interval).
  ps::mpi::TransportOptions transport;
  if (poll_us >= 0) transport.poll_interval = std::chrono::microseconds(std::min(poll_us, 100000));
  const int P = session.size();
  if (P < 2) {
    if (root) std::fprintf(stderr, "mpi_fidelity: needs two or more processes (mpirun -np 2)\n");
    return 2;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<toy::GptConfig> sizes = model_sizes();
  const ps::LayerGrid grid = profile_grid();

  // The link, once: a whole microbatch's activations of the wider model is the largest message.
  const toy::GptConfig& wide = sizes.back();
  const std::size_t largest = static_cast<std::size_t>(wide.microbatch_size) *
                              static_cast<std::size_t>(wide.sequence) *
                              static_cast<std::size_t>(wide.hidden) * sizeof(double);
  std::vector<char> buffer(largest, 1);
  if (root) std::printf("mpi_fidelity: %d processes, %d cores\n\n", P, cores);
  const ps::bench::links::Fit link = ps::bench::links::measure_pair(
      "the link between processes", 0, 1, ps::bench::links::sizes_up_to(largest), quick ? 10 : 50,
      false, buffer);

  std::vector<Config> configs = configurations(P == 2 ? 2 : P);
  if (quick) configs.resize(std::min<std::size_t>(configs.size(), 6));
  if (root)
    std::printf(
        "\n%zu configurations, %d rounds of (profile %zu grid points per size on rank 0, then "
        "every configuration: 1 warm-up and %d measured steps); toy GPT (8 blocks, sequence "
        "64, microbatches of 2; hidden 32 and 64); a receive tests for its message every "
        "%lld us\n",
        configs.size(), rounds, grid.points(), repeats,
        static_cast<long long>(transport.poll_interval.count()));
  std::vector<std::vector<ps::LayerProfile>> profiled(sizes.size());
  std::vector<std::vector<double>> steps(configs.size());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int round = 0; round < rounds; ++round) {
      if (root)
        for (std::size_t k = 0; k < sizes.size(); ++k)
          profiled[k].push_back(toy::gpt_layer_profile<double>(sizes[k], grid, {.repeats = 3}));
      MPI_Barrier(MPI_COMM_WORLD);
      for (std::size_t i = 0; i < configs.size(); ++i) {
        const Config& cfg = configs[i];
        const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
        const ps::Schedule s = schedule_of(cfg);
        std::vector<toy::GptStage<double>> stages = gpt_stages(s, c);
        const auto data = toy::make_gpt_data<double>(c, cfg.microbatches, 5);
        const auto training = toy::training_data(data, cfg.slices);
        ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages, MPI_COMM_WORLD, {}, transport);
        (void)pipe.step(training);  // warm-up
        for (int r = 0; r < repeats; ++r)
          steps[i].push_back(slowest(pipe.step(training).seconds));
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (root) {
        std::printf("round %d done at %.0f s\n", round + 1,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::fflush(stdout);
      }
    }
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(1);
  } catch (const ps::error& e) {
    std::fprintf(stderr, "mpi_fidelity: %s\n", e.what());
    session.abort(1);
  }
  if (!root) return 0;

  const Estimates e = estimates(profiled);
  print_header();
  const bool shared = P > cores;
  Comparison fast, med;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& cfg = configs[i];
    const auto k = static_cast<std::size_t>(cfg.size);
    const ps::Schedule s = schedule_of(cfg);
    const ps::DeviceSpec device = processes_device(P, link);
    const double sim_fast = predict(s, sizes[k], device, e.fastest[k], cores);
    const double sim_med = predict(s, sizes[k], device, e.median[k], cores);
    const double meas_fast = fastest(steps[i]), meas_med = median(steps[i]);
    print_row(cfg, sizes[k].hidden, sim_fast, meas_fast, sim_med, meas_med, shared);
    fast.add(sim_fast, meas_fast);
    med.add(sim_med, meas_med);
  }
  std::printf("\n");
  const char* what = shared ? "more processes than cores (SharedCompute), fastest"
                            : "at most one busy process per core, fastest";
  summary(what, fast.simulated, fast.measured);
  summary("  the same, medians", med.simulated, med.measured);
  print_noise(profiled);
  return 0;
}
