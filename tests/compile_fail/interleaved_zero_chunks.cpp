// expect: Interleaved<V>: V is the number of chunks per rank and must be at least 1
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::Interleaved1F1B, placement::Interleaved<0>>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
