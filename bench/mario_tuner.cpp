// The Mario tuner report: for GPT-3 13B and Llama 2 13B pipelined over 16 and 32 GPUs of
// 24 GB (RTX 4090), 40 GB (A100 40GB) and 80 GB (A100 80GB), the tuner's fastest plan without
// checkpointing, with conventional checkpointing (selective or full) and with Mario, under
// TransformerCost with each rank's usable device memory (less the preset's reserve) minus its
// weights, gradients and optimizer state as its activation budget; and, as the baseline of the
// paper's "with checkpointing" figure, the fastest plan with full checkpointing. Prints one
// markdown table per model.
//
//   build/default/bench/mario_tuner [--quick] [--terms T]
//
// --quick: 16 GPUs only and a global batch of 64 sequences (instead of 16 and 32 GPUs, 128).
// --terms: which cost-model terms apply (bench/cost_terms.hpp; default all).
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cost_terms.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// "1f1b, 128 mb of 1, mario (325 R): 10.813 s", or `absent`.
std::string cell(const std::optional<ps::tuning::Plan>& p, const char* absent) {
  if (!p) return absent;
  char t[32];
  std::snprintf(t, sizeof t, "%.3f s", p->makespan);
  return ps::describe(*p) + ": **" + t + "**";
}

std::string speedup(const std::optional<ps::tuning::Plan>& mario,
                    const std::optional<ps::tuning::Plan>& other) {
  if (!mario || !other) return "-";
  char t[32];
  std::snprintf(t, sizeof t, "%.3fx", other->makespan / mario->makespan);
  return t;
}

// When the weights, gradients and optimizer state of some rank alone exceed the device with
// one stage per rank: a sentence saying so, else empty.
std::string weights_overflow(const ps::ModelShape& model, const ps::DeviceSpec& device, int p) {
  const ps::TransformerCost cost{model, device, {}};
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = p, .microbatches = 1});
  const ps::CostContext ctx{s.problem, s.placement, 1};
  if (model.layers < p) return "fewer layers than GPUs";
  for (int r = 0; r < p; ++r) {
    const double fixed = cost.static_bytes(ctx, r);
    if (fixed >= device.usable_memory()) {
      char t[160];
      std::snprintf(t, sizeof t,
                    "does not fit at all: weights, gradients and optimizer state of rank %d "
                    "alone take %.1f GiB of %.1f GiB usable",
                    r, fixed / gib, device.usable_memory() / gib);
      return t;
    }
  }
  return {};
}

struct Mean {
  double sum = 0;
  int n = 0;
  void add(const std::optional<ps::tuning::Plan>& mario,
           const std::optional<ps::tuning::Plan>& other) {
    if (!mario || !other) return;
    sum += other->makespan / mario->makespan;
    ++n;
  }
  std::string text() const {
    if (n == 0) return "no row to compare";
    char t[64];
    std::snprintf(t, sizeof t, "%.3fx over %d row%s", sum / n, n, n == 1 ? "" : "s");
    return t;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const ps::bench::ReportArgs args =
      ps::bench::read_report_args(argc, argv,
                                  "usage: mario_tuner [--quick] [--terms T]\n"
                                  "  --quick    16 GPUs only and a global batch of 64 sequences\n",
                                  false);
  const bool quick = args.quick;
  const ps::bench::CostTerms terms = args.terms;
  const int global_batch = quick ? 64 : 128;
  const std::vector<int> gpu_counts = quick ? std::vector<int>{16} : std::vector<int>{16, 32};
  const ps::tuning::Request defaults;

  std::printf("# Mario tuner report\n\n");
  std::printf(
      "Pipeline over all GPUs (p = GPU count), global batch %d sequences at the model's "
      "sequence length; TransformerCost (16-bit activations, flash attention); each rank's "
      "activation budget is its usable device memory (less the reserve) minus 16 bytes per "
      "parameter of its stages "
      "(weights, gradients, Adam). Searched: 1f1b, interleaved-1f1b (2 and 4 chunks), zb-h1; "
      "microbatch sizes 1, 2, 4, 8; no checkpointing, selective and Mario (full as a "
      "fallback). Speedups are step-time ratios (same global batch): the other plan's step "
      "time over Mario's; \"Mario vs full\" compares with the fastest plan that recomputes "
      "every forward. Plans read: base, microbatches of size, checkpointing (recomputes). "
      "\"search\" is the tuner's time for the row. Cost-model terms: %s.\n",
      global_batch, ps::bench::describe(terms).c_str());

  Mean vs_none_all, vs_conv_all, vs_full_all;
  double total_seconds = 0, slowest = 0;
  for (const char* model_name : {"gpt3-13b", "llama2-13b"}) {
    const ps::ModelShape model = ps::bench::with_terms(ps::presets::find_model(model_name), terms);
    std::printf("\n## %s (sequence %d)\n\n", model_name, model.sequence);
    std::printf(
        "| GPUs | device | best without checkpointing | best conventional | best Mario | "
        "Mario vs none | Mario vs conventional | Mario vs full | search |\n");
    std::printf("|---:|---|---|---|---|---:|---:|---:|---:|\n");
    Mean vs_none, vs_conv, vs_full;
    for (int gpus : gpu_counts)
      for (const char* device_name : {"rtx-4090", "a100-40gb", "a100-80gb"}) {
        const ps::DeviceSpec device =
            ps::bench::with_terms(ps::presets::find_device(device_name), terms);
        const std::string overflow = weights_overflow(model, device, gpus);
        if (!overflow.empty()) {
          std::printf("| %d | %s | %s | | | | | | |\n", gpus, device_name, overflow.c_str());
          continue;
        }
        ps::tuning::Request req = defaults;
        req.ranks = gpus;
        req.global_batch = global_batch;
        const ps::tuning::Result r = ps::tune(req, model, device);
        // Full checkpointing on its own (the tuner keeps it as a fallback only): the
        // baseline of the paper's "with checkpointing" figure.
        ps::tuning::Request full_req = req;
        full_req.checkpoints = {ps::CheckpointMode::Full};
        full_req.full_fallback = false;
        const ps::tuning::Result full = ps::tune(full_req, model, device);
        total_seconds += r.seconds;
        slowest = std::max(slowest, r.seconds);
        const char* absent = r.best ? "does not fit" : "no plan fits";
        std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %.2f s |\n", gpus, device_name,
                    cell(r.best_without_checkpoint, "does not fit").c_str(),
                    cell(r.best_conventional, absent).c_str(), cell(r.best_mario, absent).c_str(),
                    speedup(r.best_mario, r.best_without_checkpoint).c_str(),
                    speedup(r.best_mario, r.best_conventional).c_str(),
                    speedup(r.best_mario, full.best).c_str(), r.seconds);
        vs_none.add(r.best_mario, r.best_without_checkpoint);
        vs_conv.add(r.best_mario, r.best_conventional);
        vs_full.add(r.best_mario, full.best);
        vs_none_all.add(r.best_mario, r.best_without_checkpoint);
        vs_conv_all.add(r.best_mario, r.best_conventional);
        vs_full_all.add(r.best_mario, full.best);
      }
    std::printf("\nMean Mario speedup: vs no checkpointing %s; vs conventional %s; vs full %s.\n",
                vs_none.text().c_str(), vs_conv.text().c_str(), vs_full.text().c_str());
  }
  std::printf("\nOver both models: Mario vs no checkpointing %s; vs conventional %s; vs full %s.\n",
              vs_none_all.text().c_str(), vs_conv_all.text().c_str(), vs_full_all.text().c_str());
  std::printf("Search time: %.2f s in all, %.2f s for the slowest row.\n", total_seconds, slowest);
  std::printf(
      "\nTo compare with (not a target): the Mario paper (PPoPP '25) reports 1.16x over 1F1B, "
      "Chimera and Interleave without checkpointing and 1.57x over them with checkpointing, "
      "on its own clusters and workloads.\n");
  return 0;
}
