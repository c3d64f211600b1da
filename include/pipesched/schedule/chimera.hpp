// Chimera (Li & Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
// Bidirectional Pipelines", SC '21): two pipelines over the same ranks in opposite directions,
// each a whole replica of the model, microbatches split between them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/schedule/detail/generator_support.hpp"
#include "pipesched/schedule/list_schedule.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace pipesched::schedule {
namespace detail {

//! Chimera's rule on list_schedule: each rank follows, for each of its two stages, that
//! direction's own 1F1B order (`order[rank][replica]`), and takes whichever direction's next
//! action is ready — a backward before a forward, then the smaller microbatch.
struct ChimeraRule {
  int replica_stages = 1;
  std::vector<std::vector<std::vector<Action>>> order;  //!< [rank][replica]: the 1F1B list
  //! Per rank: how much of its started list has been counted, and how far each direction's
  //! order has got. The engine asks a rank again only after its list grew or an action became
  //! ready, so counting the new entries keeps a decision constant in time.
  struct Progress {
    std::size_t counted = 0;
    std::size_t next[2] = {0, 0};
  };
  mutable std::vector<Progress> progress;

  std::pair<int, int> key(const ReadyAction& a) const {
    return {a.action.kind == OpKind::F ? 1 : 0, a.action.microbatch};
  }
  bool admit(const RankState& st, const ReadyAction& a) const {
    Progress& me = progress[static_cast<std::size_t>(st.rank)];
    for (; me.counted < st.started.size(); ++me.counted)
      ++me.next[st.started[me.counted].stage / replica_stages];
    const int q = a.action.stage / replica_stages;
    const auto& list = order[static_cast<std::size_t>(st.rank)][static_cast<std::size_t>(q)];
    return me.next[q] < list.size() && list[me.next[q]] == a.action;
  }
};

//! Forwards before the first backward of model stage `s` of D in one direction: 1F1B's
//! D − s − 1, less one on the earlier of a rank's two stages (2s + 1 < D) when D is even, so
//! that a rank holds at most D microbatches of the two directions together.
inline int chimera_warmup(int ranks, int s) {
  const int one_f_one_b = ranks - s - 1;
  return ranks % 2 == 0 && 2 * s + 1 < ranks ? one_f_one_b - 1 : one_f_one_b;
}

template <class Cost>
Schedule chimera_impl(Problem p, WGradMode wgrad, const Cost& cost) {
  constexpr const char* generator = "chimera";
  if (p.replicas == 1) p.replicas = 2;
  if (p.replicas != 2)
    throw invalid_problem(std::string(generator) + ": replicas = " + std::to_string(p.replicas) +
                          " is not accepted; Chimera runs exactly two pipelines in opposite "
                          "directions, so use replicas = 2 (or leave it at 1).");
  if (p.stages != 0 && p.stages != 2 * p.ranks)
    throw invalid_problem(std::string(generator) + ": stages = " + std::to_string(p.stages) +
                          " is not accepted; each rank holds one stage of each of the two "
                          "replicas, so use stages = " +
                          std::to_string(2 * p.ranks) + " (2 × ranks) or 0.");
  detail::check_problem(p, generator);
  detail::require_whole_sequences(p, generator);
  const int D = p.ranks;
  p.stages = 2 * D;
  ChimeraRule rule{.replica_stages = D, .order = {}, .progress = {}};
  rule.order.assign(static_cast<std::size_t>(D), std::vector<std::vector<Action>>(2));
  rule.progress.assign(static_cast<std::size_t>(D), {});
  for (int r = 0; r < D; ++r)
    for (int q = 0; q < 2; ++q) {
      const int s = q == 0 ? r : D - 1 - r;  // the model stage rank r holds in direction q
      std::vector<Action> forwards, backwards;
      for (int m = q; m < p.microbatches; m += 2) {
        forwards.push_back(Action::make(OpKind::F, q * D + s, m));
        backwards.push_back(Action::make(OpKind::B, q * D + s, m));
      }
      rule.order[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)] =
          merge_one_f_one_b(forwards, backwards, chimera_warmup(D, s), wgrad);
    }
  const ListProblem lp{
      .problem = p, .placement = Placement::v_shape(D, 2), .wgrad = wgrad, .name = generator};
  return list_schedule(lp, rule, cost);
}

}  // namespace detail

//! Chimera: rank r of D holds stage r of replica 0 (stages 0..D−1, the "down" pipeline) and
//! model stage D − 1 − r of replica 1 (stages D..2D−1; stage D + s on rank D − 1 − s, the "up"
//! pipeline) — the V-shape map, with Problem::replicas = 2 so that each microbatch runs through
//! one replica: the even microbatches down, the odd ones up (an odd count sends one more down).
//! The two replicas start from equal weights; their gradients are summed before the update.
//!
//! Each direction keeps 1F1B's order on each stage, with one warm-up forward less on a rank's
//! earlier stage when D is even (chimera_warmup), and a rank runs whichever direction's next
//! action is ready, backward first — planned by list scheduling under `cost`. With D (even)
//! microbatches, D/2 per direction, this is Chimera's basic unit: both pipelines fill from
//! their ends at once and the makespan is D(f + b) + (D − 2)·b — under the uniform cost
//! (f = 1, b = 2) 5D − 4 against 1F1B's 6D − 3, and D − 2 bubbles of one step each when f = b,
//! as the paper has it. Rank r then holds min(D − r, D/2) + min(r + 1, D/2) microbatches at its
//! peak: D/2 + 1 at both ends, D in the middle. More microbatches continue the two 1F1B
//! orders, which concatenates basic units: the next unit's forwards run in the previous one's
//! drain, no rank holds more than D microbatches (even D), and for M a multiple of D the
//! makespan stays M(f + b) + (D − 2)·b. Any microbatch count runs; odd D is accepted too (at
//! most D + 1 microbatches held). See docs/baselines.md.
//!
//! Needs `stages == 2 × ranks` (or 0), `replicas` 2 (or 1, which is taken as 2: the schedule
//! defines it), `slices == 1`; throws invalid_problem otherwise. `wgrad` Split runs each W
//! right after its I.
inline Schedule chimera(Problem p, WGradMode wgrad = WGradMode::Fused) {
  return detail::chimera_impl(p, wgrad, UniformCost{});
}

//! The same, planned under `cost` (the order the two directions interleave in depends on the
//! durations).
template <cost_model Cost>
Schedule chimera(Problem p, WGradMode wgrad, const Cost& cost) {
  return detail::chimera_impl(p, wgrad, cost);
}

}  // namespace pipesched::schedule
