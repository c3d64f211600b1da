// Errors as parts: a message keeps the fields and amounts it names, the typed errors carry their
// figures, a caller's prefix keeps the type, and one formatter writes amounts.
#include <gtest/gtest.h>

#include <string>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/core/message.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/plan.hpp"

namespace test_messages {

namespace ps = pipesched;

namespace {

TEST(FormatAmount, GivenAmountsAsTheUserWroteThem) {
  using ps::MemoryUnit;
  EXPECT_EQ(ps::format_amount(0.001 * 1073741824.0, MemoryUnit::Bytes, false), "0.001GiB");
  EXPECT_EQ(ps::format_amount(100, MemoryUnit::Bytes, false), "100B");
  EXPECT_EQ(ps::format_amount(24e9, MemoryUnit::Bytes, false), "24GB");
  EXPECT_EQ(ps::format_amount(300.0 * 1048576, MemoryUnit::Bytes, false), "300MiB");
  EXPECT_EQ(ps::format_amount(512.0 * 1048576, MemoryUnit::Bytes, false), "0.5GiB");  // shortest
  EXPECT_EQ(ps::format_amount(1.5 * 1073741824.0, MemoryUnit::Bytes, false), "1.5GiB");
  // Held or needed: GiB to a hundredth, rounded up so that the figure is enough.
  EXPECT_EQ(ps::format_amount(0.931 * 1073741824.0, MemoryUnit::Bytes), "0.94GiB");
  EXPECT_EQ(ps::format_amount(3.0 * 1073741824.0, MemoryUnit::Bytes), "3.00GiB");
  // Units: six significant digits.
  EXPECT_EQ(ps::format_amount(1.1500000000000001, MemoryUnit::Units), "1.15");
  EXPECT_EQ(ps::format_amount(1e7, MemoryUnit::Units), "1e+07");
}

TEST(MessageParts, MentionsRenderEitherWay) {
  const ps::Message m = "1f1b: " + ps::field("Problem.ranks", 0) + " is out of range; use " +
                        ps::enumerator("CheckpointMode", "Selective", "selective") + ".";
  EXPECT_EQ(m.text(), "1f1b: Problem.ranks = 0 is out of range; use CheckpointMode::Selective.");
  struct Flags {
    std::optional<std::string> mention(const ps::Message::Mention& x) const {
      return "<" + x.key + ":" + x.value + ">";
    }
    std::string amount(const ps::Message::Amount&) const { return "?"; }
  };
  EXPECT_EQ(m.text(Flags{}),
            "1f1b: <Problem.ranks:0> is out of range; use <CheckpointMode:selective>.");
  // Text next to text merges: two messages saying the same compare equal part by part.
  EXPECT_EQ((ps::Message("a") + "b").parts().size(), 1u);
}

TEST(TypedErrors, ProblemNamesItsField) {
  ps::Problem p;
  p.ranks = 0;
  try {
    p.check();
    FAIL() << "ranks = 0 was accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "Problem.ranks");
    EXPECT_EQ(e.value(), "0");
    EXPECT_NE(std::string(e.what()).find("Problem.ranks = 0 is out of range"), std::string::npos);
  }
}

TEST(TypedErrors, BudgetErrorCarriesItsFiguresThroughAPrefix) {
  using Plan = ps::plan<ps::order::OneFOneB, ps::checkpoint::Selective>;
  try {
    (void)Plan::generate({.ranks = 4, .microbatches = 8}, ps::UniformCost{},
                         ps::MemoryBudget{.all = 0.5});
    FAIL() << "a budget below what full checkpointing holds was met";
  } catch (const ps::budget_error& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_DOUBLE_EQ(e.allowed(), 0.5);
    EXPECT_NEAR(e.needed(), 1.15, 1e-9);
    EXPECT_EQ(e.unit(), ps::MemoryUnit::Units);
    // The plan's prefix came in front, and the type and figures stayed.
    EXPECT_EQ(std::string(e.what()).rfind("plan<1f1b", 0), 0u) << e.what();
  }
  // Under TransformerCost the amounts are bytes, written as budgets are given.
  ps::TransformerCost cost;
  cost.model = ps::presets::find_model("gpt3-1.3b");
  cost.device = ps::presets::find_device("a100-40gb");
  try {
    (void)Plan::generate({.ranks = 4, .microbatches = 8}, cost, ps::MemoryBudget{.all = 1e8});
    FAIL() << "100 MB was enough";
  } catch (const ps::budget_error& e) {
    EXPECT_EQ(e.unit(), ps::MemoryUnit::Bytes);
    EXPECT_NE(std::string(e.what()).find("memory budget 0.1GB is too small"), std::string::npos)
        << e.what();
  }
}

}  // namespace

}  // namespace test_messages
