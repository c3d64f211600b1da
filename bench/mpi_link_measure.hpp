// Link measurements over MPI that bench/mpi_links.cpp and bench/mpi_fidelity.cpp share: a
// pair's one-way time over message sizes, every pair sending at once, and the fit of the cost
// model's path formulas (DeviceSpec::message_seconds) through the smallest and largest size.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "link_fit.hpp"
#include "stats.hpp"

namespace pipesched::bench::links {

// One-way seconds of a `bytes` message between world ranks `a` and `b` (half the median round
// trip over `repeats` ping-pongs, after one unmeasured); every rank calls it, the rest wait at
// the barrier. The result is broadcast from `a`.
inline double one_way(int a, int b, std::size_t bytes, int repeats, std::vector<char>& buffer) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<double> trips;
  MPI_Barrier(MPI_COMM_WORLD);
  const int count = static_cast<int>(bytes);
  for (int r = 0; r <= repeats; ++r) {
    if (me == a) {
      const auto t0 = std::chrono::steady_clock::now();
      MPI_Send(buffer.data(), count, MPI_BYTE, b, 7, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), count, MPI_BYTE, b, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) trips.push_back(s);
    } else if (me == b) {
      MPI_Recv(buffer.data(), count, MPI_BYTE, a, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_BYTE, a, 7, MPI_COMM_WORLD);
    }
  }
  double out = me == a ? bench::median(trips) / 2 : 0.0;
  MPI_Bcast(&out, 1, MPI_DOUBLE, a, MPI_COMM_WORLD);
  return out;
}

// Seconds until every pair (from[i] -> to[i]) has sent `bytes` `repeats` times at once (the
// median over the repeats of the slowest pair's time), broadcast from rank 0.
inline double all_at_once(const std::vector<int>& from, const std::vector<int>& to,
                          std::size_t bytes, int repeats, std::vector<char>& buffer) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const int count = static_cast<int>(bytes);
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (me == from[i]) MPI_Send(buffer.data(), count, MPI_BYTE, to[i], 9, MPI_COMM_WORLD);
      if (me == to[i])
        MPI_Recv(buffer.data(), count, MPI_BYTE, from[i], 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (r > 0) times.push_back(slowest);
  }
  double out = me == 0 ? bench::median(times) : 0.0;
  MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return out;
}

// Measures the pair (a, b) over `sizes` (after a warm-up pass) and fits both path formulas
// through the smallest and the largest size; keeps the one whose worst miss over the sizes is
// smaller (`direct_only`: the direct one). Rank 0 prints each size's time beside both.
inline Fit measure_pair(const char* what, int a, int b, const std::vector<std::size_t>& sizes,
                        int repeats, bool direct_only, std::vector<char>& buffer) {
  for (std::size_t s : sizes)  // warm up: connections, page faults, the transport's buffers
    (void)one_way(a, b, s, 2, buffer);
  std::vector<double> t;
  for (std::size_t s : sizes)
    t.push_back(one_way(a, b, s, repeats, buffer));
  const Fit direct = fit_through_ends(sizes, t, false), staged = fit_through_ends(sizes, t, true);
  const double miss_direct = worst_miss(direct, sizes, t),
               miss_staged = worst_miss(staged, sizes, t);
  const Fit& kept = direct_only || miss_direct <= miss_staged ? direct : staged;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me == 0) {
    std::printf("%s: ranks %d -> %d, one way (median of %d)\n", what, a, b, repeats);
    std::printf("  %12s %12s %12s %8s %12s %8s\n", "bytes", "measured us", "direct us", "ratio",
                "host us", "ratio");
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const double x = static_cast<double>(sizes[i]);
      std::printf("  %12zu %12.2f %12.2f %8.3f %12.2f %8.3f\n", sizes[i], t[i] * 1e6,
                  direct.seconds(x) * 1e6, t[i] / direct.seconds(x), staged.seconds(x) * 1e6,
                  t[i] / staged.seconds(x));
    }
    std::printf(
        "  direct: L + bytes / B, L = %.2f us, B = %.3g B/s, worst miss %.2fx\n"
        "  host:   2 L + (bytes + min(bytes, 512 KiB)) / B, L = %.2f us, B = %.3g B/s, worst "
        "miss %.2fx\n"
        "  kept: %s\n",
        direct.latency * 1e6, direct.bandwidth, miss_direct, staged.latency * 1e6, staged.bandwidth,
        miss_staged,
        direct_only   ? "direct (the network's formula)"
        : kept.staged ? "host"
                      : "direct");
  }
  return kept;
}

}  // namespace pipesched::bench::links
