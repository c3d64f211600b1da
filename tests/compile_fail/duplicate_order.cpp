// expect: pipesched::plan: two order:: policies given; pass at most one
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::GPipe, wgrad::Fused, order::OneFOneB>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
