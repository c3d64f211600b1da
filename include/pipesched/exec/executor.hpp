// The generic executor: runs one rank's list of a schedule on the user's stage models —
// receives inputs, calls the layers, stashes activations (or, for checkpointed units, only
// their inputs, recomputing the rest at R), keeps each microbatch's slice context for
// slice-aware models, sends outputs, computes the loss at the last stage, accumulates weight
// gradients (whole or in parts), optionally fills waits on receives with pending recomputes
// and weight-gradient parts, records a timeline and the bytes held. The compute actions and
// what units hold between them are detail::UnitRunner's (exec/detail/unit_runner.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/detail/unit_runner.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/executor_options.hpp"
#include "pipesched/exec/training_data.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"

namespace pipesched {

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
//!
//! Vocabulary passes (VOCAB_F, VOCAB_B: the output layer split over the ranks) run the
//! training data's `vocabulary` hooks (`VocabularyPasses`, exec/training_data.hpp): the last
//! stage's forward output goes to every rank (a copy each, sent right after that forward); a
//! VOCAB_F waits for it, runs the rank's shard and sends the partial to every other rank; the
//! rank's VOCAB_B and, on the last stage's rank, the last stage's backward wait for every
//! shard's partial (merged in shard order, once per unit). Those waits are inside the action
//! that waits (no RECV stands for them). With the input embedding split too (EMBED_F,
//! EMBED_B), an EMBED_F runs the rank's `input_forward` and sends its lookups to the first
//! stage's rank, whose forward of the unit waits for every shard's (merged in shard order into
//! its input); right after the first stage's backward its input gradient goes to every rank,
//! and the rank's EMBED_B waits for it and runs `input_backward`. The transport must carry
//! vocabulary messages (`vocabulary_transport`), and the tensor type must be copyable.
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

  //! True when the executor can run vocabulary passes over this transport and tensor type.
  static constexpr bool can_run_vocabulary =
      vocabulary_transport<Transport> && std::copy_constructible<tensor_type>;

  //! True when the executor can size a checkpointed unit's kept input, so it can run
  //! schedules with recompute (R).
  static constexpr bool can_checkpoint =
      detail::reports_input_bytes<Stage> || detail::reports_bytes<tensor_type>;

  //! `stages[i]` is the model of the i-th stage this rank holds, in increasing stage order
  //! (`schedule.placement.stages_of(rank)`); the executor does not own them.
  Executor(const Schedule& schedule, int rank, std::vector<Stage*> stages, Transport& transport,
           Device device = {}, ExecutorOptions options = {})
      : schedule_(prepared(schedule, options)),
        rank_(rank),
        transport_(&transport),
        device_(std::move(device)),
        options_(std::move(options)),
        units_(checked(schedule_, rank, options_, stages)),
        vocabulary_(schedule_.has_vocabulary()),
        input_vocabulary_(schedule_.has_input_vocabulary()),
        last_rank_(schedule_.placement.rank_of(schedule_.problem.stages - 1)),
        first_rank_(schedule_.placement.rank_of(0)) {
    const auto& list = schedule_.ranks[rank_];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      // A late recompute waits for its gradient, so it never runs ahead of its place.
      if (is_fillable(a.kind) && !a.late) fillable_.push_back(i);
      if (a.kind == OpKind::RecvF || a.kind == OpKind::RecvB)
        receives_.push_back({a.stage, a.microbatch, a.slice,
                             a.kind == OpKind::RecvF ? Direction::Forward : Direction::Backward});
      // The vocabulary messages this rank takes: the last stage's output for its VOCAB_F, the
      // other shards' partials for its VOCAB_B (and the last stage's backward, which comes
      // after or before it on the last stage's rank and shares the merge).
      if (a.kind == OpKind::VocabF && rank_ != last_rank_)
        receives_.push_back({rank_, a.microbatch, a.slice, Direction::VocabularyInput});
      if (a.kind == OpKind::VocabB)
        for (int shard = 0; shard < schedule_.rank_count(); ++shard)
          if (shard != rank_)
            receives_.push_back({shard, a.microbatch, a.slice, Direction::VocabularyPartial});
      // With the input embedding split: every other shard's lookups for the first stage's
      // forwards, the first stage's input gradient for this rank's EMBED_Bs.
      if (!input_vocabulary_) continue;
      if (a.kind == OpKind::EmbedB && rank_ != first_rank_)
        receives_.push_back({rank_, a.microbatch, a.slice, Direction::EmbeddingGradient});
      const Action f = a.kind == OpKind::Overlap ? a.forward_half() : a;
      if (f.kind == OpKind::F && f.stage == 0)
        for (int shard = 0; shard < schedule_.rank_count(); ++shard)
          if (shard != rank_)
            receives_.push_back({shard, f.microbatch, f.slice, Direction::EmbeddingPartial});
    }
  }

  //! The executed schedule (the given one, lowered to sends and receives).
  const Schedule& schedule() const noexcept { return schedule_; }
  //! The rank whose list this executor runs.
  int rank() const noexcept { return rank_; }

  //! Runs one training step of this rank's list; `start` is the step's common start mark
  //! (timeline times are measured from it). Throws execution_error naming the rank, the
  //! position and the action when anything fails — whatever was thrown, std::exception or
  //! not; position -1 for the stage models' zero_gradients before the list — and
  //! transport_aborted when another rank failed. The update is not applied here: a pipeline
  //! calls `apply_update` once every rank's list has run.
  RankRun step(const TrainingData<tensor_type>& data, const mark_type& start) {
    optimizer_ran_ = false;
    if (vocabulary_ && !data.vocabulary)
      attached(-1, Action{}, "before its list", [&] {
        throw invalid_problem(
            "schedule '" + schedule_.name +
            "' has vocabulary passes (VOCAB_F, VOCAB_B), but the training data has no "
            "vocabulary hooks to run them; set TrainingData::vocabulary (forward, merge, loss "
            "and backward of the output layer's shards; toy::vocabulary_passes for the toy "
            "GPT), or run the schedule without vocabulary passes.");
      });
    if (input_vocabulary_ && !data.vocabulary.splits_input())
      attached(-1, Action{}, "before its list", [&] {
        throw invalid_problem(
            "schedule '" + schedule_.name +
            "' splits the input embedding over the ranks (EMBED_F, EMBED_B), but the training "
            "data's vocabulary hooks have no input_forward, input_merge and input_backward to "
            "run it (toy::vocabulary_passes with input shards for the toy GPT), or run the "
            "schedule with the embedding on the first stage.");
      });
    attached(-1, Action{}, "before its list (zero_gradients)", [&] {
      units_.zero_gradients();
      if (vocabulary_ && data.vocabulary.zero_gradients) data.vocabulary.zero_gradients(rank_);
    });
    units_.begin(data);
    data_ = &data;
    vocabulary_x_.clear();
    vocabulary_own_.clear();
    vocabulary_merged_.clear();
    vocabulary_bytes_.clear();
    embedding_own_.clear();
    embedding_dx_.clear();
    posted_inputs_.clear();
    posted_grads_.clear();
    RankRun run;
    run.rank = rank_;
    const auto& list = schedule_.ranks[rank_];
    run.timing.assign(list.size(), {});
    ran_early_.assign(list.size(), 0);
    next_fillable_ = 0;
    arrived_.reset();
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
    units_.end(posted_inputs_.size() + posted_grads_.size(), list.size());
    if (!vocabulary_x_.empty() || !vocabulary_own_.empty() || !vocabulary_merged_.empty() ||
        !vocabulary_bytes_.empty() || !embedding_own_.empty() || !embedding_dx_.empty())
      throw execution_error("rank " + std::to_string(rank_) + " ended the step with " +
                                std::to_string(vocabulary_x_.size() + vocabulary_own_.size() +
                                               vocabulary_merged_.size() + embedding_own_.size() +
                                               embedding_dx_.size()) +
                                " vocabulary tensors and " +
                                std::to_string(vocabulary_bytes_.size()) +
                                " shard forwards left over; every VOCAB_F needs its VOCAB_B, "
                                "the last stage's backward the merged partials, the first "
                                "stage's forward every shard's lookups (EMBED_F) and every "
                                "EMBED_B the first stage's input gradient.",
                            rank_, static_cast<int>(list.size()), Action{});
    data_ = nullptr;
    device_.synchronize();
    resolve_times(start, run);
    run.loss = units_.loss();
    run.peak_bytes = units_.peak();
    run.peak_host_bytes = units_.host_peak();
    run.memory = std::move(memory_);
    run.end = list.empty() ? 0.0 : run.timing.back().end;
    for (const auto& t : run.timing)
      run.end = std::max(run.end, t.end);
    return run;
  }

  //! True when the options have an optimizer hook (an update to apply after the step).
  bool has_update() const noexcept { return static_cast<bool>(options_.optimizer); }
  //! True when an applied update can be undone (the options have a rollback hook).
  bool can_roll_back() const noexcept { return static_cast<bool>(options_.rollback); }

  //! Applies this rank's update of the step that just ran (the snapshot hook, then the
  //! optimizer hook) and waits for the device; what they throw becomes an execution_error at
  //! the position after the list. A snapshot hook that throws stops it before the optimizer
  //! hook, so the rank's parameters stay as they were (`optimizer_ran()` is then false).
  void apply_update() {
    optimizer_ran_ = false;
    const int after = static_cast<int>(schedule_.ranks[rank_].size());
    attached(after, Action{}, "in its optimizer step", [&] {
      if (options_.snapshot) options_.snapshot(rank_);
      optimizer_ran_ = true;  // from here on the parameters may change
      if (options_.optimizer) options_.optimizer(rank_);
      device_.synchronize();
    });
  }

  //! True when the last `apply_update` got as far as calling the optimizer hook (which may
  //! have stopped half-way), so that the rank's parameters may differ from the step's start;
  //! false when its snapshot hook threw, and after `roll_back_update` put them back.
  bool optimizer_ran() const noexcept { return optimizer_ran_; }

  //! Undoes `apply_update` (the rollback hook) and waits for the device, on a rank whose
  //! optimizer hook ran; does nothing on one whose did not (its snapshot threw first: its
  //! parameters never changed, and the rollback hook would put back an older snapshot). What
  //! it throws becomes an execution_error at the position after the list.
  void roll_back_update() {
    if (!optimizer_ran_) return;
    const int after = static_cast<int>(schedule_.ranks[rank_].size());
    attached(after, Action{}, "rolling back its optimizer step", [&] {
      if (options_.rollback) options_.rollback(rank_);
      device_.synchronize();
    });
    optimizer_ran_ = false;
  }

 private:
  using Units = detail::UnitRunner<Stage>;

  // The schedule as run: lowered to sends and receives, with the gradient reductions placed
  // when the options reduce gradients and the schedule does not say where.
  static Schedule prepared(const Schedule& schedule, const ExecutorOptions& options) {
    Schedule lowered = lower_communication(schedule);
    return options.reduce_gradients ? add_gradient_reduction(lowered) : lowered;
  }

  // Checks what the constructor was given and builds the unit runner over the models by stage.
  static Units checked(const Schedule& schedule, int rank, const ExecutorOptions& options,
                       const std::vector<Stage*>& stages) {
    if (rank < 0 || rank >= schedule.rank_count())
      throw invalid_problem("Executor: rank = " + std::to_string(rank) + " but the schedule has " +
                            std::to_string(schedule.rank_count()) + " ranks (0.." +
                            std::to_string(schedule.rank_count() - 1) + ").");
    ValidationReport rep = check(schedule);
    if (!rep.ok())
      throw invalid_schedule("Executor: schedule '" + schedule.name + "' is invalid:\n" +
                             rep.summary());
    // One walk refuses the kinds this stage model or this executor cannot run.
    for (const auto& list : schedule.ranks)
      for (const Action& a : list) {
        if (a.kind == OpKind::R && !can_checkpoint)
          throw invalid_problem(
              "Executor: schedule '" + schedule.name + "' recomputes " + to_string(a) +
              ", so a checkpointed unit keeps its input until then and the executor must know "
              "its size, but the stage model needs input_bytes(...) to checkpoint: add "
              "`std::size_t input_bytes(const tensor_type&) const` to the stage model (or a "
              "`bytes()` member to its tensor type), or run a schedule without R.");
        // On a device of its own a stash moved to the host pool must leave that device's memory.
        if (a.kind == OpKind::Offload && !std::is_same_v<Device, HostDevice> &&
            !detail::offloads_stash<Stage>)
          throw invalid_problem(
              "Executor: schedule '" + schedule.name + "' offloads " + to_string(a) +
              " to host memory, but the stage model cannot move a stash there from its "
              "device: add `void offload(stash_type&)` and `void reload(stash_type&)` to it "
              "(gpu::GptStage has them), or run a schedule without OFFLOAD.");
        if (is_vocabulary(a.kind) && !vocabulary_transport<Transport>)
          throw invalid_problem(
              "Executor: schedule '" + schedule.name + "' runs " + to_string(a) +
              ", a vocabulary pass of the output layer split over the ranks, whose messages go "
              "between every two ranks, but this transport carries only messages between "
              "neighbouring stages; use the in-process or MPI transport, or run the schedule "
              "without vocabulary passes (the output layer on the last stage).");
        if (is_vocabulary(a.kind) && !std::copy_constructible<tensor_type>)
          throw invalid_problem("Executor: schedule '" + schedule.name + "' runs " + to_string(a) +
                                ", a vocabulary pass, which sends a copy of the last stage's "
                                "output to every rank, but the tensor type cannot be copied; "
                                "run the schedule without vocabulary passes.");
      }
    detail::check_receive_timeout("Executor", options.receive_timeout);
    if (!(options.memory_budget_bytes >= 0))
      throw invalid_problem("Executor: memory_budget_bytes is " +
                            std::to_string(options.memory_budget_bytes) +
                            "; give a budget of 0 bytes or more (infinity for none).");
    const auto& mine = schedule.placement.stages_of(rank);
    if (stages.size() != mine.size())
      throw invalid_problem("Executor: rank " + std::to_string(rank) + " holds " +
                            std::to_string(mine.size()) + " stages but was given " +
                            std::to_string(stages.size()) +
                            " stage models; pass one per stage in "
                            "placement.stages_of(rank) order.");
    std::vector<Stage*> stage_of(static_cast<std::size_t>(schedule.problem.stages), nullptr);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (stages[i] == nullptr)
        throw invalid_problem("Executor: the stage model for stage " + std::to_string(mine[i]) +
                              " is null.");
      stage_of[static_cast<std::size_t>(mine[i])] = stages[i];
    }
    return Units(schedule, rank, std::move(stage_of));
  }

  // The kinds of work a rank may run ahead of its place while it waits on a receive: each
  // needs nothing from another rank once its own predecessor on this rank has run. A
  // recompute needs its forward; a weight-gradient W (or W part) needs its I.
  static constexpr std::array fillable_kinds{OpKind::R, OpKind::W};
  static constexpr bool is_fillable(OpKind k) {
    return std::find(fillable_kinds.begin(), fillable_kinds.end(), k) != fillable_kinds.end();
  }

  int rank_of(int stage) const { return schedule_.placement.rank_of(stage); }

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
    if (units_.take_changed()) {
      memory_.push_back({0.0, units_.held()});
      memory_at_.push_back(i);
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
      if (list[p].kind != OpKind::R || ran_early_[p] || !units_.fill_ready(list[p])) continue;
      if (units_.fits_budget(list, i, p, units_.fill_growth(list[p]), options_.memory_budget_bytes,
                             ran_early_))
        return p;
      break;
    }
    for (std::size_t c = next_fillable_; c < fillable_.size(); ++c) {
      const std::size_t p = fillable_[c];
      if (list[p].kind == OpKind::W && !ran_early_[p] && units_.fill_ready(list[p])) return p;
    }
    return none;
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
      case OpKind::B:
      case OpKind::I:
      case OpKind::W:
      case OpKind::R:
      case OpKind::Overlap:
        if constexpr (can_run_vocabulary) {
          if (vocabulary_) {
            vocabulary_gradient(a);
            embedding_input(a);
            units_.run(a);
            vocabulary_broadcast(a);
            embedding_broadcast(a);
            return;
          }
        }
        units_.run(a);
        return;
      case OpKind::SendF:
      case OpKind::SendB: {
        const StageMessage msg = *message_of(a);
        const Direction d = direction_of(msg);
        transport_->send(
            rank_, rank_of(msg.to), {msg.to, msg.microbatch, msg.slice, d},
            units_.take_output(detail::pack_key({msg.from, msg.microbatch, msg.slice, d}), a));
        return;
      }
      case OpKind::RecvF:
        post(a, Direction::Forward, units_.inputs, posted_inputs_);
        return;
      case OpKind::RecvB:
        post(a, Direction::Backward, units_.grads, posted_grads_);
        return;
      // The data-parallel reduction of a stage's gradients, when the options have one.
      case OpKind::ReduceGrad:
        if (options_.reduce_gradients) options_.reduce_gradients.start(a.stage);
        return;
      case OpKind::WaitReduceGrad:
        if (options_.reduce_gradients && options_.reduce_gradients.wait)
          options_.reduce_gradients.wait(a.stage);
        return;
      // Sends complete when the transport has taken the tensor (it owns it from then on), so a
      // WAIT_SEND has nothing left to wait for. The stages hold whole parameters (no FSDP
      // sharding), so the FSDP actions of PyTorch's lowered files are no-ops here.
      case OpKind::WaitSendF:
      case OpKind::WaitSendB:
      case OpKind::Unshard:
      case OpKind::Reshard:
        return;
      case OpKind::Offload:
        units_.offload(a);
        return;
      case OpKind::Reload:
        units_.reload(a);
        return;
      case OpKind::VocabF:
        if constexpr (can_run_vocabulary) vocabulary_forward(a);
        return;
      case OpKind::VocabB:
        if constexpr (can_run_vocabulary) vocabulary_backward(a);
        return;
      case OpKind::EmbedF:
        if constexpr (can_run_vocabulary) embedding_forward(a);
        return;
      case OpKind::EmbedB:
        if constexpr (can_run_vocabulary) embedding_backward(a);
        return;
    }
  }

  // EMBED_F: the shard's lookups of the unit's tokens, kept on the first stage's rank or sent
  // there.
  void embedding_forward(const Action& a) {
    tensor_type x = data_->vocabulary.input_forward(rank_, a.microbatch, a.slice);
    if (rank_ == first_rank_)
      embedding_own_.insert_or_assign(detail::unit_key(0, a.microbatch, a.slice), std::move(x));
    else
      transport_->send(rank_, first_rank_,
                       {rank_, a.microbatch, a.slice, Direction::EmbeddingPartial}, std::move(x));
  }

  // Before the first stage's forward (or an overlap's forward half of it): its input, every
  // shard's lookups merged in shard order.
  void embedding_input(const Action& a) {
    if (!input_vocabulary_) return;
    const Action f = a.kind == OpKind::Overlap ? a.forward_half() : a;
    if (f.kind != OpKind::F || f.stage != 0) return;
    const std::uint64_t unit = detail::unit_key(0, f.microbatch, f.slice);
    auto own = embedding_own_.find(unit);
    if (own == embedding_own_.end())
      throw error("the lookups of this rank's shard for " + to_string(f) +
                  " are not here; its EMBED_F runs before the first stage's forward.");
    tensor_type sum = merged_shards(std::move(own->second), f.microbatch, f.slice,
                                    Direction::EmbeddingPartial, data_->vocabulary.input_merge);
    embedding_own_.erase(own);
    units_.inputs.insert_or_assign(unit, std::move(sum));
  }

  // After the first stage's backward (or an overlap's backward half of it): its input gradient
  // to every rank's EMBED_B; this rank's copy stays here.
  void embedding_broadcast(const Action& a) {
    if (!input_vocabulary_) return;
    const Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
    if ((b.kind != OpKind::B && b.kind != OpKind::I) || b.stage != 0) return;
    const std::uint64_t unit = detail::unit_key(0, b.microbatch, b.slice);
    auto it = units_.embedding_grad.find(unit);
    if (it == units_.embedding_grad.end()) return;
    tensor_type dx = std::move(it->second);
    units_.embedding_grad.erase(it);
    for (int r = 0; r < schedule_.rank_count(); ++r)
      if (r != rank_)
        transport_->send(rank_, r, {r, b.microbatch, b.slice, Direction::EmbeddingGradient},
                         tensor_type(dx));
    embedding_dx_.insert_or_assign(unit, std::move(dx));
  }

  // What rank `source` broadcast to every rank for the unit of vocabulary pass `a`: on
  // `source` its own copy, taken out of `kept` (an error naming `what` and the `order` that
  // puts it there when it is missing); on every other rank the message under `direction`.
  tensor_type broadcast_here(std::unordered_map<std::uint64_t, tensor_type>& kept, int source,
                             const Action& a, Direction direction, const char* what,
                             const char* order) {
    if (rank_ != source)
      return transport_->receive(rank_, {rank_, a.microbatch, a.slice, direction},
                                 options_.receive_timeout);
    auto it = kept.find(detail::unit_key(0, a.microbatch, a.slice));
    if (it == kept.end())
      throw error(std::string(what) + " for " + to_string(a) + " is not here; " + order + ".");
    tensor_type x = std::move(it->second);
    kept.erase(it);
    return x;
  }

  // EMBED_B: the shard's rows' gradient from the first stage's input gradient.
  void embedding_backward(const Action& a) {
    const tensor_type dx =
        broadcast_here(embedding_dx_, first_rank_, a, Direction::EmbeddingGradient,
                       "the first stage's input gradient", "its backward runs before the EMBED_B");
    data_->vocabulary.input_backward(rank_, dx, a.microbatch, a.slice);
  }

  // ---- vocabulary passes (only instantiated where the transport and tensors allow) ----

  // After a compute action: the last stage's forward output goes to every rank's shard; this
  // rank's copy stays here.
  void vocabulary_broadcast(const Action& a) {
    const Action f = a.kind == OpKind::Overlap ? a.forward_half() : a;
    if (f.kind != OpKind::F || !schedule_.problem.last_stage(f.stage)) return;
    const std::uint64_t key = detail::unit_key(f.stage, f.microbatch, f.slice);
    auto it = units_.vocabulary_out.find(key);
    if (it == units_.vocabulary_out.end()) return;
    tensor_type x = std::move(it->second);
    units_.vocabulary_out.erase(it);
    for (int r = 0; r < schedule_.rank_count(); ++r)
      if (r != rank_)
        transport_->send(rank_, r, {r, f.microbatch, f.slice, Direction::VocabularyInput},
                         tensor_type(x));
    vocabulary_x_.insert_or_assign(detail::unit_key(0, f.microbatch, f.slice), std::move(x));
  }

  // Before a compute action: the last stage's backward takes its output gradient from the
  // partials merged over every shard.
  void vocabulary_gradient(const Action& a) {
    Action b = a.kind == OpKind::Overlap ? a.backward_half() : a;
    if ((b.kind != OpKind::B && b.kind != OpKind::I) || !schedule_.problem.last_stage(b.stage))
      return;
    const std::uint64_t key = detail::unit_key(b.stage, b.microbatch, b.slice);
    if (units_.grads.contains(key)) return;
    double loss = 0;
    tensor_type dy =
        data_->vocabulary.loss(merged(b.microbatch, b.slice), b.microbatch, b.slice, loss);
    used_merged(b.microbatch, b.slice);
    units_.add_loss(loss);
    units_.grads.insert_or_assign(key, std::move(dy));
  }

  // VOCAB_F: the shard's partial of the last stage's output, kept and sent to every rank.
  void vocabulary_forward(const Action& a) {
    const std::uint64_t unit = detail::unit_key(0, a.microbatch, a.slice);
    tensor_type x =
        broadcast_here(vocabulary_x_, last_rank_, a, Direction::VocabularyInput,
                       "the last stage's output", "its forward runs before the vocabulary pass");
    tensor_type partial = data_->vocabulary.forward(rank_, x, a.microbatch, a.slice);
    const double bytes =
        data_->vocabulary.held_bytes
            ? static_cast<double>(data_->vocabulary.held_bytes(rank_, a.microbatch, a.slice))
            : 0.0;
    vocabulary_bytes_.insert_or_assign(unit, bytes);
    units_.add_held(bytes);
    for (int r = 0; r < schedule_.rank_count(); ++r)
      if (r != rank_)
        transport_->send(rank_, r, {rank_, a.microbatch, a.slice, Direction::VocabularyPartial},
                         tensor_type(partial));
    vocabulary_own_.insert_or_assign(unit, std::move(partial));
  }

  // VOCAB_B: the shard's weight gradient from the merged partials; frees what its VOCAB_F kept.
  void vocabulary_backward(const Action& a) {
    const std::uint64_t unit = detail::unit_key(0, a.microbatch, a.slice);
    auto held = vocabulary_bytes_.find(unit);
    if (held == vocabulary_bytes_.end())
      throw error(to_string(a) + " runs before the VOCAB_F of its shard and unit.");
    data_->vocabulary.backward(rank_, merged(a.microbatch, a.slice), a.microbatch, a.slice);
    used_merged(a.microbatch, a.slice);
    units_.add_held(-held->second);
    vocabulary_bytes_.erase(held);
  }

  // The partials of (microbatch, slice) merged over every shard, in shard order: made at the
  // first action that needs them, kept until the last (the VOCAB_B, and the last stage's
  // backward on its rank).
  const tensor_type& merged(int microbatch, int slice) {
    const std::uint64_t unit = detail::unit_key(0, microbatch, slice);
    if (auto it = vocabulary_merged_.find(unit); it != vocabulary_merged_.end())
      return it->second.partial;
    auto own = vocabulary_own_.find(unit);
    if (own == vocabulary_own_.end())
      throw error("the partials of microbatch " + std::to_string(microbatch) +
                  (slice ? " slice " + std::to_string(slice) : std::string()) +
                  " are wanted before this rank's VOCAB_F of it ran.");
    tensor_type sum = merged_shards(std::move(own->second), microbatch, slice,
                                    Direction::VocabularyPartial, data_->vocabulary.merge);
    vocabulary_own_.erase(own);
    const int uses = rank_ == last_rank_ ? 2 : 1;
    return vocabulary_merged_.insert_or_assign(unit, Merged{std::move(sum), uses})
        .first->second.partial;
  }

  // Every shard's tensor of (microbatch, slice) merged in increasing shard order: this rank's
  // own `mine`, every other's received under direction `d`, folded with `merge`, so every rank
  // that merges them holds the same bits.
  template <class Merge>
  tensor_type merged_shards(tensor_type mine, int microbatch, int slice, Direction d,
                            const Merge& merge) {
    std::optional<tensor_type> sum;
    for (int shard = 0; shard < schedule_.rank_count(); ++shard) {
      tensor_type part = shard == rank_ ? std::move(mine)
                                        : transport_->receive(rank_, {shard, microbatch, slice, d},
                                                              options_.receive_timeout);
      if (!sum)
        sum.emplace(std::move(part));
      else
        merge(*sum, part);
    }
    return std::move(*sum);
  }
  void used_merged(int microbatch, int slice) {
    auto it = vocabulary_merged_.find(detail::unit_key(0, microbatch, slice));
    if (it != vocabulary_merged_.end() && --it->second.uses == 0) vocabulary_merged_.erase(it);
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
    // The messages `a` receives (core/rules.hpp): a late recompute's gradient too.
    for_each_message(schedule_.problem, a, MessageEnd::Receives, [&](const StageMessage& msg) {
      const Action c = msg.receive();
      if (msg.forward)
        wait(c, Direction::Forward, units_.inputs, posted_inputs_);
      else
        wait(c, Direction::Backward, units_.grads, posted_grads_);
    });
  }

  // The direction a message travels in on the transport.
  static Direction direction_of(const StageMessage& msg) {
    return msg.forward ? Direction::Forward : Direction::Backward;
  }

  Schedule schedule_;
  int rank_;
  Transport* transport_;
  Device device_;
  ExecutorOptions options_;
  bool optimizer_ran_ = false;  // this step's optimizer hook was called (see optimizer_ran)
  Units units_;                 // the compute actions and what units hold between them
  std::vector<std::optional<std::pair<mark_type, mark_type>>> marks_;  // per list position
  std::vector<std::size_t> memory_at_;  // the list position after which memory_[k] was taken
  std::vector<MessageKey> receives_;    // this rank's receives, in list order
  std::vector<std::size_t> fillable_;   // list positions of fillable kinds
  std::optional<tensor_type> arrived_;  // a receive's message, got early
  // Units whose receive is posted but not yet taken, with the receive's list position.
  std::unordered_map<std::uint64_t, std::size_t> posted_inputs_;  // RECV_F
  std::unordered_map<std::uint64_t, std::size_t> posted_grads_;   // RECV_B
  std::size_t executing_ = 0;      // the list position execute() runs
  std::vector<char> ran_early_;    // per list position, this step
  std::size_t next_fillable_ = 0;  // into fillable_
  std::vector<MemoryPoint> memory_;
  // Vocabulary passes, by (microbatch, slice): the last stage's output for this rank's shard
  // (on the last stage's rank), this shard's partial until merged, the merged partials with the
  // actions still to use them, the bytes each VOCAB_F added.
  struct Merged {
    tensor_type partial;
    int uses = 0;
  };
  bool vocabulary_ = false;
  bool input_vocabulary_ = false;  // the schedule splits the input embedding too
  int last_rank_ = 0;
  int first_rank_ = 0;
  const TrainingData<tensor_type>* data_ = nullptr;
  std::unordered_map<std::uint64_t, tensor_type> vocabulary_x_;
  std::unordered_map<std::uint64_t, tensor_type> vocabulary_own_;
  std::unordered_map<std::uint64_t, Merged> vocabulary_merged_;
  std::unordered_map<std::uint64_t, double> vocabulary_bytes_;
  // With the input embedding split: this rank's lookups for the first stage's forward (on its
  // rank), and the first stage's input gradient for this rank's EMBED_B (on its rank).
  std::unordered_map<std::uint64_t, tensor_type> embedding_own_;
  std::unordered_map<std::uint64_t, tensor_type> embedding_dx_;
};

}  // namespace pipesched
