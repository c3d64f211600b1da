// What a process pipeline needs of its transport (mpi::Transport, nccl::Transport): a named
// concept, and a check whose failure names the member that is missing. Free of MPI itself:
// the request a transport waits for is a parameter (MPI_Request for the process pipelines).
#pragma once

#include <chrono>
#include <concepts>
#include <optional>

#include "pipesched/transport/mpi/mpi_errors.hpp"

namespace pipesched {

//! A transport one process of a multi-process pipeline runs its rank over, with `Request` the
//! handle of a non-blocking collective it completes (MPI_Request). On top of moving the
//! tensors (the `transport` concept), the pipeline needs of it:
//! - `int rank()` and `int ranks()`: this process's pipeline rank and the pipeline's ranks;
//! - `communicator()`: the pipeline's own communicator (the step's figures are gathered over
//!   it; `job()`, when the transport has it, is the whole job's, where the step's barrier and
//!   agreements run, else the communicator is);
//! - `void begin_step()`: the per-step bookkeeping, called before a step's barrier;
//! - `bool wait(Request&, std::chrono::steady_clock::time_point deadline)`: completes a
//!   collective while the transport's messages move, false when the deadline passed first;
//! - `void progress()`: moves the messages once (runs while a data-parallel or
//!   tensor-parallel collective is waited for);
//! - `void notify_failure(const FailureNotice&)`: tells every other process this one failed;
//! - `failure()`: the failure this process heard of (a `std::optional<FailureNotice>`);
//! - `bool drain(std::chrono::duration<double> timeout)`: after a failed step, completes and
//!   drops what is in flight (collective), false when it could not in time.
template <class T, class Request>
concept process_transport = requires(T& t, const T& c, Request& request,
                                     std::chrono::steady_clock::time_point deadline,
                                     std::chrono::duration<double> timeout,
                                     const FailureNotice& notice) {
  { c.rank() } -> std::convertible_to<int>;
  { c.ranks() } -> std::convertible_to<int>;
  c.communicator();
  { t.begin_step() } -> std::same_as<void>;
  { t.wait(request, deadline) } -> std::convertible_to<bool>;
  { t.progress() } -> std::same_as<void>;
  { t.notify_failure(notice) } -> std::same_as<void>;
  { c.failure() } -> std::convertible_to<const std::optional<FailureNotice>&>;
  { t.drain(timeout) } -> std::convertible_to<bool>;
};

//! Checks `T` against `process_transport<T, Request>`, naming the first member it lacks.
template <class T, class Request>
constexpr bool check_process_transport() {
  static_assert(
      requires(const T& c) {
        { c.rank() } -> std::convertible_to<int>;
        { c.ranks() } -> std::convertible_to<int>;
      },
      "pipesched: a process_transport needs `int rank() const` (this process's pipeline rank) "
      "and `int ranks() const` (the pipeline's ranks)");
  static_assert(
      requires(const T& c) { c.communicator(); },
      "pipesched: a process_transport needs `communicator() const` (the pipeline's "
      "communicator, over which the step's figures are gathered)");
  static_assert(
      requires(T & t) {
        { t.begin_step() } -> std::same_as<void>;
      },
      "pipesched: a process_transport needs `void begin_step()` (its per-step bookkeeping)");
  static_assert(
      requires(T & t, Request & r, std::chrono::steady_clock::time_point d) {
        { t.wait(r, d) } -> std::convertible_to<bool>;
      },
      "pipesched: a process_transport needs `bool wait(request&, "
      "std::chrono::steady_clock::time_point deadline)` that completes a collective while its "
      "messages move");
  static_assert(
      requires(T & t) {
        { t.progress() } -> std::same_as<void>;
      },
      "pipesched: a process_transport needs `void progress()` that moves its messages once");
  static_assert(
      requires(T & t, const FailureNotice& n) {
        { t.notify_failure(n) } -> std::same_as<void>;
      },
      "pipesched: a process_transport needs `void notify_failure(const FailureNotice&)` that "
      "tells every other process this one failed");
  static_assert(
      requires(const T& c) {
        { c.failure() } -> std::convertible_to<const std::optional<FailureNotice>&>;
      },
      "pipesched: a process_transport needs `const std::optional<FailureNotice>& failure() "
      "const` (the failure this process heard of)");
  static_assert(
      requires(T & t, std::chrono::duration<double> d) {
        { t.drain(d) } -> std::convertible_to<bool>;
      },
      "pipesched: a process_transport needs `bool drain(std::chrono::duration<double> timeout)` "
      "that completes and drops what a failed step left in flight");
  return process_transport<T, Request>;
}

}  // namespace pipesched
