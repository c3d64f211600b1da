// MEPipe over a whole cluster: Llama 2 7B, 13B and 34B on 64 RTX 4090 (8 per node over PCIe,
// one 100 Gb/s port per node), a global batch of 256 sequences of 4096 tokens. One cluster
// search per scheme family (pipeline x data x tensor parallelism, ZeRO-1, layer splits, microbatch
// sizes 1-4, checkpointing none / selective / full; TransformerCost with the optimizer step
// and workspace) over DAPPLE (1F1B), VPP (interleaved 1F1B, 2 chunks), ZB (ZB-H1), ZB-V and
// MEPipe (slice-pipe with 1, 2, 4 or 8 slices, its warm-up fitted to the memory, fine-grained
// weight gradients in 4 parts; the baselines with their own backward and whole microbatches),
// each scheme with its own best plan. Printed: each scheme's
// best, MEPipe's speed-up over each and over the best of them, MEPipe's MFU, and the gain of
// fine-grained W (MEPipe's best plan against slice-pipe searched without it), with W in 4
// equal parts and with W cut per weight GEMM as MEPipe cuts it (wgrad_parts = 0; searched at
// the configuration of MEPipe's best plan only: pipeline, tensor degree, microbatch size,
// slices and checkpointing fixed, warm-up and layer split searched, since cutting every W of
// the whole search per GEMM multiplies its time about twentyfold). Then, for each MEPipe plan,
// the rank whose end sets the step: its busy time and its waits after its first backward (the
// idle time fine-grained W could fill) beside the other ranks'. Markdown.
//
//   build/default/bench/mepipe_cluster [--quick | --model M] [--terms T]   (--quick: Llama 2 7B
//   only; --model: that model only; --terms: which cost-model terms apply,
//   bench/cost_terms.hpp, default all)
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cost_terms.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;
using ps::CheckpointMode;

namespace {

// The best plan of `scheme` over every checkpoint mode searched.
std::optional<ps::tuning::Plan> best_of(const ps::tuning::Result& r, const std::string& scheme) {
  std::optional<ps::tuning::Plan> best;
  for (const ps::tuning::Baseline& b : r.baselines)
    if (b.base == scheme && b.plan) ps::detail::keep_better(best, *b.plan);
  return best;
}

std::string cell(const std::optional<ps::tuning::Plan>& p) {
  if (!p) return "does not fit";
  char t[240];
  std::snprintf(t, sizeof t, "pp%d dp%d tp%d, %d mb of %d%s%s, %s: **%.3f s**",
                p->schedule.problem.ranks, p->data, p->tensor, p->microbatches, p->microbatch_size,
                p->slices > 1 ? (" in " + std::to_string(p->slices) + " slices").c_str() : "",
                p->fine_wgrad ? ", fine W" : "", ps::to_string(p->checkpoint), p->makespan);
  return t;
}

// Where the step of plan `p` goes: the rank that ends last (its step tail counted), its busy time
// and its waits after its first backward (what weight-gradient work could fill), beside the other
// ranks' means.
std::string critical_rank(const ps::tuning::Plan& p, const ps::TransformerCost& cost) {
  const ps::SimulationResult sim = ps::simulate(p.schedule, cost);
  const int R = p.schedule.rank_count();
  std::vector<double> waits(static_cast<std::size_t>(R), 0.0);
  for (int r = 0; r < R; ++r) {
    const auto& list = p.schedule.ranks[static_cast<std::size_t>(r)];
    const auto& t = sim.timing[static_cast<std::size_t>(r)];
    bool after_b = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (after_b && i > 0)
        waits[static_cast<std::size_t>(r)] += std::max(0.0, t[i].start - t[i - 1].end);
      after_b = after_b || ps::is_input_backward(list[i].kind);
    }
  }
  // A rank's end (RankSummary::end) counts its step tail: gradient all-reduce, optimizer step.
  const auto last = std::max_element(
      sim.ranks.begin(), sim.ranks.end(),
      [](const ps::RankSummary& a, const ps::RankSummary& b) { return a.end < b.end; });
  const int c = static_cast<int>(last - sim.ranks.begin());
  double busy = 0, wait = 0;
  for (int r = 0; r < R; ++r)
    if (r != c) {
      busy += sim.ranks[static_cast<std::size_t>(r)].busy / (R - 1);
      wait += waits[static_cast<std::size_t>(r)] / (R - 1);
    }
  char t[240];
  std::snprintf(t, sizeof t,
                "rank %d of %d ends last: busy %.3f s of the %.3f s step (%+.1f %% over the "
                "other ranks' %.3f s), waits after its first backward %.3f s (others: %.3f s)",
                c, R, sim.ranks[static_cast<std::size_t>(c)].busy, sim.makespan,
                R > 1 ? 100 * (sim.ranks[static_cast<std::size_t>(c)].busy / busy - 1) : 0.0, busy,
                waits[static_cast<std::size_t>(c)], wait);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const ps::bench::ReportArgs args = ps::bench::read_report_args(
      argc, argv,
      "usage: mepipe_cluster [--quick | --model M] [--terms T]\n"
      "  --model M  that model only (llama2-7b, llama2-13b or llama2-34b)\n",
      true);
  const bool quick = args.quick;
  const std::string only = args.model;
  const ps::bench::CostTerms terms = args.terms;
  const ps::DeviceSpec device = ps::bench::with_terms(ps::presets::find_device("rtx-4090"), terms);
  // The RTX 4090's dense FP16 tensor peak with FP16 accumulate (NVIDIA Ada Lovelace
  // architecture whitepaper, 330.3 TFLOP/s; twice the FP32-accumulate peak the cost model
  // runs at): the denominator of MEPipe's MFU, printed beside the datasheet peak's.
  const double fp16_accumulate_peak = 330.3e12;
  const std::vector<std::string> baselines = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v"};
  const char* labels[] = {"DAPPLE (1F1B)", "VPP", "ZB-H1", "ZB-V"};
  std::vector<double> over_best;
  std::vector<std::string> critical;  // where each MEPipe best plan's step goes
  double total_seconds = 0, slowest = 0;
  std::printf("# MEPipe over a 64 x RTX 4090 cluster (bench/mepipe_cluster)\n\n");
  std::printf("Cost-model terms: %s.\n\n", ps::bench::describe(terms).c_str());
  std::printf(
      "| model | MEPipe (slice-pipe, fine W) | DAPPLE (1F1B) | VPP | ZB-H1 | ZB-V | over each | "
      "over the best | MEPipe MFU (causal) | MEPipe MFU (usual) | MEPipe MFU (usual, of 330.3 TF) "
      "| fine W gain (4 parts) | fine W gain (per GEMM) | search |\n");
  std::printf("|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<const char*> models =
      quick ? std::vector<const char*>{"llama2-7b"}
            : std::vector<const char*>{"llama2-7b", "llama2-13b", "llama2-34b"};
  if (!only.empty()) {
    std::erase_if(models, [&](const char* m) { return only != m; });
    if (models.empty()) {
      std::fprintf(stderr,
                   "mepipe_cluster: --model %s is not one of llama2-7b, llama2-13b, "
                   "llama2-34b.\n",
                   only.c_str());
      return 2;
    }
  }
  for (const char* model_name : models) {
    const ps::ModelShape model = ps::bench::with_terms(ps::presets::find_model(model_name), terms);
    ps::tuning::ClusterRequest req;
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
    const ps::tuning::Result r = ps::tune_cluster(req, model, device);
    ps::tuning::ClusterRequest coarse = req;  // slice-pipe without fine-grained W
    coarse.search.fine_wgrad = false;
    const ps::tuning::Result rc = ps::tune_cluster(coarse, model, device);
    ps::tuning::ClusterRequest base =
        coarse;  // the baselines: their own backward, whole microbatches
    base.search.bases = baselines;
    base.search.slices = {1};
    const ps::tuning::Result rb = ps::tune_cluster(base, model, device);
    const auto mepipe = best_of(r, "slice-pipe");
    // W cut per weight GEMM, at the configuration of MEPipe's best plan.
    std::optional<ps::tuning::Plan> per_gemm;
    double gemm_seconds = 0;
    if (mepipe) {
      ps::tuning::ClusterRequest gemm = req;
      gemm.pipeline = {mepipe->schedule.problem.ranks};
      gemm.tensor = {mepipe->tensor};
      gemm.search.microbatch_sizes = {mepipe->microbatch_size};
      gemm.search.slices = {mepipe->slices};
      gemm.search.checkpoints = {mepipe->checkpoint};
      gemm.search.full_fallback = mepipe->checkpoint == CheckpointMode::Full;
      gemm.search.wgrad_parts = 0;
      const ps::tuning::Result rg = ps::tune_cluster(gemm, model, device);
      gemm_seconds = rg.seconds;
      for (const ps::tuning::Baseline& b : rg.baselines)
        if (b.plan && b.plan->fine_wgrad) ps::detail::keep_better(per_gemm, *b.plan);
    }
    const double seconds = r.seconds + rc.seconds + rb.seconds + gemm_seconds;
    total_seconds += seconds;
    slowest = std::max(slowest, seconds);
    std::string row = std::string("| ") + model_name + " | " + cell(mepipe);
    std::string each;
    std::optional<ps::tuning::Plan> strongest;
    for (std::size_t i = 0; i < baselines.size(); ++i) {
      const auto b = best_of(rb, baselines[i]);
      row += " | " + cell(b);
      if (b) ps::detail::keep_better(strongest, *b);
      char t[64];
      std::snprintf(t, sizeof t, "%s%s %.2fx", each.empty() ? "" : ", ", labels[i],
                    b && mepipe ? b->makespan / mepipe->makespan : 0.0);
      each += t;
    }
    char tail[400];
    const auto coarse_best = best_of(rc, "slice-pipe");
    char gemm_gain[80] = "no fine-W plan fits";
    if (per_gemm && coarse_best)
      std::snprintf(gemm_gain, sizeof gemm_gain, "%+.1f %% (%.3f s)",
                    100 * (coarse_best->makespan / per_gemm->makespan - 1), per_gemm->makespan);
    std::snprintf(
        tail, sizeof tail, " | %s | %.3fx | %.1f %% | %.1f %% | %.1f %% | %+.1f %% | %s | %.1f s |",
        each.c_str(), strongest && mepipe ? strongest->makespan / mepipe->makespan : 0.0,
        mepipe ? 100 * mepipe->mfu : 0.0, mepipe ? 100 * mepipe->mfu_usual : 0.0,
        mepipe ? 100 * mepipe->mfu_usual * device.peak_flops / fp16_accumulate_peak : 0.0,
        coarse_best && mepipe ? 100 * (coarse_best->makespan / mepipe->makespan - 1) : 0.0,
        gemm_gain, seconds);
    if (strongest && mepipe) over_best.push_back(strongest->makespan / mepipe->makespan);
    if (mepipe) {
      char head[64];
      std::snprintf(head, sizeof head, " (its LM head's forward: %.2f layers')",
                    ps::TransformerCost{model, device, {}}.head_layers());
      critical.push_back(model_name + std::string(head) + ": " +
                         critical_rank(*mepipe, ps::cost_of<ps::TransformerCost>(*mepipe)));
    }
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
  std::printf("\nMEPipe's best plans, the rank that sets the step:\n\n");
  for (const std::string& c : critical)
    std::printf("- %s.\n", c.c_str());
  return 0;
}
