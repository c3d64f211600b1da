// A small pool for independent work items: work(i) for every i in [0, n) on a number of
// threads (the caller's among them), a stop test before each item, and the first exception
// an item throws passed back to the caller once every thread is done.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace pipesched::detail {

//! The threads to run on: `requested` when positive, else one per core (at least 1).
inline int thread_count(int requested) {
  return requested > 0 ? requested
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

//! Runs `work(i)` for i in [0, n) on `threads` threads: the caller's and up to threads - 1
//! started for the call (no more than there are items). Each thread takes the next index as it
//! finishes an item, so indices are handed out in increasing order, and with one thread the
//! items run in order on the caller's thread.
//!
//! Stop: before taking an index a thread calls `stop()`, which must be safe to call from
//! several threads at once; once it returns true, or once an item has thrown, no further index
//! is handed out. Items already running finish (an item that must end early checks for itself).
//!
//! Errors: the first exception an item throws is rethrown here after every thread has joined;
//! later ones are dropped.
template <class Work, class Stop>
void parallel_for(std::size_t n, int threads, Work&& work, Stop&& stop) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::atomic<bool> failed{false};
  auto run = [&] {
    for (;;) {
      if (failed.load() || stop()) return;
      const std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        work(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        failed = true;
      }
    }
  };
  const int extra =
      static_cast<int>(std::min<std::size_t>(n, static_cast<std::size_t>(threads))) - 1;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(std::max(extra, 0)));
  for (int t = 0; t < extra; ++t)
    pool.emplace_back(run);
  run();
  for (std::thread& t : pool)
    t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace pipesched::detail
