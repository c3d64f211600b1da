// The link from an order policy to its run-time generator in pipesched::schedule. The
// primary template refuses any type without a specialization here; adding an order means
// adding its tag in order.hpp and one specialization below.
#pragma once

#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/wgrad.hpp"
#include "pipesched/schedule/common.hpp"
#include "pipesched/schedule/dualpipe_v.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/looped_bfs.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/schedule/zero_bubble_h2.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace pipesched::detail {

//! `run(Problem, WGradMode)` calls the generator of `Order`.
template <class Order>
struct OrderGenerator {
  static_assert(dependent_false_v<Order>,
                "pipesched::plan: no run-time generator is registered for this order policy; "
                "give it a specialization of pipesched::detail::OrderGenerator in "
                "pipesched/policy/generate.hpp");
};

template <>
struct OrderGenerator<order::GPipe> {
  static Schedule run(Problem p, WGradMode w) { return schedule::gpipe(p, w); }
};
template <>
struct OrderGenerator<order::OneFOneB> {
  static Schedule run(Problem p, WGradMode w) { return schedule::one_f_one_b(p, w); }
};
template <>
struct OrderGenerator<order::Interleaved1F1B> {
  static Schedule run(Problem p, WGradMode w) { return schedule::interleaved_1f1b(p, w); }
};
template <>
struct OrderGenerator<order::LoopedBFS> {
  static Schedule run(Problem p, WGradMode w) { return schedule::looped_bfs(p, w); }
};
template <>
struct OrderGenerator<order::ZeroBubbleH1> {
  static Schedule run(Problem p, WGradMode w) { return schedule::zero_bubble_h1(p, w); }
};
template <>
struct OrderGenerator<order::ZeroBubbleH2> {
  static Schedule run(Problem p, WGradMode w) { return schedule::zero_bubble_h2(p, w); }
};
template <>
struct OrderGenerator<order::ZeroBubbleV> {
  static Schedule run(Problem p, WGradMode w) { return schedule::zero_bubble_v(p, w); }
};
template <>
struct OrderGenerator<order::DualPipeV> {
  static Schedule run(Problem p, WGradMode w) { return schedule::dualpipe_v(p, w); }
};

template <>
struct OrderGenerator<order::SeqOneFOneB> {
  static Schedule run(Problem p, WGradMode w) { return schedule::seq_1f1b(p, w); }
};
template <>
struct OrderGenerator<order::SlicePipe> {
  static Schedule run(Problem p, WGradMode w) { return schedule::slice_pipe(p, w); }
};
template <int N>
struct OrderGenerator<order::SlicePipeWarmup<N>> {
  static Schedule run(Problem p, WGradMode w) { return schedule::slice_pipe(p, w, {.warmup = N}); }
};

//! The generators' backward mode for a weight-gradient policy.
template <class WGrad>
inline constexpr WGradMode wgrad_mode_v = WGrad::splits ? WGradMode::Split : WGradMode::Fused;

}  // namespace pipesched::detail
