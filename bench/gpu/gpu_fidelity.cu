// The fidelity benchmark on a GPU (scripts/gpu-check.sh runs it; docs/benchmarks.md,
// "Fidelity"): bench/fidelity.cpp's profile -> plan -> run -> compare with the GPU toy GPT
// (float) instead of the host one.
//
// 1. Profile: toy::gpu::gpt_layer_profile times the layers at two sizes on GPU 0 (one
//    cuda-local rank, the GPU's events), over a grid of slice lengths and prefixes. The
//    link: on cuda-local, device-to-device copies on GPU 0 (cudaMemcpyAsync, event-timed)
//    fitted to latency + bytes / bandwidth; over NCCL, the device file gpu_links --out wrote
//    (GPU 0 -> 1 measured by NCCL's send and receive).
// 2. Plan: each configuration (bench/fidelity_common.hpp's schedules x microbatches x slices
//    x checkpointing, on 2 ranks and on 4) is simulated under TransformerCost with that profile
//    as its measured layers.
// 3. Run: cuda-local runs every rank on GPU 0, each on a stream of its own; with --nccl, under
//    `mpirun -np P`, each process runs one rank on a GPU of its own (nccl::Pipeline) and the
//    step is the slowest process's.
// 4. Compare: measured / simulated, median and worst error and Kendall's tau, in rounds as
//    bench/fidelity.cpp (each round profiles again and runs every configuration; the fastest
//    and the median estimates side by side).
//
// cuda-local's ranks share one GPU. How much their kernels overlap depends on how much of the
// GPU each fills, which no figure of the profile says, so each configuration is predicted
// both ways: the ranks independent (as on a GPU each) and the ranks sharing one compute unit
// (SharedCompute{1}: their work serialised). The measured step lies between the two when the
// model is right; which it is nearer says how much the streams overlapped.
//
// Exit 0 when it ran, 1 when a CUDA, NCCL or pipeline call failed, 2 when there is no usable
// GPU (or, with --nccl, not one per process) or the command line is wrong.
#include <cuda_runtime.h>

#ifdef PIPESCHED_GPU_FIDELITY_NCCL
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "../fidelity_common.hpp"
#include "../link_fit.hpp"
#include "pipesched/toy/cuda/data.cuh"
#include "pipesched/toy/cuda/gpt.cuh"
#include "pipesched/toy/cuda/layer_profile.cuh"
#include "pipesched/toy/data.hpp"
#include "pipesched/transport/cuda_local/cuda_local_pipeline.cuh"
#ifdef PIPESCHED_GPU_FIDELITY_NCCL
#include "pipesched/io/device_file.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/nccl/nccl_pipeline.cuh"
#endif

namespace ps = pipesched;
namespace toy = pipesched::toy;
namespace gpu = pipesched::toy::gpu;
using namespace pipesched::bench::fidelity;
using pipesched::bench::median;

namespace {

constexpr const char* usage_text =
    "usage: gpu_fidelity [--rounds N] [--repeats N] [--quick] | --help\n"
    "       mpirun -np P gpu_fidelity --nccl --links FILE [--rounds N] [--repeats N] [--quick]\n"
    "  (no mode)      cuda-local: every rank on GPU 0; 2-rank and 4-rank configurations\n"
    "  --nccl         one process and one GPU per rank (nccl::Pipeline), P-rank configurations\n"
    "  --links FILE   with --nccl: the link between GPUs, a device file (gpu_links --out FILE)\n"
    "  --rounds N     profile and run everything N times (default 2, 1 to 100)\n"
    "  --repeats N    measured steps per configuration and round (default 5, 1 to 1000)\n"
    "  --quick        8 configurations (a smoke run)\n"
    "Prints markdown tables; exit 0 when it ran, 1 when a call failed, 2 when there is no\n"
    "usable GPU (with --nccl: not one per process) or the command line is wrong.\n";

// The GPU's two model sizes: 8 blocks, sequence 256, microbatches of 4, hidden 256 and 512.
std::vector<toy::GptConfig> gpu_sizes() {
  std::vector<toy::GptConfig> sizes;
  for (int hidden : {256, 512})
    sizes.push_back({.vocabulary = 512,
                     .hidden = hidden,
                     .heads = 8,
                     .ffn = 4 * hidden,
                     .sequence = 256,
                     .blocks = 8,
                     .microbatch_size = 4,
                     .seed = 3});
  return sizes;
}

// Every slice length and prefix the configurations use on sequences of 256.
ps::LayerGrid gpu_grid() {
  return {.tensor = {1},
          .microbatch_sizes = {4},
          .tokens = {64, 128, 256},
          .prefixes = {0, 64, 128, 192}};
}

// The largest message a configuration sends: a whole microbatch's activations of the wider
// model, in floats.
std::size_t largest_message(const std::vector<toy::GptConfig>& sizes) {
  const toy::GptConfig& c = sizes.back();
  return static_cast<std::size_t>(c.microbatch_size) * static_cast<std::size_t>(c.sequence) *
         static_cast<std::size_t>(c.hidden) * sizeof(float);
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_fidelity: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// A copy from one place of GPU 0's memory to another, event-timed, over sizes up to
// `largest`: cuda-local's message (a device-to-device copy on the sender's stream) fitted to
// latency + bytes / bandwidth. latency < 0 when a CUDA call failed.
ps::bench::links::Fit local_copies(std::size_t largest, int repeats) {
  ps::bench::links::Fit failed;
  failed.latency = -1;
  const std::vector<std::size_t> sizes = ps::bench::links::sizes_up_to(largest);
  void *a = nullptr, *b = nullptr;
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice") ||
      !cuda_ok(cudaMalloc(&a, largest), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&b, largest), "cudaMalloc") ||
      !cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate") ||
      !cuda_ok(cudaEventCreate(&start), "cudaEventCreate") ||
      !cuda_ok(cudaEventCreate(&stop), "cudaEventCreate"))
    return failed;
  std::vector<double> t;
  bool good = true;
  for (std::size_t bytes : sizes) {
    std::vector<double> each;
    for (int r = 0; r < repeats + 1 && good; ++r) {
      float ms = 0;
      good = cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord") &&
             cuda_ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream),
                     "cudaMemcpyAsync") &&
             cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord") &&
             cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize") &&
             cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (r > 0) each.push_back(1e-3 * ms);  // the first is a warm-up
    }
    if (!good) break;
    t.push_back(median(each));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  if (!good) return failed;
  const ps::bench::links::Fit f = ps::bench::links::fit_through_ends(sizes, t, false);
  std::printf(
      "cuda-local's message (device-to-device copy on GPU 0, 8 B to %zu B): latency %.2f us, "
      "%.0f GB/s; the fit misses a measured size by at most %.2fx\n\n",
      largest, f.latency * 1e6, f.bandwidth / 1e9, ps::bench::links::worst_miss(f, sizes, t));
  return f;
}

// The configuration `cfg`'s GPU stages of model `c`, stage st on `device_of(st)`.
template <class DeviceOf>
std::vector<gpu::GptStage<float>> gpu_stages(const ps::Schedule& s, const toy::GptConfig& c,
                                             DeviceOf&& device_of) {
  std::vector<gpu::GptStage<float>> stages;
  stages.reserve(static_cast<std::size_t>(s.problem.stages));
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(c, st, s.problem.stages, device_of(st));
  return stages;
}

// `repeats` step times of `cfg` on cuda-local (every rank on GPU 0), after a warm-up.
std::vector<double> local_steps(const Config& cfg, const toy::GptConfig& c, int repeats) {
  const ps::Schedule s = schedule_of(cfg);
  auto devices = ps::cuda_local::Pipeline<gpu::GptStage<float>>::devices_for(s);
  auto device_of = [&](int st) {
    return devices[static_cast<std::size_t>(s.placement.rank_of(st))];
  };
  std::vector<gpu::GptStage<float>> stages = gpu_stages(s, c, device_of);
  ps::cuda_local::Pipeline<gpu::GptStage<float>> pipe(s, devices, stages);
  const auto data = gpu::training_data(toy::make_gpt_data<float>(c, cfg.microbatches, 5),
                                       device_of(0), device_of(s.problem.stages - 1), cfg.slices);
  (void)pipe.step(data);
  std::vector<double> out;
  for (int r = 0; r < repeats; ++r)
    out.push_back(pipe.step(data).seconds);
  return out;
}

// What both modes print at the end: the table and the summaries.
struct Results {
  std::vector<Config> configs;
  std::vector<std::vector<double>> steps;               // per configuration, every round's
  std::vector<std::vector<ps::LayerProfile>> profiled;  // per size, one per round
};

// Prints the comparison: each configuration predicted from the fastest and the median
// profile, with `predictions` of it (name, cores shared: 0 for none), against the fastest and
// the median step.
void print_results(const Results& r, const std::vector<toy::GptConfig>& sizes,
                   const ps::DeviceSpec& device,
                   const std::vector<std::pair<std::string, int>>& predictions) {
  const Estimates e = estimates(r.profiled);
  for (const auto& [name, shared_cores] : predictions) {
    std::printf("\n### Predicted with %s\n\n", name.c_str());
    std::printf(
        "| configuration | hidden | simulated (fastest) | measured (fastest) | ratio | simulated "
        "(median) | measured (median) | ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    Comparison fast, med;
    for (std::size_t i = 0; i < r.configs.size(); ++i) {
      const Config& cfg = r.configs[i];
      const auto k = static_cast<std::size_t>(cfg.size);
      const ps::Schedule s = schedule_of(cfg);
      const int cores = shared_cores > 0 ? shared_cores : cfg.ranks;
      const double sim_fast = predict(s, sizes[k], device, e.fastest[k], cores);
      const double sim_med = predict(s, sizes[k], device, e.median[k], cores);
      const double meas_fast = fastest(r.steps[i]), meas_med = median(r.steps[i]);
      std::printf("| %s | %d | %.3f ms | %.3f ms | %.3f | %.3f ms | %.3f ms | %.3f |\n",
                  cfg.label().c_str(), sizes[k].hidden, sim_fast * 1e3, meas_fast * 1e3,
                  meas_fast / sim_fast, sim_med * 1e3, meas_med * 1e3, meas_med / sim_med);
      fast.add(sim_fast, meas_fast);
      med.add(sim_med, meas_med);
    }
    std::printf("\n");
    summary("fastest", fast.simulated, fast.measured);
    summary("medians", med.simulated, med.measured);
  }
  print_noise(r.profiled);
}

int run_local(int rounds, int repeats, bool quick) {
  const ps::GpuStatus status = ps::gpu_status();
  if (!status.available()) {
    std::fprintf(stderr, "gpu_fidelity: %s\n", status.reason.c_str());
    return 2;
  }
  const std::vector<toy::GptConfig> sizes = gpu_sizes();
  const ps::LayerGrid grid = gpu_grid();
  std::printf(
      "## Fidelity on the GPU: cuda-local, every rank on GPU 0\n\nToy GPT (float; 8 blocks, "
      "sequence 256, microbatches of 4; hidden 256 and 512).\n\n");
  const ps::bench::links::Fit link = local_copies(largest_message(sizes), 20);
  if (link.latency < 0) return 1;
  Results r;
  r.configs = configurations(2);
  for (const Config& c : configurations(4))
    r.configs.push_back(c);
  if (quick) r.configs.resize(std::min<std::size_t>(r.configs.size(), 8));
  r.steps.resize(r.configs.size());
  r.profiled.resize(sizes.size());
  const ps::CudaDevice device(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < sizes.size(); ++k)
      r.profiled[k].push_back(
          gpu::gpt_layer_profile<float>(sizes[k], grid, device, {.repeats = 3, .device = "GPU 0"}));
    for (std::size_t i = 0; i < r.configs.size(); ++i)
      for (double x :
           local_steps(r.configs[i], sizes[static_cast<std::size_t>(r.configs[i].size)], repeats))
        r.steps[i].push_back(x);
    std::fprintf(stderr, "gpu_fidelity: round %d done at %.0f s\n", round + 1,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf(
      "%zu configurations, %d rounds of (profile %zu grid points per size, then every "
      "configuration: 1 warm-up and %d measured steps).\n",
      r.configs.size(), rounds, grid.points(), repeats);
  const ps::DeviceSpec d =
      machine_device("cuda-local", 1024, link.bandwidth, link.latency, link.staged);
  print_results(r, sizes, d,
                {{"the ranks independent (each as on a GPU of its own)", 0},
                 {"the ranks sharing GPU 0 (SharedCompute{1})", 1}});
  return 0;
}

#ifdef PIPESCHED_GPU_FIDELITY_NCCL
// The slowest process's seconds.
double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

int run_nccl(int argc, char** argv, const std::string& links, int rounds, int repeats, bool quick) {
  ps::mpi::Session session(argc, argv);
  const bool root = session.rank() == 0;
  const int P = session.size();
  // Where this process's GPU is: its rank among the node's processes; one GPU each.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, locals = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &locals);
  MPI_Comm_free(&node);
  const ps::GpuStatus status = ps::gpu_status();
  int mine = status.available() && locals <= status.devices ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (P < 2 || all == 0) {
    if (root)
      std::fprintf(stderr,
                   "gpu_fidelity --nccl: needs 2 or more processes with a GPU each (%d processes; "
                   "this node: %d processes, %s)\n",
                   P, locals,
                   status.available() ? (std::to_string(status.devices) + " GPU(s)").c_str()
                                      : status.reason.c_str());
    return 2;
  }
  ps::DeviceSpec link_file;
  try {
    link_file = ps::read_device_file(links).device;
  } catch (const std::exception& e) {
    if (root) std::fprintf(stderr, "gpu_fidelity --nccl: %s\n", e.what());
    return 2;
  }
  const std::vector<toy::GptConfig> sizes = gpu_sizes();
  const ps::LayerGrid grid = gpu_grid();
  if (root)
    std::printf(
        "## Fidelity on the GPU: NCCL, %d processes with a GPU each\n\nToy GPT (float; 8 "
        "blocks, sequence 256, microbatches of 4; hidden 256 and 512). The link from %s: "
        "latency %.2f us, %.0f GB/s, %s.\n\n",
        P, links.c_str(), link_file.link_latency * 1e6, link_file.link_bandwidth / 1e9,
        link_file.peer_to_peer ? "peer to peer" : "through host memory");
  Results r;
  r.configs = configurations(P);
  if (quick) r.configs.resize(std::min<std::size_t>(r.configs.size(), 6));
  r.steps.resize(r.configs.size());
  r.profiled.resize(sizes.size());
  const ps::CudaDevice device(local);
  try {
    for (int round = 0; round < rounds; ++round) {
      if (root)
        for (std::size_t k = 0; k < sizes.size(); ++k)
          r.profiled[k].push_back(gpu::gpt_layer_profile<float>(sizes[k], grid, device,
                                                                {.repeats = 3, .device = "GPU 0"}));
      MPI_Barrier(MPI_COMM_WORLD);
      for (std::size_t i = 0; i < r.configs.size(); ++i) {
        const Config& cfg = r.configs[i];
        const toy::GptConfig& c = sizes[static_cast<std::size_t>(cfg.size)];
        const ps::Schedule s = schedule_of(cfg);
        std::vector<gpu::GptStage<float>> stages = gpu_stages(s, c, [&](int) { return device; });
        ps::nccl::Pipeline<gpu::GptStage<float>> pipe(s, device, stages, MPI_COMM_WORLD);
        const auto data = gpu::training_data(toy::make_gpt_data<float>(c, cfg.microbatches, 5),
                                             device, device, cfg.slices);
        (void)pipe.step(data);
        for (int k = 0; k < repeats; ++k)
          r.steps[i].push_back(slowest(pipe.step(data).seconds));
      }
    }
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "gpu_fidelity: %s\n", e.what());
    session.abort(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_fidelity: %s\n", e.what());
    session.abort(1);
  }
  if (!root) return 0;
  std::printf(
      "%zu configurations, %d rounds of (profile %zu grid points per size on rank 0's "
      "GPU, then every configuration: 1 warm-up and %d measured steps).\n",
      r.configs.size(), rounds, grid.points(), repeats);
  const ps::DeviceSpec d = machine_device("nccl", P, link_file.link_bandwidth,
                                          link_file.link_latency, !link_file.peer_to_peer);
  print_results(r, sizes, d, {{"one GPU per rank", 0}});
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int rounds = 2, repeats = 5;
  bool quick = false, nccl = false;
  std::string links;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&](int& into, int lo, int hi) {
      if (i + 1 >= argc) return false;
      const std::string text = argv[++i];
      char* end = nullptr;
      const long v = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || v < lo || v > hi) {
        std::fprintf(stderr, "gpu_fidelity: %s is '%s'; give a whole number from %d to %d\n",
                     a.c_str(), text.c_str(), lo, hi);
        return false;
      }
      into = static_cast<int>(v);
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    } else if (a == "--rounds") {
      if (!number(rounds, 1, 100)) return 2;
    } else if (a == "--repeats") {
      if (!number(repeats, 1, 1000)) return 2;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--nccl") {
      nccl = true;
    } else if (a == "--links" && i + 1 < argc) {
      links = argv[++i];
    } else {
      std::fprintf(stderr, "gpu_fidelity: unknown argument '%s'\n%s", a.c_str(), usage_text);
      return 2;
    }
  }
  if (!nccl && !links.empty()) {
    std::fprintf(stderr, "gpu_fidelity: --links is for --nccl (cuda-local measures its copies)\n");
    return 2;
  }
  try {
    if (nccl) {
#ifdef PIPESCHED_GPU_FIDELITY_NCCL
      if (links.empty()) {
        std::fprintf(stderr,
                     "gpu_fidelity --nccl: give --links FILE, the link between GPUs as a device "
                     "file (gpu_links --out FILE writes it)\n");
        return 2;
      }
      return run_nccl(argc, argv, links, rounds, repeats, quick);
#else
      std::fprintf(stderr,
                   "gpu_fidelity: --nccl needs a build with NCCL and MPI (this one has "
                   "neither)\n");
      return 2;
#endif
    }
    return run_local(rounds, repeats, quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_fidelity: %s\n", e.what());
    return 1;
  }
}
