// expect: this order policy has no generator
// A user's order derived from order::Custom that forgot its generate(): plan<> says what to
// add, instead of pointing into a library header.
#include "pipesched/policy/plan.hpp"

using namespace pipesched;
struct Mine : order::Custom {
  static constexpr std::string_view name = "mine";
};

int main() {
  return plan<Mine>::generate(Problem{.ranks = 2, .microbatches = 4}).rank_count();
}
