// expect: a list-scheduling rule's admit must be `bool admit(const RankState&, const ReadyAction&)
// const` An admit that takes the wrong arguments is named, not silently ignored.
#include "pipesched/schedule/list_schedule.hpp"

struct WrongAdmit {
  int priority(const pipesched::RankState&, const pipesched::ReadyAction&) const { return 0; }
  bool admit(int rank) const { return rank >= 0; }
};

int main() {
  using namespace pipesched;
  (void)list_schedule(
      {.problem = {.ranks = 2, .microbatches = 2}, .placement = Placement::linear(2)},
      WrongAdmit{});
}
