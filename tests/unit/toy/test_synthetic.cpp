// The synthetic stage: set durations (slept, never short, overshooting by well under a
// millisecond), set stash byte counts, the failure hook and call-order errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipesched/exec/concepts.hpp"
#include "pipesched/toy/synthetic.hpp"

namespace test_synthetic {

namespace ps = pipesched;
namespace toy = pipesched::toy;

static_assert(ps::check_stage_model<toy::SyntheticStage>());

TEST(SyntheticStage, StashReportsTheSetBytes) {
  toy::SyntheticStage stage({.forward = 0,
                             .backward_input = 0,
                             .backward_weight = 0,
                             .activation_bytes = 1000,
                             .wgrad_bytes = 300});
  EXPECT_EQ(stage.activation_bytes(), 1000u);
  EXPECT_EQ(stage.wgrad_bytes(), 300u);
  toy::SyntheticStage::stash_type a, b;
  EXPECT_EQ(stage.stash_bytes(a), 0u);
  const auto x = toy::SyntheticStage::sample_input();
  EXPECT_EQ(stage.forward(x, a), x);  // tensors pass through unchanged
  stage.forward(x, b);                // two microbatches in flight at once
  EXPECT_EQ(stage.stash_bytes(a), 1000u);
  EXPECT_EQ(stage.backward_input(x, b), x);
  EXPECT_EQ(stage.stash_bytes(b), 300u);
  EXPECT_EQ(stage.stash_bytes(a), 1000u);
  stage.backward_weight(b);
  EXPECT_EQ(stage.stash_bytes(b), 0u);
  EXPECT_THROW(stage.backward_weight(a), ps::invalid_schedule);
  EXPECT_THROW(stage.backward_input(x, b), ps::invalid_schedule);
  stage.backward_input(x, a);
  EXPECT_THROW(stage.backward_input(x, a), ps::invalid_schedule);
  stage.backward_weight(a);
  EXPECT_EQ(stage.stash_bytes(a), 0u);
}

TEST(TimedSyntheticStage, SleepsLastTheirDurationAndBarelyOvershoot) {
  using clock = std::chrono::steady_clock;
  for (double seconds : {0.0005, 0.002, 0.005}) {
    SCOPED_TRACE("duration " + std::to_string(seconds) + " s");
    toy::SyntheticStage stage(
        {.forward = seconds, .backward_input = seconds, .backward_weight = seconds});
    const auto x = toy::SyntheticStage::sample_input();
    std::vector<double> overshoot;
    for (int rep = 0; rep < 5; ++rep) {
      toy::SyntheticStage::stash_type st;
      for (int op = 0; op < 3; ++op) {
        const auto start = clock::now();
        if (op == 0) stage.forward(x, st);
        if (op == 1) stage.backward_input(x, st);
        if (op == 2) stage.backward_weight(st);
        const double took = std::chrono::duration<double>(clock::now() - start).count();
        EXPECT_GE(took, seconds) << "op " << op << " returned early";
        overshoot.push_back(took - seconds);
      }
    }
    // The median, so one descheduling on a busy machine does not fail the test.
    std::nth_element(overshoot.begin(), overshoot.begin() + overshoot.size() / 2, overshoot.end());
    EXPECT_LT(overshoot[overshoot.size() / 2], 1e-3);
  }
}

TEST(SyntheticStage, FailureHookThrowsFromTheChosenAction) {
  toy::SyntheticStage stage(
      {.forward = 0, .backward_input = 0, .backward_weight = 0, .activation_bytes = 64});
  std::vector<std::string> seen;
  stage.fail_on = [&](const char* op) {
    seen.emplace_back(op);
    if (std::string(op) == "backward_input") throw std::runtime_error("injected");
  };
  const auto x = toy::SyntheticStage::sample_input();
  toy::SyntheticStage::stash_type st;
  stage.forward(x, st);
  EXPECT_THROW(stage.backward_input(x, st), std::runtime_error);
  EXPECT_EQ(seen, (std::vector<std::string>{"forward", "backward_input"}));
  EXPECT_EQ(stage.stash_bytes(st), 64u);  // the stash is left as it was
  stage.fail_on = nullptr;
  EXPECT_NO_THROW(stage.backward_input(x, st));
}

TEST(SyntheticStage, BadDurationsThrow) {
  EXPECT_THROW(toy::SyntheticStage({.forward = -1e-3}), ps::invalid_problem);
  EXPECT_THROW(toy::SyntheticStage({.backward_input = std::nan("")}), ps::invalid_problem);
  EXPECT_THROW(toy::SyntheticStage({.backward_weight = INFINITY}), ps::invalid_problem);
  EXPECT_NO_THROW(toy::SyntheticStage({.forward = 0}));
}

}  // namespace test_synthetic
