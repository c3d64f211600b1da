// The generic executor: runs one rank's list of a schedule on the user's stage models —
// receives inputs, calls the layers, stashes activations (or, for checkpointed units, only
// their inputs, recomputing the rest at R), keeps each microbatch's slice context for
// slice-aware models, sends outputs, computes the loss at the last stage, accumulates weight
// gradients (whole or in parts), optionally fills waits on receives with pending recomputes
// and weight-gradient parts, records a timeline and the bytes held.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/pass/lower_communication.hpp"

namespace pipesched {

//! Knobs of the executor.
struct ExecutorOptions {
  //! How long a receive waits before the step fails with the rank and action named. Must be
  //! more than 0 (0, negative and NaN are refused when the executor is built); infinity, or
  //! any duration too long for the steady clock (std::chrono::hours::max()), waits without a
  //! deadline. Process pipelines bound their start-of-step and end-of-step agreement by it too.
  std::chrono::duration<double> receive_timeout{60.0};
  //! Called by each rank once per step, after its list has run (e.g. an optimizer step on
  //! that rank's stage models). What it throws fails the step like a layer's exception: the
  //! execution_error names the rank and "its optimizer step", at the position after the list.
  std::function<void(int rank)> optimizer;
  //! Dynamic bubble filling: when the rank's next action is a receive whose message has not
  //! arrived, run pending work from later in the rank's own list instead of waiting — the
  //! next recompute R whose forward has already run or, when no recompute can run, the next
  //! weight-gradient W (or W part) whose I has run — then try the receive again; block only
  //! when nothing is pending. Numerics do not change beyond rounding (a recompute's output is
  //! discarded; weight gradients may add up in another order), but held bytes rise earlier
  //! than the list says when a recompute moves up, so the measured peak may then exceed the
  //! static simulation's; `memory_budget_bytes` bounds it. A W run early only frees bytes.
  bool fill_waits = false;
  //! With `fill_waits`: work is run early only if the rank's held bytes stay within this
  //! budget from then until the work's own place in the list, projected from the byte figures
  //! this rank has measured for each of its stages (a stage whose figures it has not seen yet
  //! is not filled across). The budget never holds back the list itself: a schedule whose own
  //! peak is above it still runs, unfilled.
  double memory_budget_bytes = std::numeric_limits<double>::infinity();
};

//! What one rank measured in one step. Times are seconds since the step's common start.
struct RankRun {
  int rank = 0;                      //!< the rank these figures are of
  double loss = 0;                   //!< loss contributions computed on this rank
  double peak_bytes = 0;             //!< largest sum of live stash bytes
  double end = 0;                    //!< when the rank's last action ended
  std::vector<ActionTiming> timing;  //!< per position of the executed (lowered) list
  std::vector<MemoryPoint> memory;   //!< held stash bytes after each change
  //! Actions run ahead of their place in the list to fill a wait (`fill_waits`); each keeps
  //! its own list position in `timing`, with the times it really ran.
  int filled = 0;
};

namespace detail {

inline std::uint64_t unit_key(int stage, int microbatch, int slice) {
  return pack_key(MessageKey{stage, microbatch, slice, Direction::Forward});
}

//! A stage model that reports how many bytes a stage input takes (what a checkpointed unit
//! keeps until its recompute).
template <class S>
concept reports_input_bytes = requires(const S& s, const typename S::tensor_type& x) {
  { s.input_bytes(x) } -> std::convertible_to<std::size_t>;
};

//! A tensor that reports its own size in bytes.
template <class T>
concept reports_bytes = requires(const T& x) {
  { x.bytes() } -> std::convertible_to<std::size_t>;
};

//! The slice context of a stage model, or an empty stand-in for a model without one.
template <class S>
struct context_of {
  struct type {};
};
template <class S>
requires has_context_type<S>
struct context_of<S> {
  using type = typename S::context_type;
};

}  // namespace detail

//! Runs one rank of a schedule. `Stage` is the user's stage model; `Transport` moves tensors
//! between ranks; `Device` marks time. The schedule is validated and lowered to explicit
//! sends and receives at construction (a schedule that already has them runs as written).
//!
//! A unit (stage, microbatch, slice) is checkpointed exactly when the schedule recomputes it
//! (has an R for it), as in the simulator: its F runs `forward` as usual, then drops the stash
//! and keeps only the stage input (the boundary, sized by `Stage::input_bytes(x)` when the
//! stage model has it, else by `x.bytes()`); its R runs `forward` again from that input
//! (output discarded), rebuilding the stash; its backward frees it all.
//!
//! A slice-aware stage model (`slice_aware_stage_model`) gets one context per (stage,
//! microbatch): made at the microbatch's first forward on the stage, passed to every forward,
//! recompute and backward_input of its slices, destroyed after its slice-0 backward (the last,
//! as slices run their backwards from last to first). A checkpointed slice keeps its input and
//! the context (shared by the slices, so nothing of it is dropped); its R reads the earlier
//! slices' keys/values there again. When the schedule does not cut microbatches (slices = 1)
//! and the model also has the whole-unit calls `forward(x, stash)` and `backward_input(dy,
//! stash)`, those run instead, without a context: the model behaves as one without slices.
//!
//! A W with parts (`2W0.1:3`) runs `backward_weight(stash, part, parts)`, parts = 1 + the
//! largest part the schedule gives that unit; the stash goes once every part has run. A stage
//! model without `splits_weight_gradient` is refused for such a schedule at construction.
//!
//! Held bytes: the live stashes (`stash_bytes`, or the boundary's bytes while checkpointed) plus
//! the live contexts (`context_bytes`). Each action changes them once, by what it added or
//! freed in both, as the simulator charges one memory delta per action; so with `ProfiledCost`
//! figures taken from the same byte counts (`activation_bytes` = stash after forward plus what
//! the slice adds to its context, `boundary_bytes` = input plus that, `wgrad_bytes` = stash
//! after backward_input, `context_gradient_bytes` and `wgrad_part_bytes` as documented there)
//! the measured peak equals the simulated one when waits are not filled.
template <class Stage, class Transport, class Device = HostDevice>
class Executor {
  static_assert(check_stage_model<Stage>());
  static_assert(check_transport<Transport, typename Stage::tensor_type>());
  static_assert(check_device<Device>());

 public:
  using tensor_type = typename Stage::tensor_type;  //!< what the stages take and return
  using stash_type = typename Stage::stash_type;    //!< what a forward keeps for its backward
  using mark_type = typename Device::mark_type;     //!< a point in the device's timeline
  //! The stage model's slice context (an empty stand-in when it has none).
  using context_type = typename detail::context_of<Stage>::type;

  //! True when the stage model keeps a slice context per microbatch.
  static constexpr bool slice_aware = slice_aware_stage_model<Stage>;
  //! True when the stage model can run its weight gradient in parts.
  static constexpr bool splits_weights = splits_weight_gradient<Stage>;

  //! True when the executor can size a checkpointed unit's kept input, so it can run
  //! schedules with recompute (R).
  static constexpr bool can_checkpoint =
      detail::reports_input_bytes<Stage> || detail::reports_bytes<tensor_type>;

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
    if constexpr (!can_checkpoint) {
      for (const auto& list : schedule_.ranks)
        for (const Action& a : list)
          if (a.kind == OpKind::R)
            throw invalid_problem(
                "Executor: schedule '" + schedule_.name + "' recomputes " + to_string(a) +
                ", so a checkpointed unit keeps its input until then and the executor must know "
                "its size, but the stage model needs input_bytes(...) to checkpoint: add "
                "`std::size_t input_bytes(const tensor_type&) const` to the stage model (or a "
                "`bytes()` member to its tensor type), or run a schedule without R.");
    }
    detail::check_receive_timeout("Executor", options_.receive_timeout);
    if (!(options_.memory_budget_bytes >= 0))
      throw invalid_problem("Executor: memory_budget_bytes is " +
                            std::to_string(options_.memory_budget_bytes) +
                            "; give a budget of 0 bytes or more (infinity for none).");
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
    slices_ = static_cast<std::size_t>(std::max(1, schedule_.problem.slices));
    // Whole microbatches need no context: a model that also runs them without one does.
    use_context_ = slice_aware && !(slices_ == 1 && detail::whole_unit_calls<Stage>);
    UnitFigures unseen;
    if (!use_context_) {
      // Without a context, no action changes context bytes.
      unseen.context_forward = unseen.context_input = unseen.context_backward = 0.0;
    }
    seen_.assign(static_cast<std::size_t>(schedule_.problem.stages) * slices_, unseen);
    const auto& list = schedule_.ranks[rank_];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.kind == OpKind::R)
        checkpointed_.insert(detail::unit_key(a.stage, a.microbatch, a.slice));
      if (a.kind == OpKind::W && a.part > 0) {
        int& parts = parts_[detail::unit_key(a.stage, a.microbatch, a.slice)];
        parts = std::max(parts, a.part + 1);
        if constexpr (!splits_weights)
          throw invalid_problem(
              "Executor: schedule '" + schedule_.name + "' cuts weight gradients into parts (" +
              to_string(a) + " on rank " + std::to_string(rank_) +
              "), but the stage model cannot run a part: add `int weight_parts() const` and "
              "`void backward_weight(stash_type&, int part, int parts)` to it, or run each W "
              "whole.");
      }
      // A late recompute waits for its gradient, so it never runs ahead of its place.
      if (is_fillable(a.kind) && !a.late) fillable_.push_back(i);
      if (a.kind == OpKind::RecvF || a.kind == OpKind::RecvB)
        receives_.push_back({a.stage, a.microbatch, a.slice,
                             a.kind == OpKind::RecvF ? Direction::Forward : Direction::Backward});
    }
  }

  //! The executed schedule (the given one, lowered to sends and receives).
  const Schedule& schedule() const noexcept { return schedule_; }
  //! The rank whose list this executor runs.
  int rank() const noexcept { return rank_; }

  //! Runs one training step of this rank's list; `start` is the step's common start mark
  //! (timeline times are measured from it). Throws execution_error naming the rank, the
  //! position and the action when anything fails — whatever was thrown, std::exception or
  //! not; position -1 for the stage models' zero_gradients before the list, the list's size
  //! for the optimizer hook after it — and transport_aborted when another rank failed.
  RankRun step(const TrainingData<tensor_type>& data, const mark_type& start) {
    attached(-1, Action{}, "before its list (zero_gradients)", [&] {
      for (Stage* s : stage_of_)
        if (s) s->zero_gradients();
    });
    clear();
    RankRun run;
    run.rank = rank_;
    const auto& list = schedule_.ranks[rank_];
    run.timing.assign(list.size(), {});
    ran_early_.assign(list.size(), 0);
    next_fillable_ = 0;
    arrived_.reset();
    data_ = &data;
    loss_ = 0;
    held_ = 0;
    peak_ = 0;
    memory_.clear();
    memory_at_.clear();
    marks_.assign(list.size(), std::nullopt);
    // A transport that can post receives ahead (MPI) gets the step's receives at once.
    if constexpr (requires(Transport & t, std::span<const MessageKey> k) { t.post_receives(0, k); })
      transport_->post_receives(rank_, std::span<const MessageKey>(receives_));
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (ran_early_[i]) continue;  // a fill already ran it, and recorded when
      if (options_.fill_waits && (list[i].kind == OpKind::RecvF || list[i].kind == OpKind::RecvB))
        guarded(i, [&] { fill_wait(i, run); });
      // A receive only posts; the action that uses its data waits for it (untimed, like the
      // wait inside a blocking receive; a failure names the receive).
      await_inputs(list[i]);
      run_at(i);
    }
    if (!stashes_.empty() || !inputs_.empty() || !grads_.empty() || !outbox_.empty() ||
        !contexts_.empty() || !posted_inputs_.empty() || !posted_grads_.empty())
      throw execution_error("rank " + std::to_string(rank_) + " ended the step with " +
                                std::to_string(stashes_.size()) + " stashes, " +
                                std::to_string(inputs_.size() + grads_.size() + outbox_.size() +
                                               posted_inputs_.size() + posted_grads_.size()) +
                                " tensors and " + std::to_string(contexts_.size()) +
                                " slice contexts left over; the schedule does not consume what "
                                "it produces.",
                            rank_, static_cast<int>(list.size()), Action{});
    if (options_.optimizer)
      attached(static_cast<int>(list.size()), Action{}, "in its optimizer step",
               [&] { options_.optimizer(rank_); });
    device_.synchronize();
    resolve_times(start, run);
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
  // What a unit holds between its forward and its backward. A checkpointed unit holds only
  // its boundary (the stage input) from F until R; `bytes` is what it adds to the rank's held
  // bytes now, `full_bytes` what its stash held right after forward (what R brings back).
  struct Held {
    stash_type stash;
    double bytes = 0;
    double full_bytes = 0;
    std::optional<tensor_type> boundary;
    bool input_done = false;  // its backward_input (I) has run: W parts may run
    int parts_done = 0;       // W parts run so far
  };

  // A microbatch's slice context on one stage and the bytes it held when last measured.
  struct HeldContext {
    context_type context;
    double bytes = 0;
  };

  // Byte figures last measured per (stage, slice), to project held bytes ahead when filling a
  // wait (-1 or empty: not seen yet). They persist across steps. The context figures are the
  // change an action made to its context's bytes (F adds the slice's keys/values; the first
  // backward may take gradient buffers; slice 0's backward ends the context).
  struct UnitFigures {
    double full = -1;      // stash bytes right after forward
    double boundary = -1;  // a checkpointed forward's kept input
    double wgrad = -1;     // stash bytes right after backward_input
    std::optional<double> context_forward, context_input, context_backward;
    double context_recompute = 0;  // a recompute rewrites what its forward put: no change
  };

  // The kinds of work a rank may run ahead of its place while it waits on a receive: each
  // needs nothing from another rank once its own predecessor on this rank has run. A
  // recompute needs its forward; a weight-gradient W (or W part) needs its I.
  static constexpr std::array fillable_kinds{OpKind::R, OpKind::W};
  static constexpr bool is_fillable(OpKind k) {
    return std::find(fillable_kinds.begin(), fillable_kinds.end(), k) != fillable_kinds.end();
  }

  Stage& model(int stage) { return *stage_of_[static_cast<std::size_t>(stage)]; }
  int rank_of(int stage) const { return schedule_.placement.rank_of(stage); }
  bool is_checkpointed(std::uint64_t unit) const { return checkpointed_.contains(unit); }
  UnitFigures& figures(int stage, int slice) {
    return seen_[static_cast<std::size_t>(stage) * slices_ + static_cast<std::size_t>(slice)];
  }
  const UnitFigures& figures(int stage, int slice) const {
    return seen_[static_cast<std::size_t>(stage) * slices_ + static_cast<std::size_t>(slice)];
  }
  // How many parts the schedule cuts the unit's weight gradient into.
  int parts_of(std::uint64_t unit) const {
    auto it = parts_.find(unit);
    return it == parts_.end() ? 1 : it->second;
  }

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

  // Runs `fn` on behalf of list position `i`, turning a failure into an execution_error that
  // names the rank, the position and the action.
  template <class Fn>
  void guarded(std::size_t i, Fn&& fn) {
    const Action& a = schedule_.ranks[rank_][i];
    try {
      fn();
    } catch (const transport_aborted&) {
      throw;
    } catch (const execution_error&) {
      throw;  // a nested guard (a fill inside a receive's wait) already named its action
    } catch (...) {
      throw execution_error("rank " + std::to_string(rank_) + " failed at position " +
                                std::to_string(i) + " (" + to_string(a) +
                                "): " + detail::current_exception_text(),
                            rank_, static_cast<int>(i), a);
    }
  }

  // Runs `fn`, work of this rank outside any one action of its list (`where`: "in its
  // optimizer step"), turning whatever it throws into an execution_error at `position`.
  template <class Fn>
  void attached(int position, const Action& a, const char* where, Fn&& fn) {
    try {
      fn();
    } catch (...) {
      throw execution_error("rank " + std::to_string(rank_) + " failed " + where + ": " +
                                detail::current_exception_text(),
                            rank_, position, a);
    }
  }

  // Runs the action at list position `i` and records when it ran and what it left held.
  void run_at(std::size_t i) {
    const mark_type m0 = device_.mark();
    executing_ = i;
    guarded(i, [&] { execute(schedule_.ranks[rank_][i]); });
    marks_[i].emplace(m0, device_.mark());
    if (changed_) {
      memory_.push_back({0.0, held_});
      memory_at_.push_back(i);
      changed_ = false;
    }
  }

  // Turns the marks into times, once the device has finished the step's work (on a GPU a
  // mark is an event, and an event's time is known only once it has completed).
  void resolve_times(const mark_type& start, RankRun& run) {
    for (std::size_t i = 0; i < marks_.size(); ++i)
      if (marks_[i])
        run.timing[i] = {device_.seconds_between(start, marks_[i]->first),
                         device_.seconds_between(start, marks_[i]->second)};
    for (std::size_t k = 0; k < memory_.size(); ++k)
      memory_[k].time = run.timing[memory_at_[k]].end;
  }

  // Position `i` is a receive: while its message has not arrived, run pending work from later
  // in the list. Leaves the message in `arrived_` when it came during the fills; otherwise the
  // receive blocks as usual.
  void fill_wait(std::size_t i, RankRun& run) {
    const Action& a = schedule_.ranks[rank_][i];
    const MessageKey key{a.stage, a.microbatch, a.slice,
                         a.kind == OpKind::RecvF ? Direction::Forward : Direction::Backward};
    for (;;) {
      if (std::optional<tensor_type> x = transport_->try_receive(rank_, key)) {
        arrived_ = std::move(x);
        return;
      }
      const std::size_t p = next_fill(i);
      if (p == none) return;
      ran_early_[p] = 1;
      ++run.filled;
      run_at(p);
    }
  }

  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  // The fillable position after `i` to run now: the first recompute (in list order) whose
  // forward has run, provided it fits the memory budget — a later one is not tried past a
  // first that does not fit: it would hold its bytes even longer — else the first W whose I has
  // run (it only frees bytes, so it always fits); `none` when there is neither.
  std::size_t next_fill(std::size_t i) {
    const auto& list = schedule_.ranks[rank_];
    while (next_fillable_ < fillable_.size() && fillable_[next_fillable_] <= i)
      ++next_fillable_;
    for (std::size_t c = next_fillable_; c < fillable_.size(); ++c) {
      const std::size_t p = fillable_[c];
      if (list[p].kind != OpKind::R || ran_early_[p] || !fill_ready(list[p])) continue;
      if (fits_budget(i, p, fill_growth(list[p]))) return p;
      break;
    }
    for (std::size_t c = next_fillable_; c < fillable_.size(); ++c) {
      const std::size_t p = fillable_[c];
      if (list[p].kind == OpKind::W && !ran_early_[p] && fill_ready(list[p])) return p;
    }
    return none;
  }

  bool fill_ready(const Action& a) const {
    auto it = stashes_.find(detail::unit_key(a.stage, a.microbatch, a.slice));
    if (it == stashes_.end()) return false;
    switch (a.kind) {
      case OpKind::R:
        return it->second.boundary.has_value();
      case OpKind::W:
        return it->second.input_done;
      default:
        return false;
    }
  }

  // Bytes the ready recompute `a` adds to what the rank holds.
  double fill_growth(const Action& a) const {
    const Held& h = stashes_.at(detail::unit_key(a.stage, a.microbatch, a.slice));
    return h.full_bytes - h.bytes + figures(a.stage, a.slice).context_recompute;
  }

  // True when running the action at `p` now, adding `growth` bytes until its place in the
  // list, keeps the held bytes within the budget at every action in between. Replays the
  // list from `i` to `p` with the byte figures measured so far (growth at an action's start,
  // frees at its end, as the simulator charges); a figure not measured yet means no.
  bool fits_budget(std::size_t i, std::size_t p, double growth) const {
    const double budget = options_.memory_budget_bytes;
    if (budget == std::numeric_limits<double>::infinity()) return true;
    double held = held_;
    if (held + growth > budget) return false;
    const auto& list = schedule_.ranks[rank_];
    std::unordered_map<std::uint64_t, double> unit;  // projected bytes of the units touched
    auto bytes_of = [&](const Action& x) -> double& {
      const std::uint64_t key = detail::unit_key(x.stage, x.microbatch, x.slice);
      auto it = unit.find(key);
      if (it == unit.end()) {
        auto h = stashes_.find(key);
        it = unit.emplace(key, h == stashes_.end() ? 0.0 : h->second.bytes).first;
      }
      return it->second;
    };
    // Adds one compute action's change into grow / shrink; false when a figure is unknown.
    auto project = [&](const Action& x, double& grow, double& shrink) {
      const UnitFigures& f = figures(x.stage, x.slice);
      const std::uint64_t key = detail::unit_key(x.stage, x.microbatch, x.slice);
      double& b = bytes_of(x);
      double after = b;
      double context = 0;
      switch (x.kind) {
        case OpKind::F:
          after = is_checkpointed(key) ? f.boundary : f.full;
          if (after < 0 || !f.context_forward) return false;
          context = *f.context_forward;
          break;
        case OpKind::R: {
          auto h = stashes_.find(key);
          after = h != stashes_.end() && h->second.boundary ? h->second.full_bytes : f.full;
          if (after < 0) return false;
          context = f.context_recompute;
          break;
        }
        case OpKind::I:
          if (f.wgrad < 0 || !f.context_input) return false;
          after = f.wgrad;
          context = *f.context_input;
          break;
        case OpKind::B:
          if (!f.context_backward) return false;
          after = 0;
          context = *f.context_backward;
          break;
        case OpKind::W:
          // A part frees a share not measured per part: count none until the unit is done.
          after = parts_of(key) == 1 ? 0 : b;
          break;
        default:
          break;
      }
      const double change = after - b + context;
      (change >= 0 ? grow : shrink) += change;
      b = after;
      return true;
    };
    for (std::size_t j = i + 1; j < p; ++j) {
      const Action& x = list[j];
      if (ran_early_[j] || !is_compute(x.kind)) continue;
      double grow = 0, shrink = 0;
      const bool known = x.kind == OpKind::Overlap ? project(x.forward_half(), grow, shrink) &&
                                                         project(x.backward_half(), grow, shrink)
                                                   : project(x, grow, shrink);
      if (!known) return false;
      held += grow;
      if (held + growth > budget) return false;
      held += shrink;
    }
    return true;
  }

  // Adds `delta` bytes to what the rank holds (negative frees). A stash may also grow at I
  // (a layer that keeps more for its weight gradient than for its input gradient).
  void adjust(double delta) {
    held_ += delta;
    if (held_ > peak_) peak_ = held_;
    changed_ = changed_ || delta != 0;
  }

  double boundary_bytes(int stage, const tensor_type& x) {
    if constexpr (detail::reports_input_bytes<Stage>)
      return static_cast<double>(model(stage).input_bytes(x));
    else if constexpr (detail::reports_bytes<tensor_type>)
      return static_cast<double>(x.bytes());
    else
      return 0;  // unreachable: construction refuses R without a way to size inputs
  }

  // The context of (stage, microbatch): made by the microbatch's first forward on the stage.
  HeldContext& context_for(const Action& a, bool make) {
    const std::uint64_t key = detail::unit_key(a.stage, a.microbatch, 0);
    auto it = contexts_.find(key);
    if (it == contexts_.end()) {
      if (!make)
        throw error("no slice context is held for stage " + std::to_string(a.stage) +
                    " microbatch " + std::to_string(a.microbatch) + " at " + to_string(a) +
                    "; the microbatch's forwards on this stage make it and its slice-0 "
                    "backward ends it.");
      it = contexts_.emplace(key, HeldContext{}).first;
    }
    return it->second;
  }

  // Measures `c` again; returns the change since the last measure.
  double remeasure(int stage, HeldContext& c) {
    if constexpr (slice_aware) {
      const double now = static_cast<double>(model(stage).context_bytes(c.context));
      const double change = now - c.bytes;
      c.bytes = now;
      return change;
    } else {
      return 0;
    }
  }

  // forward of `a`'s stage, with the microbatch's context when the model takes one;
  // `context_change` gets the change in the context's bytes.
  tensor_type call_forward(const Action& a, const tensor_type& x, stash_type& stash, bool make,
                           double& context_change) {
    context_change = 0;
    if constexpr (!slice_aware) {
      return model(a.stage).forward(x, stash);
    } else {
      if constexpr (detail::whole_unit_calls<Stage>)
        if (!use_context_) return model(a.stage).forward(x, stash);
      HeldContext& c = context_for(a, make);
      tensor_type y = model(a.stage).forward(x, stash, c.context, a.slice);
      context_change = remeasure(a.stage, c);
      return y;
    }
  }

  // backward_input of `a`'s stage, the same way; slice 0's ends the microbatch's context.
  tensor_type call_backward_input(const Action& a, const tensor_type& dy, stash_type& stash,
                                  double& context_change) {
    context_change = 0;
    if constexpr (!slice_aware) {
      return model(a.stage).backward_input(dy, stash);
    } else {
      if constexpr (detail::whole_unit_calls<Stage>)
        if (!use_context_) return model(a.stage).backward_input(dy, stash);
      HeldContext& c = context_for(a, false);
      tensor_type dx = model(a.stage).backward_input(dy, stash, c.context, a.slice);
      context_change = remeasure(a.stage, c);
      if (a.slice == 0) {
        // Slice 0's backward is the microbatch's last on this stage: the context ends here.
        context_change -= c.bytes;
        contexts_.erase(detail::unit_key(a.stage, a.microbatch, 0));
      }
      return dx;
    }
  }

  void forward(const Action& a) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = detail::unit_key(s, m, k);
    const Problem& problem = schedule_.problem;
    tensor_type x =
        problem.first_stage(s) ? data_->input(m, k) : take(inputs_, key, "input activation", a);
    Held h;
    double context_change = 0;
    tensor_type y = call_forward(a, x, h.stash, true, context_change);
    UnitFigures& seen = figures(s, k);
    h.full_bytes = static_cast<double>(model(s).stash_bytes(h.stash));
    seen.full = h.full_bytes;
    seen.context_forward = context_change;
    if (is_checkpointed(key)) {
      // Keep the input, not the activations: R rebuilds them from it (and the context).
      h.stash = stash_type{};
      h.bytes = boundary_bytes(s, x);
      seen.boundary = h.bytes;
      h.boundary.emplace(std::move(x));
    } else {
      h.bytes = h.full_bytes;
    }
    adjust(h.bytes + context_change);
    stashes_.insert_or_assign(key, std::move(h));
    if (problem.last_stage(s)) {  // the last stage of the microbatch's replica
      grads_.insert_or_assign(key, data_->loss(y, m, k, loss_));
    } else if (rank_of(s + 1) == rank_) {
      inputs_.insert_or_assign(detail::unit_key(s + 1, m, k), std::move(y));
    } else {
      outbox_.insert_or_assign(detail::pack_key({s, m, k, Direction::Forward}), std::move(y));
    }
  }

  void recompute(const Action& a) {
    auto it = stashes_.find(detail::unit_key(a.stage, a.microbatch, a.slice));
    if (it == stashes_.end())
      throw error("no kept input for " + to_string(a) +
                  "; its forward has not run on this rank, and a recompute needs it first.");
    Held& h = it->second;
    if (!h.boundary)
      throw error(to_string(a) +
                  " recomputes a unit whose activations are already held; a checkpointed "
                  "forward is recomputed once, between its forward and its backward.");
    // The output is discarded: only the stash is wanted, and forward is deterministic.
    double context_change = 0;
    call_forward(a, *h.boundary, h.stash, false, context_change);
    figures(a.stage, a.slice).context_recompute = context_change;
    h.boundary.reset();  // the rebuilt stash holds what the backward needs
    const double bytes = static_cast<double>(model(a.stage).stash_bytes(h.stash));
    adjust(bytes - h.bytes + context_change);
    h.bytes = bytes;
  }

  Held& ready_stash(const Action& a, std::uint64_t key) {
    auto it = stashes_.find(key);
    if (it == stashes_.end())
      throw error("no stash for " + to_string(a) + "; its forward has not run on this rank.");
    if (it->second.boundary)
      throw error("the activations of " + to_string(a) +
                  " were dropped at its checkpointed forward and its recompute R has not run; "
                  "put the R between the forward and the backward.");
    return it->second;
  }

  void backward(const Action& a, bool weights_too) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = detail::unit_key(s, m, k);
    tensor_type dy = take(grads_, key, "output gradient", a);
    Held& h = ready_stash(a, key);
    double context_change = 0;
    tensor_type dx = call_backward_input(a, dy, h.stash, context_change);
    h.input_done = true;
    UnitFigures& seen = figures(s, k);
    if (weights_too) {
      model(s).backward_weight(h.stash);
      seen.context_backward = context_change;
      adjust(context_change - h.bytes);
      stashes_.erase(key);
    } else {
      const double left = static_cast<double>(model(s).stash_bytes(h.stash));
      seen.wgrad = left;
      seen.context_input = context_change;
      adjust(left - h.bytes + context_change);
      h.bytes = left;
    }
    // The input gradient of a replica's first stage goes nowhere.
    if (schedule_.problem.first_stage(s)) return;
    if (rank_of(s - 1) == rank_)
      grads_.insert_or_assign(detail::unit_key(s - 1, m, k), std::move(dx));
    else
      outbox_.insert_or_assign(detail::pack_key({s, m, k, Direction::Backward}), std::move(dx));
  }

  void weight(const Action& a) {
    const std::uint64_t key = detail::unit_key(a.stage, a.microbatch, a.slice);
    Held& h = ready_stash(a, key);
    if (!h.input_done)
      throw error(to_string(a) +
                  " runs before the input gradient I of its unit; a W (or W part) "
                  "follows its I.");
    const int parts = parts_of(key);
    if (parts == 1) {
      model(a.stage).backward_weight(h.stash);
      adjust(-h.bytes);
      stashes_.erase(key);
      return;
    }
    if constexpr (splits_weights) model(a.stage).backward_weight(h.stash, a.part, parts);
    ++h.parts_done;
    // Once every part has run the unit is done, whatever its stash still reports.
    const double left =
        h.parts_done == parts ? 0.0 : static_cast<double>(model(a.stage).stash_bytes(h.stash));
    adjust(left - h.bytes);
    h.bytes = left;
    if (h.parts_done == parts) stashes_.erase(key);
  }

  // A receive: the message a fill already picked up, or wait for it.
  tensor_type receive(const MessageKey& key) {
    if (arrived_) {
      tensor_type x = std::move(*arrived_);
      arrived_.reset();
      return x;
    }
    return transport_->receive(rank_, key, options_.receive_timeout);
  }

  void execute(const Action& a) {
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
      case OpKind::R:
        recompute(a);
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
        post(a, Direction::Forward, inputs_, posted_inputs_);
        return;
      case OpKind::RecvB:
        post(a, Direction::Backward, grads_, posted_grads_);
        return;
      // Sends complete when the transport has taken the tensor (it owns it from then on), so a
      // WAIT_SEND has nothing left to wait for. The stages hold whole parameters (no FSDP
      // sharding) and data-parallel gradient reduction belongs to the optimizer hook, so the
      // FSDP and reduction actions of PyTorch's lowered files are no-ops here.
      case OpKind::WaitSendF:
      case OpKind::WaitSendB:
      case OpKind::Unshard:
      case OpKind::Reshard:
      case OpKind::ReduceGrad:
      case OpKind::WaitReduceGrad:
        return;
    }
  }

  // A receive posts: the message is taken if it is there (or a fill picked it up), else the
  // unit is marked and its consumer waits for it (await_inputs).
  template <class Map>
  void post(const Action& a, Direction d, Map& into,
            std::unordered_map<std::uint64_t, std::size_t>& posted) {
    const std::uint64_t key = detail::unit_key(a.stage, a.microbatch, a.slice);
    const MessageKey message{a.stage, a.microbatch, a.slice, d};
    std::optional<tensor_type> x;
    if (arrived_) {
      x = std::move(arrived_);
      arrived_.reset();
    } else {
      x = transport_->try_receive(rank_, message);
    }
    if (x)
      into.insert_or_assign(key, std::move(*x));
    else
      posted.insert_or_assign(key, executing_);
  }

  // Waits for the posted receives whose data `a` (or a half of an overlap) consumes. The wait
  // is recorded as the receive's time, so that the timeline shows when the data came.
  void await_inputs(const Action& a) {
    auto wait = [&](const Action& c, Direction d, auto& into,
                    std::unordered_map<std::uint64_t, std::size_t>& posted) {
      const std::uint64_t key = detail::unit_key(c.stage, c.microbatch, c.slice);
      auto it = posted.find(key);
      if (it == posted.end()) return;
      const std::size_t at = it->second;
      posted.erase(it);
      const mark_type m0 = device_.mark();
      guarded(at, [&] {
        into.insert_or_assign(key, receive({c.stage, c.microbatch, c.slice, d}));
      });
      marks_[at].emplace(m0, device_.mark());
    };
    auto one = [&](const Action& c) {
      if (c.kind == OpKind::F) wait(c, Direction::Forward, inputs_, posted_inputs_);
      if (is_input_backward(c.kind) || (c.kind == OpKind::R && c.late))
        wait(c, Direction::Backward, grads_, posted_grads_);
    };
    if (a.kind == OpKind::Overlap) {
      one(a.forward_half());
      one(a.backward_half());
    } else if (is_compute(a.kind)) {
      one(a);
    }
  }

  void clear() {
    stashes_.clear();
    contexts_.clear();
    inputs_.clear();
    grads_.clear();
    outbox_.clear();
    posted_inputs_.clear();
    posted_grads_.clear();
  }

  Schedule schedule_;
  int rank_;
  Transport* transport_;
  Device device_;
  ExecutorOptions options_;
  std::vector<Stage*> stage_of_;
  std::unordered_set<std::uint64_t> checkpointed_;  // units this rank recomputes
  std::unordered_map<std::uint64_t, int> parts_;    // units whose W is cut: their part count
  std::vector<std::optional<std::pair<mark_type, mark_type>>> marks_;  // per list position
  std::vector<std::size_t> memory_at_;  // the list position after which memory_[k] was taken
  std::vector<MessageKey> receives_;    // this rank's receives, in list order
  std::vector<std::size_t> fillable_;   // list positions of fillable kinds
  std::size_t slices_ = 1;              // the problem's slices per microbatch
  bool use_context_ = false;            // slice contexts are made and passed
  std::vector<UnitFigures> seen_;       // by (stage, slice)
  const TrainingData<tensor_type>* data_ = nullptr;
  std::unordered_map<std::uint64_t, Held> stashes_;
  std::unordered_map<std::uint64_t, HeldContext> contexts_;  // by (stage, microbatch)
  std::unordered_map<std::uint64_t, tensor_type> inputs_;    // forward inputs by unit
  std::unordered_map<std::uint64_t, tensor_type> grads_;     // output gradients by unit
  std::unordered_map<std::uint64_t, tensor_type> outbox_;    // produced, waiting for a send
  std::optional<tensor_type> arrived_;                       // a receive's message, got early
  // Units whose receive is posted but not yet taken, with the receive's list position.
  std::unordered_map<std::uint64_t, std::size_t> posted_inputs_;  // RECV_F
  std::unordered_map<std::uint64_t, std::size_t> posted_grads_;   // RECV_B
  std::size_t executing_ = 0;      // the list position execute() runs
  std::vector<char> ran_early_;    // per list position, this step
  std::size_t next_fillable_ = 0;  // into fillable_
  double loss_ = 0, held_ = 0, peak_ = 0;
  bool changed_ = false;
  std::vector<MemoryPoint> memory_;
};

}  // namespace pipesched
