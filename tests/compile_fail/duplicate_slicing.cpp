// expect: pipesched::plan: two slicing:: policies given; pass at most one
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<slicing::Whole, slicing::Whole>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
