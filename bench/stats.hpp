// Statistics the benchmarks share: the median, and Kendall's rank correlation.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace pipesched::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Kendall's τ-b of two orders: concordant minus discordant pairs over the pairs not tied.
inline double kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  double concordant = 0, discordant = 0, tied_x = 0, tied_y = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = i + 1; j < x.size(); ++j) {
      const double a = x[i] - x[j], b = y[i] - y[j];
      if (a == 0 && b == 0) continue;
      if (a == 0) {
        ++tied_x;
      } else if (b == 0) {
        ++tied_y;
      } else if ((a > 0) == (b > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  const double n1 = concordant + discordant + tied_x, n2 = concordant + discordant + tied_y;
  return n1 > 0 && n2 > 0 ? (concordant - discordant) / std::sqrt(n1 * n2) : 0.0;
}

}  // namespace pipesched::bench
