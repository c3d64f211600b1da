// The one polling wait of the process transports, their reducers and groups: a bounded wait
// that tests for completion, runs the transport's progress between tests, sleeps a set
// interval (the core is free meanwhile) and gives up at a deadline, saying what it waited
// for. Every wait of mpi::Transport, nccl::Transport, the gradient reducers, the tensor group and
// the process pipeline's agreements is one of these; only the intervals differ, named here.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "pipesched/exec/detail/deadline.hpp"

namespace pipesched::detail {

//! The sleeps between the tests of a wait, by what is waited for. A transport's message waits
//! use its own `poll_interval` option (20 µs by default).
namespace poll_interval {
//! A gradient reduction, a drain's agreement and a collective of the tensor group's drain.
inline constexpr std::chrono::microseconds collective{20};
//! A tensor-parallel all-reduce inside a layer: on the step's critical path, so tested often.
inline constexpr std::chrono::microseconds tensor{5};
//! The reducer's progress thread between two pushes of MPI's progress engine.
inline constexpr std::chrono::microseconds progress{100};
//! The end of a job: an NCCL communicator's finalize, the agreement on how to end them.
inline constexpr std::chrono::microseconds teardown{50};
//! A roll call of the job's processes after a wait over the job ran out.
inline constexpr std::chrono::microseconds roll_call{1000};
}  // namespace poll_interval

//! How long a start-up agreement waits for every process unless told otherwise, in seconds
//! (mpi::TransportOptions::startup_timeout's default; nccl::Groups' agreement on the GPUs).
inline constexpr double default_startup_timeout_s = 60.0;

//! A bounded wait: what it waits for (a noun phrase, for the error when the deadline passes:
//! "the data-parallel reduction of stage 2's gradients"), until when (`no_deadline`: until
//! done), and how long it sleeps between tests (0: it tests again at once).
struct Wait {
  std::string_view what;
  std::chrono::steady_clock::time_point deadline = no_deadline;
  std::chrono::microseconds interval = poll_interval::collective;
};

//! Tests `done()` until it returns true and returns true; between tests runs `between()` (the
//! transport's progress; it may throw to stop the wait) and sleeps `wait.interval`. Returns
//! false once `wait.deadline` passed with `done()` still false. `done` may throw too (a failed
//! MPI call, a failure another process reported).
template <class Done, class Between>
bool poll_until(const Wait& wait, Done&& done, Between&& between) {
  for (;;) {
    if (done()) return true;
    between();
    if (std::chrono::steady_clock::now() >= wait.deadline) return false;
    if (wait.interval.count() > 0) std::this_thread::sleep_for(wait.interval);
  }
}

//! As above, with nothing between the tests but the sleep.
template <class Done>
bool poll_until(const Wait& wait, Done&& done) {
  return poll_until(wait, done, [] {});
}

//! What a wait that ran out says: "<what> did not complete within <timeout> s; <hint>".
inline std::string expired_text(const Wait& wait, std::chrono::duration<double> timeout,
                                std::string_view hint) {
  return std::string(wait.what) + " did not complete within " + seconds_text(timeout.count()) +
         " s; " + std::string(hint);
}

//! As poll_until, but a wait that runs out throws `Error(expired_text(wait, timeout, hint))`
//! (receive_timeout for the reductions: the pipeline turns it into the rank's failure).
template <class Error, class Done, class Between>
void poll_or_throw(const Wait& wait, std::chrono::duration<double> timeout, std::string_view hint,
                   Done&& done, Between&& between) {
  if (!poll_until(wait, done, between)) throw Error(expired_text(wait, timeout, hint));
}

}  // namespace pipesched::detail
