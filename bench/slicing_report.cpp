// The slicing report: where to cut the sequence. A Llama-2-7B-like model (the llama2-7b
// preset) at 4096 and 8192 tokens on RTX 4090s (TransformerCost), p = 8 and 16 ranks,
// m = 2p microbatches, seq-1f1b, slice-pipe (2 chunks per rank) and gpipe over slices
// (TeraPipe's order) with K = 4 and 8 slices: step time (makespan) with uniform slices
// (equal tokens), balanced slices (equal forward time under causal attention) and TeraPipe's
// slices (least Σ t_k + (p − 1)·max t_k). Prints markdown, and per schedule in how many
// configurations balanced slices beat uniform ones.
//
//   build/default/bench/slicing_report
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/slice_pipe.hpp"

namespace ps = pipesched;

namespace {

std::string join(const std::vector<int>& lengths) {
  std::string out;
  for (int t : lengths)
    out += (out.empty() ? "" : ", ") + std::to_string(t);
  return out;
}

ps::Schedule generate(const std::string& name, const ps::Problem& problem) {
  if (name == "seq-1f1b") return ps::schedule::seq_1f1b(problem);
  if (name == "slice-pipe") return ps::schedule::slice_pipe(problem);
  return ps::schedule::gpipe(problem);
}

// Balanced against uniform over the configurations of one schedule.
struct Tally {
  int rows = 0, wins = 0;
  double best = 1e300, worst = 0;  // balanced / uniform
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: slicing_report (no options; prints markdown)\n");
    return std::string(argv[1]) == "--help" ? 0 : 2;
  }
  const auto started = std::chrono::steady_clock::now();
  const char* schedules[] = {"seq-1f1b", "slice-pipe", "gpipe"};
  std::map<std::string, Tally> tally;
  for (int sequence : {4096, 8192}) {
    ps::TransformerCost base{
        ps::presets::find_model("llama2-7b"), ps::presets::find_device("rtx-4090"), {}};
    base.model.sequence = sequence;
    std::printf("\n### llama2-7b, sequence %d, rtx-4090\n\n", sequence);
    std::printf(
        "| schedule | p | m | K | uniform (s) | balanced (s) | balanced / uniform | "
        "TeraPipe (s) | TeraPipe / uniform | balanced lengths | TeraPipe lengths |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for (int p : {8, 16}) {
      const int m = 2 * p;
      for (const char* name : schedules) {
        for (int k : {4, 8}) {
          const ps::Schedule s = generate(name, {.ranks = p, .microbatches = m, .slices = k});
          auto makespan = [&](ps::SlicingMode mode, std::vector<int>& lengths) {
            const ps::TransformerCost cost = ps::with_slicing(base, mode, k, p);
            lengths = cost.slice_lengths;
            return ps::simulate(s, cost).makespan;
          };
          std::vector<int> uniform_lengths, balanced_lengths, terapipe_lengths;
          const double uniform = makespan(ps::SlicingMode::Uniform, uniform_lengths);
          const double balanced = makespan(ps::SlicingMode::Balanced, balanced_lengths);
          const double terapipe = makespan(ps::SlicingMode::TeraPipe, terapipe_lengths);
          const double ratio = balanced / uniform;
          Tally& t = tally[name];
          ++t.rows;
          t.wins += balanced < uniform;
          t.best = std::min(t.best, ratio);
          t.worst = std::max(t.worst, ratio);
          std::printf("| %s | %d | %d | %d | %.4f | %.4f | %.4f | %.4f | %.4f | %s | %s |\n", name,
                      p, m, k, uniform, balanced, ratio, terapipe, terapipe / uniform,
                      join(balanced_lengths).c_str(), join(terapipe_lengths).c_str());
        }
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("\n| schedule | balanced faster than uniform | balanced / uniform |\n");
  std::printf("|---|---:|---:|\n");
  for (const char* name : schedules) {
    const Tally& t = tally[name];
    std::printf("| %s | %d of %d | %.4f to %.4f |\n", name, t.wins, t.rows, t.best, t.worst);
  }
  std::printf("\n(%.1f s)\n", seconds);
  return 0;
}
