// expect: a process_transport needs `bool drain(std::chrono::duration<double> timeout)`
// A process pipeline's transport that cannot clean up after a failed step is named in the
// error; every other member is there, so the check stops at drain alone.
#include <chrono>
#include <optional>

#include "pipesched/transport/detail/process_transport.hpp"

struct Request {};

struct WithoutDrain {
  int rank() const { return 0; }
  int ranks() const { return 2; }
  int communicator() const { return 0; }
  void begin_step() {}
  bool wait(Request&, std::chrono::steady_clock::time_point) { return true; }
  void progress() {}
  void notify_failure(const pipesched::FailureNotice&) {}
  const std::optional<pipesched::FailureNotice>& failure() const { return failure_; }
  std::optional<pipesched::FailureNotice> failure_;
};

static_assert(pipesched::check_process_transport<WithoutDrain, Request>());

int main() {}
