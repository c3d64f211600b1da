// expect: use a slice-level order, whose takes_slices is true, or slicing::Whole
// The same rule with Balanced slicing on an order with two chunks per rank.
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<slicing::Balanced<2>, order::ZeroBubbleV>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}, UniformCost{}, MemoryBudget{})
      .rank_count();
}
