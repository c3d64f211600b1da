// MEPipe over a whole cluster: Llama 2 7B, 13B and 34B on 64 RTX 4090 (8 per node over PCIe,
// one 100 Gb/s port per node), a global batch of 256 sequences of 4096 tokens. One cluster
// search per scheme family (pipeline x data x tensor parallelism, ZeRO-1, layer splits, microbatch
// sizes 1-4, checkpointing none / selective / full; TransformerCost with the optimizer step
// and workspace) over DAPPLE (1F1B), VPP (interleaved 1F1B, 2 chunks), ZB (ZB-H1), ZB-V and
// MEPipe (slice-pipe with 1, 2, 4 or 8 slices, its warm-up fitted to the memory, fine-grained
// weight gradients in 4 parts; the baselines with their own backward and whole microbatches),
// each scheme with its own best plan. Printed: each scheme's
// best, MEPipe's speed-up over each and over the best of them, MEPipe's MFU, and the gain of
// fine-grained W (MEPipe's best plan against slice-pipe searched without it). Markdown.
//
//   build/default/bench/mepipe_cluster [--quick]      (--quick: Llama 2 7B only)
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;
using ps::CheckpointMode;

namespace {

// The best plan of `scheme` over every checkpoint mode searched.
std::optional<ps::TunePlan> best_of(const ps::TuneResult& r, const std::string& scheme) {
  std::optional<ps::TunePlan> best;
  for (const ps::TuneBaseline& b : r.baselines)
    if (b.base == scheme && b.plan) ps::detail::keep_better(best, *b.plan);
  return best;
}

std::string cell(const std::optional<ps::TunePlan>& p) {
  if (!p) return "does not fit";
  char t[240];
  std::snprintf(t, sizeof t, "pp%d dp%d tp%d, %d mb of %d%s%s, %s: **%.3f s**",
                p->schedule.problem.ranks, p->data, p->tensor, p->microbatches, p->microbatch_size,
                p->slices > 1 ? (" in " + std::to_string(p->slices) + " slices").c_str() : "",
                p->fine_wgrad ? ", fine W" : "", ps::to_string(p->checkpoint), p->makespan);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const ps::DeviceSpec device = ps::presets::find_device("rtx-4090");
  const std::vector<std::string> baselines = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v"};
  const char* labels[] = {"DAPPLE (1F1B)", "VPP", "ZB-H1", "ZB-V"};
  std::vector<double> over_best;
  double total_seconds = 0, slowest = 0;
  std::printf("# MEPipe over a 64 x RTX 4090 cluster (bench/mepipe_cluster)\n\n");
  std::printf(
      "| model | MEPipe (slice-pipe, fine W) | DAPPLE (1F1B) | VPP | ZB-H1 | ZB-V | over each | "
      "over the best | MEPipe MFU | fine W gain | search |\n");
  std::printf("|---|---|---|---|---|---|---|---:|---:|---:|---:|\n");
  const std::vector<const char*> models =
      quick ? std::vector<const char*>{"llama2-7b"}
            : std::vector<const char*>{"llama2-7b", "llama2-13b", "llama2-34b"};
  for (const char* model_name : models) {
    const ps::ModelShape model = ps::presets::find_model(model_name);
    ps::ClusterRequest req;
    req.gpus = 64;
    req.global_batch = 256;
    req.search.chunks = {2};
    req.search.microbatch_sizes = {1, 2, 4};
    req.search.slices = {1, 2, 4, 8};
    req.search.slicing = ps::SlicingMode::Balanced;
    req.search.fine_wgrad = true;
    req.search.checkpoints = {CheckpointMode::None, CheckpointMode::Selective,
                              CheckpointMode::Full};
    req.search.bases = {"slice-pipe"};
    const ps::TuneResult r = ps::tune_cluster(req, model, device);
    ps::ClusterRequest coarse = req;  // slice-pipe without fine-grained W
    coarse.search.fine_wgrad = false;
    const ps::TuneResult rc = ps::tune_cluster(coarse, model, device);
    ps::ClusterRequest base = coarse;  // the baselines: their own backward, whole microbatches
    base.search.bases = baselines;
    base.search.slices = {1};
    const ps::TuneResult rb = ps::tune_cluster(base, model, device);
    const double seconds = r.seconds + rc.seconds + rb.seconds;
    total_seconds += seconds;
    slowest = std::max(slowest, seconds);
    const auto mepipe = best_of(r, "slice-pipe");
    std::string row = std::string("| ") + model_name + " | " + cell(mepipe);
    std::string each;
    std::optional<ps::TunePlan> strongest;
    for (std::size_t i = 0; i < baselines.size(); ++i) {
      const auto b = best_of(rb, baselines[i]);
      row += " | " + cell(b);
      if (b) ps::detail::keep_better(strongest, *b);
      char t[64];
      std::snprintf(t, sizeof t, "%s%s %.2fx", each.empty() ? "" : ", ", labels[i],
                    b && mepipe ? b->makespan / mepipe->makespan : 0.0);
      each += t;
    }
    char tail[200];
    const auto coarse_best = best_of(rc, "slice-pipe");
    std::snprintf(
        tail, sizeof tail, " | %s | %.3fx | %.1f %% | %+.1f %% | %.1f s |", each.c_str(),
        strongest && mepipe ? strongest->makespan / mepipe->makespan : 0.0,
        mepipe ? 100 * mepipe->mfu : 0.0,
        coarse_best && mepipe ? 100 * (coarse_best->makespan / mepipe->makespan - 1) : 0.0,
        seconds);
    if (strongest && mepipe) over_best.push_back(strongest->makespan / mepipe->makespan);
    std::printf("%s%s\n", row.c_str(), tail);
    std::fflush(stdout);
  }
  double sum = 0, most = 0;
  for (double x : over_best) {
    sum += x;
    most = std::max(most, x);
  }
  std::printf(
      "\nMEPipe over the best baseline: %.3fx mean, %.3fx max over %zu models (paper: 1.35x "
      "mean, 1.68x max over 1F1B / VPP / ZB / ZB-V; MFU 35 %% on Llama 2 13B; fine W "
      "+9.4 %%).\n",
      over_best.empty() ? 0.0 : sum / over_best.size(), most, over_best.size());
  std::printf("Search: %.1f s in all, %.1f s for the slowest model.\n", total_seconds, slowest);
  return 0;
}
