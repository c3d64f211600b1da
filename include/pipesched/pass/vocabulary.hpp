// Vocabulary parallelism (Yeung, Qi, Lin, Wan, "Balancing Pipeline Parallelism with
// Vocabulary Parallelism", MLSys '25): the output layer — LM head, softmax and loss — is split
// by vocabulary into one shard per rank, and each microbatch's output layer runs as two passes
// on every rank instead of on the last stage: VOCAB_F (its shard's logits, their softmax
// statistics and its share of the input gradient) once the last stage's forward has broadcast
// its output, and VOCAB_B (its shard's weight gradient) once the statistics of every shard are
// reduced. The last stage's backward takes the reduced input gradient. The last stage is as
// light as the others, and each rank holds 1/p of the head's weights.
//
// add_vocabulary_passes puts the passes into any compute-only schedule of one replica. It
// simulates the schedule and orders every rank's list by (start time, topological order of
// the replay), where VOCAB_F(j, m, k) takes the end of the last stage's F(m, k) and the place
// right after it in the topological order, and VOCAB_B(j, m, k) that end plus the broadcast,
// the VOCAB_F and the reduction. The last stage's backward starts no earlier than its forward's
// end and comes after it in the topological order, so it follows every VOCAB_F of its
// microbatch; every dependency goes forward in this one order, so the result cannot deadlock.
//
// A rank reaches its VOCAB_F only when the action it is running ends, so a last stage whose
// backward follows its forward at once (1F1B's steady state) would wait, every microbatch, for
// the slowest rank to get there and for the reduction. The paper's schedules give the passes
// room by running the backwards later, holding one or two more microbatches on each device
// (p + 1 or p + 2 in flight on the first). The pass does the same with a lag: first every
// stage's backwards (and their weight gradients) move `lag` of its forwards later, as a
// warm-up `lag` forwards longer would, then the passes are placed; it tries lags 0, 1 and 2
// and keeps the shortest simulated step within the memory budget (the least memory where none
// fits).
//
// Under a cost model that splits the input embedding too (splits_input_vocabulary), every
// rank also gets an EMBED_F and an EMBED_B of its shard for every microbatch and slice. An
// EMBED_F needs only the tokens, and the first stage's forward needs every shard's: it is
// placed one first-stage forward ahead, at the start of the first stage's forward of the unit
// before (at the head of every list for the first unit), so a rank busy when that forward
// starts still has a whole forward's time to reach it. An EMBED_B takes the end of the first
// stage's backward of its unit plus the broadcast, and the place after it in the topological
// order. Both orders keep every dependency pointing forward, as above.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! How add_vocabulary_passes places the passes.
struct VocabularyOptions {
  //! Forwards each stage runs more before its backwards (a longer warm-up), giving the ranks
  //! time to reach their VOCAB_F and the reduction time to end before the last stage's
  //! backward (see the file comment): 0 keeps the schedule's order, -1 (the default) tries 0,
  //! 1 and 2.
  int lag = -1;
  //! The memory a lag may take the ranks to: the fastest placement within it is kept, the one
  //! holding the least where none is.
  MemoryBudget budget{};

  //! Throws invalid_problem naming the field out of range.
  void check() const {
    if (lag < -1 || lag > 64)
      throw invalid_problem(field("VocabularyOptions.lag", lag) +
                            " is out of range; give -1 (try 0, 1 and 2) or 0 to 64 forwards.");
  }
};

namespace detail {

// `s` with every stage's backwards (B or I, and the W parts after it) moved `lag` of the
// stage's forwards later in its rank's list, where that many forwards of the stage follow: each
// stage holds `lag` more microbatches, as a warm-up `lag` forwards longer does (1F1B's
// p - s - 1 + lag). A backward with fewer forwards of its stage after it follows the held
// backwards of its stage (or stays where it was, where none is held): backwards keep their
// order.
inline Schedule defer_backwards(const Schedule& s, int lag) {
  if (lag <= 0) return s;
  const Problem& p = s.problem;
  Schedule out = s;
  for (int r = 0; r < s.rank_count(); ++r) {
    const auto& list = s.ranks[static_cast<std::size_t>(r)];
    auto& dst = out.ranks[static_cast<std::size_t>(r)];
    dst.clear();
    // Forwards of each stage seen so far and left after the current point.
    std::vector<int> seen(static_cast<std::size_t>(p.stages), 0), left(seen);
    for (const Action& a : list)
      if (a.kind == OpKind::F && a.stage >= 0 && a.stage < p.stages)
        ++left[static_cast<std::size_t>(a.stage)];
    struct Held {
      int stage, release;  // emitted once `release` forwards of `stage` have been
      Action backward;
      std::vector<Action> weights;
    };
    std::vector<Held> held;
    auto inside = [&](const Action& a) { return a.stage >= 0 && a.stage < p.stages; };
    for (const Action& a : list) {
      if (is_input_backward(a.kind) && inside(a)) {
        const auto st = static_cast<std::size_t>(a.stage);
        if (left[st] >= lag) {
          held.push_back({a.stage, seen[st] + lag, a, {}});
          continue;
        }
        // Too few forwards left to hold it: it follows the held backwards of its stage.
        auto last = std::find_if(held.rbegin(), held.rend(),
                                 [&](const Held& h) { return h.stage == a.stage; });
        if (last != held.rend()) {
          held.push_back({a.stage, last->release, a, {}});
          continue;
        }
      }
      if (a.kind == OpKind::W && inside(a)) {
        auto it = std::find_if(held.begin(), held.end(), [&](const Held& h) {
          return h.backward.stage == a.stage && h.backward.microbatch == a.microbatch &&
                 h.backward.slice == a.slice;
        });
        if (it != held.end()) {
          it->weights.push_back(a);
          continue;
        }
      }
      dst.push_back(a);
      if (a.kind != OpKind::F || !inside(a)) continue;
      const auto st = static_cast<std::size_t>(a.stage);
      ++seen[st];
      --left[st];
      for (auto it = held.begin(); it != held.end();) {
        if (it->stage == a.stage && it->release <= seen[st]) {
          dst.push_back(it->backward);
          dst.insert(dst.end(), it->weights.begin(), it->weights.end());
          it = held.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Held& h : held) {  // not reached: where the list ends
      dst.push_back(h.backward);
      dst.insert(dst.end(), h.weights.begin(), h.weights.end());
    }
  }
  return out;
}

// The passes placed into `s` by its simulated times (the file comment), or nothing where `s`
// cannot run to its end. With `eager`, a rank whose action running when the last stage's output
// arrives has run for less than it has left runs its VOCAB_F before that action instead (the
// action waits a little, the last stage's backward much less).
template <cost_model Cost>
std::optional<Schedule> place_vocabulary_passes(const Schedule& s, const Cost& cost, bool eager) {
  const Problem& p = s.problem;
  const detail::DependencyGraph g(s);
  if (!g.issues().empty()) return std::nullopt;
  detail::SimRecorder<Cost> rec(s, g, cost);
  std::vector<double> order(static_cast<std::size_t>(g.size()), 0.0);
  int next = 0;
  const detail::ReplayResult rr = detail::replay(g, [&](int id) {
    order[static_cast<std::size_t>(id)] = next++;
    const double start = rec.ready_time(id);
    const double d = rec.duration(g.action(id));
    rec.record(id, start, start + d, d);
  });
  const SimulationResult sim = rec.finish(rr);
  if (sim.deadlock) return std::nullopt;

  struct Item {
    double time, tie;
    Action action;
  };
  std::vector<std::vector<Item>> items(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r) {
    const auto& list = s.ranks[static_cast<std::size_t>(r)];
    double time = -1, tie = -1;  // an idle slot keeps the place after the action before it
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].kind != OpKind::Idle) {
        const int id = g.index(r, static_cast<int>(i));
        time = sim.timing[static_cast<std::size_t>(r)][i].start;
        tie = order[static_cast<std::size_t>(id)];
      }
      items[static_cast<std::size_t>(r)].push_back({time, tie, list[i]});
    }
  }

  // The position of the action rank j runs at time `t` as simulated, or -1 where it runs none.
  auto running = [&](int j, double t) -> std::ptrdiff_t {
    const auto& timing = sim.timing[static_cast<std::size_t>(j)];
    // Start times do not decrease along a list, and actions do not overlap: the one running
    // at `t` is the last to start by then, but for idle slots (no length) after it.
    auto it = std::upper_bound(timing.begin(), timing.end(), t,
                               [](double x, const ActionTiming& a) { return x < a.start; });
    while (it != timing.begin()) {
      --it;
      if (it->end > it->start) return t < it->end ? it - timing.begin() : -1;
    }
    return -1;
  };
  std::vector<std::vector<Item>> vocab(static_cast<std::size_t>(p.ranks));
  const CostContext ctx{p, s.placement, 1};
  const int last = p.stages - 1;
  for (int m = 0; m < p.microbatches; ++m) {
    for (int k = 0; k < p.slices; ++k) {
      const int f = g.forward_of(last, m, k);
      if (f == detail::DependencyGraph::none) return std::nullopt;
      const detail::ActionRef& at = g.ref(f);
      const double end =
          sim.timing[static_cast<std::size_t>(at.rank)][static_cast<std::size_t>(at.position)].end;
      const double tie = order[static_cast<std::size_t>(f)];
      // Each rank runs its VOCAB_F once the broadcast is in and the action it is running has
      // ended (or, eager, before that action where it has run for less than it has left); the
      // reduction, likely done then, follows the last of them.
      double reduced = 0;
      std::vector<Item> forwards;
      for (int j = 0; j < p.ranks; ++j) {
        const Action vf = Action::make(OpKind::VocabF, j, m, k);
        const double in = end + static_cast<double>(cost.vocabulary_transfer_seconds(ctx, vf));
        const std::ptrdiff_t x = running(j, in);
        double from = in;
        Item item{end, tie + 0.25, vf};
        if (x >= 0) {
          const auto at_x = static_cast<std::size_t>(x);
          const ActionTiming& t = sim.timing[static_cast<std::size_t>(j)][at_x];
          const int id = g.index(j, static_cast<int>(x));
          if (eager && in - t.start < t.end - in && id >= 0)
            item = {t.start, order[static_cast<std::size_t>(id)] - 0.25, vf};
          else
            from = t.end;
        }
        forwards.push_back(item);
        reduced = std::max(reduced, from + static_cast<double>(cost.vocabulary_seconds(ctx, vf)));
      }
      reduced += static_cast<double>(
          cost.vocabulary_transfer_seconds(ctx, Action::make(OpKind::VocabB, 0, m, k)));
      for (int j = 0; j < p.ranks; ++j) {
        auto& list = vocab[static_cast<std::size_t>(j)];
        list.push_back(forwards[static_cast<std::size_t>(j)]);
        list.push_back({reduced, tie + 0.5, Action::make(OpKind::VocabB, j, m, k)});
      }
    }
  }
  if (splits_input_vocabulary(cost)) {
    // The first stage's forwards in the order they run; each unit's EMBED_Fs at the start of
    // the one before (the first unit's at the head of every list).
    std::vector<int> firsts;
    for (int m = 0; m < p.microbatches; ++m)
      for (int k = 0; k < p.slices; ++k) {
        const int f = g.forward_of(0, m, k);
        const int bi = g.input_backward_of(0, m, k);
        if (f == detail::DependencyGraph::none || bi == detail::DependencyGraph::none)
          return std::nullopt;
        firsts.push_back(f);
      }
    auto start_of = [&](int id) {
      const detail::ActionRef& at = g.ref(id);
      return sim.timing[static_cast<std::size_t>(at.rank)][static_cast<std::size_t>(at.position)]
          .start;
    };
    std::stable_sort(firsts.begin(), firsts.end(), [&](int x, int y) {
      const double sx = start_of(x), sy = start_of(y);
      return sx < sy ||
             (sx == sy && order[static_cast<std::size_t>(x)] < order[static_cast<std::size_t>(y)]);
    });
    for (std::size_t n = 0; n < firsts.size(); ++n) {
      const Action& f = g.action(firsts[n]);
      const int m = f.microbatch, k = f.slice;
      Item at{-2.0, -2.0 + 1e-6 * static_cast<double>(n), Action{}};
      if (n > 0) {
        const int before = firsts[n - 1];
        at.time = start_of(before);
        at.tie = order[static_cast<std::size_t>(before)] - 0.25;
      }
      const int bi = g.input_backward_of(0, m, k);
      const detail::ActionRef& bref = g.ref(bi);
      const double back =
          sim.timing[static_cast<std::size_t>(bref.rank)][static_cast<std::size_t>(bref.position)]
              .end;
      for (int j = 0; j < p.ranks; ++j) {
        auto& list = vocab[static_cast<std::size_t>(j)];
        list.push_back({at.time, at.tie, Action::make(OpKind::EmbedF, j, m, k)});
        const Action eb = Action::make(OpKind::EmbedB, j, m, k);
        list.push_back({back + static_cast<double>(cost.vocabulary_transfer_seconds(ctx, eb)),
                        order[static_cast<std::size_t>(bi)] + 0.5, eb});
      }
    }
  }

  Schedule out = s;
  for (int r = 0; r < p.ranks; ++r) {
    auto& list = items[static_cast<std::size_t>(r)];
    list.insert(list.end(), vocab[static_cast<std::size_t>(r)].begin(),
                vocab[static_cast<std::size_t>(r)].end());
    std::stable_sort(list.begin(), list.end(), [](const Item& a, const Item& b) {
      return a.time < b.time || (a.time == b.time && a.tie < b.tie);
    });
    auto& dst = out.ranks[static_cast<std::size_t>(r)];
    dst.clear();
    dst.reserve(list.size());
    for (const Item& it : list)
      dst.push_back(it.action);
  }
  return out;
}

}  // namespace detail

//! `s` with a VOCAB_F and a VOCAB_B of every rank's vocabulary shard for every microbatch and
//! slice (and, under a cost that splits the input embedding too, an EMBED_F and an EMBED_B),
//! placed by the simulated times of `s` under `cost` after its backwards were moved
//! `options.lag` forwards later (see the file comment; by default the fastest of
//! lags 0, 1 and 2 within `options.budget`). `cost` prices the passes (has_vocabulary_cost; a
//! CostRef must refer to such a model). `s` must be compute-only (add the passes before
//! lowering communication), valid, of one replica, without vocabulary passes already and over
//! at most max_vocabulary_ranks ranks; else invalid_problem says which. The name gains
//! "+vocab".
template <cost_model Cost>
requires has_vocabulary_cost<Cost> Schedule
add_vocabulary_passes(const Schedule& s, const Cost& cost, const VocabularyOptions& options = {}) {
  options.check();
  const Problem& p = s.problem;
  auto refuse = [&](const std::string& why) {
    throw invalid_problem("add_vocabulary_passes: schedule '" + s.name + "' " + why);
  };
  if (s.has_vocabulary())
    refuse("already has vocabulary passes (VOCAB_F, VOCAB_B); add them once.");
  if (p.replicas != 1)
    refuse("pipelines " + std::to_string(p.replicas) +
           " model replicas; vocabulary parallelism splits the output layer of one pipeline over "
           "its ranks, so use a schedule of one replica.");
  if (s.has_comm())
    refuse(
        "has communication actions; add the vocabulary passes to the compute-only schedule, "
        "then lower it.");
  if (p.ranks > max_vocabulary_ranks)
    refuse("has " + std::to_string(p.ranks) + " ranks; vocabulary parallelism is supported up to " +
           std::to_string(max_vocabulary_ranks) + ".");
  if constexpr (requires { cost.prices_vocabulary(); }) {
    if (!cost.prices_vocabulary())
      refuse(
          "cannot get vocabulary passes under a cost model that does not price them; use one "
          "with vocabulary_seconds, vocabulary_bytes and vocabulary_transfer_seconds.");
  }
  if (const ValidationReport rep = check(s); !rep.ok())
    refuse("is not valid, so its passes have no place: " + rep.message(s.name));

  std::optional<Schedule> best;
  double best_step = 0, best_over = 0;
  const int first = options.lag < 0 ? 0 : options.lag, stop = options.lag < 0 ? 2 : options.lag;
  for (int lag = first; lag <= stop; ++lag) {
    const Schedule deferred = detail::defer_backwards(s, lag);
    if (lag > 0 && !check(deferred).ok()) continue;
    for (bool eager : {false, true}) {
      std::optional<Schedule> placed = detail::place_vocabulary_passes(deferred, cost, eager);
      if (!placed || !check(*placed).ok()) continue;
      const SimulationResult r = simulate(*placed, cost);
      if (r.deadlock) continue;
      double over = 0;  // how far the most crowded rank is over its budget
      for (int i = 0; i < p.ranks; ++i)
        over =
            std::max(over, r.ranks[static_cast<std::size_t>(i)].peak_memory - options.budget.of(i));
      const bool better = !best || (over <= 0 && best_over > 0) ||
                          (over <= 0 && best_over <= 0 && r.makespan < best_step) ||
                          (over > 0 && best_over > 0 && over < best_over);
      if (better) {
        best = std::move(placed);
        best_step = r.makespan;
        best_over = over;
      }
    }
  }
  if (!best && options.lag > 0)
    refuse("cannot hold " + std::to_string(options.lag) +
           " more microbatches per stage (its backwards moved that many forwards later) without "
           "a deadlock; give a smaller lag, or -1 to try 0, 1 and 2.");
  if (!best)
    throw invalid_schedule(
        "add_vocabulary_passes: internal error, no placement of the passes of "
        "schedule '" +
        s.name + "' validates.");
  best->name = s.name + "+vocab";
  return *best;
}

}  // namespace pipesched
