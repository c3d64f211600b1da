// expect: cannot use wgrad::Fused; pass wgrad::Split or leave wgrad out
// Zero Bubble orders exist to move weight gradients; a fused backward leaves nothing to move.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::ZeroBubbleH1, wgrad::Fused>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
