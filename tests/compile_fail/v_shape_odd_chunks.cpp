// expect: VShape<V>: a V-shape needs an even number of chunks per rank
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::DualPipeV, placement::VShape<3>>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
