// expect: SlicePipeWarmup<N>: N is the number of forwards rank 0 runs before its first backward
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::SlicePipeWarmup<0>, slicing::Uniform<4>>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
