// expect: orders of that rule need placement::VShape<2>; pass it or leave placement out
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::ZeroBubbleV, placement::Linear>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
