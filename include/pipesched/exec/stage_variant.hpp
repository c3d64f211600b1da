// A stage model that is one of several stage model types: a pipeline whose stages differ (an
// embedding, blocks, an LM head) holds one `StageVariant` per stage, and the executor and the
// pipelines, which take one stage type, run it unchanged.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/concepts.hpp"

namespace pipesched {

namespace detail {

// Stands in for a member type an alternative lacks, so that only the checks below report it.
struct stage_variant_missing {};

template <class S>
struct stage_variant_tensor {
  using type = stage_variant_missing;
};
template <class S>
requires has_tensor_type<S>
struct stage_variant_tensor<S> {
  using type = typename S::tensor_type;
};

template <class S>
struct stage_variant_stash {
  using type = stage_variant_missing;
};
template <class S>
requires has_stash_type<S>
struct stage_variant_stash<S> {
  using type = typename S::stash_type;
};

//! The slice context of an alternative without one: it runs each slice on its own.
struct no_slice_context {};

template <class S>
struct stage_variant_context {
  using type = no_slice_context;
};
template <class S>
requires has_context_type<S>
struct stage_variant_context<S> {
  using type = typename S::context_type;
};

// `context_type` exists on the variant only when some alternative keeps a slice context.
template <bool SliceAware, class Context>
struct stage_variant_context_member {};
template <class Context>
struct stage_variant_context_member<true, Context> {
  using context_type = Context;
};

template <class A, class... S>
inline constexpr std::size_t stage_variant_count = (std::size_t{std::is_same_v<A, S>} + ... + 0);

template <class A, class... S>
constexpr std::size_t stage_variant_index() {
  constexpr bool same[] = {std::is_same_v<A, S>...};
  std::size_t i = 0;
  while (!same[i])
    ++i;
  return i;
}

template <class S, class Tensor>
concept sizes_stage_input = requires(const S& s, const Tensor& x) {
  { s.input_bytes(x) } -> std::convertible_to<std::size_t>;
};
template <class Tensor>
concept tensor_sizes_itself = requires(const Tensor& x) {
  { x.bytes() } -> std::convertible_to<std::size_t>;
};
// The executor can size a kept input of S: S says, or the tensor does.
template <class S, class Tensor>
concept stage_input_sizable = sizes_stage_input<S, Tensor> || tensor_sizes_itself<Tensor>;

template <class A, class... S>
concept stage_variant_alternative_of = (std::same_as<std::remove_cvref_t<A>, S> || ...);

// The alternatives' parameters() (or gradients()) have one type they all convert to.
template <class... R>
concept stage_variant_common = requires {
  typename std::common_type_t<R...>;
}
&&(std::convertible_to<R, std::common_type_t<R...>>&&...);
template <class S>
using stage_parameters_t = decltype(std::declval<S&>().parameters());
template <class S>
using stage_gradients_t = decltype(std::declval<S&>().gradients());
template <class S>
concept has_stage_parameters = requires(S& s) {
  s.parameters();
};
template <class S>
concept has_stage_gradients = requires(S& s) {
  s.gradients();
};
// Checked in two steps so that an alternative without the member only makes the constraint false.
template <class... S>
concept stage_variant_parameters =
    (has_stage_parameters<S> && ...) && stage_variant_common<stage_parameters_t<S>...>;
template <class... S>
concept stage_variant_gradients =
    (has_stage_gradients<S> && ...) && stage_variant_common<stage_gradients_t<S>...>;

//! Checks alternative number `Index` (from 0) of a StageVariant whose first alternative's tensor
//! type is `Tensor`. When a check fails, the compiler names this function with `Index` and
//! `Alternative` spelled out: that is the alternative at fault.
template <std::size_t Index, class Alternative, class Tensor>
constexpr bool check_stage_variant_alternative() {
  static_assert(stage_model<Alternative>,
                "pipesched: every alternative of a StageVariant must be a stage model; the "
                "alternative named in check_stage_variant_alternative<Index, Alternative, ...> "
                "is not (the messages of check_stage_model below say what it lacks)");
  if constexpr (has_tensor_type<Alternative>)
    static_assert(std::same_as<typename Alternative::tensor_type, Tensor>,
                  "pipesched: every alternative of a StageVariant must have the first "
                  "alternative's `tensor_type`: the stages of one pipeline pass one tensor type "
                  "between them (convert at a stage boundary inside a stage model)");
  return check_stage_model<Alternative>();
}

template <class Tensor, class... S, std::size_t... I>
constexpr bool check_stage_variant_alternatives(std::index_sequence<I...>) {
  return (check_stage_variant_alternative<I, S, Tensor>() && ...);
}

template <class First, class... Rest>
struct stage_variant_first {
  using type = First;
};

}  // namespace detail

//! A stage model that holds one of the stage models `S...` and forwards every call of the
//! stage-model concepts to it. A pipeline of stages of different types (an embedding stage, block
//! stages, a head stage) is a `std::vector<StageVariant<Embed, Block, Head>>` with one element per
//! stage; `Executor`, `inproc::Pipeline` and `mpi::Pipeline` take it as they take any stage model.
//!
//! Every alternative is checked with `check_stage_model`, and all must have the same
//! `tensor_type`; a failing alternative is named by its index and type. A type may be listed once.
//!
//! - `stash_type` is a `std::variant` of `std::monostate` (an empty stash, as the executor makes
//!   one) and the alternatives' stash types. A forward turns the stash into the held
//!   alternative's; a backward given an empty stash passes that alternative an empty stash of its
//!   own (which it reports as it would alone); a stash filled by an alternative of another index
//!   is refused with `invalid_schedule`. An empty stash holds 0 bytes.
//! - Slices: the variant is slice-aware (has `context_type`, a variant of the alternatives'
//!   contexts) when **any** alternative is. An alternative without a context then runs each slice
//!   on its own, exactly as the executor runs such a model alone, and its context holds 0 bytes.
//!   The whole-unit calls `forward(x, stash)` / `backward_input(dy, stash)` exist when **every**
//!   alternative has them (so with one slice the executor uses them, as it does for one type).
//! - Weight-gradient parts (`splits_weight_gradient`) exist when **every** alternative can split;
//!   otherwise the executor refuses schedules with W parts when it is built, as for one type.
//! - `input_bytes(x)` exists when some alternative has it and every other can be sized by the
//!   tensor's `bytes()`, which is what the executor would use for that alternative alone.
//! - `parameters()` / `gradients()` exist when every alternative has them and their types have a
//!   common type (the toy GPT's stage models all return `toy::TensorRange`).
//!
//! Anything else an alternative offers is reached with `visit`, `get` and `get_if`.
template <class... S>
class StageVariant
    : public detail::stage_variant_context_member<
          (detail::has_context_type<S> || ...),
          std::variant<std::monostate, typename detail::stage_variant_context<S>::type...>> {
  static_assert(sizeof...(S) >= 1, "pipesched: a StageVariant needs at least one stage model type");
  static_assert(((detail::stage_variant_count<S, S...> == 1) && ...),
                "pipesched: a StageVariant lists each stage model type once (give a stage model "
                "that plays two roles one alternative)");
  using first_type = typename detail::stage_variant_first<S...>::type;
  static_assert(detail::check_stage_variant_alternatives<
                typename detail::stage_variant_tensor<first_type>::type, S...>(
      std::index_sequence_for<S...>{}));

  using context_variant =
      std::variant<std::monostate, typename detail::stage_variant_context<S>::type...>;

 public:
  //! The alternatives' common tensor type.
  using tensor_type = typename detail::stage_variant_tensor<first_type>::type;
  //! Empty (`std::monostate`) or the stash of the alternative that filled it.
  using stash_type = std::variant<std::monostate, typename detail::stage_variant_stash<S>::type...>;

  //! True when some alternative keeps a slice context (the variant then has `context_type`).
  static constexpr bool slice_aware = (detail::has_context_type<S> || ...);
  //! True when every alternative has the whole-unit calls.
  static constexpr bool whole_unit_calls = (detail::whole_unit_calls<S> && ...);
  //! True when every alternative can run its weight gradient in parts.
  static constexpr bool splits_weights = (splits_weight_gradient<S> && ...);
  //! True when the variant has `input_bytes` (see above).
  static constexpr bool sizes_inputs = (detail::sizes_stage_input<S, tensor_type> || ...) &&
                                       (detail::stage_input_sizable<S, tensor_type> && ...);

  //! Holds `stage` (one of `S...`).
  template <detail::stage_variant_alternative_of<S...> A>
  StageVariant(A&& stage)
      : stage_(std::in_place_type<std::remove_cvref_t<A>>, std::forward<A>(stage)) {}

  //! Holds an `A` built from `args`.
  template <detail::stage_variant_alternative_of<S...> A, class... Args>
  explicit StageVariant(std::in_place_type_t<A>, Args&&... args)
      : stage_(std::in_place_type<A>, std::forward<Args>(args)...) {}

  //! The index of the held alternative in `S...`.
  std::size_t index() const noexcept { return stage_.index(); }
  //! True when the held alternative is an `A`.
  template <class A>
  bool holds() const noexcept {
    return std::holds_alternative<A>(stage_);
  }
  //! The held `A`, or null.
  template <class A>
  A* get_if() noexcept {
    return std::get_if<A>(&stage_);
  }
  //! The held `A`, or null (const).
  template <class A>
  const A* get_if() const noexcept {
    return std::get_if<A>(&stage_);
  }
  //! The held `A`; throws `invalid_problem` when another alternative is held.
  template <class A>
  A& get() {
    if (A* a = get_if<A>()) return *a;
    throw invalid_problem(wrong_alternative(detail::stage_variant_index<A, S...>()));
  }
  //! The held `A`; throws `invalid_problem` when another alternative is held (const).
  template <class A>
  const A& get() const {
    if (const A* a = get_if<A>()) return *a;
    throw invalid_problem(wrong_alternative(detail::stage_variant_index<A, S...>()));
  }
  //! `fn(stage)` on the held alternative (as `std::visit`).
  template <class Fn>
  decltype(auto) visit(Fn&& fn) {
    return std::visit(std::forward<Fn>(fn), stage_);
  }
  //! `fn(stage)` on the held alternative, const.
  template <class Fn>
  decltype(auto) visit(Fn&& fn) const {
    return std::visit(std::forward<Fn>(fn), stage_);
  }

  // ---- the stage-model calls, forwarded to the held alternative ----------------------------

  //! The held alternative's forward of a whole microbatch; `stash` becomes its stash.
  tensor_type forward(const tensor_type& x, stash_type& stash) requires whole_unit_calls {
    return std::visit([&]<class A>(A& s) -> tensor_type { return s.forward(x, refill<A>(stash)); },
                      stage_);
  }

  //! The held alternative's input gradient of a whole microbatch, from the stash its forward
  //! filled (another alternative's stash is refused with invalid_schedule).
  tensor_type backward_input(const tensor_type& dy, stash_type& stash) requires whole_unit_calls {
    return std::visit(
        [&]<class A>(A& s) -> tensor_type {
          return s.backward_input(dy, held<A>(stash, "backward_input"));
        },
        stage_);
  }

  //! Slice `slice` of a microbatch; an alternative without a context runs it on its own.
  tensor_type forward(const tensor_type& x, stash_type& stash, context_variant& context,
                      int slice) requires slice_aware {
    return std::visit(
        [&]<class A>(A& s) -> tensor_type {
          auto& c = held_context<A>(context, "forward");
          if constexpr (detail::has_context_type<A>)
            return s.forward(x, refill<A>(stash), c, slice);
          else
            return s.forward(x, refill<A>(stash));
        },
        stage_);
  }

  //! The input gradient of slice `slice`; an alternative without a context runs it on its own.
  tensor_type backward_input(const tensor_type& dy, stash_type& stash, context_variant& context,
                             int slice) requires slice_aware {
    return std::visit(
        [&]<class A>(A& s) -> tensor_type {
          auto& c = held_context<A>(context, "backward_input");
          if constexpr (detail::has_context_type<A>)
            return s.backward_input(dy, held<A>(stash, "backward_input"), c, slice);
          else
            return s.backward_input(dy, held<A>(stash, "backward_input"));
        },
        stage_);
  }

  //! The held alternative's weight gradient, from the stash its forward filled.
  void backward_weight(stash_type& stash) {
    std::visit([&]<class A>(A& s) { s.backward_weight(held<A>(stash, "backward_weight")); },
               stage_);
  }

  //! The parts the held alternative cuts its weight gradient into.
  int weight_parts() const requires splits_weights {
    return std::visit([](const auto& s) -> int { return s.weight_parts(); }, stage_);
  }

  //! Part `part` of `parts` of the held alternative's weight gradient.
  void backward_weight(stash_type& stash, int part, int parts) requires splits_weights {
    std::visit(
        [&]<class A>(A& s) { s.backward_weight(held<A>(stash, "backward_weight"), part, parts); },
        stage_);
  }

  //! The bytes `stash` holds, as the held alternative counts them; 0 when empty.
  std::size_t stash_bytes(const stash_type& stash) const {
    if (stash.index() == 0) return 0;
    return std::visit(
        [&]<class A>(const A& s) -> std::size_t {
          return static_cast<std::size_t>(s.stash_bytes(held<A>(stash, "stash_bytes")));
        },
        stage_);
  }

  //! The bytes a slice context holds; 0 when empty or for an alternative without contexts.
  std::size_t context_bytes(const context_variant& context) const requires slice_aware {
    if (context.index() == 0) return 0;
    return std::visit(
        [&]<class A>(const A& s) -> std::size_t {
          const auto& c = held_context<A>(context, "context_bytes");
          if constexpr (detail::has_context_type<A>)
            return static_cast<std::size_t>(s.context_bytes(c));
          else
            return 0;
        },
        stage_);
  }

  //! Zeroes the held alternative's gradients.
  void zero_gradients() {
    std::visit([](auto& s) { s.zero_gradients(); }, stage_);
  }

  //! The bytes a checkpointed forward keeps of input `x`: the held alternative's
  //! `input_bytes(x)`, or `x.bytes()` when it has none.
  std::size_t input_bytes(const tensor_type& x) const requires sizes_inputs {
    return std::visit(
        [&]<class A>(const A& s) -> std::size_t {
          if constexpr (detail::sizes_stage_input<A, tensor_type>)
            return static_cast<std::size_t>(s.input_bytes(x));
          else
            return static_cast<std::size_t>(x.bytes());
        },
        stage_);
  }

  // ---- parameters, for optimizers and references -------------------------------------------

  //! The held alternative's parameters, as the alternatives' common type.
  auto parameters() requires detail::stage_variant_parameters<S...> {
    using R = std::common_type_t<detail::stage_parameters_t<S>...>;
    return std::visit([](auto& s) -> R { return s.parameters(); }, stage_);
  }
  //! The held alternative's parameters, const.
  auto parameters() const requires detail::stage_variant_parameters<const S...> {
    using R = std::common_type_t<detail::stage_parameters_t<const S>...>;
    return std::visit([](const auto& s) -> R { return s.parameters(); }, stage_);
  }
  //! The held alternative's gradients, as the alternatives' common type.
  auto gradients() requires detail::stage_variant_gradients<S...> {
    using R = std::common_type_t<detail::stage_gradients_t<S>...>;
    return std::visit([](auto& s) -> R { return s.gradients(); }, stage_);
  }
  //! The held alternative's gradients, const.
  auto gradients() const requires detail::stage_variant_gradients<const S...> {
    using R = std::common_type_t<detail::stage_gradients_t<const S>...>;
    return std::visit([](const auto& s) -> R { return s.gradients(); }, stage_);
  }

 private:
  // Where alternative A's stash and context sit in their variants (0 is the empty one).
  template <class A>
  static constexpr std::size_t slot = 1 +
                                      detail::stage_variant_index<std::remove_const_t<A>, S...>();

  // The stash of alternative A for a forward, which replaces whatever the stash held.
  template <class A>
  static auto& refill(stash_type& stash) {
    if (stash.index() != slot<A>) stash.template emplace<slot<A>>();
    return *std::get_if<slot<A>>(&stash);
  }

  // The stash of alternative A for a later call: an empty one becomes A's (empty); one of another
  // alternative is refused.
  template <class A>
  static auto& held(stash_type& stash, const char* op) {
    if (stash.index() == 0) stash.template emplace<slot<A>>();
    if (stash.index() != slot<A>)
      throw invalid_schedule(foreign("stash", op, stash.index(), slot<A>));
    return *std::get_if<slot<A>>(&stash);
  }
  template <class A>
  static const auto& held(const stash_type& stash, const char* op) {
    if (stash.index() != slot<A>)
      throw invalid_schedule(foreign("stash", op, stash.index(), slot<A>));
    return *std::get_if<slot<A>>(&stash);
  }

  // The context of alternative A: a fresh one is made A's; one of another alternative is refused
  // (the slices of a microbatch share it, so it is never replaced).
  template <class A>
  static auto& held_context(context_variant& context, const char* op) {
    if (context.index() == 0) context.template emplace<slot<A>>();
    if (context.index() != slot<A>)
      throw invalid_schedule(foreign("slice context", op, context.index(), slot<A>));
    return *std::get_if<slot<A>>(&context);
  }
  template <class A>
  static const auto& held_context(const context_variant& context, const char* op) {
    if (context.index() != slot<A>)
      throw invalid_schedule(foreign("slice context", op, context.index(), slot<A>));
    return *std::get_if<slot<A>>(&context);
  }

  static std::string foreign(const char* what, const char* op, std::size_t filled,
                             std::size_t mine) {
    return std::string("StageVariant::") + op + ": the " + what +
           " belongs to a stage holding alternative " + std::to_string(filled - 1) +
           " of the variant, but this stage holds alternative " + std::to_string(mine - 1) +
           "; pass each stage the stashes and slice contexts of its own units";
  }

  std::string wrong_alternative(std::size_t wanted) const {
    return "StageVariant::get: the stage holds alternative " + std::to_string(stage_.index()) +
           ", not alternative " + std::to_string(wanted) +
           "; check holds<A>() or use get_if<A>() first";
  }

  std::variant<S...> stage_;
};

}  // namespace pipesched
