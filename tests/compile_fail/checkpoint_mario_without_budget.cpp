// expect: chooses what to recompute from a memory budget and a cost model: call generate(problem, cost, budget)
// Mario spends a memory budget on preposed forwards; generate(Problem) has none to spend.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<checkpoint::Mario, order::Interleaved1F1B>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
