// Data-parallel gradient reduction over MPI: at a stage's REDUCE_GRAD its weight gradients are
// packed into buckets and each bucket's MPI_Iallreduce starts; at its WAIT_REDUCE_GRAD the
// reducer waits for them (polling, so the pipeline's messages and failure notices keep moving)
// and writes the replicas' mean back into the gradients. With ZeRO-1/2 each bucket is
// reduce-scattered instead (MPI_Ireduce_scatter_block): a replica receives the mean of its own
// shard only, steps that shard with its own optimizer state (`step_shards`) and, once the
// whole job agreed to commit, the replicas all-gather the updated weights (`gather_weights`).
// With ZeRO-0 and mpi::ReducerOptions::optimizer set, the same steps run on whole buckets
// (ZeRO-0's shard is the whole tensor; nothing to all-gather), so one optimizer serves every
// ZeRO stage.
// The buckets, the reductions' order and the clean-up after a failed step are the NCCL
// reducer's too (detail::ReductionPlan).
#pragma once

#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/shard_optimizer.hpp"
#include "pipesched/exec/wire.hpp"
#include "pipesched/transport/detail/reduction_plan.hpp"
#include "pipesched/transport/pipeline_options.hpp"

namespace pipesched::mpi {

//! Reduces the weight gradients of this process's stages over `data` (its data-parallel
//! group, mpi::Groups::data()): one MPI_Iallreduce per bucket, started at the stage's
//! REDUCE_GRAD and waited for at its WAIT_REDUCE_GRAD. `stages` is indexed by stage (as the
//! pipeline's); every replica reduces the same stages in the same order, as the schedule's
//! actions say. `poll` runs between completion tests (the pipeline transport's progress) and
//! throws when the step is being stopped.
template <class Stage>
requires reducible_stage<Stage>
class GradientReducer {
  using tensor = std::remove_cvref_t<
      std::ranges::range_reference_t<decltype(std::declval<Stage&>().gradients())>>;
  using value = typename tensor::value_type;
  static_assert(std::is_same_v<value, float> || std::is_same_v<value, double>,
                "mpi::GradientReducer reduces float or double gradients");

 public:
  //! A reducer of `stages` over a duplicate of `data`; `order` is the executed schedule's list
  //! of this rank (its REDUCE_GRAD actions give the order the stages are reduced in).
  GradientReducer(MPI_Comm data, std::span<Stage> stages, const std::vector<Action>& order,
                  std::function<void()> poll, std::chrono::duration<double> timeout,
                  ReducerOptions options = {})
      : stages_(stages),
        poll_(std::move(poll)),
        timeout_(timeout),
        options_(options),
        plan_(order, data),
        steps_(options_.optimizer) {
    // Checked first: nothing to free, no thread to stop when they throw.
    options_.validate("mpi::ReducerOptions");
    detail::mpi::check(MPI_Comm_dup(data, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_size(comm_, &replicas_);
    MPI_Comm_rank(comm_, &replica_);
    sharding_ = detail::Sharding(options_.zero, replicas_, replica_);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (options_.progress_thread && level == MPI_THREAD_MULTIPLE) {
      detail::mpi::check(MPI_Comm_dup(data, &progress_comm_), "MPI_Comm_dup");
      progress_ = std::thread([this] { drive_progress(); });  // last: nothing throws after it
    }
  }

  //! True when a thread of the reducer drives MPI's progress (mpi::ReducerOptions::
  //! progress_thread, under MPI_THREAD_MULTIPLE).
  bool drives_progress() const noexcept { return progress_.joinable(); }

  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  //! Frees the communicator (a reduction still in flight is abandoned: the job is ending).
  ~GradientReducer() {
    if (progress_.joinable()) {
      {
        std::lock_guard lock(progress_mutex_);
        stopping_ = true;
      }
      progress_wake_.notify_one();
      progress_.join();
    }
    if (!detail::mpi::initialized()) return;
    if (progress_comm_ != MPI_COMM_NULL) MPI_Comm_free(&progress_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }

  //! Replicas in the data-parallel group.
  int replicas() const noexcept { return replicas_; }
  //! This process's replica: its rank in the data-parallel group (its shard, with ZeRO).
  int replica() const noexcept { return replica_; }
  //! The ZeRO stage the reducer runs (mpi::ReducerOptions::zero).
  int zero() const noexcept { return options_.zero; }
  //! True when the reducer steps the weights (mpi::ReducerOptions::optimizer is set): the
  //! pipeline's optimizer hook is then `step_shards`, its rollback `discard_step`, and a
  //! committed step ends with `gather_weights`.
  bool steps_weights() const noexcept { return static_cast<bool>(options_.optimizer); }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    plan_.begin_step();
    set_in_flight(0);
    pending_.clear();
    reduced_.clear();
    updated_.clear();
  }

  //! Starts reducing stage `stage`'s gradients (REDUCE_GRAD): packs them into buckets and
  //! starts one all-reduce per bucket.
  void start(int stage) {
    Pending p;
    p.stage = stage;
    p.buckets = pack(stage, gradients_of);
    p.shards.resize(p.buckets.size());
    p.requests.assign(p.buckets.size(), MPI_REQUEST_NULL);
    for (std::size_t b = 0; b < p.buckets.size(); ++b) {
      begin_reduction(p.buckets[b], p.shards[b], p.requests[b]);
      plan_.count_start();
    }
    pending_.push_back(std::move(p));
    set_in_flight(static_cast<int>(pending_.size()));
  }

  //! Waits for stage `stage`'s reduction (WAIT_REDUCE_GRAD) and writes the result into its
  //! gradients. Throws receive_timeout after the timeout.
  void wait(int stage) {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& p) { return p.stage == stage; });
    if (it == pending_.end())
      throw detail::ReductionPlan::not_started("mpi::GradientReducer", stage);
    set_waiting(true);
    struct Resume {
      GradientReducer* self;
      ~Resume() { self->set_waiting(false); }
    } resume{this};  // also when the wait throws
    const std::string what =
        "the data-parallel reduction of stage " + std::to_string(stage) + "'s gradients";
    detail::poll_or_throw<receive_timeout>(
        {what, detail::deadline_after(timeout_)}, timeout_, detail::same_schedule_hint,
        [&] { return detail::mpi::test_all(it->requests.data(), it->requests.size()); },
        [&] { run_poll(); });
    unpack(*it);
    pending_.erase(it);
    set_in_flight(static_cast<int>(pending_.size()));
  }

  //! Steps this replica's shard (without ZeRO the whole bucket) of every bucket of the stages
  //! it reduced this step (their WAIT_REDUCE_GRAD has run) with the shard optimizer and the
  //! shard's own state, keeping the previous state for `discard_step`. The updated weights are
  //! kept apart: the stage models change only in `gather_weights`.
  void step_shards() {
    require_steps("step_shards");
    steps_.begin_update();
    updated_.clear();
    for (int stage : plan_.sequence()) {
      auto r = reduced_.find(stage);
      if (r == reduced_.end()) throw detail::ShardSteps::not_waited("mpi::GradientReducer", stage);
      std::vector<std::vector<value>> weights = pack(stage, parameters_of);
      for (std::size_t b = 0; b < weights.size(); ++b) {
        const detail::Sharding::Range sh = sharding_.shard(r->second.sizes[b]);
        std::vector<double> w(weights[b].begin() + static_cast<std::ptrdiff_t>(sh.begin),
                              weights[b].begin() + static_cast<std::ptrdiff_t>(sh.end));
        const std::vector<value>& g = r->second.shards[b];
        std::vector<double> grad(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(w.size()));
        steps_.step(stage, weights.size(), b, w, grad);
        std::copy(w.begin(), w.end(), weights[b].begin() + static_cast<std::ptrdiff_t>(sh.begin));
      }
      updated_.emplace_back(stage, std::move(weights));
    }
  }

  //! Undoes `step_shards` (its optimizer may have stopped half-way): the shards' state is put
  //! back and the updated weights are dropped; the stage models never changed.
  void discard_step() {
    require_steps("discard_step");
    steps_.discard();
    updated_.clear();
  }

  //! Once every process of the job has stepped: all-gathers every replica's updated shard into
  //! the stage models' weights (collective over the data-parallel group, in REDUCE_GRAD order;
  //! waited for with `poll`); without ZeRO writes the updated weights, which every replica
  //! stepped whole. Throws receive_timeout after the timeout.
  void gather_weights() {
    require_steps("gather_weights");
    const detail::Wait wait{"the all-gather of the updated weights",
                            detail::deadline_after(timeout_)};
    std::vector<MPI_Request> requests;
    requests.reserve(updated_.size() * 2);
    if (sharding_.sharded())
      for (auto& [stage, buckets] : updated_)
        for (std::vector<value>& b : buckets) {
          requests.push_back(MPI_REQUEST_NULL);
          detail::mpi::check(MPI_Iallgather(MPI_IN_PLACE, 0, datatype(), b.data(),
                                            static_cast<int>(b.size()) / replicas_, datatype(),
                                            comm_, &requests.back()),
                             "MPI_Iallgather");
        }
    detail::poll_or_throw<receive_timeout>(
        wait, timeout_, detail::same_schedule_hint,
        [&] { return detail::mpi::test_all(requests.data(), requests.size()); },
        [&] { run_poll(); });
    for (auto& [stage, buckets] : updated_)
      walk(stage, parameters_of, [&](std::span<value> v, std::size_t b, std::size_t at) {
        std::copy_n(buckets[b].begin() + static_cast<std::ptrdiff_t>(at), v.size(), v.begin());
      });
    updated_.clear();
    reduced_.clear();
  }

  //! After a failed step: every replica learns how many all-reduces the most advanced one
  //! started, starts the ones it did not (on scratch buffers of the same sizes, in the same
  //! order) and completes them all, so the communicator is clean for the next step
  //! (collective over the data-parallel group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    const std::optional<long long> most = plan_.most_started(deadline);
    if (!most) return false;
    std::vector<MPI_Request> all;
    for (Pending& p : pending_)
      all.insert(all.end(), p.requests.begin(), p.requests.end());
    // The ones this replica did not start, started now on scratch buffers (in lists: each
    // stays put while later ones are added).
    std::list<std::vector<value>> scratch, scratch_shards;
    plan_.for_each_missing(
        *most, [&](int stage) { return bucket_sizes(stage); },
        [&](std::size_t n) {
          scratch.emplace_back(padded(n), value(0));
          scratch_shards.emplace_back();
          all.push_back(MPI_REQUEST_NULL);
          begin_reduction(scratch.back(), scratch_shards.back(), all.back());
        });
    const bool clean = wait_all(all, deadline);
    begin_step();
    return clean;
  }

 private:
  // The progress thread: while reductions are in flight and the rank computes, MPI_Iprobe
  // (which runs MPI's progress engine for every pending operation of the process) every
  // 100 µs; asleep otherwise, and while `wait` polls itself (two threads in MPI's progress
  // engine at once only contend for its lock).
  void drive_progress() {
    std::unique_lock lock(progress_mutex_);
    for (;;) {
      progress_wake_.wait(lock, [this] { return stopping_ || (in_flight_ > 0 && !waiting_); });
      if (stopping_) return;
      lock.unlock();
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, progress_comm_, &flag, MPI_STATUS_IGNORE);
      std::this_thread::sleep_for(detail::poll_interval::progress);
      lock.lock();
    }
  }

  // `wait` polls MPI itself between `true` and `false`: the thread rests meanwhile.
  void set_waiting(bool on) {
    if (!progress_.joinable()) return;
    {
      std::lock_guard lock(progress_mutex_);
      waiting_ = on;
    }
    if (!on) progress_wake_.notify_one();
  }

  void set_in_flight(int n) {
    if (!progress_.joinable()) return;
    {
      std::lock_guard lock(progress_mutex_);
      in_flight_ = n;
    }
    if (n > 0) progress_wake_.notify_one();
  }

  struct Pending {
    int stage = 0;
    std::vector<std::vector<value>> buckets;  // padded to a multiple of the replicas with ZeRO
    std::vector<std::vector<value>> shards;   // ZeRO: this replica's reduced shard of each
    std::vector<MPI_Request> requests;
  };
  // A stage's reduced shards (the replicas' mean; without ZeRO the whole buckets) and its
  // buckets' real sizes, kept when the reducer steps the weights.
  struct Reduced {
    std::vector<std::vector<value>> shards;
    std::vector<std::size_t> sizes;
  };
  // A bucket's length as reduced (detail::Sharding::padded).
  std::size_t padded(std::size_t n) const { return sharding_.padded(n); }

  // Starts one bucket's reduction: the all-reduce in place, or with ZeRO the reduce-scatter
  // into `shard` (sized here).
  void begin_reduction(std::vector<value>& bucket, std::vector<value>& shard_out,
                       MPI_Request& request) {
    if (options_.zero == 0) {
      detail::mpi::check(
          MPI_Iallreduce(MPI_IN_PLACE, bucket.data(), static_cast<int>(bucket.size()), datatype(),
                         MPI_SUM, comm_, &request),
          "MPI_Iallreduce");
      return;
    }
    const int c = static_cast<int>(bucket.size()) / replicas_;
    shard_out.assign(static_cast<std::size_t>(c), value(0));
    detail::mpi::check(MPI_Ireduce_scatter_block(bucket.data(), shard_out.data(), c, datatype(),
                                                 MPI_SUM, comm_, &request),
                       "MPI_Ireduce_scatter_block");
  }

  void require_steps(const char* what) const {
    if (!steps_weights())
      throw error(std::string("mpi::GradientReducer::") + what +
                  " runs only when the reducer steps the weights (mpi::ReducerOptions::optimizer "
                  "set).");
  }

  static auto gradients_of(Stage& s) { return s.gradients(); }
  static auto parameters_of(Stage& s) { return s.parameters(); }

  static MPI_Datatype datatype() { return std::is_same_v<value, double> ? MPI_DOUBLE : MPI_FLOAT; }

  static std::span<value> values(tensor& t) {
    std::span<std::byte> bytes = wire<tensor>::payload(t);
    return {reinterpret_cast<value*>(bytes.data()), bytes.size() / sizeof(value)};
  }

  // Calls `each(values, bucket, offset)` for every tensor `range(stage)` gives, in order:
  // a bucket is closed when the next tensor would take it past bucket_bytes. Returns the
  // buckets' element counts.
  template <class Range, class Each>
  std::vector<std::size_t> walk(int stage, Range&& range, Each&& each) {
    detail::Buckets buckets(options_.bucket_bytes, sizeof(value));
    for (auto&& t : range(stage_at(stage))) {
      const std::span<value> v = values(t);
      if (v.empty()) continue;
      const detail::Buckets::Place at = buckets.add(v.size());
      each(v, at.bucket, at.offset);
    }
    return buckets.sizes();
  }

  std::vector<std::size_t> bucket_sizes(int stage) {
    return walk(stage, gradients_of, [](std::span<value>, std::size_t, std::size_t) {});
  }

  // The tensors `range` gives of stage `stage`, packed into buckets (padded with zeros).
  template <class Range>
  std::vector<std::vector<value>> pack(int stage, Range&& range) {
    std::vector<std::vector<value>> buckets;
    const std::vector<std::size_t> sizes =
        walk(stage, range, [&](std::span<value> v, std::size_t b, std::size_t) {
          if (b >= buckets.size()) buckets.emplace_back();
          buckets[b].insert(buckets[b].end(), v.begin(), v.end());
        });
    if (sizes != bucket_sizes(stage))
      throw error("mpi::GradientReducer: stage " + std::to_string(stage) +
                  "'s parameters() and gradients() differ in sizes; give them the same tensors "
                  "in the same order.");
    for (std::size_t b = 0; b < buckets.size(); ++b)
      buckets[b].resize(padded(sizes[b]), value(0));
    return buckets;
  }

  void unpack(Pending& p) {
    const value scale = options_.average ? value(1) / static_cast<value>(replicas_) : value(1);
    if (options_.zero == 0) {
      for (std::vector<value>& b : p.buckets)
        for (value& x : b)
          x *= scale;
      Reduced r;
      r.sizes = walk(p.stage, gradients_of, [&](std::span<value> v, std::size_t b, std::size_t at) {
        std::copy_n(p.buckets[b].begin() + static_cast<std::ptrdiff_t>(at), v.size(), v.begin());
      });
      if (steps_weights()) {  // the whole bucket is this replica's shard
        r.shards = std::move(p.buckets);
        reduced_[p.stage] = std::move(r);
      }
      return;
    }
    // ZeRO: this replica's shard holds the mean; the rest keep the replica's own sums (1) or
    // are released (2).
    Reduced r;
    for (std::vector<value>& s : p.shards)
      for (value& x : s)
        x *= scale;
    r.sizes = bucket_sizes(p.stage);
    walk(p.stage, gradients_of, [&](std::span<value> v, std::size_t b, std::size_t at) {
      const detail::Sharding::Range sh = sharding_.shard(r.sizes[b]);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::size_t k = at + i;
        if (k >= sh.begin && k < sh.end)
          v[i] = p.shards[b][k - sh.begin];
        else if (options_.zero == 2)
          v[i] = value(0);
      }
    });
    r.shards = std::move(p.shards);
    reduced_[p.stage] = std::move(r);
  }

  Stage& stage_at(int stage) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= stages_.size())
      throw detail::ReductionPlan::no_such_stage("mpi::GradientReducer", stage, stages_.size());
    return stages_[static_cast<std::size_t>(stage)];
  }

  bool wait_all(std::vector<MPI_Request>& requests,
                std::chrono::steady_clock::time_point deadline) {
    return detail::poll_until({"the reductions after a failed step", deadline}, [&] {
      return detail::mpi::test_all(requests.data(), requests.size());
    });
  }

  void run_poll() {
    if (poll_) poll_();
  }

  std::span<Stage> stages_;
  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  ReducerOptions options_;
  detail::ReductionPlan plan_;     // the stages' order, the count started, drain's agreement
  MPI_Comm comm_ = MPI_COMM_NULL;  // the all-reduces of gradients
  int replicas_ = 1;
  int replica_ = 0;
  std::vector<Pending> pending_;
  // The cut of a bucket (ZeRO); when the reducer steps the weights, this step's reduced shards
  // per stage, each stage's shard optimizer state (per bucket) with its copy from before this
  // step's update, and the updated weights to gather.
  detail::Sharding sharding_{0, 1, 0};
  std::map<int, Reduced> reduced_;
  detail::ShardSteps steps_;
  std::vector<std::pair<int, std::vector<std::vector<value>>>> updated_;
  // The progress thread (mpi::ReducerOptions::progress_thread) and what wakes it.
  MPI_Comm progress_comm_ = MPI_COMM_NULL;  // probed, never used for messages
  std::mutex progress_mutex_;
  std::condition_variable progress_wake_;
  int in_flight_ = 0;     // reductions started and not waited for
  bool waiting_ = false;  // `wait` is polling
  bool stopping_ = false;
  std::thread progress_;  // last: started once everything it reads exists
};
}  // namespace pipesched::mpi
