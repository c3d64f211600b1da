// expect: pipesched::plan: two placement:: policies given; pass at most one
// Two instances of one template are still two placements.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::Interleaved1F1B, placement::Interleaved<2>, placement::Interleaved<4>>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
