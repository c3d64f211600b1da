// Data-parallel gradient reduction over MPI: at a stage's REDUCE_GRAD its weight gradients are
// packed into buckets and each bucket's MPI_Iallreduce starts; at its WAIT_REDUCE_GRAD the
// reducer waits for them (polling, so the pipeline's messages and failure notices keep moving)
// and writes the replicas' mean back into the gradients. After a failed step `drain` completes
// every reduction some replica started, so the data-parallel communicator is clean.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <ranges>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/wire.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"

namespace pipesched {

//! A stage model whose weight gradients a data-parallel reduction can reach: `gradients()` is
//! a range of tensors with a `wire` specialization (their payload is the values) whose
//! `value_type` is float or double.
template <class S>
concept reducible_stage = requires(S& s) {
  { s.gradients() } -> std::ranges::range;
  requires wire_tensor<std::remove_cvref_t<
      std::ranges::range_reference_t<decltype(std::declval<S&>().gradients())>>>;
};

//! Knobs of MpiGradientReducer.
struct MpiReducerOptions {
  //! The most bytes one all-reduce carries; a stage's gradients go in buckets of at most this
  //! many (PyTorch DDP's default, 25 MiB). One tensor larger than it gets a bucket of its own.
  std::size_t bucket_bytes = 25u << 20;
  //! Divide the sum by the replica count (the mean: the gradient of the global batch's mean
  //! loss, when each replica's loss is the mean over its own share).
  bool average = true;
};

//! Reduces the weight gradients of this process's stages over `data` (its data-parallel
//! group, MpiGroups::data()): one MPI_Iallreduce per bucket, started at the stage's
//! REDUCE_GRAD and waited for at its WAIT_REDUCE_GRAD. `stages` is indexed by stage (as the
//! pipeline's); every replica reduces the same stages in the same order, as the schedule's
//! actions say. `poll` runs between completion tests (the pipeline transport's progress) and
//! throws when the step is being stopped.
template <class Stage>
requires reducible_stage<Stage>
class MpiGradientReducer {
  using tensor = std::remove_cvref_t<
      std::ranges::range_reference_t<decltype(std::declval<Stage&>().gradients())>>;
  using value = typename tensor::value_type;
  static_assert(std::is_same_v<value, float> || std::is_same_v<value, double>,
                "MpiGradientReducer reduces float or double gradients");

 public:
  //! A reducer of `stages` over a duplicate of `data`; `order` is the executed schedule's list
  //! of this rank (its REDUCE_GRAD actions give the order the stages are reduced in).
  MpiGradientReducer(MPI_Comm data, std::span<Stage> stages, const std::vector<Action>& order,
                     std::function<void()> poll, std::chrono::duration<double> timeout,
                     MpiReducerOptions options = {})
      : stages_(stages), poll_(std::move(poll)), timeout_(timeout), options_(options) {
    detail::mpi::check(MPI_Comm_dup(data, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    detail::mpi::check(MPI_Comm_dup(data, &control_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_size(comm_, &replicas_);
    for (const Action& a : order)
      if (a.kind == OpKind::ReduceGrad) sequence_.push_back(a.stage);
    if (options_.bucket_bytes == 0)
      throw invalid_argument(
          "MpiReducerOptions.bucket_bytes = 0 is out of range; give 1 byte "
          "or more (25 MiB is PyTorch DDP's default).",
          "MpiReducerOptions.bucket_bytes", "0");
  }

  MpiGradientReducer(const MpiGradientReducer&) = delete;
  MpiGradientReducer& operator=(const MpiGradientReducer&) = delete;

  //! Frees the communicator (a reduction still in flight is abandoned: the job is ending).
  ~MpiGradientReducer() {
    if (!detail::mpi::initialized()) return;
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }

  //! Replicas in the data-parallel group.
  int replicas() const noexcept { return replicas_; }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    started_ = 0;
    pending_.clear();
  }

  //! Starts reducing stage `stage`'s gradients (REDUCE_GRAD): packs them into buckets and
  //! starts one all-reduce per bucket.
  void start(int stage) {
    Pending p;
    p.stage = stage;
    for (std::vector<value>& bucket : pack(stage)) {
      p.buckets.push_back(std::move(bucket));
      p.requests.push_back(MPI_REQUEST_NULL);
      std::vector<value>& b = p.buckets.back();
      detail::mpi::check(MPI_Iallreduce(MPI_IN_PLACE, b.data(), static_cast<int>(b.size()),
                                        datatype(), MPI_SUM, comm_, &p.requests.back()),
                         "MPI_Iallreduce");
      ++started_;
    }
    pending_.push_back(std::move(p));
  }

  //! Waits for stage `stage`'s reduction (WAIT_REDUCE_GRAD) and writes the result into its
  //! gradients. Throws receive_timeout after the timeout.
  void wait(int stage) {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& p) { return p.stage == stage; });
    if (it == pending_.end())
      throw error("MpiGradientReducer: WAIT_REDUCE_GRAD of stage " + std::to_string(stage) +
                  " with no reduction of it started; put " + std::to_string(stage) +
                  "REDUCE_GRAD before it.");
    const auto deadline = detail::deadline_after(timeout_);
    for (;;) {
      int done = 0;
      detail::mpi::check(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(),
                                     &done, MPI_STATUSES_IGNORE),
                         "MPI_Testall");
      if (done) break;
      if (poll_) poll_();
      if (std::chrono::steady_clock::now() >= deadline)
        throw receive_timeout("the data-parallel reduction of stage " + std::to_string(stage) +
                              "'s gradients did not complete within " +
                              detail::seconds_text(timeout_.count()) +
                              " s; does every replica run the same schedule?");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    unpack(*it);
    pending_.erase(it);
  }

  //! After a failed step: every replica learns how many all-reduces the most advanced one
  //! started, starts the ones it did not (on scratch buffers of the same sizes, in the same
  //! order) and completes them all, so the communicator is clean for the next step
  //! (collective over the data-parallel group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    // The count goes over a communicator of its own: a collective on comm_ would match an
    // all-reduce another replica started and this one did not.
    long long mine = started_, most = 0;
    std::vector<MPI_Request> count{MPI_REQUEST_NULL};
    detail::mpi::check(
        MPI_Iallreduce(&mine, &most, 1, MPI_LONG_LONG, MPI_MAX, control_, &count.front()),
        "MPI_Iallreduce");
    if (!wait_all(count, deadline)) return false;
    // The step's buckets in order: the stages in REDUCE_GRAD order, each stage's buckets; the
    // ones this replica did not start, started now on scratch buffers.
    std::vector<std::vector<value>> scratch;
    std::vector<MPI_Request> all;
    for (Pending& p : pending_)
      all.insert(all.end(), p.requests.begin(), p.requests.end());
    long long index = 0;
    for (int stage : sequence_)
      for (std::size_t n : bucket_sizes(stage)) {
        if (index >= started_ && index < most) {
          scratch.emplace_back(n, value(0));
          all.push_back(MPI_REQUEST_NULL);
          detail::mpi::check(
              MPI_Iallreduce(MPI_IN_PLACE, scratch.back().data(), static_cast<int>(n), datatype(),
                             MPI_SUM, comm_, &all.back()),
              "MPI_Iallreduce");
        }
        ++index;
      }
    const bool clean = wait_all(all, deadline);
    begin_step();
    return clean;
  }

 private:
  struct Pending {
    int stage = 0;
    std::vector<std::vector<value>> buckets;
    std::vector<MPI_Request> requests;
  };

  static MPI_Datatype datatype() { return std::is_same_v<value, double> ? MPI_DOUBLE : MPI_FLOAT; }

  static std::span<value> values(tensor& t) {
    std::span<std::byte> bytes = wire<tensor>::payload(t);
    return {reinterpret_cast<value*>(bytes.data()), bytes.size() / sizeof(value)};
  }

  // Calls `each(values, bucket, offset)` for every gradient tensor of stage `stage`, in order:
  // a bucket is closed when the next tensor would take it past bucket_bytes. Returns the
  // buckets' element counts.
  template <class Each>
  std::vector<std::size_t> walk(int stage, Each&& each) {
    std::vector<std::size_t> sizes;
    const std::size_t cap = std::max<std::size_t>(1, options_.bucket_bytes / sizeof(value));
    std::size_t open = 0;
    for (auto&& t : stage_at(stage).gradients()) {
      const std::span<value> v = values(t);
      if (open > 0 && open + v.size() > cap) {
        sizes.push_back(open);
        open = 0;
      }
      each(v, sizes.size(), open);
      open += v.size();
    }
    if (open > 0) sizes.push_back(open);
    return sizes;
  }

  std::vector<std::size_t> bucket_sizes(int stage) {
    return walk(stage, [](std::span<value>, std::size_t, std::size_t) {});
  }

  std::vector<std::vector<value>> pack(int stage) {
    std::vector<std::vector<value>> buckets;
    for (std::size_t n : bucket_sizes(stage))
      buckets.emplace_back(n);
    walk(stage, [&](std::span<value> v, std::size_t b, std::size_t at) {
      std::copy(v.begin(), v.end(), buckets[b].begin() + static_cast<std::ptrdiff_t>(at));
    });
    return buckets;
  }

  void unpack(Pending& p) {
    const value scale = options_.average ? value(1) / static_cast<value>(replicas_) : value(1);
    walk(p.stage, [&](std::span<value> v, std::size_t b, std::size_t at) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = p.buckets[b][at + i] * scale;
    });
  }

  Stage& stage_at(int stage) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= stages_.size())
      throw error("MpiGradientReducer: stage " + std::to_string(stage) + " is not one of the " +
                  std::to_string(stages_.size()) + " stage models given.");
    return stages_[static_cast<std::size_t>(stage)];
  }

  bool wait_all(std::vector<MPI_Request>& requests,
                std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      int done = 0;
      if (requests.empty()) return true;
      detail::mpi::check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                     MPI_STATUSES_IGNORE),
                         "MPI_Testall");
      if (done) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::span<Stage> stages_;
  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  MpiReducerOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;     // the all-reduces of gradients
  MPI_Comm control_ = MPI_COMM_NULL;  // the count agreement of `drain`
  int replicas_ = 1;
  std::vector<int> sequence_;  // the stages in the order this rank starts their reductions
  long long started_ = 0;      // all-reduces started this step
  std::vector<Pending> pending_;
};

}  // namespace pipesched
