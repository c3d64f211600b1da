// Compose a schedule from policies, check it, and measure it.
#include <iostream>

#include "pipesched/pipesched.hpp"

int main() {
  using namespace pipesched;
  using Plan = plan<order::Interleaved1F1B, placement::Interleaved<2>>;  // knobs in any order

  Schedule s = Plan::generate(Problem{.ranks = 4, .microbatches = 8});
  validate(s);  // throws invalid_schedule naming the rank, position and rule on any error

  SimulationResult r = simulate(s, UniformCost{.f = 1, .b = 2, .w = 1});
  std::cout << s.name << ": " << s.action_count() << " actions, makespan " << r.makespan
            << ", bubble " << r.bubble_ratio * 100 << "%, peak " << r.peak_memory_max
            << " microbatches of activations\n";
  std::cout << to_csv(lower_communication(s));  // PyTorch's CSV, with sends and receives
  return r.deadlock ? 1 : 0;
}
