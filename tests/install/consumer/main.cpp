// Builds a 1F1B schedule through an installed pipesched and checks its size.
#include <cstdio>

#include "pipesched/pipesched.hpp"

int main() {
  using Plan = pipesched::plan<pipesched::order::OneFOneB, pipesched::wgrad::Fused>;
  const pipesched::Schedule s = Plan::generate(pipesched::Problem{.ranks = 4, .microbatches = 8});
  // One forward and one backward per stage and microbatch: 2 × 4 × 8.
  const std::size_t expected = 2 * 4 * 8;
  if (s.action_count() != expected || s.rank_count() != 4) {
    std::fprintf(stderr, "pipesched consumer: %s has %zu actions on %d ranks; expected %zu on 4\n",
                 s.name.c_str(), s.action_count(), s.rank_count(), expected);
    return 1;
  }
  std::printf("pipesched consumer: %s, %zu actions on %d ranks\n", s.name.c_str(), s.action_count(),
              s.rank_count());
  return 0;
}
