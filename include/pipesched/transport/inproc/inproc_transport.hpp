// The in-process transport: ranks are threads of one process. A send moves the tensor into
// the receiver's mailbox (no copy); a receive polls its mailbox for a short while, yielding its
// core between polls, then waits on a condition variable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"

namespace pipesched::inproc {

//! Ranks as threads of one process. Satisfies `transport<inproc::Transport<Tensor>, Tensor>`.
template <class Tensor>
class Transport {
 public:
  //! Carries vocabulary messages: any rank may send to any other.
  static constexpr bool carries_vocabulary = true;

  //! Empty mailboxes for `ranks` ranks; throws invalid_problem when `ranks` < 1.
  explicit Transport(int ranks) {
    if (ranks < 1)
      throw invalid_problem("inproc::Transport: ranks = " + std::to_string(ranks) +
                            "; need at least 1.");
    for (int r = 0; r < ranks; ++r)
      boxes_.push_back(std::make_unique<Mailbox>());
  }

  //! The number of ranks.
  int ranks() const noexcept { return static_cast<int>(boxes_.size()); }

  //! Moves `x` into rank `to`'s mailbox under `key`. Never waits.
  void send(int from, int to, const MessageKey& key, Tensor&& x) {
    check_rank(from, "send from");
    Mailbox& box = mailbox(to, "send to");
    {
      std::lock_guard lock(box.mutex);
      auto [it, fresh] = box.messages.try_emplace(detail::pack_key(key), std::move(x));
      if (!fresh)
        throw error("rank " + std::to_string(from) + " sent the " + detail::describe_key(key) +
                    " to rank " + std::to_string(to) +
                    " twice; each message is sent once per step.");
      box.arrivals.fetch_add(1, std::memory_order_release);
    }
    box.ready.notify_all();
  }

  //! Waits until the message `key` for `rank` arrives and returns it. Throws
  //! receive_timeout after `timeout` (one too long for the clock, infinity included, waits
  //! without a deadline), transport_aborted when another rank failed.
  Tensor receive(int rank, const MessageKey& key, std::chrono::duration<double> timeout) {
    Mailbox& box = mailbox(rank, "receive on");
    const std::uint64_t k = detail::pack_key(key);
    const auto deadline = detail::deadline_after(timeout);
    // Until then a missing message is polled for rather than waited on (see poll_window).
    const auto poll_until = std::chrono::steady_clock::now() + poll_window;
    std::unique_lock lock(box.mutex);
    for (;;) {
      if (box.aborted)
        throw transport_aborted("rank " + std::to_string(rank) + " stopped waiting for the " +
                                detail::describe_key(key) + ": another rank failed.");
      if (auto it = box.messages.find(k); it != box.messages.end()) {
        Tensor x = std::move(it->second);
        box.messages.erase(it);
        return x;
      }
      if (std::chrono::steady_clock::now() < poll_until) {
        const std::uint64_t seen = box.arrivals.load(std::memory_order_acquire);
        lock.unlock();
        while (box.arrivals.load(std::memory_order_acquire) == seen &&
               !box.aborted_flag.load(std::memory_order_acquire) &&
               std::chrono::steady_clock::now() < poll_until)
          std::this_thread::yield();
        lock.lock();
        continue;
      }
      if (deadline == detail::no_deadline) {
        // No deadline: nothing but a message or an abort ends the wait, and a plain wait does
        // not ask the library to convert the clock's last time point into a system timeout.
        box.ready.wait(lock);
        continue;
      }
      if (box.ready.wait_until(lock, deadline) == std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline && !box.aborted &&
          box.messages.find(k) == box.messages.end())
        throw receive_timeout("rank " + std::to_string(rank) + " waited " +
                              detail::seconds_text(timeout.count()) + " s for the " +
                              detail::describe_key(key) + " and none came.");
    }
  }

  //! The message `key` for `rank` if it has arrived; never waits.
  std::optional<Tensor> try_receive(int rank, const MessageKey& key) {
    Mailbox& box = mailbox(rank, "receive on");
    std::lock_guard lock(box.mutex);
    if (auto it = box.messages.find(detail::pack_key(key)); it != box.messages.end()) {
      std::optional<Tensor> x(std::move(it->second));
      box.messages.erase(it);
      return x;
    }
    return std::nullopt;
  }

  //! Wakes every waiting receive; they throw transport_aborted until `reset()`.
  void abort() {
    for (auto& b : boxes_) {
      {
        std::lock_guard lock(b->mutex);
        b->aborted = true;
        b->aborted_flag.store(true, std::memory_order_release);
      }
      b->ready.notify_all();
    }
  }

  //! Clears messages and the aborted state (between steps).
  void reset() {
    for (auto& b : boxes_) {
      std::lock_guard lock(b->mutex);
      b->aborted = false;
      b->aborted_flag.store(false, std::memory_order_release);
      b->messages.clear();
    }
  }

  //! Messages delivered to `rank` and not yet received.
  std::size_t pending(int rank) {
    Mailbox& box = mailbox(rank, "inspect");
    std::lock_guard lock(box.mutex);
    return box.messages.size();
  }

 private:
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable ready;
    std::unordered_map<std::uint64_t, Tensor> messages;
    bool aborted = false;
    // For polling without the mutex: messages delivered so far, and `aborted`.
    std::atomic<std::uint64_t> arrivals{0};
    std::atomic<bool> aborted_flag{false};
  };

  // How long a receive polls for a missing message before it waits on the condition
  // variable: a waiting thread woken by notify_all starts tens of microseconds after the send
  // on a shared or virtual machine (the scheduler must wake it, its core may have gone idle),
  // a polling one as soon as it next runs. Yielding between polls leaves the core to any
  // thread with work; past the window the receive blocks as before.
  static constexpr std::chrono::microseconds poll_window{200};

  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= ranks())
      throw error(std::string("inproc::Transport: ") + what + " rank " + std::to_string(r) +
                  ", but ranks run from 0 to " + std::to_string(ranks() - 1) + ".");
  }
  Mailbox& mailbox(int r, const char* what) {
    check_rank(r, what);
    return *boxes_[static_cast<std::size_t>(r)];
  }

  std::vector<std::unique_ptr<Mailbox>> boxes_;
};
}  // namespace pipesched::inproc
