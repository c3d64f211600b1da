// The tuner's shared state while it searches, and its report: the best plan of each (base,
// checkpoint mode) pair and overall, the candidates settled (kept, refused, over budget,
// pruned), the notes, and the progress calls, all under one mutex; finish() turns them into
// the tuning::Result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/detail/plans.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::detail {

//! What became of a settled candidate (tuning::Result's counters).
enum class Settled { Kept, Refused, OverBudget, Pruned };

//! Every member function may be called from any search thread; each takes the one mutex, so
//! the progress calls never overlap and each sees the counts and the best plan of one moment.
class Scoreboard {
 public:
  //! The slots of `space`'s pairs, empty; `total` candidates in the search.
  //! `limit` evaluated candidates kept (tuning::Request::evaluated_limit).
  Scoreboard(const SearchSpace& space, int threads, int total, const tuning::ProgressFn& progress,
             int limit = 0)
      : space_(space),
        progress_(progress),
        best_full_(space.bases.size()),
        limit_(static_cast<std::size_t>(std::max(limit, 0))) {
    result_.threads = threads;
    for (const GeneratorInfo* g : space.bases) {
      for (CheckpointMode m : space.pair_modes)
        result_.baselines.push_back(tuning::Baseline{std::string(g->name), m, std::nullopt});
      for (const CheckpointInfo* c : space.policies)
        result_.baselines.push_back(tuning::Baseline{std::string(g->name), CheckpointMode::None,
                                                     std::nullopt, std::string(c->name)});
    }
    result_.candidates_total = total;
  }
  Scoreboard(const Scoreboard&) = delete;
  Scoreboard& operator=(const Scoreboard&) = delete;

  //! Counts `n` candidates as settled with `outcome`, each with a progress call.
  void settle(int n, Settled outcome) {
    std::lock_guard<std::mutex> lock(mutex_);
    settle_locked(n, outcome);
  }

  //! Counts `n` candidates of the configuration at grid position `index` as refused for
  //! `reason` (a note naming `configuration`).
  void refuse(std::size_t index, const std::string& configuration, const Message& reason, int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    note_locked(configuration, reason, index);
    settle_locked(n, Settled::Refused);
  }

  //! The step time a candidate of (g, m) must beat to be kept for its pair; infinity while
  //! none is kept.
  double rival(const GeneratorInfo* g, CheckpointMode m) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::optional<tuning::Plan>& slot = slot_of(g, m);
    return slot ? slot->makespan : std::numeric_limits<double>::infinity();
  }
  //! The same for the pair of (g, the program's own policy `j`).
  double rival_of_policy(const GeneratorInfo* g, std::size_t j) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::optional<tuning::Plan>& slot = result_.baselines[space_.pair_of_policy(g, j)].plan;
    return slot ? slot->makespan : std::numeric_limits<double>::infinity();
  }

  //! Offers plan `p` of base `g` to its pair's slot and to the overall bests (full checkpointing
  //! as the fallback only to its own slot), and counts it settled.
  void keep(tuning::Plan&& p, const GeneratorInfo* g) {
    std::lock_guard<std::mutex> lock(mutex_);
    record_locked(point_of(p));
    if (!p.checkpoint_policy.empty()) {  // a program's own policy: its pair and the best only
      keep_better(
          result_.baselines[space_.pair_of_policy(g, space_.policy_index(p.checkpoint_policy))]
              .plan,
          p);
      keep_better(result_.best, p);
      settle_locked(1, Settled::Kept);
      return;
    }
    keep_better(slot_of(g, p.checkpoint), p);
    if (!(p.checkpoint == CheckpointMode::Full && space_.fallback_full)) {
      keep_better(result_.best, p);
      if (p.checkpoint == CheckpointMode::None) keep_better(result_.best_without_checkpoint, p);
      if (is_selective(p.checkpoint) || is_full(p.checkpoint))
        keep_better(result_.best_conventional, p);
      if (p.checkpoint == CheckpointMode::Mario) keep_better(result_.best_mario, p);
    }
    settle_locked(1, Settled::Kept);
  }

  //! `n` more candidates in the search (the layout phase's configurations).
  void add_candidates(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    result_.candidates_total += n;
  }

  //! A kept plan's configuration (grid position), checkpoint mode and step.
  struct Kept {
    std::size_t order = 0;
    CheckpointMode mode = CheckpointMode::None;
    double makespan = 0;
  };
  //! The configurations of up to `k` of the best plans kept, best first, one per
  //! configuration; plans of a program's own policy left out.
  std::vector<Kept> best_configurations(int k) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const tuning::Plan*> plans;
    for (const tuning::Baseline& b : result_.baselines)
      if (b.plan && b.plan->checkpoint_policy.empty()) plans.push_back(&*b.plan);
    std::stable_sort(plans.begin(), plans.end(), [](const tuning::Plan* a, const tuning::Plan* b) {
      return better_plan(*a, *b);
    });
    std::vector<Kept> out;
    for (const tuning::Plan* p : plans) {
      if (static_cast<int>(out.size()) >= k) break;
      const bool seen =
          std::any_of(out.begin(), out.end(), [&](const Kept& o) { return o.order == p->order; });
      if (!seen) out.push_back({p->order, p->checkpoint, p->makespan});
    }
    return out;
  }

  //! Records an evaluated candidate over the budget (`p.fits` false) and counts it settled.
  void over_budget(tuning::Point&& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    record_locked(std::move(p));
    settle_locked(1, Settled::OverBudget);
  }

  //! The report, once every search thread is done: full checkpointing as the fallback where
  //! nothing else fits, notes in the grid order of the configuration each names.
  tuning::Result finish(bool cut, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (space_.fallback_full && !result_.best) {
      std::optional<tuning::Plan> full;
      for (const auto& f : best_full_)
        if (f) keep_better(full, *f);
      if (full) {
        result_.best = full;
        keep_better(result_.best_conventional, *full);
      }
    }
    std::stable_sort(
        result_.notes.begin(), result_.notes.end(),
        [](const tuning::Note& a, const tuning::Note& b) { return a.first < b.first; });
    finish_points();
    result_.cut = cut;
    result_.seconds = seconds;
    return std::move(result_);
  }

 private:
  void settle_locked(int n, Settled outcome) {
    int* counter = outcome == Settled::Refused      ? &result_.candidates_refused
                   : outcome == Settled::OverBudget ? &result_.candidates_over_budget
                   : outcome == Settled::Pruned     ? &result_.candidates_pruned
                                                    : nullptr;
    for (int i = 0; i < n; ++i) {
      ++result_.candidates_tried;
      if (counter) ++*counter;
      if (progress_)
        progress_(result_.candidates_tried, result_.candidates_total,
                  result_.best ? &*result_.best : nullptr);
    }
  }

  // Repeats are counted, not stored: a grid can refuse thousands of configurations for a
  // handful of reasons. The note names the configuration earliest in the grid, whichever
  // thread met it first.
  void note_locked(const std::string& configuration, const Message& reason, std::size_t index) {
    const std::string text = reason.text();
    auto same = std::find_if(result_.notes.begin(), result_.notes.end(),
                             [&](const tuning::Note& n) { return n.reason == text; });
    if (same == result_.notes.end()) {
      result_.notes.push_back(tuning::Note{configuration, text, 1, index, reason});
      return;
    }
    ++same->count;
    if (index < same->first) {
      same->configuration = configuration;
      same->first = index;
    }
  }

  // Grid order, then the mode, then the checkpoint's name: the same on any number of threads.
  static bool earlier(const tuning::Point& a, const tuning::Point& b) {
    if (a.order != b.order) return a.order < b.order;
    if (a.mode != b.mode) return a.mode < b.mode;
    return a.checkpoint < b.checkpoint;
  }
  // a dominates b: no slower and no larger, and better in one or, equal, earlier.
  static bool dominates(const tuning::Point& a, const tuning::Point& b) {
    if (a.makespan > b.makespan || a.peak_memory > b.peak_memory) return false;
    return a.makespan < b.makespan || a.peak_memory < b.peak_memory || earlier(a, b);
  }

  // Keeps the frontier over every point that fits, and the earliest `limit_` points: past
  // twice the limit the list is cut back to it, so it never holds more than that.
  void record_locked(tuning::Point&& p) {
    ++result_.evaluated_count;
    if (p.fits && std::none_of(frontier_.begin(), frontier_.end(),
                               [&](const tuning::Point& f) { return dominates(f, p); })) {
      std::erase_if(frontier_, [&](const tuning::Point& f) { return dominates(p, f); });
      frontier_.push_back(p);
    }
    if (limit_ == 0) return;
    points_.push_back(std::move(p));
    if (points_.size() >= 2 * limit_) cut_points();
  }
  void cut_points() {
    std::sort(points_.begin(), points_.end(), earlier);
    if (points_.size() > limit_) points_.resize(limit_);
  }
  // The kept points with the frontier's marked, and the frontier's not kept added.
  void finish_points() {
    cut_points();
    for (const tuning::Point& f : frontier_) {
      auto same = std::find_if(points_.begin(), points_.end(), [&](const tuning::Point& q) {
        return !earlier(q, f) && !earlier(f, q);
      });
      if (same == points_.end()) same = points_.insert(points_.end(), f);
      same->frontier = true;
    }
    std::sort(points_.begin(), points_.end(), earlier);
    result_.evaluated = std::move(points_);
  }

  // The slot a plan of (g, m) competes for.
  std::optional<tuning::Plan>& slot_of(const GeneratorInfo* g, CheckpointMode m) {
    if (m == CheckpointMode::Full && space_.fallback_full) return best_full_[space_.base_index(g)];
    return result_.baselines[space_.pair_of(g, m)].plan;
  }

  const SearchSpace& space_;
  const tuning::ProgressFn& progress_;
  std::mutex mutex_;
  tuning::Result result_;
  std::vector<std::optional<tuning::Plan>> best_full_;  // full checkpointing as fallback, per base
  std::size_t limit_ = 0;                               // evaluated points kept
  std::vector<tuning::Point> points_;                   // the earliest evaluated points
  std::vector<tuning::Point> frontier_;                 // the frontier of all that fit
};

}  // namespace pipesched::detail
