// expect: wgrad::Fine<Parts> places weight-gradient parts in the waits a cost model predicts
// Fine's parts are placed with a cost model, which generate(problem) does not have.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;

int main() {
  return plan<order::ZeroBubbleH1, wgrad::Fine<4>>::generate(Problem{.ranks = 2, .microbatches = 4})
      .rank_count();
}
