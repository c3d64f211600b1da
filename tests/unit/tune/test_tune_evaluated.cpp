// The tuner's record of what it evaluated (tuning::Result::evaluated): every kept plan is in it,
// its Pareto frontier holds exactly the points no other point that fits dominates, it does not
// depend on the order threads settle candidates in (where none is pruned: which are is a
// matter of timing), and tuning::Request::evaluated_limit bounds it without losing the frontier.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipesched/tune/tune.hpp"

namespace test_tune_evaluated {

namespace ps = pipesched;

namespace {

ps::tuning::Request request(int threads, int limit) {
  ps::tuning::Request r{.ranks = 4, .global_batch = 8};
  r.budget = ps::MemoryBudget{.all = 3};
  r.threads = threads;
  r.evaluated_limit = limit;
  return r;
}

bool dominated(const ps::tuning::Point& p, const std::vector<ps::tuning::Point>& all) {
  for (const ps::tuning::Point& q : all)
    if (q.fits && q.makespan <= p.makespan && q.peak_memory <= p.peak_memory &&
        (q.makespan < p.makespan || q.peak_memory < p.peak_memory))
      return true;
  return false;
}

std::string key(const ps::tuning::Point& p) {
  return ps::describe(p) + "|" + std::to_string(p.makespan) + "|" + std::to_string(p.peak_memory) +
         "|" + std::to_string(p.fits) + std::to_string(p.frontier);
}

}  // namespace

TEST(TuneEvaluated, HoldsEveryPlanAndItsFrontier) {
  const ps::tuning::Result r = ps::tune(request(1, 20000), ps::UniformCost{});
  ASSERT_TRUE(r.best);
  ASSERT_FALSE(r.evaluated.empty());
  EXPECT_EQ(static_cast<int>(r.evaluated.size()), r.evaluated_count);
  // Some over the budget are settled without a simulation (where not even full checkpointing
  // fits); the rest were built and simulated.
  EXPECT_LE(r.evaluated_count, r.candidates_tried - r.candidates_pruned - r.candidates_refused);
  int over = 0, frontier = 0;
  for (const ps::tuning::Point& p : r.evaluated) {
    over += !p.fits;
    frontier += p.frontier;
    if (p.fits)
      EXPECT_LE(p.activation_peak, 3 + 1e-9) << ps::describe(p);
    else
      EXPECT_GT(p.activation_peak, 3) << ps::describe(p);
    // On the frontier exactly when no point that fits is better in one figure and no worse in
    // the other (among equal points one is on it).
    if (p.frontier) {
      EXPECT_TRUE(p.fits && !dominated(p, r.evaluated)) << ps::describe(p);
    }
    if (p.fits && !dominated(p, r.evaluated)) {
      bool equal_on = false;
      for (const ps::tuning::Point& q : r.evaluated)
        equal_on =
            equal_on || (q.frontier && q.makespan == p.makespan && q.peak_memory == p.peak_memory);
      EXPECT_TRUE(equal_on) << ps::describe(p);
    }
  }
  EXPECT_GT(over, 0);  // the budget of 3 microbatches refuses some
  EXPECT_GT(frontier, 0);
  EXPECT_LE(over, r.candidates_over_budget);
  // The best plan and each baseline's are among the points.
  std::vector<ps::tuning::Plan> plans{*r.best};
  for (const ps::tuning::Baseline& b : r.baselines)
    if (b.plan) plans.push_back(*b.plan);
  for (const ps::tuning::Plan& plan : plans) {
    bool found = false;
    for (const ps::tuning::Point& p : r.evaluated)
      found = found || (p.order == plan.order && p.mode == static_cast<int>(plan.checkpoint) &&
                        p.makespan == plan.makespan && p.fits);
    EXPECT_TRUE(found) << ps::describe(plan);
  }
}

TEST(TuneEvaluated, SameOnAnyNumberOfThreads) {
  const ps::tuning::Result one = ps::tune(request(1, 20000), ps::UniformCost{});
  const ps::tuning::Result four = ps::tune(request(4, 20000), ps::UniformCost{});
  ASSERT_EQ(one.candidates_pruned, 0);  // a search without pruning evaluates every candidate
  ASSERT_EQ(four.candidates_pruned, 0);
  ASSERT_EQ(one.evaluated.size(), four.evaluated.size());
  for (std::size_t i = 0; i < one.evaluated.size(); ++i)
    EXPECT_EQ(key(one.evaluated[i]), key(four.evaluated[i]));
}

TEST(TuneEvaluated, LimitKeepsTheFirstAndTheWholeFrontier) {
  const ps::tuning::Result all = ps::tune(request(1, 20000), ps::UniformCost{});
  std::vector<std::string> front;
  for (const ps::tuning::Point& p : all.evaluated)
    if (p.frontier) front.push_back(key(p));
  ASSERT_GT(all.evaluated.size(), 4u);
  for (int limit : {0, 1, 3}) {
    SCOPED_TRACE(limit);
    const ps::tuning::Result cut = ps::tune(request(1, limit), ps::UniformCost{});
    EXPECT_EQ(cut.evaluated_count, all.evaluated_count);
    EXPECT_LE(cut.evaluated.size(), static_cast<std::size_t>(limit) + front.size());
    std::vector<std::string> cut_front;
    for (const ps::tuning::Point& p : cut.evaluated)
      if (p.frontier) cut_front.push_back(key(p));
    EXPECT_EQ(cut_front, front);
    // The first `limit` in the search's order are kept, whether on the frontier or not.
    for (int i = 0; i < limit; ++i) {
      const std::size_t k = static_cast<std::size_t>(i);
      ASSERT_LT(k, cut.evaluated.size());
      EXPECT_EQ(key(cut.evaluated[k]), key(all.evaluated[k]));
    }
  }
}

TEST(TuneEvaluated, NegativeLimitIsRefused) {
  EXPECT_THROW(ps::tune(request(1, -1), ps::UniformCost{}), ps::invalid_problem);
}

}  // namespace test_tune_evaluated
