// Time-and-memory simulation of a schedule under a cost model.
//
// Each rank runs its list in order. An action starts at max(the rank is free, every
// dependency has finished, plus the transfer time when the dependency is on another rank).
// In a schedule with communication a receive is posted where it stands and takes no wait;
// its consumer starts once the data has arrived (the send's end plus the transfer time), as
// PyTorch's runtime and pipesched's MPI transport run it. A WAIT_SEND ends once its send has
// been delivered (the send's end plus the transfer time) and the peer has posted the receive.
// A REDUCE_GRAD starts its stage's data-parallel gradient reduction as a transfer on the rank's
// data-parallel link: from when the rank reaches it (or the link frees: a rank's reductions
// share one link and run one after another) for the cost's `reduce_seconds(ctx, rank, stage)`
// (0 for a cost without the hook), without occupying the rank, like a send. Its
// WAIT_REDUCE_GRAD starts no earlier than that transfer's end, and the rank ends no earlier
// either, so a reduction overlaps whatever the rank runs between the two and only what
// outlasts the list lengthens the step.
// A cost model with a `step_tail(ctx, rank)` (TransformerCost: the optimizer step and, when the
// schedule holds no REDUCE_GRAD, the gradient all-reduce over data-parallel replicas) adds that
// time after each rank's last action, so the makespan is the step time.
// An OFFLOAD's copy of its unit's activations to host memory starts when the unit's forward
// ends, on the rank's host link to host memory (once that is free: a rank's copies in one
// direction run one after another) for the cost's `host_copy_seconds(ctx, a)` (0 for a cost
// without the hook); the OFFLOAD itself starts once that copy has ended (the rank waits for it
// there) and frees the activations. A RELOAD takes the memory again where it stands and starts
// the copy back on the link from host memory, without occupying the rank; the unit's backward
// starts no earlier than that copy's end.
// A VOCAB_F (vocabulary parallelism) starts once the last stage's forward of its microbatch
// and slice has ended and its output reached the shard's rank (the cost's
// `vocabulary_transfer_seconds` of the VOCAB_F: the broadcast); the reduction of a
// microbatch's vocabulary passes ends `vocabulary_transfer_seconds` of a VOCAB_B after the
// last of its VOCAB_Fs on any rank, and every VOCAB_B and the last stage's backward of that
// microbatch and slice start no earlier. With the input embedding split, the first stage's
// forward starts `vocabulary_transfer_seconds` of an EMBED_F (the reduction of the shards'
// lookups) after the last of its unit's EMBED_Fs, and an EMBED_B `vocabulary_transfer_seconds`
// of it (the broadcast of the first stage's input gradient) after the first stage's backward.
// Only the passes occupy their ranks; the broadcasts and the reductions run beside them.
// Makespan is the last end; bubble ratio = 1 − Σ busy / (ranks × makespan). Memory: the running sum
// of memory deltas along each rank's list (a forward's activations count from its start, a backward
// frees at its end); the per-rank peak is its maximum.
#pragma once

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! When an action ran in the simulation.
struct ActionTiming {
  double start = 0;  //!< when it started
  double end = 0;    //!< when it ended
};

//! One point of a rank's memory curve: from `time` on, the rank holds `value`.
struct MemoryPoint {
  double time = 0;   //!< when the held memory changed
  double value = 0;  //!< what the rank holds from then on
};

//! Per-rank figures.
struct RankSummary {
  double busy = 0;         //!< time spent computing (and in the rank's share of transfers)
  double idle = 0;         //!< makespan − busy
  double peak_memory = 0;  //!< largest held memory along the list
  //! Largest memory held in host memory for the rank along the list (offloaded activations,
  //! from each OFFLOAD to its RELOAD); not part of peak_memory.
  double peak_host_memory = 0;
  //! Time the rank's host link spent copying activations, both directions together.
  double host_copy_seconds = 0;
  //! When the rank's last action (or its last gradient reduction) ends, its step tail included.
  double end = 0;
  std::vector<MemoryPoint> memory;  //!< the memory curve, in time order
};

//! What `simulate` computes.
struct SimulationResult {
  bool deadlock = false;        //!< true when some rank could not finish its list
  std::string deadlock_report;  //!< which rank waits for what, when deadlock
  double makespan = 0;          //!< when the last rank ends (its step tail included)
  //! The idle share of ranks × makespan: 1 − Σ busy / (ranks · makespan).
  double bubble_ratio = 0;
  double peak_memory_max = 0;       //!< max over ranks of peak_memory
  double peak_host_memory_max = 0;  //!< max over ranks of peak_host_memory
  std::vector<RankSummary> ranks;   //!< each rank's figures, by rank
  //! timing[r][i] for the action at rank r, position i (idle slots: start = end).
  std::vector<std::vector<ActionTiming>> timing;
};

namespace detail {

inline bool is_checkpointed(const DependencyGraph& g, const Action& a) {
  return g.recompute_of(a.stage, a.microbatch, a.slice) != DependencyGraph::none;
}

inline bool is_offloaded(const DependencyGraph& g, const Action& a) {
  return g.offload_of(a.stage, a.microbatch, a.slice) != DependencyGraph::none;
}

}  // namespace detail

namespace detail {

//! What a simulation of `s` under `cost` records as its actions run, whatever decides when
//! they run (every rank on a processor of its own, or ranks sharing compute units): each
//! action's earliest start given its rank and dependencies, its end, the rank's memory curve
//! and summary, the gradient reductions on the ranks' data-parallel links, and the result.
template <cost_model Cost>
class SimRecorder {
 public:
  //! A recorder of `s` (whose graph is `g`) under `cost`. Throws invalid_schedule if `s`
  //! breaks a structural rule the simulation cannot proceed without.
  SimRecorder(const Schedule& s, const DependencyGraph& g, const Cost& cost)
      : s_(s),
        g_(g),
        cost_(cost),
        ctx_(context(s)),
        end_(g.size(), 0.0),
        copy_end_(g.size(), -1.0) {
    if (!g.issues().empty())
      throw invalid_schedule("cannot simulate schedule '" + s.name +
                             "': " + g.issues().front().message);
    if (g.vocabulary()) check_vocabulary_cost();
    const int nranks = s.rank_count();
    res_.ranks.assign(nranks, {});
    res_.timing.resize(nranks);
    for (int r = 0; r < nranks; ++r)
      res_.timing[r].assign(s.ranks[r].size(), {});
    free_at_.assign(nranks, 0.0);
    held_.assign(nranks, 0.0);
    last_pos_.assign(nranks, -1);
    link_free_.assign(nranks, 0.0);
    to_host_free_.assign(nranks, 0.0);
    from_host_free_.assign(nranks, 0.0);
    host_held_.assign(nranks, 0.0);
    reduced_at_.assign(static_cast<std::size_t>(std::max(s.problem.stages, 0)), 0.0);
  }

  //! The rank time `a` takes under the cost model (an Overlap both halves; an idle slot none).
  double duration(const Action& a) const {
    if (a.kind == OpKind::Overlap)
      return static_cast<double>(cost_.duration(ctx_, a.forward_half())) +
             static_cast<double>(cost_.duration(ctx_, a.backward_half()));
    if (a.kind == OpKind::Idle) return 0.0;
    if (is_vocabulary(a.kind)) {
      if constexpr (has_vocabulary_cost<Cost>)
        return static_cast<double>(cost_.vocabulary_seconds(ctx_, a));
      else
        return 0.0;  // refused in the constructor
    }
    return cost_.duration(ctx_, a);
  }

  //! The earliest start of action `id` once every dependency has ended: its rank is free,
  //! each dependency has ended (plus the transfer when it is on another rank, or when it is
  //! the send a WAIT_SEND completes), and a WAIT_REDUCE_GRAD's reduction has ended.
  double ready_time(int id) {
    const ActionRef& ref = g_.ref(id);
    const Action& a = g_.action(id);
    const int r = ref.rank;
    double start = free_at_[r];
    for (int d : g_.deps(id)) {
      const ActionRef& dref = g_.ref(d);
      double ready = end_[d];
      const Action& da = g_.action(d);
      if (da.kind == OpKind::EmbedF) {
        ready += vocabulary_transfer(da);  // the shards' lookups, reduced into the input
      } else if (a.kind == OpKind::EmbedB) {
        ready += vocabulary_transfer(a);  // the first stage's input gradient, broadcast
      } else if (da.kind == OpKind::VocabF && a.kind != OpKind::VocabF) {
        // The reduction of the microbatch's vocabulary passes, after the last VOCAB_F.
        ready +=
            vocabulary_transfer(Action::make(OpKind::VocabB, da.stage, da.microbatch, da.slice));
      } else if (a.kind == OpKind::VocabF) {
        ready += vocabulary_transfer(a);  // the last stage's output, broadcast to the shard
      } else if (is_wait_send(a.kind)) {
        // Delivered: the send's end plus the transfer; the peer's receive only needs posting.
        if (dref.rank == r) ready += cost_.transfer_time(ctx_, g_.action(d));
      } else if (dref.rank != r) {
        ready += cost_.transfer_time(ctx_, g_.action(d));
      }
      start = std::max(start, ready);
    }
    if (a.kind == OpKind::WaitReduceGrad && a.stage >= 0)
      start = std::max(start, reduction_end(a.stage));
    if (a.kind == OpKind::Offload) start = std::max(start, offload_copy_end(id));
    return start;
  }

  //! Records that action `id` ran on its rank from `start` to `end`, occupying it for `busy`
  //! (its duration alone; the wall time it took when it shared a processor).
  void record(int id, double start, double end, double busy) {
    const ActionRef& ref = g_.ref(id);
    const Action& a = g_.action(id);
    const int r = ref.rank;
    end_[id] = end;
    if (a.kind == OpKind::ReduceGrad && a.stage >= 0) {
      // On the link, not the rank: from when it is reached or the link frees.
      link_free_[r] = std::max(start, link_free_[r]) + reduce_seconds_of(cost_, ctx_, r, a.stage);
      reduction_end(a.stage) = link_free_[r];
    }
    free_at_[r] = end;
    if (a.kind == OpKind::Reload) {
      // On the link from host memory, once the offload's copy is in and the link is free; the
      // backward waits for its end (end_), the rank does not.
      const int off = g_.offload_of(a.stage, a.microbatch, a.slice);
      const double copy = host_copy_seconds_of(cost_, ctx_, a);
      const double from = std::max({start, from_host_free_[r], off >= 0 ? end_[off] : 0.0});
      from_host_free_[r] = from + copy;
      end_[id] = copy_end_[id] = from + copy;
      res_.ranks[r].host_copy_seconds += copy;
    }
    // Idle slots between the previous action and this one take no time.
    for (int p = last_pos_[r] + 1; p < ref.position; ++p)
      res_.timing[r][p] = {start, start};
    last_pos_[r] = ref.position;
    res_.timing[r][ref.position] = {start, end};
    RankSummary& rs = res_.ranks[r];
    rs.busy += busy;  // transfers count with their share on the rank (0 in the built-in models)
    const MemoryEffect mem =
        memory_effect(cost_, ctx_, a, [&](const Action& x) { return is_checkpointed(g_, x); });
    if (mem.grow != 0) {
      held_[r] += mem.grow;
      rs.memory.push_back({start, held_[r]});
      rs.peak_memory = std::max(rs.peak_memory, held_[r]);
    }
    if (mem.shrink != 0) {
      held_[r] += mem.shrink;
      rs.memory.push_back({end, held_[r]});
    }
    if (a.kind == OpKind::Offload) {
      host_held_[r] -= mem.shrink;
      rs.peak_host_memory = std::max(rs.peak_host_memory, host_held_[r]);
    } else if (a.kind == OpKind::Reload) {
      host_held_[r] -= mem.grow;
    }
    rs.end = std::max({rs.end, end, link_free_[r]});  // reduced gradients end the step
  }

  //! The result, once every rank ran what it could (`rr` says where each stopped).
  SimulationResult finish(const ReplayResult& rr) {
    SimulationResult res = std::move(res_);
    const int nranks = s_.rank_count();
    if (!rr.complete) {
      res.deadlock = true;
      res.deadlock_report = describe_deadlock(g_, rr);
    }
    if constexpr (has_step_tail<Cost>) {
      if (rr.complete)
        for (int r = 0; r < nranks; ++r)
          res.ranks[r].end += static_cast<double>(cost_.step_tail(ctx_, r));
    }
    double busy = 0;
    for (int r = 0; r < nranks; ++r) {
      res.makespan = std::max(res.makespan, res.ranks[r].end);
      busy += res.ranks[r].busy;
      for (int p = last_pos_[r] + 1; p < static_cast<int>(s_.ranks[r].size()); ++p)
        res.timing[r][p] = {free_at_[r], free_at_[r]};
    }
    for (int r = 0; r < nranks; ++r) {
      res.ranks[r].idle = res.makespan - res.ranks[r].busy;
      res.peak_memory_max = std::max(res.peak_memory_max, res.ranks[r].peak_memory);
      res.peak_host_memory_max = std::max(res.peak_host_memory_max, res.ranks[r].peak_host_memory);
    }
    res.bubble_ratio = res.makespan > 0 ? 1.0 - busy / (nranks * res.makespan) : 0.0;
    return res;
  }

 private:
  static CostContext context(const Schedule& s) {
    int parts = 1;  // the largest part index + 1 (a part of INT_MAX counts as INT_MAX parts)
    for (const auto& list : s.ranks)
      for (const Action& a : list)
        if (a.kind == OpKind::W && a.part >= parts)
          parts = a.part == INT_MAX ? INT_MAX : a.part + 1;
    return CostContext{s.problem, s.placement, parts, s.has_gradient_reduction()};
  }

  // The cost's vocabulary_transfer_seconds of `a` (refused in the constructor without it).
  double vocabulary_transfer(const Action& a) const {
    if constexpr (has_vocabulary_cost<Cost>)
      return static_cast<double>(cost_.vocabulary_transfer_seconds(ctx_, a));
    else
      return 0.0;
  }

  // Throws invalid_schedule when the cost cannot price the schedule's vocabulary passes, or
  // keeps the output layer on the last stage (so the schedule would compute it twice).
  void check_vocabulary_cost() const {
    auto refuse = [&](const std::string& why) {
      throw invalid_schedule("cannot simulate schedule '" + s_.name +
                             "': it has vocabulary passes (VOCAB_F, VOCAB_B), but " + why);
    };
    bool prices = has_vocabulary_cost<Cost>;
    if constexpr (requires { cost_.prices_vocabulary(); }) prices = cost_.prices_vocabulary();
    if (!prices)
      refuse(
          "the cost model does not price them; use one with vocabulary_seconds, "
          "vocabulary_bytes and vocabulary_transfer_seconds (UniformCost, ProfiledCost with "
          "vocabulary figures, or TransformerCost with Parallelism::vocabulary).");
    if constexpr (requires { cost_.vocabulary_parallel(); }) {
      if (!cost_.vocabulary_parallel())
        refuse(
            "the cost model keeps the output layer on the last stage, which would compute it "
            "twice; split it by vocabulary in the cost too (TransformerCost: "
            "Parallelism::vocabulary = true, --vocab-parallel).");
    }
    if (s_.has_input_vocabulary() != splits_input_vocabulary(cost_))
      refuse(s_.has_input_vocabulary()
                 ? "its input embedding passes (EMBED_F, EMBED_B) are not priced: the cost model "
                   "keeps the embedding on the first stage; split it in the cost too "
                   "(TransformerCost: Parallelism::input_vocabulary; UniformCost and "
                   "ProfiledCost: input_vocabulary; --vocab-parallel)."
                 : "the cost model splits the input embedding by vocabulary, and the schedule "
                   "has no EMBED_F and EMBED_B to run it; add the passes with the same cost "
                   "(add_vocabulary_passes).");
  }

  // When the copy of OFFLOAD `id`'s activations to host memory ends: from its forward's end, or
  // once the rank's link to host memory frees (computed once, when first asked: the OFFLOAD's
  // dependencies, its forward included, have ended by then).
  double offload_copy_end(int id) {
    double& end = copy_end_[static_cast<std::size_t>(id)];
    if (end >= 0) return end;
    const Action& a = g_.action(id);
    const int r = g_.ref(id).rank;
    const int f = g_.forward_of(a.stage, a.microbatch, a.slice);
    const double copy = host_copy_seconds_of(cost_, ctx_, a);
    const double from = std::max(to_host_free_[r], f >= 0 ? end_[f] : 0.0);
    to_host_free_[r] = end = from + copy;
    res_.ranks[r].host_copy_seconds += copy;
    return end;
  }

  double& reduction_end(int stage) {
    if (stage >= static_cast<int>(reduced_at_.size()))
      reduced_at_.resize(static_cast<std::size_t>(stage) + 1, 0.0);
    return reduced_at_[static_cast<std::size_t>(stage)];
  }

  const Schedule& s_;
  const DependencyGraph& g_;
  const Cost& cost_;
  CostContext ctx_;
  SimulationResult res_;
  std::vector<double> end_;             // each action's end, by flat index
  std::vector<double> free_at_;         // when each rank's last action ended
  std::vector<double> held_;            // each rank's held memory
  std::vector<int> last_pos_;           // each rank's last recorded position, to time idle slots
  std::vector<double> link_free_;       // when each rank's data-parallel link frees
  std::vector<double> copy_end_;        // an OFFLOAD's or RELOAD's host copy's end, by flat index
  std::vector<double> to_host_free_;    // when each rank's link to host memory frees
  std::vector<double> from_host_free_;  // when each rank's link from host memory frees
  std::vector<double> host_held_;       // each rank's activations in host memory
  std::vector<double> reduced_at_;      // when each stage's gradient reduction ends
};

}  // namespace detail

//! Simulates `s` under `cost`. Throws invalid_schedule if `s` breaks a structural rule
//! the simulation cannot proceed without (a dependency later on the same rank, a missing
//! receive); a deadlock is reported in the result, not thrown. Linear in actions.
template <cost_model Cost>
SimulationResult simulate(const Schedule& s, const Cost& cost) {
  const detail::DependencyGraph g(s);
  detail::SimRecorder<Cost> rec(s, g, cost);
  const detail::ReplayResult rr = detail::replay(g, [&](int id) {
    const double start = rec.ready_time(id);
    const double dur = rec.duration(g.action(id));
    rec.record(id, start, start + dur, dur);
  });
  return rec.finish(rr);
}

//! Simulates under UniformCost defaults (f = 1, b = 2, w = 1, r = 1, comm = 0), the input
//! embedding split where the schedule has its passes (EMBED_F, EMBED_B).
inline SimulationResult simulate(const Schedule& s) {
  UniformCost cost;
  cost.input_vocabulary = s.has_input_vocabulary();
  return simulate(s, cost);
}

}  // namespace pipesched
