// expect: Mario hides recomputes in the bubbles of a one-forward-one-backward rhythm
// GPipe has no steady one-forward-one-backward phase for Mario to plan on, even with the
// budget and cost model the Mario overload asks for.
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::GPipe, checkpoint::Mario>;

int main() {
  MemoryBudget budget;
  budget.all = 2;
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}, UniformCost{}, budget).rank_count();
}
