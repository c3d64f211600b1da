// expect: chooses what to recompute from a memory budget and a cost model: call generate(problem, cost, budget)
// Selective checkpointing chooses what to recompute from a budget; generate(Problem) has none.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::OneFOneB, checkpoint::Selective>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
