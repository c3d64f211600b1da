// Builds a 1F1B schedule through an installed pipesched and checks its size, and that the
// installed headers have the package's version.
#include <cstdio>
#include <cstring>

#include "pipesched/pipesched.hpp"
#include "pipesched/version.hpp"

int main() {
  if (std::strcmp(pipesched::version_string, PIPESCHED_CONSUMER_PACKAGE_VERSION) != 0) {
    std::fprintf(stderr, "pipesched consumer: headers say version %s, the CMake package %s\n",
                 pipesched::version_string, PIPESCHED_CONSUMER_PACKAGE_VERSION);
    return 1;
  }
  using Plan = pipesched::plan<pipesched::order::OneFOneB, pipesched::wgrad::Fused>;
  const pipesched::Schedule s = Plan::generate(pipesched::Problem{.ranks = 4, .microbatches = 8});
  // One forward and one backward per stage and microbatch: 2 × 4 × 8.
  const std::size_t expected = 2 * 4 * 8;
  if (s.action_count() != expected || s.rank_count() != 4) {
    std::fprintf(stderr, "pipesched consumer: %s has %zu actions on %d ranks; expected %zu on 4\n",
                 s.name.c_str(), s.action_count(), s.rank_count(), expected);
    return 1;
  }
  std::printf("pipesched consumer: pipesched %s, %s, %zu actions on %d ranks\n",
              pipesched::version_string, s.name.c_str(), s.action_count(), s.rank_count());
  return 0;
}
