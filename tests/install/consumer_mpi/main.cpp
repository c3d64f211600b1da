// Starts MPI through an installed pipesched's mpi::Session and checks that every rank sees
// the expected number of ranks and can reach the others (a sum of the ranks).
#include <cstdio>
#include <cstdlib>

#include "pipesched/transport/mpi/mpi_session.hpp"

int main(int argc, char** argv) {
  pipesched::mpi::Session mpi(argc, argv);
  const int expected = argc > 1 ? std::atoi(argv[1]) : 1;
  int rank_sum = 0;
  int rank = mpi.rank();
  MPI_Allreduce(&rank, &rank_sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const int expected_sum = mpi.size() * (mpi.size() - 1) / 2;
  if (mpi.size() != expected || rank_sum != expected_sum) {
    std::fprintf(stderr,
                 "pipesched MPI consumer, rank %d: %d ranks summing to %d; expected %d ranks "
                 "summing to %d\n",
                 mpi.rank(), mpi.size(), rank_sum, expected, expected * (expected - 1) / 2);
    return 1;
  }
  if (mpi.rank() == 0) std::printf("pipesched MPI consumer: %d ranks\n", mpi.size());
  return 0;
}
