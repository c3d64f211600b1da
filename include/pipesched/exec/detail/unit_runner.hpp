// The compute half of the executor: runs one rank's compute actions (F, R, B, I, W) on its
// stage models and keeps what units hold between actions — stashes, the kept inputs of
// checkpointed units, slice contexts, tensors waiting for their consumer or their send — with
// the rank's held bytes and the byte figures measured per (stage, slice), from which a fill's
// effect on the memory budget is projected. An OFFLOAD moves a unit's stash to a pool of its
// own, host memory, whose bytes are counted apart from the device's (a stage model that can
// copy its stash to host memory and back, `offloads_stash`, does so there); its RELOAD moves
// it back. The executor (exec/executor.hpp) owns the list,
// the transport, the timeline and failure naming.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/training_data.hpp"

namespace pipesched::detail {

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

//! A stage model that moves a stash's device buffers to host memory and back (a CUDA stage
//! model: pinned host memory, a copy stream). `offload` may return before the copy ends: the
//! model keeps the stash usable for `reload`, and `reload` before the backward that reads it.
template <class S>
concept offloads_stash = requires(S& s, typename S::stash_type& stash) {
  s.offload(stash);
  s.reload(stash);
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

//! Runs the compute actions of one rank on its stage models and keeps the units' state
//! between them (see the file comment). Built by the executor from the lowered, validated
//! schedule; `stage_of[s]` is the model of stage s when this rank holds it, else null.
template <class Stage>
class UnitRunner {
 public:
  using tensor_type = typename Stage::tensor_type;
  using stash_type = typename Stage::stash_type;
  using context_type = typename context_of<Stage>::type;
  static constexpr bool slice_aware = slice_aware_stage_model<Stage>;
  static constexpr bool splits_weights = splits_weight_gradient<Stage>;

  UnitRunner(const Schedule& schedule, int rank, std::vector<Stage*> stage_of)
      : problem_(schedule.problem),
        placement_(schedule.placement),
        rank_(rank),
        stage_of_(std::move(stage_of)) {
    slices_ = static_cast<std::size_t>(std::max(1, schedule.problem.slices));
    vocabulary_ = schedule.has_vocabulary();
    input_vocabulary_ = schedule.has_input_vocabulary();
    // Whole microbatches need no context: a model that also runs them without one does.
    use_context_ = slice_aware && !(slices_ == 1 && whole_unit_calls<Stage>);
    UnitFigures unseen;
    if (!use_context_) {
      // Without a context, no action changes context bytes.
      unseen.context_forward = unseen.context_input = unseen.context_backward = 0.0;
    }
    seen_.assign(static_cast<std::size_t>(schedule.problem.stages) * slices_, unseen);
    for (const Action& a : schedule.ranks[rank_]) {
      if (a.kind == OpKind::R) checkpointed_.insert(unit_key(a.stage, a.microbatch, a.slice));
      if (a.kind == OpKind::W && a.part > 0) {
        int& parts = parts_[unit_key(a.stage, a.microbatch, a.slice)];
        parts = std::max(parts, a.part + 1);
        if constexpr (!splits_weights)
          throw invalid_problem(
              "Executor: schedule '" + schedule.name + "' cuts weight gradients into parts (" +
              to_string(a) + " on rank " + std::to_string(rank_) +
              "), but the stage model cannot run a part: add `int weight_parts() const` and "
              "`void backward_weight(stash_type&, int part, int parts)` to it, or run each W "
              "whole.");
      }
    }
  }

  //! The stage models' zero_gradients, before a step.
  void zero_gradients() {
    for (Stage* s : stage_of_)
      if (s) s->zero_gradients();
  }

  //! Starts a step on `data`: nothing held, no loss yet.
  void begin(const TrainingData<tensor_type>& data) {
    clear();
    data_ = &data;
    loss_ = held_ = peak_ = host_held_ = host_peak_ = 0;
    changed_ = false;
  }
  //! Ends the step; throws when the schedule left something unconsumed (not an action's
  //! fault: the caller names the position after the list). `posted` counts receives posted
  //! but never taken.
  void end(std::size_t posted, std::size_t list_size) {
    if (!stashes_.empty() || !offloaded_.empty() || !inputs.empty() || !grads.empty() ||
        !outbox.empty() || !vocabulary_out.empty() || !embedding_grad.empty() ||
        !contexts_.empty() || posted != 0)
      throw execution_error(
          "rank " + std::to_string(rank_) + " ended the step with " +
              std::to_string(stashes_.size() + offloaded_.size()) + " stashes, " +
              std::to_string(inputs.size() + grads.size() + outbox.size() + vocabulary_out.size() +
                             embedding_grad.size() + posted) +
              " tensors and " + std::to_string(contexts_.size()) +
              " slice contexts left over; the schedule does not consume what "
              "it produces.",
          rank_, static_cast<int>(list_size), Action{});
    data_ = nullptr;
  }
  //! Drops everything held (a failed step's leftovers).
  void clear() {
    stashes_.clear();
    offloaded_.clear();
    contexts_.clear();
    inputs.clear();
    grads.clear();
    outbox.clear();
    vocabulary_out.clear();
    embedding_grad.clear();
  }

  double loss() const noexcept { return loss_; }  //!< loss contributions this step
  double held() const noexcept { return held_; }  //!< bytes held now
  double peak() const noexcept { return peak_; }  //!< largest bytes held this step
  //! Largest stash bytes offloaded to host memory at once this step.
  double host_peak() const noexcept { return host_peak_; }

  //! OFFLOAD `a`: its unit's stash leaves the device for the host pool (its bytes with it).
  void offload(const Action& a) {
    const std::uint64_t key = unit_key(a.stage, a.microbatch, a.slice);
    auto it = stashes_.find(key);
    if (it == stashes_.end())
      throw error("no stash for " + to_string(a) +
                  "; its forward has not run on this rank (or its backward already has), and "
                  "an OFFLOAD comes between them.");
    if (it->second.boundary || it->second.input_done)
      throw error(to_string(a) +
                  (it->second.boundary ? " offloads a checkpointed unit"
                                       : " offloads a unit whose backward ran") +
                  "; an OFFLOAD moves a kept forward's activations, between the forward and "
                  "its backward.");
    Held h = std::move(it->second);
    stashes_.erase(it);
    if constexpr (offloads_stash<Stage>) model(a.stage).offload(h.stash);
    adjust(-h.bytes);
    host_held_ += h.bytes;
    host_peak_ = std::max(host_peak_, host_held_);
    offloaded_.insert_or_assign(key, std::move(h));
  }

  //! RELOAD `a`: the unit's stash comes back from the host pool for its backward.
  void reload(const Action& a) {
    const std::uint64_t key = unit_key(a.stage, a.microbatch, a.slice);
    auto it = offloaded_.find(key);
    if (it == offloaded_.end())
      throw error("nothing of " + to_string(a) +
                  " is in host memory; a RELOAD follows the OFFLOAD of its unit.");
    Held h = std::move(it->second);
    offloaded_.erase(it);
    if constexpr (offloads_stash<Stage>) model(a.stage).reload(h.stash);
    host_held_ -= h.bytes;
    adjust(h.bytes);
    stashes_.insert_or_assign(key, std::move(h));
  }
  //! Adds `delta` bytes held outside the units (a vocabulary shard's, from its VOCAB_F to its
  //! VOCAB_B; negative frees).
  void add_held(double delta) { adjust(delta); }
  //! Adds a loss contribution computed outside the units (a vocabulary-parallel unit's).
  void add_loss(double loss) { loss_ += loss; }

  //! True once when held bytes changed since the last call.
  bool take_changed() noexcept { return std::exchange(changed_, false); }

  //! Runs the compute action `a` (F, R, B, I, W or an overlap of F and B).
  void run(const Action& a) {
    switch (a.kind) {
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
      default:
        return;
    }
  }

  //! Takes the tensor `outbox` holds under `key` for the send `a`.
  tensor_type take_output(std::uint64_t key, const Action& a) {
    return take(outbox, key, a.kind == OpKind::SendF ? "forward output" : "input gradient", a);
  }

  //! True when the recompute or W `a` can run now: its forward (for R) or its I (for W) ran.
  bool fill_ready(const Action& a) const {
    auto it = stashes_.find(unit_key(a.stage, a.microbatch, a.slice));
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

  //! Bytes the ready recompute `a` adds to what the rank holds.
  double fill_growth(const Action& a) const {
    const Held& h = stashes_.at(unit_key(a.stage, a.microbatch, a.slice));
    return h.full_bytes - h.bytes + figures(a.stage, a.slice).context_recompute;
  }

  //! True when running the action at `p` now, adding `growth` bytes until its place in the
  //! list, keeps the held bytes within `budget` at every action in between. Replays `list`
  //! from `i` to `p` (skipping positions `ran_early` marks) with the byte figures measured so
  //! far (growth at an action's start, frees at its end, as the simulator charges); a figure
  //! not measured yet means no.
  bool fits_budget(std::span<const Action> list, std::size_t i, std::size_t p, double growth,
                   double budget, const std::vector<char>& ran_early) const {
    if (budget == std::numeric_limits<double>::infinity()) return true;
    double held = held_;
    if (held + growth > budget) return false;
    std::unordered_map<std::uint64_t, double> unit;  // projected bytes of the units touched
    for (std::size_t j = i + 1; j < p; ++j) {
      const Action& x = list[j];
      if (ran_early[j] || !(is_compute(x.kind) || is_offload_action(x.kind))) continue;
      double grow = 0, shrink = 0;
      const bool known = x.kind == OpKind::Overlap
                             ? project(unit, x.forward_half(), grow, shrink) &&
                                   project(unit, x.backward_half(), grow, shrink)
                             : project(unit, x, grow, shrink);
      if (!known) return false;
      held += grow;
      if (held + growth > budget) return false;
      held += shrink;
    }
    return true;
  }

  // Tensors by unit, waiting for their consumer: forward inputs, output gradients, and what
  // was produced for a send (keyed by the sending unit and direction).
  std::unordered_map<std::uint64_t, tensor_type> inputs;  //!< forward inputs by unit
  std::unordered_map<std::uint64_t, tensor_type> grads;   //!< output gradients by unit
  std::unordered_map<std::uint64_t, tensor_type> outbox;  //!< produced, waiting for a send
  //! With vocabulary passes: the last stage's outputs by unit, for the shards.
  std::unordered_map<std::uint64_t, tensor_type> vocabulary_out;
  //! With the input embedding split: the first stage's input gradients by unit, for the shards.
  std::unordered_map<std::uint64_t, tensor_type> embedding_grad;

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

  Stage& model(int stage) { return *stage_of_[static_cast<std::size_t>(stage)]; }
  int rank_of(int stage) const { return placement_.rank_of(stage); }
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

  // Adds one compute action's projected change into grow / shrink (fits_budget); `unit`
  // holds the projected bytes of the units touched so far. False when a figure is unknown.
  bool project(std::unordered_map<std::uint64_t, double>& unit, const Action& x, double& grow,
               double& shrink) const {
    const UnitFigures& f = figures(x.stage, x.slice);
    const std::uint64_t key = unit_key(x.stage, x.microbatch, x.slice);
    auto at = unit.find(key);
    if (at == unit.end()) {
      auto h = stashes_.find(key);
      at = unit.emplace(key, h == stashes_.end() ? 0.0 : h->second.bytes).first;
    }
    double& b = at->second;
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
      case OpKind::Offload:
        after = 0;
        break;
      case OpKind::Reload: {
        auto h = offloaded_.find(key);
        after = h != offloaded_.end() ? h->second.bytes : f.full;
        if (after < 0) return false;
        break;
      }
      default:
        break;
    }
    const double change = after - b + context;
    (change >= 0 ? grow : shrink) += change;
    b = after;
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
    if constexpr (reports_input_bytes<Stage>)
      return static_cast<double>(model(stage).input_bytes(x));
    else if constexpr (reports_bytes<tensor_type>)
      return static_cast<double>(x.bytes());
    else
      return 0;  // unreachable: the executor refuses R without a way to size inputs
  }

  // The context of (stage, microbatch): made by the microbatch's first forward on the stage.
  HeldContext& context_for(const Action& a, bool make) {
    const std::uint64_t key = unit_key(a.stage, a.microbatch, 0);
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
      if constexpr (whole_unit_calls<Stage>)
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
      if constexpr (whole_unit_calls<Stage>)
        if (!use_context_) return model(a.stage).backward_input(dy, stash);
      HeldContext& c = context_for(a, false);
      tensor_type dx = model(a.stage).backward_input(dy, stash, c.context, a.slice);
      context_change = remeasure(a.stage, c);
      if (a.slice == 0) {
        // Slice 0's backward is the microbatch's last on this stage: the context ends here.
        context_change -= c.bytes;
        contexts_.erase(unit_key(a.stage, a.microbatch, 0));
      }
      return dx;
    }
  }

  void forward(const Action& a) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = unit_key(s, m, k);
    const Problem& problem = problem_;
    // With the input embedding split, the first stage's input is the shards' lookups, merged
    // into `inputs` by the executor.
    tensor_type x = problem.first_stage(s) && !input_vocabulary_
                        ? data_->input(m, k)
                        : take(inputs, key, "input activation", a);
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
    if (problem.last_stage(s) && vocabulary_) {  // the output layer's shards take it
      vocabulary_out.insert_or_assign(key, std::move(y));
    } else if (problem.last_stage(s)) {  // the last stage of the microbatch's replica
      grads.insert_or_assign(key, data_->loss(y, m, k, loss_));
    } else if (rank_of(s + 1) == rank_) {
      inputs.insert_or_assign(unit_key(s + 1, m, k), std::move(y));
    } else {
      outbox.insert_or_assign(pack_key({s, m, k, Direction::Forward}), std::move(y));
    }
  }

  void recompute(const Action& a) {
    auto it = stashes_.find(unit_key(a.stage, a.microbatch, a.slice));
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
    if (it == stashes_.end()) {
      if (offloaded_.contains(key))
        throw error("the activations of " + to_string(a) +
                    " are in host memory: its unit was offloaded and its RELOAD has not run; put "
                    "the RELOAD before the backward.");
      throw error("no stash for " + to_string(a) + "; its forward has not run on this rank.");
    }
    if (it->second.boundary)
      throw error("the activations of " + to_string(a) +
                  " were dropped at its checkpointed forward and its recompute R has not run; "
                  "put the R between the forward and the backward.");
    return it->second;
  }

  void backward(const Action& a, bool weights_too) {
    const int s = a.stage, m = a.microbatch, k = a.slice;
    const std::uint64_t key = unit_key(s, m, k);
    tensor_type dy = take(grads, key, "output gradient", a);
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
    // The input gradient of a replica's first stage goes nowhere, or with the input embedding
    // split to its shards.
    if (problem_.first_stage(s)) {
      if (input_vocabulary_) embedding_grad.insert_or_assign(key, std::move(dx));
      return;
    }
    if (rank_of(s - 1) == rank_)
      grads.insert_or_assign(unit_key(s - 1, m, k), std::move(dx));
    else
      outbox.insert_or_assign(pack_key({s, m, k, Direction::Backward}), std::move(dx));
  }

  void weight(const Action& a) {
    const std::uint64_t key = unit_key(a.stage, a.microbatch, a.slice);
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

  Problem problem_;
  Placement placement_;
  int rank_;
  std::vector<Stage*> stage_of_;                    // by stage; null where another rank's
  std::unordered_set<std::uint64_t> checkpointed_;  // units this rank recomputes
  std::unordered_map<std::uint64_t, int> parts_;    // units whose W is cut: their part count
  std::size_t slices_ = 1;                          // the problem's slices per microbatch
  bool use_context_ = false;                        // slice contexts are made and passed
  bool vocabulary_ = false;  // the schedule has vocabulary passes: the shards compute the loss
  bool input_vocabulary_ = false;  // and the embedding's: the shards compute the first input
  std::vector<UnitFigures> seen_;  // by (stage, slice)
  const TrainingData<tensor_type>* data_ = nullptr;
  std::unordered_map<std::uint64_t, Held> stashes_;
  std::unordered_map<std::uint64_t, Held> offloaded_;        // the host pool: offloaded stashes
  std::unordered_map<std::uint64_t, HeldContext> contexts_;  // by (stage, microbatch)
  double loss_ = 0, held_ = 0, peak_ = 0, host_held_ = 0, host_peak_ = 0;
  bool changed_ = false;
};

}  // namespace pipesched::detail
