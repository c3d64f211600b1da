// The host device: actions run on the calling thread; marks are steady-clock readings.
#pragma once

#include <chrono>

namespace pipesched {

//! Runs work on the CPU thread that calls it. Satisfies `device`.
struct HostDevice {
  using mark_type = std::chrono::steady_clock::time_point;  //!< a steady-clock reading
  //! The steady clock now.
  mark_type mark() const { return std::chrono::steady_clock::now(); }
  //! Nothing to wait for: work on the host is done when it returns.
  void synchronize() const {}
  //! Seconds from `a` to `b`.
  double seconds_between(const mark_type& a, const mark_type& b) const {
    return std::chrono::duration<double>(b - a).count();
  }
};

}  // namespace pipesched
