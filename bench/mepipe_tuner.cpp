// The MEPipe scenario: Llama-2 7B and 13B on 64 GPUs of 24 GB (RTX 4090: PCIe inside a node
// of 8, 100 Gb/s between nodes), TransformerCost. For each pipeline size p (data-parallel
// degree d = 64 / p, each pipeline running global_batch / d sequences), the best plan the
// tuner finds with every knob — slice-level schedules, slices, warm-up, fine weight
// gradients, Mario — against the best 1F1B, Interleaved 1F1B, ZB-H1 and ZB-V plans (whole
// microbatches, conventional checkpointing where memory needs it) under the same per-rank
// memory (usable device memory less weights, gradients and Adam state). Prints markdown.
//
//   build/default/bench/mepipe_tuner [--quick] [--terms T]   (--terms: which cost-model terms
//   apply, bench/cost_terms.hpp, default all)
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "cost_terms.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;

namespace {

std::string cell(const std::optional<ps::tuning::Plan>& p) {
  if (!p) return "does not fit";
  char buf[64];
  std::snprintf(buf, sizeof buf, ": **%.3f s**", p->makespan);
  return ps::describe(*p) + buf;
}

std::string speedup(const std::optional<ps::tuning::Plan>& best,
                    const std::optional<ps::tuning::Plan>& other) {
  if (!best || !other) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", other->makespan / best->makespan);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const ps::bench::ReportArgs args =
      ps::bench::read_report_args(argc, argv, "usage: mepipe_tuner [--quick] [--terms T]\n", false);
  const bool quick = args.quick;
  const ps::bench::CostTerms terms = args.terms;
  const int gpus = 64, global_batch = 256;
  const ps::DeviceSpec device = ps::bench::with_terms(ps::presets::find_device("rtx-4090"), terms);
  std::printf("# MEPipe scenario: %d x %s, global batch %d sequences\n\n", gpus,
              device.name.c_str(), global_batch);
  std::printf(
      "TransformerCost; per-rank activation budget = 24 GB less the reserve and 16 bytes per "
      "parameter of the rank's stages. Pipelines of p ranks, d = %d / p data-parallel replicas "
      "(the gradient "
      "all-reduce between replicas is not modelled; compare plans within a row). Baselines: "
      "whole microbatches, checkpointing none / selective / full. Best: every knob "
      "(seq-1f1b, slice-pipe with warm-up fitted to the budget, slices 1-8 with balanced "
      "lengths, fine W in 4 parts, Mario).\n",
      gpus);
  double total_seconds = 0, worst = 0;
  for (const char* model_name : {"llama2-7b", "llama2-13b"}) {
    const ps::ModelShape model = ps::bench::with_terms(ps::presets::find_model(model_name), terms);
    std::printf("\n## %s (sequence %d)\n\n", model_name, model.sequence);
    std::printf(
        "| p x d | best (all knobs) | best 1F1B | best interleaved | best ZB-H1 | best ZB-V | "
        "vs 1F1B | vs interleaved | vs ZB-H1 | vs ZB-V | search |\n");
    std::printf("|---|---|---|---|---|---|---:|---:|---:|---:|---:|\n");
    for (int p : quick ? std::vector<int>{16} : std::vector<int>{8, 16, 32}) {
      const int d = gpus / p;
      const int batch = global_batch / d;
      auto run = [&](std::vector<std::string> bases, bool all_knobs) {
        ps::tuning::Request req;
        req.ranks = p;
        req.global_batch = batch;
        req.bases = std::move(bases);
        req.chunks = {2};
        req.microbatch_sizes = {1, 2};
        if (all_knobs) {
          req.slices = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4, 8};
          req.slicing = ps::SlicingMode::Balanced;
          req.fine_wgrad = true;
          req.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective,
                             ps::CheckpointMode::Mario};
        } else {
          req.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective,
                             ps::CheckpointMode::Full};
        }
        return ps::tune(req, model, device);
      };
      const auto t0 = std::chrono::steady_clock::now();
      const ps::tuning::Result all =
          run({"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "seq-1f1b", "slice-pipe"}, true);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const ps::tuning::Result b1 = run({"1f1b"}, false), bi = run({"interleaved-1f1b"}, false),
                               bh = run({"zb-h1"}, false), bv = run({"zb-v"}, false);
      total_seconds += secs;
      worst = std::max(worst, secs);
      std::printf("| %d x %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f s |\n", p, d,
                  cell(all.best).c_str(), cell(b1.best).c_str(), cell(bi.best).c_str(),
                  cell(bh.best).c_str(), cell(bv.best).c_str(), speedup(all.best, b1.best).c_str(),
                  speedup(all.best, bi.best).c_str(), speedup(all.best, bh.best).c_str(),
                  speedup(all.best, bv.best).c_str(), secs);
      std::fflush(stdout);
    }
  }
  std::printf("\nSearch with every knob: %.1f s in all, %.1f s for the slowest row.\n",
              total_seconds, worst);
  std::printf(
      "\nTo compare with (not a target): MEPipe (EuroSys '25) reports up to 1.68x, 1.35x on "
      "average, over 1F1B, VPP, ZB and ZBV on 64 RTX 4090s.\n");
  return 0;
}
