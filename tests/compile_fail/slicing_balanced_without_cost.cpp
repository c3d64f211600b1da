// expect: slicing::Balanced chooses slice lengths with a cost model: call generate(problem
// Balanced slice lengths come from a cost model; generate(Problem) has none.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::SeqOneFOneB, slicing::Balanced<4>>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
