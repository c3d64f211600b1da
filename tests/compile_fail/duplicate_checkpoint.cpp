// expect: pipesched::plan: two checkpoint:: policies given; pass at most one
// The same policy twice is a duplicate too.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<checkpoint::None, order::OneFOneB, checkpoint::None>;

int main() {
  return Plan::generate(Problem{.ranks = 2}).rank_count();
}
