// The fidelity benchmark over MPI (docs/benchmarks.md, "Fidelity"): run under
// `mpirun -np P mpi_fidelity [--repeats N] [--quick]`. The same profile -> plan -> run ->
// compare as bench/fidelity.cpp, with each pipeline rank a process and its messages sent by
// the MPI transport:
// 1. Profile: rank 0 measures the toy GPT's layers at both sizes over the same grid, and the
//    link between ranks 0 and 1 with bench/mpi_links.cpp's measurement (one way over message
//    sizes up to the largest message a configuration sends, the better fitting of the direct
//    and the host path's formulas).
// 2. Plan: each configuration on P ranks (bench/fidelity_common.hpp) is simulated under
//    TransformerCost with the measured layers and the measured link, the cores shared
//    (SharedCompute) when there are more processes than cores.
// 3. Run: the same schedule trains the toy GPT over MPI (mpi::Pipeline); a step's time is the
//    slowest process's, the median over the repeats.
// 4. Compare: measured / simulated per configuration, the median and worst error and
//    Kendall's τ, and the same against the prediction scaled by the machine's drift.
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
  int repeats = 5;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else {
      if (root) std::fprintf(stderr, "usage: mpirun -np P mpi_fidelity [--repeats N] [--quick]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  repeats = std::clamp(repeats, 1, 1000);
  const int P = session.size();
  if (P < 2) {
    if (root) std::fprintf(stderr, "mpi_fidelity: needs two or more processes (mpirun -np 2)\n");
    return 2;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<toy::GptConfig> sizes = model_sizes();
  const ps::LayerGrid grid = profile_grid();

  // 1. Profile (rank 0; the others wait).
  std::vector<std::shared_ptr<const ps::LayerProfile>> profiles;
  const auto t0 = std::chrono::steady_clock::now();
  if (root)
    for (const toy::GptConfig& c : sizes)
      profiles.push_back(std::make_shared<const ps::LayerProfile>(
          toy::gpt_layer_profile<double>(c, grid, {.repeats = quick ? 3 : 7})));
  MPI_Barrier(MPI_COMM_WORLD);
  // The largest message: a whole microbatch's activations of the wider model, in doubles.
  const toy::GptConfig& wide = sizes.back();
  const std::size_t largest = static_cast<std::size_t>(wide.microbatch_size) *
                              static_cast<std::size_t>(wide.sequence) *
                              static_cast<std::size_t>(wide.hidden) * sizeof(double);
  std::vector<char> buffer(largest, 1);
  if (root) std::printf("mpi_fidelity: %d processes, %d cores\n\n", P, cores);
  const ps::bench::links::Fit link = ps::bench::links::measure_pair(
      "the link between processes", 0, 1, ps::bench::links::sizes_up_to(largest), quick ? 10 : 50,
      false, buffer);
  const double profile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (root)
    std::printf(
        "\nprofile: %zu grid points per size and the link in %.1f s; toy GPT (8 blocks, "
        "sequence 64, microbatches of 2; hidden 32 and 64)\n\n",
        grid.points(), profile_seconds);

  std::vector<Config> configs = configurations(P == 2 ? 2 : P);
  if (quick) configs.resize(std::min<std::size_t>(configs.size(), 6));
  if (root)
    std::printf("%-34s %5s %11s %11s %9s %6s %11s\n", "configuration", "size", "simulated",
                "measured", "meas/sim", "drift", "meas/(sim*d)");
  std::vector<double> sim_a, meas_a, sim_b, meas_b, simd_a, simd_b;
  try {
    for (const Config& cfg : configs) {
      const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
      const ps::Schedule s = schedule_of(cfg);
      const bool shared = P > cores;
      double simulated = 0, before = 0;
      if (root) {
        simulated = predict(s, c, processes_device(P, link),
                            profiles[static_cast<std::size_t>(cfg.size)], cores);
        before = probe(c);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<toy::GptStage<double>> stages;
      for (int st = 0; st < s.problem.stages; ++st)
        stages.emplace_back(c, st, s.problem.stages);
      const auto data = toy::make_gpt_data<double>(c, cfg.microbatches, 5);
      const auto training = toy::training_data(data, cfg.slices);
      ps::mpi::Pipeline<toy::GptStage<double>> pipe(s, stages);
      (void)pipe.step(training);  // warm-up
      std::vector<double> steps;
      for (int r = 0; r < repeats; ++r)
        steps.push_back(slowest(pipe.step(training).seconds));
      const double measured = median(steps);
      MPI_Barrier(MPI_COMM_WORLD);
      if (!root) continue;
      const double drift =
          0.5 * (before + probe(c)) / profiled_probe(*profiles[static_cast<std::size_t>(cfg.size)]);
      std::printf("%-34s %5d %8.2f ms %8.2f ms %9.3f %6.3f %11.3f%s\n", cfg.label().c_str(),
                  c.hidden, simulated * 1e3, measured * 1e3, measured / simulated, drift,
                  measured / (simulated * drift), shared ? "  (shared)" : "");
      std::fflush(stdout);
      (shared ? sim_b : sim_a).push_back(simulated);
      (shared ? simd_b : simd_a).push_back(simulated * drift);
      (shared ? meas_b : meas_a).push_back(measured);
    }
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(1);
  } catch (const ps::error& e) {
    std::fprintf(stderr, "mpi_fidelity: %s\n", e.what());
    session.abort(1);
  }
  if (root) {
    std::printf("\n");
    summary("at most one busy process per core", sim_a, meas_a);
    summary("  the same, prediction x drift", simd_a, meas_a);
    summary("more processes than cores (SharedCompute)", sim_b, meas_b);
    summary("  the same, prediction x drift", simd_b, meas_b);
  }
  return 0;
}
