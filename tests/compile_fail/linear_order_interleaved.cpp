// expect: runs one stage per rank and needs placement::Linear
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::GPipe, placement::Interleaved<2>>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
