// expect: every knob must be a policy from order::, placement::, checkpoint::, slicing:: or wgrad::
// Numbers are run-time values in Problem, not knobs.
#include <type_traits>

#include "pipesched/policy/plan.hpp"

using Plan = pipesched::plan<pipesched::order::GPipe, std::integral_constant<int, 8>>;

int main() {
  return Plan::generate(pipesched::Problem{.ranks = 2}).rank_count();
}
