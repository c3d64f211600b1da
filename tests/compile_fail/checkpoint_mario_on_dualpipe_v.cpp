// expect: runs only on an order whose mario_applies is true
// The rule holds for every other order; naming the plan's types is enough to trip it.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;

int main() {
  return plan<checkpoint::Mario, order::DualPipeV>::placement::chunks;
}
