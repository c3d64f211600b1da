// What the executor needs from user code: layers, stage models, transports and devices,
// each a named concept whose unmet requirement gets a readable error (see check_* below).
// The stage models' concepts form one chain, each refining the one before it:
//
//   stage_model               runs the schedule's actions (forward, backward, W, stash bytes)
//   └ trainable_stage         + parameters() and gradients() of the same tensors: an optimizer
//                               can step it (toy::use_sgd, ExecutorOptions::optimizer)
//     └ reducible_stage       + gradients with a wire form: MPI data parallelism and ZeRO
//   └ device_reducible_stage  + device_gradients() (spans of device memory): NCCL data
//     └ device_shardable_stage  parallelism; + device_parameters(): ZeRO on NCCL
//   └ tensor_parallel_stage   + a tensor group it sums partial results over (tp > 1)
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>

#include "pipesched/core/action.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/exec/wire.hpp"

namespace pipesched {

//! A layer: the unit users write. `forward` computes the output and saves in the stash
//! what the backward needs; `backward_input` turns the output gradient into the input
//! gradient, keeping in the stash only what `backward_weight` still needs; `backward_weight`
//! adds this microbatch's weight gradients into the layer's gradients and may empty the
//! stash. `stash_bytes` says how many bytes a stash holds (the executor's memory figures
//! and the simulator's predictions are made from it). `parameters()` and `gradients()`
//! give the layer's tensors (ranges of the same length; an optimizer walks them together).
template <class L>
concept layer = requires(L& l, const L& cl, const typename L::tensor_type& x,
                         typename L::stash_type& st, const typename L::stash_type& cst) {
  typename L::tensor_type;
  typename L::stash_type;
  requires std::movable<typename L::tensor_type>;
  requires std::default_initializable<typename L::stash_type> &&
      std::movable<typename L::stash_type>;
  { l.forward(x, st) } -> std::same_as<typename L::tensor_type>;
  { l.backward_input(x, st) } -> std::same_as<typename L::tensor_type>;
  { l.backward_weight(st) } -> std::same_as<void>;
  { cl.stash_bytes(cst) } -> std::convertible_to<std::size_t>;
  { l.parameters() } -> std::ranges::range;
  { l.gradients() } -> std::ranges::range;
};

namespace detail {
template <class T>
concept has_tensor_type = requires {
  typename T::tensor_type;
};
template <class T>
concept has_stash_type = requires {
  typename T::stash_type;
};
template <class T>
concept has_context_type = requires {
  typename T::context_type;
};

// What every stage model has, sliced or not.
template <class S>
concept stage_model_common = requires(S& s, const S& cs, typename S::stash_type& st,
                                      const typename S::stash_type& cst) {
  typename S::tensor_type;
  typename S::stash_type;
  requires std::movable<typename S::tensor_type>;
  requires std::default_initializable<typename S::stash_type> &&
      std::movable<typename S::stash_type>;
  { s.backward_weight(st) } -> std::same_as<void>;
  { cs.stash_bytes(cst) } -> std::convertible_to<std::size_t>;
  { s.zero_gradients() } -> std::same_as<void>;
};

// The calls of a stage model without slices: each unit on its own.
template <class S>
concept whole_unit_calls = requires(S& s, const typename S::tensor_type& x,
                                    typename S::stash_type& st) {
  { s.forward(x, st) } -> std::same_as<typename S::tensor_type>;
  { s.backward_input(x, st) } -> std::same_as<typename S::tensor_type>;
};

// The calls of a slice-aware stage model: each unit also gets its microbatch's slice context.
template <class S>
concept slice_calls = requires(S& s, const S& cs, const typename S::tensor_type& x,
                               typename S::stash_type& st, typename S::context_type& c,
                               const typename S::context_type& cc, int slice) {
  requires std::default_initializable<typename S::context_type> &&
      std::movable<typename S::context_type>;
  { s.forward(x, st, c, slice) } -> std::same_as<typename S::tensor_type>;
  { s.backward_input(x, st, c, slice) } -> std::same_as<typename S::tensor_type>;
  { cs.context_bytes(cc) } -> std::convertible_to<std::size_t>;
};
}  // namespace detail

//! A stage model: what one pipeline stage computes — the layers of the stage behind the
//! same four calls as a layer (toy::MlpStage and toy::GptStage are two). The executor holds
//! one per stage of its rank and never looks inside. `zero_gradients()` clears the
//! accumulated weight gradients before a step.
//!
//! A **slice-aware** stage model (causal attention over sequence slices) also names a
//! `context_type`: what one microbatch's slices share on this stage (the keys/values of the
//! slices run so far, the gradients later slices send back to them). Its forward and
//! backward_input then take that context and the slice index — `forward(x, stash, context,
//! slice)`, `backward_input(dy, stash, context, slice)` — and `context_bytes(context)` says how
//! many bytes it holds. `backward_weight(stash)` takes no context: a W may run after the
//! microbatch's last backward, when the context is gone.
template <class S>
concept stage_model = detail::stage_model_common<S> &&
    ((!detail::has_context_type<S> && detail::whole_unit_calls<S>) ||
     (detail::has_context_type<S> && detail::slice_calls<S>));

//! A stage model with a slice context (see `stage_model`).
template <class S>
concept slice_aware_stage_model = stage_model<S> && detail::has_context_type<S>;

//! A stage model that can split its weight gradient into parts: `weight_parts()` is the
//! number of pieces its weight-gradient work naturally falls into (one per weight GEMM, say),
//! and `backward_weight(stash, part, parts)` runs part `part` of `parts` (any parts >= 1; a
//! part beyond the natural count may be empty). The parts of one unit run once each, in any
//! order, after its backward_input; each computes a disjoint share of the weight gradients
//! and may free what only it needed, so the stash shrinks as parts complete.
template <class S>
concept splits_weight_gradient = stage_model<S> &&
    requires(S& s, const S& cs, typename S::stash_type& st, int part) {
  { cs.weight_parts() } -> std::convertible_to<int>;
  { s.backward_weight(st, part, part) } -> std::same_as<void>;
};

namespace detail {
// The tensor type a member range of S gives (`parameters()`, `gradients()`).
template <class R>
using range_tensor_t = std::remove_cvref_t<std::ranges::range_reference_t<R>>;
}  // namespace detail

//! A stage model an optimizer can step: `parameters()` and `gradients()` are ranges of the same
//! tensor type, the gradient of each parameter at the same place and of the same size
//! (toy::use_sgd and the reducers' shard step walk them together).
template <class S>
concept trainable_stage = stage_model<S> && requires(S& s) {
  { s.parameters() } -> std::ranges::range;
  { s.gradients() } -> std::ranges::range;
  requires std::is_same_v<detail::range_tensor_t<decltype(std::declval<S&>().parameters())>,
                          detail::range_tensor_t<decltype(std::declval<S&>().gradients())>>;
};

//! A trainable stage whose weight gradients a data-parallel reduction over MPI can reach: its
//! tensors have a `wire` specialization (their payload is the values) whose `value_type` is
//! float or double. The reducer then also steps its weights with a ShardOptimizer (ZeRO 0, 1
//! or 2).
template <class S>
concept reducible_stage = trainable_stage<S> &&
    wire_tensor<detail::range_tensor_t<decltype(std::declval<S&>().gradients())>>;

//! A GPU stage model whose weight gradients an NCCL reduction can reach: `device_gradients()`
//! is a range of `std::span<T>` over device memory (T float or double), written on the
//! compute stream of the device the stage was made with (the toy GPU MLP and GPT have it).
template <class S>
concept device_reducible_stage = stage_model<S> && requires(S& s) {
  { s.device_gradients() } -> std::ranges::range;
  requires std::is_floating_point_v<typename std::remove_cvref_t<
      std::ranges::range_value_t<decltype(s.device_gradients())>>::element_type>;
};

//! A device-reducible stage whose weights the NCCL reducer's ShardOptimizer can step:
//! `device_parameters()` is a range of `std::span<T>` over the device parameters, in the order
//! and of the sizes of `device_gradients()` (the toy GPU MLP and GPT have it).
template <class S>
concept device_shardable_stage = device_reducible_stage<S> && requires(S& s) {
  { s.device_parameters() } -> std::ranges::range;
  requires std::is_same_v<
      std::remove_cvref_t<std::ranges::range_value_t<decltype(s.device_parameters())>>,
      std::remove_cvref_t<std::ranges::range_value_t<decltype(s.device_gradients())>>>;
};

//! A stage model that takes part in tensor parallelism: it was built for one shard
//! (`tensor_shard()`) and sums its partial results over the group it is given
//! (`set_tensor_group`, before its first action; nullptr detaches it).
template <class S>
concept tensor_parallel_stage = stage_model<S> && requires(S& s, const S& c, TensorGroup* g) {
  s.set_tensor_group(g);
  { c.tensor_shard() } -> std::convertible_to<TensorShard>;
};

//! Which way a message goes: a forward activation to the next stage, or an input gradient
//! to the previous one; with vocabulary parallelism (VOCAB_F, VOCAB_B) also the last stage's
//! output to every shard's rank, and each shard's partial to every rank.
enum class Direction : std::uint8_t {
  Forward,            //!< a stage's output to the next stage
  Backward,           //!< an input gradient to the previous stage
  VocabularyInput,    //!< the last stage's output to shard `stage`'s rank (a VOCAB_F's input)
  VocabularyPartial,  //!< shard `stage`'s partial (its VOCAB_F's result) to another rank
  EmbeddingPartial,   //!< shard `stage`'s lookups (its EMBED_F's result) to the first stage
  EmbeddingGradient,  //!< the first stage's input gradient to shard `stage`'s rank (EMBED_B)
};

//! What identifies a message: the stage that receives it, the microbatch, the slice and
//! the direction. A transport matches a receive to the send with the same key. A vocabulary
//! message names a shard (= the rank that holds it) instead: the shard it goes to
//! (VocabularyInput, EmbeddingGradient) or the shard it comes from (VocabularyPartial,
//! EmbeddingPartial).
struct MessageKey {
  int stage = 0;       //!< the stage that receives the message (a vocabulary message: the shard)
  int microbatch = 0;  //!< the microbatch it belongs to
  int slice = 0;       //!< its sequence slice
  Direction direction = Direction::Forward;  //!< activation (Forward) or gradient (Backward)
  friend bool operator==(const MessageKey&, const MessageKey&) = default;
};

namespace detail {
// A key as one integer, for hashing (in-process mailboxes, the executor's unit tables).
inline std::uint64_t pack_key(const MessageKey& k) {
  // 21 bits stage, 24 bits microbatch, 16 bits slice, 3 bits direction.
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.stage) & 0x1FFFFF) << 43) |
         (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.microbatch) & 0xFFFFFF) << 19) |
         (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.slice) & 0xFFFF) << 3) |
         (static_cast<std::uint64_t>(k.direction) & 7);
}
// A key in words, for error messages.
inline std::string describe_key(const MessageKey& k) {
  const char* what = k.direction == Direction::Forward             ? "forward activation for stage "
                     : k.direction == Direction::Backward          ? "input gradient for stage "
                     : k.direction == Direction::VocabularyInput   ? "vocabulary input for shard "
                     : k.direction == Direction::EmbeddingPartial  ? "embedding lookups of shard "
                     : k.direction == Direction::EmbeddingGradient ? "embedding gradient for shard "
                                                                   : "vocabulary partial of shard ";
  return what + std::to_string(k.stage) + " microbatch " + std::to_string(k.microbatch) +
         (k.slice ? " slice " + std::to_string(k.slice) : std::string());
}
}  // namespace detail

//! A transport moves tensors between ranks. `send` hands a tensor over (buffered: it never
//! waits for the receiver); `receive` blocks, without burning a core, until the message with
//! that key has arrived for that rank, up to `timeout` (then it throws `pipesched::error`);
//! `try_receive` returns at once with the tensor or nothing; `abort` wakes every waiting
//! receive on every rank, which then throws, so one failing rank stops all.
template <class T, class Tensor>
concept transport = requires(T& t, int rank, const MessageKey& key, Tensor&& x,
                             std::chrono::duration<double> timeout) {
  { t.send(rank, rank, key, std::move(x)) } -> std::same_as<void>;
  { t.receive(rank, key, timeout) } -> std::same_as<Tensor>;
  { t.try_receive(rank, key) } -> std::same_as<std::optional<Tensor>>;
  { t.abort() } -> std::same_as<void>;
};

//! A device: where a rank's work runs. The executor marks the start and end of every
//! action and, after `synchronize()`, asks for the seconds between two marks (on a host the
//! marks are clock readings; on a GPU, events recorded on a stream).
template <class D>
concept device = requires(D& d, const typename D::mark_type& m) {
  typename D::mark_type;
  { d.mark() } -> std::same_as<typename D::mark_type>;
  { d.synchronize() } -> std::same_as<void>;
  { d.seconds_between(m, m) } -> std::convertible_to<double>;
};

//! A transport that carries the messages of vocabulary parallelism (`Direction::
//! VocabularyInput`, `VocabularyPartial`) between any two ranks: it says so with `static
//! constexpr bool carries_vocabulary = true` (the in-process and MPI transports do).
template <class T>
concept vocabulary_transport = requires {
  requires T::carries_vocabulary;
};

//! Checks `S` against `stage_model`, one requirement at a time, so a type that misses one
//! gets a message naming it rather than a wall of template errors. A type with a
//! `context_type` is checked as a slice-aware stage model.
template <class S>
constexpr bool check_stage_model() {
  static_assert(detail::has_tensor_type<S>,
                "pipesched: a stage model needs a member type `tensor_type` (the tensors it takes "
                "and returns)");
  static_assert(detail::has_stash_type<S>,
                "pipesched: a stage model needs a member type `stash_type` (what forward saves "
                "for backward), default-constructible and movable");
  if constexpr (detail::has_tensor_type<S> && detail::has_stash_type<S>) {
    using T = typename S::tensor_type;
    using St = typename S::stash_type;
    if constexpr (detail::has_context_type<S>) {
      using C = typename S::context_type;
      static_assert(std::default_initializable<C> && std::movable<C>,
                    "pipesched: a slice-aware stage model's `context_type` must be "
                    "default-constructible and movable (the executor makes one per microbatch "
                    "at its first slice's forward)");
      static_assert(
          requires(S & s, const T& x, St& st, C& c, int k) {
            { s.forward(x, st, c, k) } -> std::same_as<T>;
          },
          "pipesched: a slice-aware stage model (one with `context_type`) needs `tensor_type "
          "forward(const tensor_type& x, stash_type& stash, context_type& context, int slice)`");
      static_assert(
          requires(S & s, const T& dy, St& st, C& c, int k) {
            { s.backward_input(dy, st, c, k) } -> std::same_as<T>;
          },
          "pipesched: a slice-aware stage model (one with `context_type`) needs `tensor_type "
          "backward_input(const tensor_type& dy, stash_type& stash, context_type& context, int "
          "slice)` returning the input gradient");
      static_assert(
          requires(const S& s, const C& c) {
            { s.context_bytes(c) } -> std::convertible_to<std::size_t>;
          },
          "pipesched: a slice-aware stage model (one with `context_type`) needs `std::size_t "
          "context_bytes(const context_type&) const` (bytes a slice context holds)");
    } else {
      static_assert(
          requires(S & s, const T& x, St& st) {
            { s.forward(x, st) } -> std::same_as<T>;
          },
          "pipesched: a stage model needs `tensor_type forward(const tensor_type& x, stash_type& "
          "stash)`");
      static_assert(
          requires(S & s, const T& dy, St& st) {
            { s.backward_input(dy, st) } -> std::same_as<T>;
          },
          "pipesched: a stage model needs `tensor_type backward_input(const tensor_type& dy, "
          "stash_type& stash)` returning the input gradient");
    }
    static_assert(
        requires(S & s, St & st) {
          { s.backward_weight(st) } -> std::same_as<void>;
        },
        "pipesched: a stage model needs `void backward_weight(stash_type& stash)` that adds "
        "the weight gradients");
    static_assert(
        requires(const S& s, const St& st) {
          { s.stash_bytes(st) } -> std::convertible_to<std::size_t>;
        },
        "pipesched: a stage model needs `std::size_t stash_bytes(const stash_type&) const` (bytes "
        "a stash holds)");
    static_assert(
        requires(S & s) {
          { s.zero_gradients() } -> std::same_as<void>;
        },
        "pipesched: a stage model needs `void zero_gradients()` (called before each step)");
    if constexpr (requires(const S& s) { s.weight_parts(); }) {
      static_assert(
          requires(S & s, St & st, int part) {
            { s.backward_weight(st, part, part) } -> std::same_as<void>;
          },
          "pipesched: a stage model with `weight_parts()` needs `void backward_weight(stash_type& "
          "stash, int part, int parts)` that runs one part of its weight gradient");
    }
  }
  return stage_model<S>;
}

//! Checks `L` against `layer` the same way.
template <class L>
constexpr bool check_layer() {
  static_assert(detail::has_tensor_type<L>, "pipesched: a layer needs a member type `tensor_type`");
  static_assert(detail::has_stash_type<L>,
                "pipesched: a layer needs a member type `stash_type` (what forward saves for "
                "backward)");
  if constexpr (detail::has_tensor_type<L> && detail::has_stash_type<L>) {
    using T = typename L::tensor_type;
    using St = typename L::stash_type;
    static_assert(
        requires(L & l, const T& x, St& st) {
          { l.forward(x, st) } -> std::same_as<T>;
        },
        "pipesched: a layer needs `tensor_type forward(const tensor_type& x, stash_type& stash)`");
    static_assert(
        requires(L & l, const T& dy, St& st) {
          { l.backward_input(dy, st) } -> std::same_as<T>;
        },
        "pipesched: a layer needs `tensor_type backward_input(const tensor_type& dy, stash_type& "
        "stash)`");
    static_assert(
        requires(L & l, St & st) {
          { l.backward_weight(st) } -> std::same_as<void>;
        },
        "pipesched: a layer needs `void backward_weight(stash_type& stash)`");
    static_assert(
        requires(const L& l, const St& st) {
          { l.stash_bytes(st) } -> std::convertible_to<std::size_t>;
        },
        "pipesched: a layer needs `std::size_t stash_bytes(const stash_type&) const`");
    static_assert(
        requires(L & l) {
          { l.parameters() } -> std::ranges::range;
          { l.gradients() } -> std::ranges::range;
        },
        "pipesched: a layer needs `parameters()` and `gradients()` returning ranges of its "
        "tensors");
  }
  return layer<L>;
}

//! Checks `T` against `transport<T, Tensor>`.
template <class T, class Tensor>
constexpr bool check_transport() {
  static_assert(
      requires(T & t, const MessageKey& k, Tensor&& x) {
        { t.send(0, 0, k, std::move(x)) } -> std::same_as<void>;
      },
      "pipesched: a transport needs `void send(int from_rank, int to_rank, const MessageKey&, "
      "tensor&&)`");
  static_assert(
      requires(T & t, const MessageKey& k, std::chrono::duration<double> d) {
        { t.receive(0, k, d) } -> std::same_as<Tensor>;
      },
      "pipesched: a transport needs `tensor receive(int rank, const MessageKey&, "
      "std::chrono::duration<double> timeout)` that blocks until the message arrives");
  static_assert(
      requires(T & t, const MessageKey& k) {
        { t.try_receive(0, k) } -> std::same_as<std::optional<Tensor>>;
      },
      "pipesched: a transport needs `std::optional<tensor> try_receive(int rank, const "
      "MessageKey&)` that never blocks");
  static_assert(
      requires(T & t) {
        { t.abort() } -> std::same_as<void>;
      },
      "pipesched: a transport needs `void abort()` that wakes every waiting receive");
  return transport<T, Tensor>;
}

//! Checks `D` against `device`.
template <class D>
constexpr bool check_device() {
  static_assert(
      requires { typename D::mark_type; },
      "pipesched: a device needs a member type `mark_type` (a point in its timeline)");
  if constexpr (requires { typename D::mark_type; }) {
    static_assert(
        requires(D & d) {
          { d.mark() } -> std::same_as<typename D::mark_type>;
        },
        "pipesched: a device needs `mark_type mark()`");
    static_assert(
        requires(D & d) {
          { d.synchronize() } -> std::same_as<void>;
        },
        "pipesched: a device needs `void synchronize()` (waits for queued work)");
    static_assert(
        requires(D & d, const typename D::mark_type& m) {
          { d.seconds_between(m, m) } -> std::convertible_to<double>;
        },
        "pipesched: a device needs `double seconds_between(const mark_type&, const mark_type&)`");
  }
  return device<D>;
}

}  // namespace pipesched
