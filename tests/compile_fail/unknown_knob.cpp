// expect: every knob must be a policy from order::, placement::, checkpoint::, slicing:: or wgrad::
// A type from no policy family is not a knob.
#include "pipesched/policy/plan.hpp"

struct NotAPolicy {};

using Plan = pipesched::plan<pipesched::order::OneFOneB, NotAPolicy>;

int main() {
  return Plan::generate(pipesched::Problem{.ranks = 2}).rank_count();
}
