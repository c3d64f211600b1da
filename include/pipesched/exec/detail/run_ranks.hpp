// Runs one function per rank on threads of this process: the first failure aborts the
// transport (so every waiting rank wakes and stops) and is rethrown once all have joined.
#pragma once

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "pipesched/exec/errors.hpp"

namespace pipesched::detail {

template <class Fn, class Abort>
void run_ranks(int ranks, Fn&& fn, Abort&& abort) {
  std::mutex failure_mutex;
  std::exception_ptr failure;
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          fn(r);
        } catch (const transport_aborted&) {
          // Another rank failed first; its error is the one reported.
        } catch (...) {
          {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
          }
          abort();
        }
      });
  }  // joins every thread
  if (failure) std::rethrow_exception(failure);
}

}  // namespace pipesched::detail
