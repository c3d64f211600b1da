// The MPI transport's helpers: checked calls, the start-up agreement on the schedule, the
// failure notice's wire form and the timer slack of polling threads.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "pipesched/core/action.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/fingerprint.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/mpi/mpi_errors.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"

namespace pipesched::detail::mpi {

inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

//! Throws mpi_error naming `call` when `code` is not MPI_SUCCESS.
inline void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw mpi_error(std::string(call) + " failed: " + error_text(code));
}

using pipesched::detail::seconds_text;

//! Whether `request` has completed (MPI_Test; throws mpi_error when the call fails).
inline bool test(MPI_Request& request) {
  int done = 0;
  check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

//! Whether all `n` requests from `requests` have completed (MPI_Testall; none: true).
inline bool test_all(MPI_Request* requests, std::size_t n) {
  if (n == 0) return true;
  int done = 0;
  check(MPI_Testall(static_cast<int>(n), requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  return done != 0;
}

//! Whether `request` has completed, without throwing: a failed MPI_Test counts as done, for
//! the waits of a destructor or an agreement that must end (`failed` says it failed).
inline bool test_quietly(MPI_Request& request, bool& failed) noexcept {
  int done = 0;
  if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) failed = true;
  return failed || done != 0;
}

//! Whether `mine` holds on every process of `comm`, agreed by a non-blocking all-reduce that
//! must complete by `deadline` (false when a process does not take part in time or MPI
//! fails); never throws, for the end of a job.
inline bool every_process(bool mine, MPI_Comm comm, std::chrono::steady_clock::time_point deadline,
                          std::chrono::microseconds interval) noexcept {
  int in = mine ? 1 : 0, all = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(&in, &all, 1, MPI_INT, MPI_MIN, comm, &request) != MPI_SUCCESS) return false;
  bool failed = false;
  const Wait wait{"the agreement on how to end the job", deadline, interval};
  return poll_until(wait, [&] { return test_quietly(request, failed); }) && !failed && all == 1;
}

inline std::string hex_text(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// What a process whose schedule cannot be fingerprinted (lowering it failed) contributes, so
// that it still takes part in the agreement.
inline constexpr std::uint64_t no_fingerprint = 0;

// Every process of `comm` learns every process's schedule fingerprint; all of them throw the
// same schedule_mismatch when one differs from rank 0's. Runs before anything that could
// refuse on some processes only (a schedule for another rank count, say), which would leave
// the others waiting in a collective call for processes that already gave up. A process whose
// own schedule cannot even be lowered still joins the gather, then throws its own error. A
// process that does not join within `timeout` (dead, hung, or never reaching its transport)
// makes the others throw peer_lost naming the agreement.
inline void agree_on_schedule(const char* who, const Schedule& schedule, MPI_Comm comm,
                              std::chrono::microseconds poll_interval,
                              std::chrono::duration<double> timeout) {
  int size = 0;
  check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::uint64_t mine = no_fingerprint;
  std::exception_ptr own_failure;
  try {
    mine = schedule_fingerprint(schedule);
  } catch (...) {
    own_failure = std::current_exception();
  }
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size), 0);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm, &request),
        "MPI_Iallgather");
  // Every process builds its transport at start-up, like MPI_Comm_dup after this; polling
  // leaves the core to processes that are still getting there.
  const Wait wait{"the start-up agreement on the schedule", deadline_after(timeout), poll_interval};
  if (!poll_until(wait, [&] { return test(request); }))
    throw peer_lost(std::string(who) + ": not every process of the job joined " +
                    std::string(wait.what) + " within " + seconds_text(timeout.count()) +
                    " s (each compares its schedule's fingerprint when its transport is built), "
                    "so a process has died, hangs or never reached its transport. End the job "
                    "(mpi::Session::abort).");
  if (own_failure) std::rethrow_exception(own_failure);
  for (int r = 1; r < size; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0])
      throw schedule_mismatch(
          std::string(who) + ": rank 0 and rank " + std::to_string(r) +
              " were given different schedules (fingerprints " + hex_text(all[0]) + " and " +
              hex_text(all[static_cast<std::size_t>(r)]) +
              "); start every process with the same schedule (the same generator, problem, "
              "placement and passes).",
          0, r);
}

inline bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  int finalized = 0;
  MPI_Finalized(&finalized);
  return flag != 0 && finalized == 0;
}

// The wire form of a FailureNotice: fixed size, so a receive for it can be posted ahead.
struct NoticeWire {
  std::int32_t step = 0;  // a notice from an earlier (failed, drained) step is stale
  std::int32_t rank = -1;
  std::int32_t position = -1;
  std::array<std::int32_t, 8> action{};
  char message[2000] = {};
};

inline NoticeWire encode(const FailureNotice& n) {
  NoticeWire w;
  w.rank = n.rank;
  w.position = n.position;
  const Action& a = n.action;
  w.action = {static_cast<std::int32_t>(a.kind),
              a.stage,
              a.microbatch,
              a.slice,
              a.part,
              a.b_stage,
              a.b_microbatch,
              a.b_slice};
  const std::size_t len = std::min(n.message.size(), sizeof w.message - 1);
  std::memcpy(w.message, n.message.data(), len);
  w.message[len] = '\0';
  return w;
}

inline FailureNotice decode(const NoticeWire& w) {
  FailureNotice n;
  n.rank = w.rank;
  n.position = w.position;
  n.action = Action{static_cast<OpKind>(w.action[0]),
                    w.action[1],
                    w.action[2],
                    w.action[3],
                    w.action[4],
                    w.action[5],
                    w.action[6],
                    w.action[7]};
  n.message.assign(w.message, strnlen(w.message, sizeof w.message));
  return n;
}

//! Lets short sleeps be short: Linux rounds a thread's sleeps up by its timer slack (50 µs by
//! default), which would add that much latency to every message a rank waits for.
inline void tighten_timer_slack() {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
}

}  // namespace pipesched::detail::mpi
