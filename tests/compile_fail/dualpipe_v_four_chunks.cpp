// expect: orders of that rule need placement::VShape<2>; pass it or leave placement out
// A V-shape, but not the two-chunk one DualPipeV is defined on.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<placement::VShape<4>, order::DualPipeV>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
