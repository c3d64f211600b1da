// expect: cannot run on a V-shape placement; pass placement::Interleaved<V>
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::LoopedBFS, placement::VShape<2>>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
