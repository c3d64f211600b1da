// expect: a list-scheduling rule needs `priority(const RankState&, const ReadyAction&) const` or
// `key(const ReadyAction&) const` A rule that says what to admit but not what goes first is named
// in the error.
#include "pipesched/schedule/list_schedule.hpp"

struct OnlyAdmits {
  bool admit(const pipesched::RankState&, const pipesched::ReadyAction&) const { return true; }
};

int main() {
  using namespace pipesched;
  (void)list_schedule(
      {.problem = {.ranks = 2, .microbatches = 2}, .placement = Placement::linear(2)},
      OnlyAdmits{});
}
