// A synthetic stage model whose actions take set durations and hold set byte counts: it sleeps
// instead of computing, so executed timelines and memory can be checked against the simulator
// without the machine's cores being the limit.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/tensor.hpp"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace pipesched::toy {

//! What each action of a `SyntheticStage` costs: seconds of (sleeping) work and the bytes its
//! stash reports.
struct SyntheticCost {
  double forward = 1e-3;             //!< seconds
  double backward_input = 1e-3;      //!< seconds
  double backward_weight = 1e-3;     //!< seconds
  std::size_t activation_bytes = 0;  //!< stash bytes after forward
  std::size_t wgrad_bytes = 0;       //!< stash bytes after backward_input
};

namespace detail {
// The kernel rounds sleeps up by the thread's timer slack (50 µs by default); 1 ns keeps the
// overshoot to the wake-up latency. Set once per thread, as the executor runs ranks on threads.
inline void use_fine_timer_slack() noexcept {
#if defined(__linux__)
  thread_local bool done = false;
  if (!done) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    done = true;
  }
#endif
}

// How long before the deadline a sleep hands over to a yielding wait: the kernel wakes a
// sleeper tens of microseconds late, which on 1 ms actions would be a few per cent.
inline constexpr std::chrono::microseconds precise_wait{120};

// How long before the deadline the yielding wait stops yielding: a yield that hands the core
// to another runnable thread returns microseconds later, past a deadline that fell meanwhile.
inline constexpr std::chrono::microseconds spin_wait{10};

// Waits until `start + seconds` (never short): sleeps until shortly before, then yields the
// core until just before the deadline and spins the last few microseconds, so actions last
// their duration to about a microsecond while the core stays free for the other ranks'
// threads for almost all of it.
inline void sleep_from(std::chrono::steady_clock::time_point start, double seconds) {
  use_fine_timer_slack();
  if (seconds <= 0) return;
  const auto deadline = start + std::chrono::ceil<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(seconds));
  if (std::chrono::steady_clock::now() < deadline - precise_wait)
    std::this_thread::sleep_until(deadline - precise_wait);
  for (auto now = std::chrono::steady_clock::now(); now < deadline;
       now = std::chrono::steady_clock::now())
    if (deadline - now > spin_wait) std::this_thread::yield();
}
}  // namespace detail

//! A stage model that computes nothing: forward, backward_input and backward_weight each sleep
//! for their `SyntheticCost` duration, measured from the start of the call, and the stash holds
//! only a byte count (activation_bytes after forward, wgrad_bytes after backward_input, 0 after
//! backward_weight). Tensors pass through unchanged (keep them a few elements long).
class SyntheticStage {
 public:
  using tensor_type = Tensor<float>;  //!< passed through unchanged
  //! A byte count and where the stash is in its life; no memory is really held.
  struct Stash {
    std::size_t bytes = 0;  //!< the bytes the stash stands for
    //! Which calls have run on the stash: none, the forward, backward_input.
    detail::StashPhase phase = detail::StashPhase::Empty;
  };
  using stash_type = Stash;  //!< what a forward keeps for the backward

  //! Called with "forward", "backward_input" or "backward_weight" at the start of each action
  //! (before the sleep), so a test can make a chosen stage throw. Empty by default.
  std::function<void(const char* op)> fail_on;

  //! Throws `invalid_problem` for a negative or non-finite duration.
  explicit SyntheticStage(const SyntheticCost& cost = {}) : cost_(cost) {
    check(cost.forward, "forward");
    check(cost.backward_input, "backward_input");
    check(cost.backward_weight, "backward_weight");
  }

  //! Sleeps for the forward's duration and returns `x`; the stash holds activation_bytes.
  tensor_type forward(const tensor_type& x, Stash& stash) {
    const auto start = std::chrono::steady_clock::now();
    if (fail_on) fail_on("forward");
    detail::sleep_from(start, cost_.forward);
    stash = Stash{cost_.activation_bytes, detail::StashPhase::Forwarded};
    return x;
  }

  //! Sleeps for backward_input's duration and returns `dy`; the stash holds wgrad_bytes.
  tensor_type backward_input(const tensor_type& dy, Stash& stash) {
    const auto start = std::chrono::steady_clock::now();
    if (fail_on) fail_on("backward_input");
    detail::require_phase(stash.phase, detail::StashPhase::Forwarded, "SyntheticStage",
                          "backward_input");
    detail::sleep_from(start, cost_.backward_input);
    stash = Stash{cost_.wgrad_bytes, detail::StashPhase::InputDone};
    return dy;
  }

  //! Sleeps for backward_weight's duration and empties the stash.
  void backward_weight(Stash& stash) {
    const auto start = std::chrono::steady_clock::now();
    if (fail_on) fail_on("backward_weight");
    detail::require_phase(stash.phase, detail::StashPhase::InputDone, "SyntheticStage",
                          "backward_weight");
    detail::sleep_from(start, cost_.backward_weight);
    stash = Stash{};
  }

  //! The byte count the stash stands for.
  std::size_t stash_bytes(const Stash& stash) const noexcept { return stash.bytes; }
  //! Nothing to zero: the stage has no parameters.
  void zero_gradients() {}

  //! Bytes a stash holds right after forward.
  std::size_t activation_bytes() const noexcept { return cost_.activation_bytes; }
  //! Bytes a stash holds right after backward_input.
  std::size_t wgrad_bytes() const noexcept { return cost_.wgrad_bytes; }
  //! The durations and byte counts the stage was built with.
  const SyntheticCost& cost() const noexcept { return cost_; }

  //! A small tensor to feed the first stage (its values do not matter).
  static tensor_type sample_input() { return tensor_type({4}, 1.0f); }

 private:
  static void check(double seconds, const char* name) {
    if (!std::isfinite(seconds) || seconds < 0)
      throw invalid_problem(std::string("SyntheticStage: the ") + name + " duration is " +
                            std::to_string(seconds) +
                            " s; durations must be finite and not negative");
  }

  SyntheticCost cost_;
};

//! What the simulator needs to predict `stages` synthetic stages of `cost`: their durations
//! and byte counts (a checkpointed unit keeps `sample_input()`).
inline ProfiledCost synthetic_profiled_cost(const SyntheticCost& cost, int stages) {
  ProfiledCost c;
  c.stages.assign(static_cast<std::size_t>(stages),
                  {.forward = cost.forward,
                   .backward_input = cost.backward_input,
                   .backward_weight = cost.backward_weight,
                   .activation_bytes = static_cast<double>(cost.activation_bytes),
                   .wgrad_bytes = static_cast<double>(cost.wgrad_bytes),
                   .boundary_bytes = static_cast<double>(SyntheticStage::sample_input().bytes())});
  return c;
}

//! Training data for synthetic stages: `SyntheticStage::sample_input()` in, the output's own
//! values back as its gradient, no loss.
inline TrainingData<SyntheticStage::tensor_type> synthetic_training_data() {
  TrainingData<SyntheticStage::tensor_type> data;
  data.input = [](int, int) { return SyntheticStage::sample_input(); };
  data.loss = [](const SyntheticStage::tensor_type& y, int, int, double&) { return y; };
  return data;
}

}  // namespace pipesched::toy
