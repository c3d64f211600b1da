// The Mario report: Selective (conventional) checkpointing against Mario on 1F1B,
// Interleaved 1F1B (V = 2) and Zero Bubble H1 bases, UniformCost f = 1, b = 2, w = 1, r = 1,
// boundary 0.05, budgets in units of one microbatch's activations. Prints the markdown tables
// of docs/mario.md and, with --svg DIR, writes a Mario schedule beside its Selective
// counterpart.
//
//   build/default/bench/mario_report [--svg DIR]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "pipesched/io/svg.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/registry.hpp"

namespace ps = pipesched;

int main(int argc, char** argv) {
  std::string svg_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--svg" && i + 1 < argc) {
      svg_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: mario_report [--svg DIR]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const ps::UniformCost cost{.f = 1, .b = 2, .w = 1, .r = 1, .boundary = 0.05};
  for (const char* name : {"1f1b", "interleaved-1f1b", "zb-h1"}) {
    const ps::GeneratorInfo& g = ps::find_generator(name);
    std::printf("\n### Base: %s%s\n\n", name,
                std::string(name) == "interleaved-1f1b" ? " (V = 2)" : "");
    std::printf(
        "| p | m | budget | no checkpoint | Selective | Mario | Selective overhead | Mario "
        "overhead | Mario / Selective | R (Sel / Mario) | Mario search |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double sum_ratio = 0, sum_sel = 0, sum_mario = 0;
    int n = 0;
    for (int p : {4, 8, 16})
      for (int m : {p, 2 * p, 4 * p})
        for (double b : {2.0, p / 2.0}) {
          const ps::Schedule base = g.generate({.ranks = p, .microbatches = m}, g.default_wgrad);
          const double t0 = ps::simulate(base, cost).makespan;
          const ps::Schedule sel = ps::checkpoint_selective(base, cost, ps::MemoryBudget{.all = b});
          const auto start = std::chrono::steady_clock::now();
          const ps::Schedule mar = ps::checkpoint_mario(base, cost, ps::MemoryBudget{.all = b});
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const ps::SimulationResult rs = ps::simulate(sel, cost), rm = ps::simulate(mar, cost);
          auto recomputes = [](const ps::Schedule& s) {
            int k = 0;
            for (const auto& l : s.ranks)
              for (const ps::Action& a : l)
                k += a.kind == ps::OpKind::R;
            return k;
          };
          const double os = rs.makespan / t0 - 1, om = rm.makespan / t0 - 1;
          const double ratio = os > 0 ? om / os : 0;
          sum_ratio += ratio;
          sum_sel += os;
          sum_mario += om;
          ++n;
          std::printf(
              "| %d | %d | %g | %.1f | %.1f | %.1f | %.2f %% | %.2f %% | %.2f | %d / %d | %.0f ms "
              "|\n",
              p, m, b, t0, rs.makespan, rm.makespan, 100 * os, 100 * om, ratio, recomputes(sel),
              recomputes(mar), 1e3 * secs);
        }
    std::printf(
        "\nMean over the %d grid points of Mario's overhead / Selective's: **%.3f**; "
        "mean Mario overhead / mean Selective overhead: **%.3f** (%.2f %% vs %.2f %%).\n",
        n, sum_ratio / n, sum_mario / sum_sel, 100 * sum_mario / n, 100 * sum_sel / n);
  }
  if (!svg_dir.empty()) {
    const ps::Schedule base = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
    const ps::MemoryBudget budget{.all = 2.0};
    const ps::Schedule sel = ps::checkpoint_selective(base, cost, budget);
    const ps::Schedule mar = ps::checkpoint_mario(base, cost, budget);
    ps::SvgOptions o;
    o.memory_unit = "microbatches";
    o.title = "Selective checkpointing, 1F1B, 4 ranks, 8 microbatches, budget 2";
    std::ofstream(svg_dir + "/selective_1f1b_4x8.svg")
        << ps::render_svg(sel, ps::simulate(sel, cost), o);
    o.title = "Mario, 1F1B base, 4 ranks, 8 microbatches, budget 2";
    std::ofstream(svg_dir + "/mario_1f1b_4x8.svg")
        << ps::render_svg(mar, ps::simulate(mar, cost), o);
    std::printf("\nwrote %s/selective_1f1b_4x8.svg and %s/mario_1f1b_4x8.svg\n", svg_dir.c_str(),
                svg_dir.c_str());
  }
  return 0;
}
