// The pipesched demo: every built-in schedule generated for one problem, validated,
// lowered to sends and receives, simulated, and printed side by side.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "pipesched/pipesched.hpp"

int main(int argc, char** argv) {
  using namespace pipesched;
  int ranks = 4, microbatches = 8;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--ranks" || a == "--microbatches") && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "pipesched_demo: %s needs a whole number from 1 to 4096, got '%s'\n",
                     a.c_str(), argv[i]);
        return 2;
      }
      (a == "--ranks" ? ranks : microbatches) = static_cast<int>(v);
    } else {
      std::fprintf(stderr,
                   "usage: pipesched_demo [--ranks P] [--microbatches M]\n"
                   "Generates every built-in schedule for P ranks and M microbatches, validates\n"
                   "it, lowers it to sends/receives and simulates it (f=1, b=2, w=1).\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }

  std::printf("pipesched demo: %d ranks, %d microbatches, UniformCost f=1 b=2 w=1\n\n", ranks,
              microbatches);
  std::printf("%-17s %-20s %8s %9s %8s %9s  %s\n", "schedule", "placement", "actions", "makespan",
              "bubble", "max peak", "status");
  const UniformCost cost{};
  int failures = 0;
  for (const GeneratorInfo& g : generators()) {
    Schedule s;
    try {
      s = g.generate(Problem{.ranks = ranks, .microbatches = microbatches}, g.default_wgrad);
    } catch (const invalid_problem& e) {
      std::printf("%-17s refused: %s\n", std::string(g.name).c_str(), e.what());
      continue;
    }
    ValidationReport rep = check(s);
    Schedule lowered = lower_communication(s);
    ValidationReport rep_lowered = check(lowered);
    SimulationResult r = simulate(s, cost);
    const bool ok = rep.ok() && rep_lowered.ok() && !r.deadlock;
    failures += !ok;
    std::printf("%-17s %-20s %8zu %9.2f %7.1f%% %9.3f  %s\n", std::string(g.name).c_str(),
                s.placement.describe().c_str(), s.action_count(), r.makespan, 100 * r.bubble_ratio,
                r.peak_memory_max, ok ? "valid" : "INVALID");
    if (!ok) std::printf("%s\n", (rep.ok() ? rep_lowered : rep).summary().c_str());
  }

  // One schedule in full: 1F1B, as PyTorch's CSV would hold it (one row per rank).
  Schedule one = schedule::one_f_one_b({.ranks = ranks, .microbatches = microbatches});
  std::printf("\n1f1b, one row per rank (PyTorch CSV form):\n%s", to_csv(one).c_str());
  return failures == 0 ? 0 : 1;
}
