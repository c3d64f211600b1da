// expect: a checkpoint policy needs `template <cost_model Cost> static Schedule apply(
// A policy of one's own that forgets its customization point is named in one message.
#include "pipesched/policy/plan.hpp"

struct Forgetful : pipesched::checkpoint::Custom {
  static constexpr std::string_view name = "forgetful";
};

int main() {
  pipesched::Problem p;
  p.ranks = 2;
  p.microbatches = 4;
  (void)pipesched::plan<pipesched::order::OneFOneB, Forgetful>::generate(p);
}
