// Data-parallel gradient reduction over NCCL, the GPU twin of mpi::GradientReducer: at a stage's
// REDUCE_GRAD its weight gradients (device memory) are packed into buckets on a stream of the
// reducer's own, which first waits (on the GPU) for the compute stream that produced them;
// each bucket is all-reduced there (ncclAllReduce, ncclAvg for the replicas' mean) and
// unpacked back into the gradients. At its WAIT_REDUCE_GRAD the host waits for the stage's
// reduction (polling, so the pipeline's messages and failure notices keep moving) and the
// compute stream is ordered after it, so the optimizer sees the mean. After a failed step
// `drain` runs on every replica the all-reduces another replica started and it did not, so the
// data-parallel communicator is clean for the next step (detail::ReductionPlan, shared with
// the MPI reducer, as are the buckets and the reductions' order).
// With ZeRO-1/2 each bucket, padded to a multiple of the replicas, is reduce-scattered instead
// (ncclReduceScatter): a replica receives the mean of its own shard only, steps that shard with
// its own optimizer state (`step_shards`, on the host in double, as the MPI reducer does) and,
// once the whole job agreed to commit, the replicas all-gather the updated weights
// (ncclAllGather, `gather_weights`). The cut of a bucket, the shard optimizer's state and the
// order of the calls are the MPI reducer's (detail::Sharding, detail::ShardSteps). With ZeRO-0
// and nccl::ReducerOptions::optimizer set, the same steps run on whole buckets: ZeRO-0's shard
// is the whole tensor, and no all-gather is needed.
#pragma once

#include <nccl.h>

#include <map>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/transport/detail/reduction_plan.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"
#include "pipesched/transport/pipeline_options.hpp"

namespace pipesched::nccl {

//! Reduces the weight gradients of this process's stages over a data-parallel NCCL
//! communicator: one ncclAllReduce per bucket (ncclReduceScatter with ZeRO) on the reducer's
//! own stream, started at the stage's REDUCE_GRAD (after the compute stream's work so far) and
//! waited for at its WAIT_REDUCE_GRAD. `stages` is indexed by stage; every replica reduces the same
//! stages in the same order, as the schedule's actions say. Called by one thread (the rank's).
template <class Stage>
requires device_reducible_stage<Stage>
class GradientReducer {
  using span_type = std::remove_cvref_t<
      std::ranges::range_value_t<decltype(std::declval<Stage&>().device_gradients())>>;
  using value = std::remove_cv_t<typename span_type::element_type>;
  static_assert(std::is_same_v<value, float> || std::is_same_v<value, double>,
                "nccl::GradientReducer reduces float or double gradients");

 public:
  //! A reducer of `stages` on `device` over a communicator split from `data` (collective over
  //! `data`'s ranks, like ncclCommSplit) with `control` (the MPI communicator of the same
  //! processes, duplicated) for drain's agreement; `order` is the executed schedule's list of
  //! this rank (its REDUCE_GRAD actions give the order the stages are reduced in). `poll` runs
  //! between completion tests of a wait and throws when the step is being stopped.
  GradientReducer(ncclComm_t data, MPI_Comm control, CudaDevice device, std::span<Stage> stages,
                  const std::vector<Action>& order, std::function<void()> poll,
                  std::chrono::duration<double> timeout, ReducerOptions options = {})
      : stages_(stages),
        device_(std::move(device)),
        poll_(std::move(poll)),
        timeout_(timeout),
        options_(options),
        plan_(order, control),
        steps_(options_.optimizer) {
    options_.validate("nccl::ReducerOptions");
    if (steps_weights() && !shardable)
      throw invalid_problem(
          "nccl::GradientReducer: with ZeRO-" + std::to_string(options_.zero) +
          " and nccl::ReducerOptions::optimizer the reducer steps the weights, but the stage "
          "model has no device_parameters() of the same sizes as its device_gradients() (see "
          "device_shardable_stage).");
    device_.activate();
    stream_.emplace();
    int rank = 0;
    PIPESCHED_NCCL_CHECK(ncclCommUserRank(data, &rank));
    PIPESCHED_NCCL_CHECK(ncclCommSplit(data, 0, rank, comm_.out(), nullptr));
    PIPESCHED_NCCL_CHECK(ncclCommCount(comm_.get(), &replicas_));
    replica_ = rank;
    sharding_ = detail::Sharding(options_.zero, replicas_, replica_);
  }

  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  //! Ends the communicator: finalized and destroyed when the reducer's stream is idle,
  //! aborted otherwise (a reduction still in flight is abandoned: the job is ending).
  ~GradientReducer() {
    try {
      device_.activate();
      pending_.clear();
    } catch (...) {
    }
    // After a wait that timed out or a drain that failed a replica may be gone, and a
    // finalize could wait for it.
    detail::nccl::end_link(comm_, stream_, broken_);
  }

  //! Sets what runs between completion tests of a wait.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }
  //! Replicas in the data-parallel group.
  int replicas() const noexcept { return replicas_; }
  //! This process's replica: its rank in the data-parallel group.
  int replica() const noexcept { return replica_; }
  //! The stream the all-reduces run on.
  cudaStream_t stream() const noexcept { return *stream_; }
  //! The ZeRO stage (nccl::ReducerOptions::zero).
  int zero() const noexcept { return options_.zero; }
  //! True when the reducer steps the weights (nccl::ReducerOptions::optimizer is set).
  bool steps_weights() const noexcept { return static_cast<bool>(options_.optimizer); }

  //! Per-step bookkeeping: called when a step starts.
  void begin_step() {
    plan_.begin_step();
    pending_.clear();
    reduced_.clear();
    updated_.clear();
  }

  //! Starts reducing stage `stage`'s gradients (REDUCE_GRAD): the reducer's stream waits for
  //! the compute stream's work so far, then packs each bucket, all-reduces it and unpacks it
  //! into the gradients — with ZeRO reduce-scatters it and unpacks this replica's shard (the
  //! rest of the gradients kept with ZeRO-1, zeroed with ZeRO-2). Returns at once.
  void start(int stage) {
    device_.activate();
    const cudaStream_t s = *stream_;
    CudaDevice::wait(s, device_.mark());
    Pending p;
    p.stage = stage;
    std::vector<std::vector<std::span<value>>> buckets = bucket(stage);
    for (std::vector<std::span<value>>& b : buckets) {
      const std::size_t n = values_in(b);
      p.sizes.push_back(n);
      if (sharding_.sharded()) {
        start_shard(b, n, p);
      } else if (b.size() == 1) {  // one tensor: reduced in place
        all_reduce(b.front().data(), n);
      } else {
        p.buffers.emplace_back(std::vector<int>{static_cast<int>(n)}, s);
        value* buffer = p.buffers.back().data();
        copy(b, buffer, true);
        all_reduce(buffer, n);
        copy(b, buffer, false);
      }
      plan_.count_start();
    }
    p.done = device_.mark_on(s);
    pending_.push_back(std::move(p));
  }

  //! Waits for stage `stage`'s reduction (WAIT_REDUCE_GRAD): the host polls until it is done
  //! (running `poll` meanwhile) and the compute stream is ordered after it. Throws
  //! receive_timeout after the timeout.
  void wait(int stage) {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& p) { return p.stage == stage; });
    if (it == pending_.end())
      throw detail::ReductionPlan::not_started("nccl::GradientReducer", stage);
    wait_for(it->done, "the data-parallel reduction of stage " + std::to_string(stage) +
                           "'s gradients (NCCL)");
    CudaDevice::wait(device_.compute(), it->done);
    if (steps_weights()) reduced_[stage] = Reduced{std::move(it->shards), std::move(it->sizes)};
    pending_.erase(it);
  }

  //! Steps this replica's shard (without ZeRO the whole bucket) of every bucket of the stages
  //! it reduced this step (their WAIT_REDUCE_GRAD has run) with the shard optimizer and the
  //! shard's own state, on the host in double (the shard's weights and mean gradient copied
  //! from the device after the compute stream's work), keeping the previous state for
  //! `discard_step`. The updated weights are kept apart: the stage models change only in
  //! `gather_weights`.
  void step_shards() {
    require_steps("step_shards");
    device_.activate();
    const cudaStream_t s = *stream_;
    CudaDevice::wait(s, device_.mark());
    steps_.begin_update();
    updated_.clear();
    for (int stage : plan_.sequence()) {
      auto r = reduced_.find(stage);
      if (r == reduced_.end()) throw detail::ShardSteps::not_waited("nccl::GradientReducer", stage);
      const std::vector<std::vector<std::span<value>>> weights = parameter_buckets(stage);
      // Without ZeRO the mean gradient is in the stage's gradients, reduced in place.
      std::vector<std::vector<std::span<value>>> gradients;
      if (!sharding_.sharded()) gradients = bucket(stage);
      Updated u{stage, r->second.sizes, {}};
      for (std::size_t b = 0; b < weights.size(); ++b) {
        const std::size_t n = r->second.sizes[b];
        const detail::Sharding::Range sh = sharding_.shard(n);
        std::vector<value> w(sh.size()), g(sh.size());
        each_in_shard(weights[b], n,
                      [&](std::span<value> t, detail::Sharding::Range piece, std::size_t at) {
                        PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(w.data() + at, t.data() + piece.begin,
                                                             piece.size() * sizeof(value),
                                                             cudaMemcpyDeviceToHost, s));
                      });
        if (!sharding_.sharded())
          each_in_shard(gradients[b], n,
                        [&](std::span<value> t, detail::Sharding::Range piece, std::size_t at) {
                          PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(
                              g.data() + at, t.data() + piece.begin, piece.size() * sizeof(value),
                              cudaMemcpyDeviceToHost, s));
                        });
        else if (!g.empty())
          PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(g.data(), r->second.shards[b].data(),
                                               g.size() * sizeof(value), cudaMemcpyDeviceToHost,
                                               s));
        PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<double> wd(w.begin(), w.end());
        const std::vector<double> gd(g.begin(), g.end());
        steps_.step(stage, weights.size(), b, wd, gd);
        std::copy(wd.begin(), wd.end(), w.begin());
        u.weights.push_back(std::move(w));
      }
      updated_.push_back(std::move(u));
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
  //! the stage models' weights (ncclAllGather of each bucket over the data-parallel group, in
  //! REDUCE_GRAD order, on the reducer's stream; the host waits with `poll` and the compute
  //! stream is ordered after it); without ZeRO copies the updated weights, which every replica
  //! stepped whole, into the stage models. Throws receive_timeout after the timeout.
  void gather_weights() {
    require_steps("gather_weights");
    device_.activate();
    const cudaStream_t s = *stream_;
    CudaDevice::wait(s, device_.mark());
    std::vector<DeviceTensor<value>> buffers;
    for (const Updated& u : updated_) {
      const std::vector<std::vector<std::span<value>>> weights = parameter_buckets(u.stage);
      for (std::size_t b = 0; b < weights.size(); ++b) {
        const std::size_t n = u.sizes[b], c = sharding_.part(n), at = sharding_.part_begin(n);
        if (!sharding_.sharded()) {
          each_in_shard(weights[b], n,
                        [&](std::span<value> t, detail::Sharding::Range piece, std::size_t from) {
                          PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(
                              t.data() + piece.begin, u.weights[b].data() + from,
                              piece.size() * sizeof(value), cudaMemcpyHostToDevice, s));
                        });
          continue;
        }
        buffers.push_back(DeviceTensor<value>::zeros({static_cast<int>(sharding_.padded(n))}, s));
        value* buffer = buffers.back().data();
        if (!u.weights[b].empty())
          PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(buffer + at, u.weights[b].data(),
                                               u.weights[b].size() * sizeof(value),
                                               cudaMemcpyHostToDevice, s));
        PIPESCHED_NCCL_CHECK(ncclAllGather(buffer + at, buffer, c, datatype(), comm_.get(), s));
        copy(weights[b], buffer, false);
      }
    }
    const CudaDevice::Mark done = device_.mark_on(s);
    wait_for(done, "the all-gather of the updated weights (NCCL)");
    CudaDevice::wait(device_.compute(), done);
    updated_.clear();
    reduced_.clear();
  }

  //! After a failed step: every replica learns how many all-reduces the most advanced one
  //! started, runs the ones it did not (on scratch buffers of the same sizes, in the same
  //! order) and waits for its stream, so the communicator is clean for the next step
  //! (collective over the data-parallel group; false when it could not within `timeout`).
  bool drain(std::chrono::duration<double> timeout) {
    const auto deadline = detail::deadline_after(timeout);
    device_.activate();
    const std::optional<long long> most = plan_.most_started(deadline);
    if (!most) return broken();
    std::vector<DeviceTensor<value>> scratch;
    plan_.for_each_missing(
        *most,
        [&](int stage) {
          std::vector<std::size_t> sizes;
          for (const std::vector<std::span<value>>& b : bucket(stage))
            sizes.push_back(values_in(b));
          return sizes;
        },
        [&](std::size_t n) {
          scratch.push_back(
              DeviceTensor<value>::zeros({static_cast<int>(sharding_.padded(n))}, *stream_));
          if (!sharding_.sharded()) {
            all_reduce(scratch.back().data(), n);
            return;
          }
          scratch.push_back(
              DeviceTensor<value>::zeros({static_cast<int>(sharding_.part(n))}, *stream_));
          reduce_scatter(scratch[scratch.size() - 2].data(), scratch.back().data(), n);
        });
    if (!detail::nccl::wait_idle(*stream_, {"the all-reduces after a failed step", deadline}))
      return broken();
    begin_step();
    return true;
  }

 private:
  static constexpr bool shardable = device_shardable_stage<Stage>;

  struct Pending {
    int stage = 0;
    std::vector<DeviceTensor<value>> buffers;  // the packed buckets (freed on the stream)
    std::vector<DeviceTensor<value>> shards;   // ZeRO: this replica's reduced part of each
    std::vector<std::size_t> sizes;            // the buckets' real sizes
    CudaDevice::Mark done;                     // recorded after the last unpack
  };
  // A stage's reduced parts (ZeRO: the replicas' mean, on the device; none without ZeRO, whose
  // mean is in the gradients) and its buckets' sizes, kept when the reducer steps the weights.
  struct Reduced {
    std::vector<DeviceTensor<value>> shards;
    std::vector<std::size_t> sizes;
  };
  // A stage's updated shard of each bucket (on the host) and the buckets' sizes.
  struct Updated {
    int stage = 0;
    std::vector<std::size_t> sizes;
    std::vector<std::vector<value>> weights;
  };

  // Starts bucket `b` (of `n` values) of `p`'s stage with ZeRO: packed into a buffer padded to
  // a multiple of the replicas, reduce-scattered into this replica's part, which is unpacked
  // into the gradients of its shard; with ZeRO-2 the rest of the gradients are zeroed.
  void start_shard(const std::vector<std::span<value>>& b, std::size_t n, Pending& p) {
    const cudaStream_t s = *stream_;
    p.buffers.push_back(DeviceTensor<value>::zeros({static_cast<int>(sharding_.padded(n))}, s));
    p.shards.push_back(DeviceTensor<value>::zeros({static_cast<int>(sharding_.part(n))}, s));
    value* buffer = p.buffers.back().data();
    const value* shard = p.shards.back().data();
    copy(b, buffer, true);
    reduce_scatter(buffer, p.shards.back().data(), n);
    if (sharding_.zero() == 2)
      for (std::span<value> g : b)
        PIPESCHED_CUDA_CHECK(cudaMemsetAsync(g.data(), 0, g.size_bytes(), s));
    each_in_shard(b, n, [&](std::span<value> t, detail::Sharding::Range piece, std::size_t at) {
      PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(t.data() + piece.begin, shard + at,
                                           piece.size() * sizeof(value), cudaMemcpyDeviceToDevice,
                                           s));
    });
  }

  // Calls `each(tensor, piece, at)` for every tensor of bucket `b` (of `n` values) with a piece
  // in this replica's shard: `piece` is that piece within the tensor, `at` where it starts in
  // the shard.
  template <class Each>
  void each_in_shard(const std::vector<std::span<value>>& b, std::size_t n, Each&& each) const {
    const detail::Sharding::Range sh = sharding_.shard(n);
    std::size_t offset = 0;
    for (std::span<value> t : b) {
      const detail::Sharding::Range piece = sharding_.shard_of_tensor(n, offset, t.size());
      if (piece.size() > 0) each(t, piece, offset + piece.begin - sh.begin);
      offset += t.size();
    }
  }

  // The host waits for `done` (running `poll` between tests); after the timeout the
  // communicator counts as broken and receive_timeout is thrown (`what` names the wait).
  void wait_for(const CudaDevice::Mark& done, const std::string& what) {
    const detail::Wait wait{what, detail::deadline_after(timeout_)};
    const bool ok = detail::nccl::wait_for_mark(done, wait, poll_);
    if (!ok) {
      broken_ = true;
      throw receive_timeout(detail::expired_text(wait, timeout_, detail::same_schedule_hint));
    }
  }

  void require_steps(const char* what) const {
    if (!steps_weights())
      throw error(std::string("nccl::GradientReducer::") + what +
                  " runs only when the reducer steps the weights (nccl::ReducerOptions::optimizer "
                  "set).");
  }

  // Notes that a replica may be gone (the communicator is then aborted, not finalized); false.
  bool broken() noexcept {
    broken_ = true;
    return false;
  }

  static constexpr ncclDataType_t datatype() {
    return std::is_same_v<value, double> ? ncclFloat64 : ncclFloat32;
  }

  void all_reduce(value* data, std::size_t n) {
    PIPESCHED_NCCL_CHECK(ncclAllReduce(
        data, data, n, datatype(), options_.average ? ncclAvg : ncclSum, comm_.get(), *stream_));
  }

  // ZeRO: reduce-scatters `buffer` (a bucket of `n` values, padded) into this replica's part.
  void reduce_scatter(const value* buffer, value* part, std::size_t n) {
    PIPESCHED_NCCL_CHECK(ncclReduceScatter(buffer, part, sharding_.part(n), datatype(),
                                           options_.average ? ncclAvg : ncclSum, comm_.get(),
                                           *stream_));
  }

  // Copies the tensors of bucket `b` into `buffer` (`in`) or back out of it, on the stream.
  void copy(const std::vector<std::span<value>>& b, value* buffer, bool in) {
    std::size_t at = 0;
    for (std::span<value> g : b) {
      void* to = in ? static_cast<void*>(buffer + at) : static_cast<void*>(g.data());
      const void* from = in ? static_cast<const void*>(g.data()) : buffer + at;
      PIPESCHED_CUDA_CHECK(
          cudaMemcpyAsync(to, from, g.size_bytes(), cudaMemcpyDeviceToDevice, *stream_));
      at += g.size();
    }
  }

  // Stage `stage`'s gradients in buckets: a bucket is closed when the next tensor would take it
  // past bucket_bytes; empty tensors are left out.
  std::vector<std::vector<std::span<value>>> bucket(int stage) {
    return in_buckets(stage_at(stage).device_gradients());
  }

  // Stage `stage`'s parameters in the same buckets as its gradients.
  std::vector<std::vector<std::span<value>>> parameter_buckets(int stage) {
    Stage& st = stage_at(stage);
    std::vector<std::vector<std::span<value>>> out;
    if constexpr (shardable) out = in_buckets(st.device_parameters());
    std::vector<std::size_t> got, want;
    for (const std::vector<std::span<value>>& b : out)
      got.push_back(values_in(b));
    for (const std::vector<std::span<value>>& b : bucket(stage))
      want.push_back(values_in(b));
    if (got != want)
      throw error("nccl::GradientReducer: stage " + std::to_string(stage) +
                  "'s device_parameters() and device_gradients() differ in sizes; give them the "
                  "same tensors in the same order.");
    return out;
  }

  Stage& stage_at(int stage) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= stages_.size())
      throw detail::ReductionPlan::no_such_stage("nccl::GradientReducer", stage, stages_.size());
    return stages_[static_cast<std::size_t>(stage)];
  }

  // `tensors` (spans over device memory) in buckets by the bucket rule.
  template <class Range>
  std::vector<std::vector<std::span<value>>> in_buckets(Range&& tensors) const {
    std::vector<std::vector<std::span<value>>> out;
    detail::Buckets buckets(options_.bucket_bytes, sizeof(value));
    for (auto g : tensors) {
      const std::span<value> v(g.data(), g.size());
      if (v.empty()) continue;
      if (buckets.add(v.size()).bucket == out.size()) out.emplace_back();
      out.back().push_back(v);
    }
    return out;
  }

  // The values in bucket `b`.
  static std::size_t values_in(const std::vector<std::span<value>>& b) {
    std::size_t n = 0;
    for (std::span<value> g : b)
      n += g.size();
    return n;
  }

  std::span<Stage> stages_;
  CudaDevice device_;
  std::function<void()> poll_;
  std::chrono::duration<double> timeout_;
  ReducerOptions options_;
  std::optional<CudaStream> stream_;  // the all-reduces' (made on the device, after activate)
  detail::ReductionPlan plan_;        // the stages' order, the count started, drain's agreement
  detail::nccl::Link comm_;           // split from the data-parallel communicator
  int replicas_ = 1;
  int replica_ = 0;
  bool broken_ = false;  // a wait or a drain ran out of time: a replica may be gone
  std::vector<Pending> pending_;
  // ZeRO: the cut of a bucket; this step's reduced parts, per stage; each stage's shard
  // optimizer state with its copy from before this step's update; the updated shards to
  // all-gather.
  detail::Sharding sharding_{0, 1, 0};
  std::map<int, Reduced> reduced_;
  detail::ShardSteps steps_;
  std::vector<Updated> updated_;
};
}  // namespace pipesched::nccl
