// expect: this order schedules whole microbatches and cannot take more than one slice per
// 1F1B's warm-up and steady state count whole microbatches; slices need a slice-level order.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
using Plan = plan<order::OneFOneB, slicing::Uniform<4>>;

int main() {
  return Plan::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
