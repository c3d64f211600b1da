// expect: slicing::Uniform<K>: K is the number of slices per microbatch and must be at least 1
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::SeqOneFOneB, slicing::Uniform<0>>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
