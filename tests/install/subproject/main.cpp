// A program of a project that builds pipesched as its subproject: a schedule through the core
// target and, where the MPI transport is built, a call into the MPI library it links.
#include <cstdio>

#include "pipesched/pipesched.hpp"
#ifdef PIPESCHED_PARENT_WITH_MPI
#include "pipesched/transport/mpi/mpi_session.hpp"
#endif

int main() {
  using Plan = pipesched::plan<pipesched::order::GPipe, pipesched::wgrad::Fused>;
  const pipesched::Schedule s = Plan::generate(pipesched::Problem{.ranks = 2, .microbatches = 4});
  // One forward and one backward per stage and microbatch: 2 × 2 × 4.
  if (s.action_count() != 2 * 2 * 4) {
    std::fprintf(stderr, "pipesched parent: %s has %zu actions; expected 16\n", s.name.c_str(),
                 s.action_count());
    return 1;
  }
#ifdef PIPESCHED_PARENT_WITH_MPI
  int major = 0;
  int minor = 0;
  MPI_Get_version(&major, &minor);  // allowed before MPI_Init: starts no MPI job
  if (major < 3) {
    std::fprintf(stderr, "pipesched parent: MPI %d.%d; the MPI transport needs MPI 3\n", major,
                 minor);
    return 1;
  }
  std::printf("pipesched parent: %s, %zu actions; MPI %d.%d\n", s.name.c_str(), s.action_count(),
              major, minor);
#else
  std::printf("pipesched parent: %s, %zu actions\n", s.name.c_str(), s.action_count());
#endif
  return 0;
}
