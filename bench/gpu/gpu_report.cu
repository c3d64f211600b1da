// The GPU report (scripts/gpu-check.sh runs it): on cuda-local with 4 ranks on one GPU,
// (1) the GPU toy GPT's loss, gradients and parameters against the host double reference for
// 1F1B, ZB-H1, a Mario plan and a slice-pipe plan, float and double; (2) synthetic 1 ms layers:
// measured step over simulated makespan; (3) the toy GPT's step time (float, a wider model)
// for the 1F1B, Mario and slice-pipe plans. Prints markdown tables; exits 1 when a check fails,
// 2 when there is no GPU.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
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

struct Plan {
  std::string name;
  ps::Schedule schedule;
  ps::ProfiledCost cost;
};

std::vector<toy::GptStage<double>> host_stages(const toy::GptConfig& config, int stages) {
  std::vector<toy::GptStage<double>> v;
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages);
  return v;
}

// The four plans of the numerics table (and, on a wider model, of the step-time table).
std::vector<Plan> plans(const toy::GptConfig& whole, const toy::GptConfig& sliced, int microbatches,
                        int slices) {
  std::vector<Plan> out;
  const ps::Schedule one = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = microbatches});
  const ps::ProfiledCost whole_cost = toy::gpt_profiled_cost(host_stages(whole, 4));
  out.push_back({"1F1B", one, whole_cost});
  out.push_back({"ZB-H1", ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = microbatches}),
                 whole_cost});
  const double peak = ps::simulate(one, whole_cost).peak_memory_max;
  out.push_back({"1F1B + Mario (60 % of 1F1B's peak)",
                 ps::checkpoint_mario(one, whole_cost, ps::MemoryBudget{.all = 0.6 * peak}),
                 whole_cost});
  const ps::Schedule sp = ps::schedule::slice_pipe(
      {.ranks = 4, .stages = 8, .microbatches = microbatches, .slices = slices});
  out.push_back({"slice-pipe (" + std::to_string(slices) + " slices, 2 chunks)", sp,
                 toy::gpt_profiled_cost(host_stages(sliced, 8), slices)});
  return out;
}

template <class T>
bool numerics_row(const Plan& p, const toy::GptConfig& config) {
  const auto data = toy::make_gpt_data<T>(config, p.schedule.problem.microbatches, 17);
  const auto ref_data = toy::make_gpt_data<double>(config, p.schedule.problem.microbatches, 17);
  const auto steps = gpu::compare_with_reference<gpu::GptStage<T>, toy::GptStage<double>>(
      p.schedule, config, data, ref_data, p.cost);
  double loss = 0, grads = 0, params = 0;
  bool peaks = true;
  for (const auto& s : steps) {
    loss = std::max(loss, s.loss);
    grads = std::max(grads, s.gradients);
    params = std::max(params, s.parameters);
    peaks = peaks && s.peaks_match;
  }
  const bool dbl = std::is_same_v<T, double>;
  // Float gradients: a float model's own rounding moves them ~1e-4 from the double model's
  // (the host float models do the same), so they are held to 1e-3; see docs/gpu.md.
  const double tol = dbl ? 1e-12 : 1e-5, grad_tol = dbl ? 1e-12 : 1e-3;
  const bool ok = loss <= tol && params <= tol && grads <= grad_tol && peaks;
  std::printf("| %s | %s | %.2e | %.2e | %.2e | %s | %s |\n", p.name.c_str(),
              dbl ? "double" : "float", loss, grads, params, peaks ? "yes" : "NO",
              ok ? "pass" : "FAIL");
  return ok;
}

// The GPU's step times of `p` (float, SGD), after one warm-up step; no reference run.
std::vector<double> step_seconds(const Plan& p, const toy::GptConfig& config, int steps) {
  const ps::Schedule& s = p.schedule;
  auto devices = ps::CudaLocalPipeline<gpu::GptStage<float>>::devices_for(s);
  std::vector<gpu::GptStage<float>> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(config, st, s.problem.stages,
                        devices[static_cast<std::size_t>(s.placement.rank_of(st))]);
  ps::ExecutorOptions options;
  options.optimizer = [&](int rank) {
    for (int st : s.placement.stages_of(rank))
      stages[static_cast<std::size_t>(st)].sgd_step(0.01);
  };
  ps::CudaLocalPipeline<gpu::GptStage<float>> pipe(s, devices, stages, options);
  const auto data = gpu::training_data(
      toy::make_gpt_data<float>(config, s.problem.microbatches, 5),
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

}  // namespace

int main(int argc, char** argv) {
  std::string gpu_name = "the GPU";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--gpu") == 0) gpu_name = argv[i + 1];
  const ps::GpuStatus status = ps::gpu_status();
  if (!status.available()) {
    std::fprintf(stderr, "gpu_report: %s\n", status.reason.c_str());
    return 2;
  }
  bool ok = true;
  try {
    std::printf("## GPU report: %s, cuda-local, 4 ranks on one GPU\n\n", gpu_name.c_str());

    std::printf("### Numerics against the host double reference (2 SGD steps, worst step)\n\n");
    std::printf("| plan | GPU precision | loss | gradients | parameters | peak = simulated | |\n");
    std::printf("|---|---|---:|---:|---:|---|---|\n");
    const toy::GptConfig whole{.blocks = 4};
    const toy::GptConfig sliced{.sequence = 16, .blocks = 8};
    for (const Plan& p : plans(whole, sliced, 8, 2)) {
      const toy::GptConfig& config = p.schedule.problem.slices > 1 ? sliced : whole;
      ok = numerics_row<float>(p, config) && ok;
      ok = numerics_row<double>(p, config) && ok;
    }

    std::printf("\n### Synthetic 1 ms layers: measured step / simulated makespan (best of 5)\n\n");
    std::printf("| schedule | ratio | |\n|---|---:|---|\n");
    const toy::SyntheticCost cost{.forward = 1e-3,
                                  .backward_input = 1e-3,
                                  .backward_weight = 1e-3,
                                  .activation_bytes = 1 << 20,
                                  .wgrad_bytes = 1 << 19};
    for (const char* name : {"1f1b", "zb-h1"}) {
      const ps::Schedule s = std::string(name) == "1f1b"
                                 ? ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 16})
                                 : ps::schedule::zero_bubble_h1({.ranks = 4, .microbatches = 16});
      const double ratio = gpu::synthetic_ratio(s, cost);
      const bool pass = ratio <= 1.05;
      ok = ok && pass;
      std::printf("| %s | %.3f | %s |\n", name, ratio, pass ? "pass (≤ 1.05)" : "FAIL (> 1.05)");
    }

    std::printf(
        "\n### Toy GPT step time (float; hidden 256, 8 heads, sequence 256, 8 blocks, "
        "8 microbatches of 4)\n\n");
    std::printf("| plan | step ms (median of 5) | simulated peak, max rank (MiB) |\n");
    std::printf("|---|---:|---:|\n");
    const toy::GptConfig big{.vocabulary = 256,
                             .hidden = 256,
                             .heads = 8,
                             .ffn = 1024,
                             .sequence = 256,
                             .blocks = 8,
                             .microbatch_size = 4,
                             .seed = 3};
    const toy::GptConfig big4{.vocabulary = 256,
                              .hidden = 256,
                              .heads = 8,
                              .ffn = 1024,
                              .sequence = 256,
                              .blocks = 4,
                              .microbatch_size = 4,
                              .seed = 3};
    for (const Plan& p : plans(big4, big, 8, 4)) {
      if (p.name == "ZB-H1") continue;
      const toy::GptConfig& config = p.schedule.problem.slices > 1 ? big : big4;
      const std::vector<double> seconds = step_seconds(p, config, 5);
      std::printf("| %s | %.2f | %.1f |\n", p.name.c_str(), 1e3 * median(seconds),
                  ps::simulate(p.schedule, p.cost).peak_memory_max / (1 << 20));
    }
  } catch (const ps::error& e) {
    std::fprintf(stderr, "gpu_report: %s\n", e.what());
    return 1;
  }
  std::printf("\n%s\n", ok ? "Every check passed." : "SOME CHECKS FAILED.");
  return ok ? 0 : 1;
}
