// expect: success
// The control for the checkpoint compile-fail files: the accepted checkpoint combinations
// compile, so those files fail for the reason they name.
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/policy/policy.hpp"

using namespace pipesched;

int main() {
  const Problem p{.ranks = 2, .microbatches = 4};
  MemoryBudget budget;
  budget.all = 2;
  std::size_t n = plan<checkpoint::Full, order::GPipe>::generate(p).action_count();
  n += plan<checkpoint::Full, order::DualPipeV>::generate(p, UniformCost{}, budget).action_count();
  n += plan<checkpoint::Selective, order::ZeroBubbleV>::generate(p, UniformCost{}, budget)
           .action_count();
  n += plan<checkpoint::Mario>::generate(p, UniformCost{}, budget).action_count();
  n += plan<checkpoint::Mario, order::Interleaved1F1B>::generate(p, UniformCost{}, budget)
           .action_count();
  n += plan<order::ZeroBubbleH1, checkpoint::Mario>::generate(p, UniformCost{}, budget)
           .action_count();
  return static_cast<int>(n == 0);
}
