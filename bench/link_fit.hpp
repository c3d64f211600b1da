// The fit of the cost model's formulas for a path (DeviceSpec::message_seconds) to a pair's
// measured one-way times, which the link microbenchmarks share (bench/mpi_links.cpp over MPI,
// bench/gpu/gpu_links.cu on GPUs).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "pipesched/analysis/device_spec.hpp"

namespace pipesched::bench::links {

// A path formula fitted to a pair's times: DeviceSpec::message_seconds' Direct path, latency
// + bytes / bandwidth, or its Host path (`staged`), 2 · latency + (bytes + min(bytes,
// 512 KiB)) / bandwidth.
struct Fit {
  double latency = 0;
  double bandwidth = 0;
  bool staged = false;
  double seconds(double bytes) const {
    return staged ? detail::staged_send(bytes, bandwidth, latency) : latency + bytes / bandwidth;
  }
};

// The message sizes: 8 B, then powers of 4 up to `largest`, and `largest`.
inline std::vector<std::size_t> sizes_up_to(std::size_t largest) {
  std::vector<std::size_t> out;
  for (std::size_t b = 8; b < largest; b *= 4)
    out.push_back(b);
  out.push_back(largest);
  return out;
}

// The formula (`staged` or not) through the smallest and the largest size's times.
inline Fit fit_through_ends(const std::vector<std::size_t>& sizes, const std::vector<double>& t,
                            bool staged) {
  Fit f;
  f.staged = staged;
  f.latency = staged ? t.front() / 2 : t.front();
  const double big = static_cast<double>(sizes.back());
  const double rest = t.back() - (staged ? 2 : 1) * f.latency;
  f.bandwidth =
      (staged ? big + std::min(big, detail::host_staging_chunk) : big) / std::max(rest, 1e-12);
  return f;
}

// The largest factor by which `f` misses a measured time, either way.
inline double worst_miss(const Fit& f, const std::vector<std::size_t>& sizes,
                         const std::vector<double>& t) {
  double worst = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double r = t[i] / f.seconds(static_cast<double>(sizes[i]));
    worst = std::max(worst, std::max(r, 1 / r));
  }
  return worst;
}

}  // namespace pipesched::bench::links
