// The generic executor: runs one rank's list of a schedule on the user's stage models —
// receives inputs, calls the layers, stashes activations, sends outputs, computes the loss
// at the last stage, accumulates weight gradients, records a timeline and the bytes held.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/transport/inproc/inproc_transport.hpp"

namespace pipesched {

//! Knobs of the executor.
struct ExecutorOptions {
  //! How long a receive waits before the step fails with the rank and action named.
  std::chrono::duration<double> receive_timeout{60.0};
  //! Called by each rank once per step, after its list has run (e.g. an optimizer step on
  //! that rank's stage models).
  std::function<void(int rank)> optimizer;
};

//! What one rank measured in one step. Times are seconds since the step's common start.
struct RankRun {
  int rank = 0;
  double loss = 0;                   //!< loss contributions computed on this rank
  double peak_bytes = 0;             //!< largest sum of live stash bytes
  double end = 0;                    //!< when the rank's last action ended
  std::vector<ActionTiming> timing;  //!< per position of the executed (lowered) list
  std::vector<MemoryPoint> memory;   //!< held stash bytes after each change
};

namespace detail {

inline std::uint64_t unit_key(int stage, int microbatch, int slice) {
  return pack_key(MessageKey{stage, microbatch, slice, Direction::Forward});
}

}  // namespace detail

//! Runs one rank of a schedule. `Stage` is the user's stage model; `Transport` moves tensors
//! between ranks; `Device` marks time. The schedule is validated and lowered to explicit
//! sends and receives at construction (a schedule that already has them runs as written).
template <class Stage, class Transport, class Device = HostDevice>
class Executor {
  static_assert(check_stage_model<Stage>());
  static_assert(check_transport<Transport, typename Stage::tensor_type>());
  static_assert(check_device<Device>());

 public:
  using tensor_type = typename Stage::tensor_type;
  using stash_type = typename Stage::stash_type;
  using mark_type = typename Device::mark_type;

  //! `stages[i]` is the model of the i-th stage this rank holds, in increasing stage order
  //! (`schedule.placement.stages_of(rank)`); the executor does not own them.
  Executor(const Schedule& schedule, int rank, std::vector<Stage*> stages, Transport& transport,
           Device device = {}, ExecutorOptions options = {})
      : schedule_(lower_communication(schedule)),
        rank_(rank),
        transport_(&transport),
        device_(std::move(device)),
        options_(std::move(options)) {
    if (rank < 0 || rank >= schedule_.rank_count())
      throw invalid_problem("Executor: rank = " + std::to_string(rank) + " but the schedule has " +
                            std::to_string(schedule_.rank_count()) + " ranks (0.." +
                            std::to_string(schedule_.rank_count() - 1) + ").");
    ValidationReport rep = check(schedule_);
    if (!rep.ok())
      throw invalid_schedule("Executor: schedule '" + schedule_.name + "' is invalid:\n" +
                             rep.summary());
    const auto& mine = schedule_.placement.stages_of(rank);
    if (stages.size() != mine.size())
      throw invalid_problem("Executor: rank " + std::to_string(rank) + " holds " +
                            std::to_string(mine.size()) + " stages but was given " +
                            std::to_string(stages.size()) +
                            " stage models; pass one per stage in "
                            "placement.stages_of(rank) order.");
    stage_of_.assign(schedule_.problem.stages, nullptr);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (stages[i] == nullptr)
        throw invalid_problem("Executor: the stage model for stage " + std::to_string(mine[i]) +
                              " is null.");
      stage_of_[mine[i]] = stages[i];
    }
  }

  //! The executed schedule (the given one, lowered to sends and receives).
  const Schedule& schedule() const noexcept { return schedule_; }
  int rank() const noexcept { return rank_; }

  //! Runs one training step of this rank's list; `start` is the step's common start mark
  //! (timeline times are measured from it). Throws execution_error naming the rank, the
  //! position and the action when anything fails; transport_aborted when another rank did.
  RankRun step(const TrainingData<tensor_type>& data, const mark_type& start) {
    for (Stage* s : stage_of_)
      if (s) s->zero_gradients();
    clear();
    RankRun run;
    run.rank = rank_;
    const auto& list = schedule_.ranks[rank_];
    run.timing.assign(list.size(), {});
    data_ = &data;
    loss_ = 0;
    held_ = 0;
    peak_ = 0;
    memory_.clear();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const mark_type m0 = device_.mark();
      try {
        execute(a);
      } catch (const transport_aborted&) {
        throw;
      } catch (const std::exception& e) {
        throw execution_error("rank " + std::to_string(rank_) + " failed at position " +
                                  std::to_string(i) + " (" + to_string(a) + "): " + e.what(),
                              rank_, static_cast<int>(i), a);
      }
      const mark_type m1 = device_.mark();
      run.timing[i] = {device_.seconds_between(start, m0), device_.seconds_between(start, m1)};
      if (changed_) {
        memory_.push_back({run.timing[i].end, held_});
        changed_ = false;
      }
    }
    if (!stashes_.empty() || !inputs_.empty() || !grads_.empty() || !outbox_.empty())
      throw execution_error("rank " + std::to_string(rank_) + " ended the step with " +
                                std::to_string(stashes_.size()) + " stashes, " +
                                std::to_string(inputs_.size() + grads_.size() + outbox_.size()) +
                                " tensors left over; the schedule does not consume what it "
                                "produces.",
                            rank_, static_cast<int>(list.size()), Action{});
    if (options_.optimizer) options_.optimizer(rank_);
    device_.synchronize();
    run.loss = loss_;
    run.peak_bytes = peak_;
    run.memory = std::move(memory_);
    run.end = list.empty() ? 0.0 : run.timing.back().end;
    for (const auto& t : run.timing)
      run.end = std::max(run.end, t.end);
    data_ = nullptr;
    return run;
  }

 private:
  struct Held {
    stash_type stash;
    double bytes = 0;
  };

  Stage& model(int stage) { return *stage_of_[static_cast<std::size_t>(stage)]; }
  int rank_of(int stage) const { return schedule_.placement.rank_of(stage); }

  template <class Map>
  static auto take(Map& map, std::uint64_t key, const char* what, const Action& a) {
    auto it = map.find(key);
    if (it == map.end())
      throw error(std::string("no ") + what + " is available for " + to_string(a) +
                  "; the schedule uses it before it was produced or received.");
    auto value = std::move(it->second);
    map.erase(it);
    return value;
  }

  // Adds `delta` bytes to what the rank holds (negative frees). A stash may also grow at I
  // (a layer that keeps more for its weight gradient than for its input gradient).
  void adjust(double delta) {
    held_ += delta;
    if (held_ > peak_) peak_ = held_;
    changed_ = changed_ || delta != 0;
  }

  void forward(const Action& a) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = detail::unit_key(s, m, k);
    tensor_type x = s == 0 ? data_->input(m, k) : take(inputs_, key, "input activation", a);
    Held h;
    tensor_type y = model(s).forward(x, h.stash);
    h.bytes = static_cast<double>(model(s).stash_bytes(h.stash));
    adjust(h.bytes);
    stashes_.insert_or_assign(key, std::move(h));
    const int last = schedule_.problem.stages - 1;
    if (s == last) {
      grads_.insert_or_assign(key, data_->loss(y, m, k, loss_));
    } else if (rank_of(s + 1) == rank_) {
      inputs_.insert_or_assign(detail::unit_key(s + 1, m, k), std::move(y));
    } else {
      outbox_.insert_or_assign(detail::pack_key({s, m, k, Direction::Forward}), std::move(y));
    }
  }

  void backward(const Action& a, bool weights_too) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = detail::unit_key(s, m, k);
    tensor_type dy = take(grads_, key, "output gradient", a);
    auto it = stashes_.find(key);
    if (it == stashes_.end())
      throw error("no stash for " + to_string(a) + "; its forward has not run on this rank.");
    Held& h = it->second;
    tensor_type dx = model(s).backward_input(dy, h.stash);
    if (weights_too) {
      model(s).backward_weight(h.stash);
      adjust(-h.bytes);
      stashes_.erase(it);
    } else {
      const double left = static_cast<double>(model(s).stash_bytes(h.stash));
      adjust(left - h.bytes);
      h.bytes = left;
    }
    if (s == 0) return;  // the input gradient of the first stage goes nowhere
    if (rank_of(s - 1) == rank_)
      grads_.insert_or_assign(detail::unit_key(s - 1, m, k), std::move(dx));
    else
      outbox_.insert_or_assign(detail::pack_key({s, m, k, Direction::Backward}), std::move(dx));
  }

  void weight(const Action& a) {
    const std::uint64_t key = detail::unit_key(a.stage, a.microbatch, a.slice);
    auto it = stashes_.find(key);
    if (it == stashes_.end())
      throw error("no stash for " + to_string(a) + "; its forward has not run on this rank.");
    model(a.stage).backward_weight(it->second.stash);
    adjust(-it->second.bytes);
    stashes_.erase(it);
  }

  void execute(const Action& a) {
    const auto timeout = options_.receive_timeout;
    switch (a.kind) {
      case OpKind::Idle:
        return;
      case OpKind::F:
        forward(a);
        return;
      case OpKind::B:
        backward(a, true);
        return;
      case OpKind::I:
        backward(a, false);
        return;
      case OpKind::W:
        weight(a);
        return;
      case OpKind::Overlap:
        forward(a.forward_half());
        backward(a.backward_half(), true);
        return;
      case OpKind::SendF:
        transport_->send(
            rank_, rank_of(a.stage + 1), {a.stage + 1, a.microbatch, a.slice, Direction::Forward},
            take(outbox_, detail::pack_key({a.stage, a.microbatch, a.slice, Direction::Forward}),
                 "forward output", a));
        return;
      case OpKind::SendB:
        transport_->send(
            rank_, rank_of(a.stage - 1), {a.stage - 1, a.microbatch, a.slice, Direction::Backward},
            take(outbox_, detail::pack_key({a.stage, a.microbatch, a.slice, Direction::Backward}),
                 "input gradient", a));
        return;
      case OpKind::RecvF:
        inputs_.insert_or_assign(
            detail::unit_key(a.stage, a.microbatch, a.slice),
            transport_->receive(rank_, {a.stage, a.microbatch, a.slice, Direction::Forward},
                                timeout));
        return;
      case OpKind::RecvB:
        grads_.insert_or_assign(
            detail::unit_key(a.stage, a.microbatch, a.slice),
            transport_->receive(rank_, {a.stage, a.microbatch, a.slice, Direction::Backward},
                                timeout));
        return;
      case OpKind::R:
        throw error(
            "recompute (R) needs a checkpoint policy; this executor keeps every "
            "activation, so give it a schedule without R actions.");
    }
  }

  void clear() {
    stashes_.clear();
    inputs_.clear();
    grads_.clear();
    outbox_.clear();
  }

  Schedule schedule_;
  int rank_;
  Transport* transport_;
  Device device_;
  ExecutorOptions options_;
  std::vector<Stage*> stage_of_;
  const TrainingData<tensor_type>* data_ = nullptr;
  std::unordered_map<std::uint64_t, Held> stashes_;
  std::unordered_map<std::uint64_t, tensor_type> inputs_;  // forward inputs by unit
  std::unordered_map<std::uint64_t, tensor_type> grads_;   // output gradients by unit
  std::unordered_map<std::uint64_t, tensor_type> outbox_;  // produced, waiting for a send
  double loss_ = 0, held_ = 0, peak_ = 0;
  bool changed_ = false;
  std::vector<MemoryPoint> memory_;
};

}  // namespace pipesched
