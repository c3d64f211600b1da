// Every exception type keeps its type and its fields when a caller puts its own words before
// the message (rethrow_after, as plan<> and the tuner do), and its fields name the argument
// it refused.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/stop_token.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/shard_optimizer.hpp"
#include "pipesched/schedule/list_rule.hpp"
#include "pipesched/transport/mpi/mpi_errors.hpp"

namespace test_error_types {

namespace {

namespace ps = pipesched;

// `e` rethrown after "caller: ", caught as its own type.
template <class E>
E rethrown(const E& e) {
  try {
    e.rethrow_after("caller: ");
  } catch (const E& again) {
    return again;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "rethrow_after lost the type: " << other.what();
  }
  return e;
}

template <class E>
void expect_prefixed(const E& again, const std::string& text) {
  EXPECT_EQ(std::string(again.what()), "caller: " + text);
}

TEST(ErrorTypes, RethrowAfterKeepsEveryTypeAndItsFields) {
  expect_prefixed(rethrown(ps::error("a")), "a");
  expect_prefixed(rethrown(ps::invalid_problem("b")), "b");
  expect_prefixed(rethrown(ps::invalid_schedule("c")), "c");
  expect_prefixed(rethrown(ps::work_stopped(std::string("d"))), "d");
  expect_prefixed(rethrown(ps::receive_timeout("e")), "e");
  expect_prefixed(rethrown(ps::transport_aborted("f")), "f");
  expect_prefixed(rethrown(ps::mpi_error("g")), "g");

  const ps::parse_error parse = rethrown(ps::parse_error("h", 3, 7));
  EXPECT_EQ(parse.line(), 3);
  EXPECT_EQ(parse.column(), 7);

  const ps::budget_error budget =
      rethrown(ps::budget_error("i", 2, 5.0, 4.0, ps::MemoryUnit::Bytes));
  EXPECT_EQ(budget.rank(), 2);
  EXPECT_EQ(budget.needed(), 5.0);
  EXPECT_EQ(budget.allowed(), 4.0);

  const ps::invalid_argument arg = rethrown(ps::invalid_argument("j", "Problem.ranks", "0"));
  EXPECT_EQ(arg.field(), "Problem.ranks");
  EXPECT_EQ(arg.value(), "0");

  const ps::Action f = ps::Action::make(ps::OpKind::F, 1, 2);
  const ps::execution_error exec = rethrown(ps::execution_error("k", 3, 4, f, true));
  expect_prefixed(exec, "k");
  EXPECT_EQ(exec.rank(), 3);
  EXPECT_EQ(exec.position(), 4);
  EXPECT_EQ(exec.action(), f);
  EXPECT_TRUE(exec.rolled_back());

  const ps::schedule_stalled stalled =
      rethrown(ps::schedule_stalled("l", std::vector<ps::RankStall>(2)));
  expect_prefixed(stalled, "l");
  EXPECT_EQ(stalled.stalls().size(), 2u);

  const ps::schedule_mismatch mismatch = rethrown(ps::schedule_mismatch("m", 0, 5));
  expect_prefixed(mismatch, "m");
  EXPECT_EQ(mismatch.second_rank(), 5);
}

TEST(ErrorTypes, SgdShardsNamesTheArgumentItRefuses) {
  try {
    (void)ps::sgd_shards(std::numeric_limits<double>::quiet_NaN(), 0.5);
    FAIL() << "a learning rate that is not a number was accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "learning_rate");
    EXPECT_NE(std::string(e.what()).find("learning rate"), std::string::npos) << e.what();
  }
  try {
    (void)ps::sgd_shards(0.1, -1);
    FAIL() << "a negative momentum was accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "momentum");
    EXPECT_EQ(e.value(), "-1");
  }
}

}  // namespace

}  // namespace test_error_types
