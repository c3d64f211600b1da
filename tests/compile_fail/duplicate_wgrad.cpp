// expect: pipesched::plan: two wgrad:: policies given; pass at most one
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<wgrad::Split, order::ZeroBubbleH2, wgrad::Fused>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
