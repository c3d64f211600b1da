// The GPU report (scripts/gpu-check.sh runs it): on cuda-local with 4 ranks on one GPU,
// (1) the GPU toy GPT's loss, gradients and parameters against the host double reference for
// 1F1B, ZB-H1, a Mario plan and a slice-pipe plan, float and double, and each run's measured
// peak against the simulation of the same precision's byte figures; (2) synthetic 1 ms layers:
// measured step over simulated makespan; (3) the toy GPT's step time (float, a wider model) for
// the 1F1B, Mario and slice-pipe plans. Prints markdown tables; exits 1 when a check fails, 2
// when there is no usable GPU or the command line is wrong. `--probe` says what the CUDA runtime
// sees, `--check-figures` checks the report's byte figures on the host (no GPU needed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/toy/cuda/compare.cuh"
#include "pipesched/toy/cuda/gpt.cuh"
#include "pipesched/toy/cuda/synthetic.cuh"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/profile.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;
namespace gpu = pipesched::toy::gpu;

namespace {

constexpr const char* usage_text =
    "usage: gpu_report [--gpu NAME] | --probe | --check-figures | --help\n"
    "  (no mode)        run the report on GPU 0 and print its tables (markdown); exit 0 when\n"
    "                   every check passes, 1 when one fails, 2 when there is no usable GPU\n"
    "  --gpu NAME       the GPU's name for the title (scripts/gpu-check.sh passes nvidia-smi's)\n"
    "  --probe          print the CUDA driver and runtime versions and every GPU the runtime\n"
    "                   sees, and run one kernel on GPU 0; exit 0 when it ran, 2 when there is\n"
    "                   no usable GPU, 1 when the kernel could not run\n"
    "  --check-figures  no GPU needed: run each numerics plan on the host toy GPT of each\n"
    "                   precision and check that its measured peaks equal the simulation of\n"
    "                   that precision's byte figures (what the GPU rows compare), and differ\n"
    "                   from the other precision's; exit 0 when they do, 1 otherwise\n";

// A plan of the tables: its schedule and the model it runs (whole sequences or slices).
struct Plan {
  std::string name;
  ps::Schedule schedule;
  toy::GptConfig config;
};

template <class T>
std::vector<toy::GptStage<T>> host_stages(const toy::GptConfig& config, int stages) {
  std::vector<toy::GptStage<T>> v;
  v.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages);
  return v;
}

// The simulator's figures for `p` run in precision T: the host stages of that precision report
// the bytes the GPU stages of that precision hold (a float run holds half a double run's, a
// little more with slices, whose key/value gradient sums are double in both).
template <class T>
ps::ProfiledCost cost_for(const Plan& p) {
  return toy::gpt_profiled_cost(host_stages<T>(p.config, p.schedule.problem.stages),
                                p.schedule.problem.slices);
}

// The four plans of the numerics table (and, on a wider model, of the step-time table). The
// Mario plan's checkpoints are chosen with the double figures; which ones it takes does not
// depend on the precision it then runs in, since both precisions' bytes are in proportion.
std::vector<Plan> plans(const toy::GptConfig& whole, const toy::GptConfig& sliced, int microbatches,
                        int slices) {
  std::vector<Plan> out;
  const ps::Schedule one = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = microbatches});
  out.push_back({"1F1B", one, whole});
  out.push_back(
      {"ZB-H1", ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = microbatches}), whole});
  const ps::ProfiledCost whole_cost = cost_for<double>(out.front());
  const double peak = ps::simulate(one, whole_cost).peak_memory_max;
  out.push_back({"1F1B + Mario (60 % of 1F1B's peak)",
                 ps::checkpoint_mario(one, whole_cost, ps::MemoryBudget{.all = 0.6 * peak}),
                 whole});
  out.push_back({"slice-pipe (" + std::to_string(slices) + " slices, 2 chunks)",
                 ps::schedule::slice_pipe(
                     {.ranks = 4, .stages = 8, .microbatches = microbatches, .slices = slices}),
                 sliced});
  return out;
}

const toy::GptConfig numerics_whole{.blocks = 4};
const toy::GptConfig numerics_sliced{.sequence = 16, .blocks = 8};

template <class T>
const char* precision_name() {
  return std::is_same_v<T, double> ? "double" : "float";
}

template <class T>
bool numerics_row(const Plan& p) {
  const bool dbl = std::is_same_v<T, double>;
  try {
    const auto data = toy::make_gpt_data<T>(p.config, p.schedule.problem.microbatches, 17);
    const auto ref_data = toy::make_gpt_data<double>(p.config, p.schedule.problem.microbatches, 17);
    const auto steps = gpu::compare_with_reference<gpu::GptStage<T>, toy::GptStage<double>>(
        p.schedule, p.config, data, ref_data, cost_for<T>(p));
    double loss = 0, grads = 0, params = 0;
    bool peaks = true;
    for (const auto& s : steps) {
      loss = std::max(loss, s.loss);
      grads = std::max(grads, s.gradients);
      params = std::max(params, s.parameters);
      peaks = peaks && s.peaks_match;
    }
    // Float gradients: a float model's own rounding moves them ~1e-4 from the double model's
    // (the host float models do the same), so they are held to 1e-3; see docs/gpu.md.
    const double tol = dbl ? 1e-12 : 1e-5, grad_tol = dbl ? 1e-12 : 1e-3;
    const bool ok = loss <= tol && params <= tol && grads <= grad_tol && peaks;
    std::printf("| %s | %s | %.2e | %.2e | %.2e | %s | %s |\n", p.name.c_str(), precision_name<T>(),
                loss, grads, params, peaks ? "yes" : "NO", ok ? "pass" : "FAIL");
    return ok;
  } catch (const std::exception& e) {
    std::printf("| %s | %s | – | – | – | – | FAIL: %s |\n", p.name.c_str(), precision_name<T>(),
                e.what());
    return false;
  }
}

// The GPU's step times of `p` (float, SGD), after one warm-up step; no reference run.
std::vector<double> step_seconds(const Plan& p, int steps) {
  const ps::Schedule& s = p.schedule;
  auto devices = ps::cuda_local::Pipeline<gpu::GptStage<float>>::devices_for(s);
  std::vector<gpu::GptStage<float>> stages;
  stages.reserve(static_cast<std::size_t>(s.problem.stages));
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(p.config, st, s.problem.stages,
                        devices[static_cast<std::size_t>(s.placement.rank_of(st))]);
  ps::ExecutorOptions options;
  options.optimizer = [&](int rank) {
    for (int st : s.placement.stages_of(rank))
      stages[static_cast<std::size_t>(st)].sgd_step(0.01);
  };
  ps::cuda_local::Pipeline<gpu::GptStage<float>> pipe(s, devices, stages, options);
  const auto data = gpu::training_data(
      toy::make_gpt_data<float>(p.config, s.problem.microbatches, 5),
      devices[static_cast<std::size_t>(s.placement.rank_of(0))],
      devices[static_cast<std::size_t>(s.placement.rank_of(s.problem.stages - 1))],
      s.problem.slices);
  pipe.step(data);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i)
    out.push_back(pipe.step(data).seconds);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int report(const std::string& gpu_name) {
  const ps::GpuStatus status = ps::gpu_status();
  if (!status.available()) {
    std::fprintf(stderr, "gpu_report: %s\n", status.reason.c_str());
    return 2;
  }
  bool ok = true;
  std::printf("## GPU report: %s, cuda-local, 4 ranks on one GPU\n\n", gpu_name.c_str());

  std::printf("### Numerics against the host double reference (2 SGD steps, worst step)\n\n");
  std::printf("| plan | GPU precision | loss | gradients | parameters | peak = simulated | |\n");
  std::printf("|---|---|---:|---:|---:|---|---|\n");
  for (const Plan& p : plans(numerics_whole, numerics_sliced, 8, 2)) {
    ok = numerics_row<float>(p) && ok;
    ok = numerics_row<double>(p) && ok;
  }

  std::printf("\n### Synthetic 1 ms layers: measured step / simulated makespan (best of 5)\n\n");
  std::printf("| schedule | ratio | |\n|---|---:|---|\n");
  const toy::SyntheticCost cost{.forward = 1e-3,
                                .backward_input = 1e-3,
                                .backward_weight = 1e-3,
                                .activation_bytes = 1 << 20,
                                .wgrad_bytes = 1 << 19};
  for (const char* name : {"1f1b", "zb-h1"}) {
    try {
      const ps::Schedule s = std::string(name) == "1f1b"
                                 ? ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 16})
                                 : ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 16});
      const double ratio = gpu::synthetic_ratio(s, cost);
      const bool pass = ratio <= 1.05;
      ok = ok && pass;
      std::printf("| %s | %.3f | %s |\n", name, ratio, pass ? "pass (≤ 1.05)" : "FAIL (> 1.05)");
    } catch (const std::exception& e) {
      ok = false;
      std::printf("| %s | – | FAIL: %s |\n", name, e.what());
    }
  }

  std::printf(
      "\n### Toy GPT step time (float; hidden 256, 8 heads, sequence 256, 8 microbatches of 4)"
      "\n\n");
  std::printf("| plan | step ms (median of 5) | simulated peak, max rank (MiB) |\n");
  std::printf("|---|---:|---:|\n");
  toy::GptConfig big{.vocabulary = 256,
                     .hidden = 256,
                     .heads = 8,
                     .ffn = 1024,
                     .sequence = 256,
                     .blocks = 8,
                     .microbatch_size = 4,
                     .seed = 3};
  toy::GptConfig big4 = big;
  big4.blocks = 4;
  for (const Plan& p : plans(big4, big, 8, 4)) {
    if (p.name == "ZB-H1") continue;
    try {
      const std::vector<double> seconds = step_seconds(p, 5);
      std::printf("| %s | %.2f | %.1f |\n", p.name.c_str(), 1e3 * median(seconds),
                  ps::simulate(p.schedule, cost_for<float>(p)).peak_memory_max / (1 << 20));
    } catch (const std::exception& e) {
      ok = false;
      std::printf("| %s | FAIL: %s | – |\n", p.name.c_str(), e.what());
    }
  }
  std::printf("\n%s\n", ok ? "Every check passed." : "SOME CHECKS FAILED.");
  return ok ? 0 : 1;
}

__global__ void probe_kernel(int* out) {
  *out = 0x5eed;
}

int probe() {
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  if (driver > 0)
    std::printf("CUDA runtime %d.%d; the driver supports CUDA %d.%d\n", runtime / 1000,
                runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
  else
    std::printf("CUDA runtime %d.%d; no CUDA driver is loaded\n", runtime / 1000,
                runtime % 1000 / 10);
  const ps::GpuStatus status = ps::gpu_status();
  if (!status.available()) {
    std::printf("%s\n", status.reason.c_str());
    return 2;
  }
  for (int d = 0; d < status.devices; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      std::printf("GPU %d: cudaGetDeviceProperties failed\n", d);
      continue;
    }
    std::printf("GPU %d: %s, compute capability %d.%d, %.1f GiB\n", d, prop.name, prop.major,
                prop.minor, double(prop.totalGlobalMem) / (1ull << 30));
  }
  int* value = nullptr;
  int host = 0;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaMalloc(&value, sizeof(int));
  if (e == cudaSuccess) {
    probe_kernel<<<1, 1>>>(value);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(&host, value, sizeof(int), cudaMemcpyDeviceToHost);
  if (value != nullptr) (void)cudaFree(value);
  if (e != cudaSuccess || host != 0x5eed) {
    std::printf("a kernel could not run on GPU 0: %s (%s)\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "wrong result",
                e != cudaSuccess ? cudaGetErrorString(e) : "the kernel's value did not arrive");
    return 1;
  }
  std::printf("a kernel ran on GPU 0\n");
  return 0;
}

// The peak each rank of `p` measures on host stages of precision T, against the simulation of
// T's figures and of the other precision's; true when the first agrees and the second does not
// (so the comparison the GPU rows make can tell the two apart).
template <class T>
bool figures_row(const Plan& p) {
  using Other = std::conditional_t<std::is_same_v<T, double>, float, double>;
  const ps::Schedule& s = p.schedule;
  std::vector<toy::GptStage<T>> stages = host_stages<T>(p.config, s.problem.stages);
  ps::inproc::Pipeline<toy::GptStage<T>> pipe(s, stages);
  const ps::StepResult r = pipe.step(toy::training_data(
      toy::make_gpt_data<T>(p.config, s.problem.microbatches, 17), s.problem.slices));
  const ps::SimulationResult same = ps::simulate(s, cost_for<T>(p));
  const ps::SimulationResult other = ps::simulate(s, cost_for<Other>(p));
  bool equal = true, differs = false;
  double measured = 0;
  for (int k = 0; k < s.rank_count(); ++k) {
    const auto rank = static_cast<std::size_t>(k);
    equal = equal && r.ranks[rank].peak_bytes == same.ranks[rank].peak_memory;
    differs = differs || r.ranks[rank].peak_bytes != other.ranks[rank].peak_memory;
    measured = std::max(measured, double(r.ranks[rank].peak_bytes));
  }
  const bool ok = equal && differs;
  std::printf("| %s | %s | %.0f | %.0f | %.0f | %s |\n", p.name.c_str(), precision_name<T>(),
              measured, same.peak_memory_max, other.peak_memory_max, ok ? "pass" : "FAIL");
  return ok;
}

int check_figures() {
  std::printf("### Host toy GPT: measured peak bytes against the simulated ones\n\n");
  std::printf(
      "| plan | precision | measured, max rank | simulated, same precision | simulated, other "
      "precision | |\n");
  std::printf("|---|---|---:|---:|---:|---|\n");
  bool ok = true;
  try {
    for (const Plan& p : plans(numerics_whole, numerics_sliced, 8, 2)) {
      ok = figures_row<float>(p) && ok;
      ok = figures_row<double>(p) && ok;
    }
  } catch (const std::exception& e) {
    std::printf("gpu_report: %s\n", e.what());
    return 1;
  }
  std::printf("\n%s\n", ok ? "The figures agree." : "THE FIGURES DISAGREE.");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpu_name = "the GPU";
  enum class Mode { Report, Probe, Figures } mode = Mode::Report;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    } else if (arg == "--gpu" && i + 1 < argc) {
      gpu_name = argv[++i];
    } else if (arg == "--probe") {
      mode = Mode::Probe;
    } else if (arg == "--check-figures") {
      mode = Mode::Figures;
    } else {
      std::fprintf(stderr, "gpu_report: unknown argument '%s'%s\n%s", arg.c_str(),
                   arg == "--gpu" ? " (it takes the GPU's name)" : "", usage_text);
      return 2;
    }
  }
  try {
    switch (mode) {
      case Mode::Probe:
        return probe();
      case Mode::Figures:
        return check_figures();
      case Mode::Report:
        return report(gpu_name);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_report: %s\n", e.what());
    return 1;
  }
  return 1;
}
