// Runs one function per rank on threads of this process: the first failure aborts the
// transport (so every waiting rank wakes and stops) and is rethrown once all have joined.
#pragma once

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "pipesched/exec/errors.hpp"

namespace pipesched::detail {

//! Runs `fn(r)` for every rank r in [0, ranks): rank 0 on the calling thread, the others on
//! threads that a launcher thread starts meanwhile. A step's first action is usually rank 0's,
//! and starting a thread costs tens of microseconds before it runs (more on a virtual machine,
//! whose idle core must be woken), so rank 0 starts at once instead of after every thread is
//! made. The first failure (of `fn`, or a thread that could not be started) calls `abort` so
//! that the ranks waiting for messages stop, and is rethrown once every thread has joined;
//! transport_aborted, what the other ranks then throw, is not reported.
template <class Fn, class Abort>
void run_ranks(int ranks, Fn&& fn, Abort&& abort) {
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto fail = [&] {
    {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
    abort();
  };
  auto run = [&](int r) {
    try {
      fn(r);
    } catch (const transport_aborted&) {
      // Another rank failed first; its error is the one reported.
    } catch (...) {
      fail();
    }
  };
  if (ranks > 1) {
    std::vector<std::jthread> threads;  // only the launcher touches it until it has joined
    threads.reserve(static_cast<std::size_t>(ranks - 1));
    std::jthread launcher([&] {
      try {
        for (int r = 1; r < ranks; ++r)
          threads.emplace_back(run, r);
      } catch (...) {
        fail();  // the ranks that did start would wait for the missing ones forever
      }
    });
    run(0);
    launcher.join();
  } else if (ranks == 1) {
    run(0);
  }
  // Out of the block above, `threads` has joined every rank's thread.
  if (failure) std::rethrow_exception(failure);
}

}  // namespace pipesched::detail
