// Tests of the classic generators: GPipe, 1F1B, Interleaved 1F1B, Looped BFS and DualPipeV.
// Properties every generator shares run over the whole grid (ranks 1-8, microbatches 1-32,
// chunks 1-4 where the generator takes them, fused and split); each generator's own order
// is then checked against its definition and, for DualPipeV, against PyTorch's output.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/schedule/dualpipe_v.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/looped_bfs.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_classic_generators {

namespace {

using pipesched::Action;
using pipesched::invalid_problem;
using pipesched::OpKind;
using pipesched::Placement;
using pipesched::Problem;
using pipesched::Schedule;
using pipesched::WGradMode;

constexpr int max_ranks = 8;
constexpr int max_microbatches = 32;
constexpr int max_chunks = 4;

Action F(int s, int m) {
  return Action::make(OpKind::F, s, m);
}
Action B(int s, int m) {
  return Action::make(OpKind::B, s, m);
}
Action I(int s, int m) {
  return Action::make(OpKind::I, s, m);
}
Action W(int s, int m) {
  return Action::make(OpKind::W, s, m);
}

bool is_backward(OpKind k) {
  return k == OpKind::B || k == OpKind::I;
}

// One generator under test: how to call it, which grid points it takes, its placement.
struct Generator {
  std::string name;  // command-line name, also the Schedule's name
  std::function<Schedule(Problem, WGradMode)> generate;
  std::vector<int> chunk_grid;  // chunks per rank to run it with
  int default_chunks;
  std::function<bool(int ranks, int microbatches, int chunks)> accepts;
  std::function<Placement(int ranks, int chunks)> placement;
};

const std::vector<Generator>& generators() {
  static const std::vector<Generator> all = {
      {"gpipe",
       [](Problem p, WGradMode w) { return pipesched::schedule::gpipe(p, w); },
       {1},
       1,
       [](int, int, int v) { return v == 1; },
       [](int p, int) { return Placement::linear(p); }},
      {"1f1b",
       [](Problem p, WGradMode w) { return pipesched::schedule::one_f_one_b(p, w); },
       {1},
       1,
       [](int, int, int v) { return v == 1; },
       [](int p, int) { return Placement::linear(p); }},
      {"interleaved-1f1b",
       [](Problem p, WGradMode w) { return pipesched::schedule::interleaved_1f1b(p, w); },
       {1, 2, 3, 4},
       2,
       // Rounds of at least `ranks` microbatches: every count.
       [](int, int, int) { return true; },
       [](int p, int v) { return Placement::interleaved(p, v); }},
      {"looped-bfs",
       [](Problem p, WGradMode w) { return pipesched::schedule::looped_bfs(p, w); },
       {1, 2, 3, 4},
       2,
       [](int, int, int) { return true; },
       [](int p, int v) { return Placement::interleaved(p, v); }},
      {"dualpipe-v",
       [](Problem p, WGradMode w) { return pipesched::schedule::dualpipe_v(p, w); },
       {2},
       2,
       [](int p, int m, int v) { return v == 2 && m >= 2 * p; },
       [](int p, int) { return Placement::v_shape(p, 2); }},
  };
  return all;
}

const Generator& generator(const std::string& name) {
  for (const Generator& g : generators())
    if (g.name == name) return g;
  throw std::logic_error("no generator " + name);
}

std::string grid_point(int p, int m, int v, WGradMode w) {
  return "ranks=" + std::to_string(p) + " microbatches=" + std::to_string(m) +
         " chunks=" + std::to_string(v) + " " + pipesched::to_string(w);
}

// Calls `body(schedule, ranks, microbatches, chunks)` for every grid point `g` accepts.
template <class Body>
void for_each_accepted(const Generator& g, WGradMode w, Body body) {
  for (int p = 1; p <= max_ranks; ++p)
    for (int v : g.chunk_grid)
      for (int m = 1; m <= max_microbatches; ++m) {
        if (!g.accepts(p, m, v)) continue;
        SCOPED_TRACE(g.name + " " + grid_point(p, m, v, w));
        body(g.generate(Problem{.ranks = p, .stages = p * v, .microbatches = m}, w), p, m, v);
        if (testing::Test::HasFatalFailure()) return;
      }
}

// Runs `call` and checks it throws invalid_problem whose message holds every one of `parts`.
template <class Call>
void expect_refused(Call call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "expected invalid_problem, nothing was thrown";
  } catch (const invalid_problem& e) {
    const std::string what = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' missing from: " << what;
  }
}

// The fused form of a split schedule: I becomes B, W is dropped.
Schedule fuse(Schedule s) {
  for (auto& list : s.ranks) {
    std::vector<Action> fused;
    for (Action a : list) {
      if (a.kind == OpKind::W) continue;
      if (a.kind == OpKind::I) a.kind = OpKind::B;
      fused.push_back(a);
    }
    list = std::move(fused);
  }
  return s;
}

// Forwards at the start of `list`, before its first backward (B, I or an Overlap).
int forwards_before_first_backward(const std::vector<Action>& list) {
  int n = 0;
  for (const Action& a : list) {
    if (a.kind != OpKind::F) break;
    ++n;
  }
  return n;
}

// Checks `list` is `warmup` forwards, then strict (forward, backward) pairs, then backwards
// only; a split backward (I then W) counts as one backward.
void expect_one_f_one_b_shape(const std::vector<Action>& list, int warmup, int forwards) {
  std::vector<OpKind> kinds;
  for (const Action& a : list)
    if (a.kind != OpKind::W) kinds.push_back(a.kind == OpKind::I ? OpKind::B : a.kind);
  ASSERT_EQ(kinds.size(), static_cast<std::size_t>(2 * forwards));
  std::vector<OpKind> want(static_cast<std::size_t>(warmup), OpKind::F);
  for (int k = 0; k < forwards - warmup; ++k) {
    want.push_back(OpKind::F);
    want.push_back(OpKind::B);
  }
  want.resize(kinds.size(), OpKind::B);
  EXPECT_EQ(kinds, want);
}

// The forwards of `list` (stage, microbatch), in order.
std::vector<Action> forwards_of(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (a.kind == OpKind::F) out.push_back(a);
    if (a.kind == OpKind::Overlap) out.push_back(a.forward_half());
  }
  return out;
}
// The backwards (B or I) of `list` as B actions, in order.
std::vector<Action> backwards_of(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (is_backward(a.kind)) out.push_back(B(a.stage, a.microbatch));
    if (a.kind == OpKind::Overlap) out.push_back(a.backward_half());
  }
  return out;
}

// PyTorch's form of an action, for failure messages.
std::string describe(const Action& a) {
  if (a.kind == OpKind::Overlap)
    return "(" + describe(a.forward_half()) + ";" + describe(a.backward_half()) + ")OVERLAP_F_B";
  return std::to_string(a.stage) + std::string(pipesched::to_string(a.kind)) +
         std::to_string(a.microbatch);
}

std::string describe(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list)
    out += (out.empty() ? "" : ",") + describe(a);
  return out;
}

// Compares two action lists and shows both in PyTorch's form when they differ.
void expect_lists_eq(const std::vector<Action>& got, const std::vector<Action>& want) {
  EXPECT_TRUE(got == want) << "got:  " << describe(got) << "\nwant: " << describe(want);
}

// ---- Properties of every generator, over the grid -----------------------------------------

class EveryGenerator : public testing::TestWithParam<std::tuple<std::string, WGradMode>> {
 protected:
  const Generator& gen() const { return generator(std::get<0>(GetParam())); }
  WGradMode wgrad() const { return std::get<1>(GetParam()); }
};

TEST_P(EveryGenerator, NameProblemAndPlacement) {
  for_each_accepted(gen(), wgrad(), [&](const Schedule& s, int p, int m, int v) {
    EXPECT_EQ(s.name, gen().name);
    EXPECT_EQ(s.problem, (Problem{.ranks = p, .stages = p * v, .microbatches = m}));
    EXPECT_EQ(s.placement, gen().placement(p, v));
    EXPECT_EQ(s.placement.kind(), gen().placement(p, v).kind());
    EXPECT_EQ(s.rank_count(), p);
    EXPECT_FALSE(s.has_comm());
    EXPECT_EQ(s.has_split_backward(), wgrad() == WGradMode::Split);
    for (const auto& list : s.ranks)
      for (const Action& a : list)
        EXPECT_NE(a.kind, OpKind::Idle);
  });
}

// Per (stage, microbatch): exactly one forward and one backward (B, or one I and one W);
// an Overlap counts as one F and one B. Every action sits on the rank holding its stage.
TEST_P(EveryGenerator, EachUnitOnceOnItsRank) {
  for_each_accepted(gen(), wgrad(), [&](const Schedule& s, int p, int m, int v) {
    const int stages = p * v;
    // counts[kind][stage * m + microbatch]
    std::map<OpKind, std::vector<int>> counts;
    for (OpKind k : {OpKind::F, OpKind::B, OpKind::I, OpKind::W})
      counts[k].assign(static_cast<std::size_t>(stages * m), 0);
    auto count = [&](OpKind k, int stage, int microbatch, int rank) {
      ASSERT_GE(stage, 0);
      ASSERT_LT(stage, stages);
      ASSERT_GE(microbatch, 0);
      ASSERT_LT(microbatch, m);
      EXPECT_EQ(s.placement.rank_of(stage), rank) << "stage " << stage;
      ++counts[k][static_cast<std::size_t>(stage * m + microbatch)];
    };
    for (int r = 0; r < p; ++r)
      for (const Action& a : s.ranks[static_cast<std::size_t>(r)]) {
        if (a.kind == OpKind::Overlap) {
          count(OpKind::F, a.stage, a.microbatch, r);
          count(OpKind::B, a.b_stage, a.b_microbatch, r);
        } else {
          count(a.kind, a.stage, a.microbatch, r);
        }
        EXPECT_EQ(a.slice, 0);
      }
    for (int u = 0; u < stages * m; ++u) {
      SCOPED_TRACE("stage " + std::to_string(u / m) + " microbatch " + std::to_string(u % m));
      const auto at = static_cast<std::size_t>(u);
      EXPECT_EQ(counts[OpKind::F][at], 1);
      EXPECT_EQ(counts[OpKind::B][at] + counts[OpKind::I][at], 1);
      EXPECT_EQ(counts[OpKind::I][at], counts[OpKind::W][at]);
      if (wgrad() == WGradMode::Fused) {
        EXPECT_EQ(counts[OpKind::I][at], 0);
      }
    }
    if (gen().name != "dualpipe-v") {  // only DualPipeV packs two units into one action
      const int per_unit = wgrad() == WGradMode::Split ? 3 : 2;
      EXPECT_EQ(s.action_count(), static_cast<std::size_t>(per_unit * stages * m));
    }
  });
}

// Dependency order, placement and deadlock freedom (a dry run after lowering).
TEST_P(EveryGenerator, PassesValidation) {
  for_each_accepted(gen(), wgrad(), [&](const Schedule& s, int, int, int) {
    EXPECT_NO_THROW(pipesched::validate(s));
  });
}

// Each rank's forwards of a given stage take microbatches in increasing order, and so do its
// backwards (weight gradients then accumulate in sequential training's order).
TEST_P(EveryGenerator, MicrobatchOrderPerStage) {
  const bool backwards_decrease = false;
  for_each_accepted(gen(), wgrad(), [&](const Schedule& s, int p, int, int v) {
    for (int r = 0; r < p; ++r) {
      const auto& list = s.ranks[static_cast<std::size_t>(r)];
      std::map<int, int> last_f, last_b, last_w;
      auto check = [](std::map<int, int>& last, const Action& a, bool decrease) {
        auto it = last.find(a.stage);
        if (it != last.end()) {
          if (decrease)
            EXPECT_LT(a.microbatch, it->second) << "stage " << a.stage;
          else
            EXPECT_GT(a.microbatch, it->second) << "stage " << a.stage;
        }
        last[a.stage] = a.microbatch;
      };
      for (const Action& a : forwards_of(list))
        check(last_f, a, false);
      for (const Action& a : backwards_of(list))
        check(last_b, a, backwards_decrease);
      for (const Action& a : list)
        if (a.kind == OpKind::W) check(last_w, a, backwards_decrease);
      EXPECT_EQ(last_f.size(), static_cast<std::size_t>(v));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Classic, EveryGenerator,
                         testing::Combine(testing::Values("gpipe", "1f1b", "interleaved-1f1b",
                                                          "looped-bfs", "dualpipe-v"),
                                          testing::Values(WGradMode::Fused, WGradMode::Split)),
                         [](const auto& param_info) {
                           std::string name = std::get<0>(param_info.param) + "_" +
                                              pipesched::to_string(std::get<1>(param_info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---- Properties that do not depend on the backward mode -----------------------------------

class EachGenerator : public testing::TestWithParam<std::string> {
 protected:
  const Generator& gen() const { return generator(GetParam()); }
};

// Split and fused differ only in how a backward is written.
TEST_P(EachGenerator, FusedIsSplitWithBackwardsJoined) {
  for_each_accepted(gen(), WGradMode::Split, [&](const Schedule& split, int p, int m, int v) {
    Schedule fused =
        gen().generate(Problem{.ranks = p, .stages = p * v, .microbatches = m}, WGradMode::Fused);
    EXPECT_EQ(fuse(split), fused);
  });
}

// stages = 0 takes the generator's default chunks; an explicit equal count gives the same.
TEST_P(EachGenerator, ZeroStagesMeansDefaultChunks) {
  for (int p = 1; p <= max_ranks; ++p) {
    const int m = 2 * p;
    SCOPED_TRACE(grid_point(p, m, gen().default_chunks, WGradMode::Fused));
    Schedule s = gen().generate(Problem{.ranks = p, .microbatches = m}, WGradMode::Fused);
    EXPECT_EQ(s.problem.stages, p * gen().default_chunks);
    EXPECT_EQ(s, gen().generate(
                     Problem{.ranks = p, .stages = p * gen().default_chunks, .microbatches = m},
                     WGradMode::Fused));
  }
}

// Over ranks, microbatches and chunks 1-4: a generator throws exactly where it does not
// accept, and then names itself and the refused value (stages or microbatches).
TEST_P(EachGenerator, RefusesExactlyWhatItDoesNotTake) {
  for (int p = 1; p <= max_ranks; ++p)
    for (int v = 1; v <= max_chunks; ++v)
      for (int m = 1; m <= max_microbatches; ++m) {
        SCOPED_TRACE(grid_point(p, m, v, WGradMode::Split));
        const Problem prob{.ranks = p, .stages = p * v, .microbatches = m};
        if (gen().accepts(p, m, v)) {
          EXPECT_NO_THROW(gen().generate(prob, WGradMode::Split));
          continue;
        }
        try {
          gen().generate(prob, WGradMode::Split);
          ADD_FAILURE() << "expected invalid_problem, nothing was thrown";
        } catch (const invalid_problem& e) {
          const std::string what = e.what();
          EXPECT_EQ(what.rfind(gen().name + ": ", 0), 0u) << what;
          const bool names_value =
              what.find("stages = " + std::to_string(p * v)) != std::string::npos ||
              what.find("microbatches = " + std::to_string(m)) != std::string::npos;
          EXPECT_TRUE(names_value) << what;
        }
      }
}

TEST_P(EachGenerator, RefusesSlicesAndBadProblems) {
  const std::string& name = gen().name;
  const int c = gen().default_chunks;
  if (pipesched::find_generator(name).slices) {
    // Slice-level generators take slices (GPipe over slices is TeraPipe's order).
    EXPECT_NO_THROW(
        gen().generate(Problem{.ranks = 2, .microbatches = 8, .slices = 2}, WGradMode::Fused));
  } else {
    expect_refused(
        [&] {
          gen().generate(Problem{.ranks = 2, .microbatches = 8, .slices = 2}, WGradMode::Fused);
        },
        {name, "slices = 2", "slices = 1"});
  }
  expect_refused([&] { gen().generate(Problem{.ranks = 0, .microbatches = 8}, WGradMode::Fused); },
                 {name, "ranks = 0"});
  expect_refused([&] { gen().generate(Problem{.ranks = 2, .microbatches = 0}, WGradMode::Fused); },
                 {name, "microbatches = 0"});
  expect_refused(
      [&] {
        gen().generate(Problem{.ranks = 4, .stages = 4 * c + 1, .microbatches = 8},
                       WGradMode::Fused);
      },
      {name, "stages = " + std::to_string(4 * c + 1), "ranks = 4"});
}

INSTANTIATE_TEST_SUITE_P(Classic, EachGenerator,
                         testing::Values("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs",
                                         "dualpipe-v"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---- GPipe ------------------------------------------------------------------------------

TEST(GPipe, AllForwardsThenAllBackwards) {
  Schedule s = pipesched::schedule::gpipe(Problem{.ranks = 2, .microbatches = 3}, WGradMode::Split);
  expect_lists_eq(s.ranks[0], (std::vector<Action>{F(0, 0), F(0, 1), F(0, 2), I(0, 0), W(0, 0),
                                                   I(0, 1), W(0, 1), I(0, 2), W(0, 2)}));
  expect_lists_eq(s.ranks[1], (std::vector<Action>{F(1, 0), F(1, 1), F(1, 2), I(1, 0), W(1, 0),
                                                   I(1, 1), W(1, 1), I(1, 2), W(1, 2)}));
  for_each_accepted(generator("gpipe"), WGradMode::Fused, [](const Schedule& g, int p, int m, int) {
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(forwards_before_first_backward(g.ranks[static_cast<std::size_t>(r)]), m);
  });
}

TEST(GPipe, RefusesMoreThanOneStagePerRank) {
  expect_refused(
      [] { pipesched::schedule::gpipe(Problem{.ranks = 4, .stages = 8, .microbatches = 4}); },
      {"gpipe", "stages = 8", "ranks = 4", "stages = 4"});
}

// ---- 1F1B -------------------------------------------------------------------------------

// The warm-up, as 1F1B defines it, is the forwards before the steady state: min(p − r − 1, M)
// on rank r. The forwards before the first backward are one more (the steady state's first
// forward) when a steady state exists, i.e. min(p − r, M).
TEST(OneFOneB, WarmupThenAlternationThenCooldown) {
  for (WGradMode w : {WGradMode::Fused, WGradMode::Split})
    for_each_accepted(generator("1f1b"), w, [](const Schedule& s, int p, int m, int) {
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const auto& list = s.ranks[static_cast<std::size_t>(r)];
        const int warmup = std::min(p - r - 1, m);
        EXPECT_EQ(forwards_before_first_backward(list), std::min(p - r, m));
        expect_one_f_one_b_shape(list, warmup, m);
      }
    });
}

TEST(OneFOneB, SmallCaseInFull) {
  Schedule s = pipesched::schedule::one_f_one_b(Problem{.ranks = 3, .microbatches = 4});
  expect_lists_eq(s.ranks[0], (std::vector<Action>{F(0, 0), F(0, 1), F(0, 2), B(0, 0), F(0, 3),
                                                   B(0, 1), B(0, 2), B(0, 3)}));
  expect_lists_eq(s.ranks[1], (std::vector<Action>{F(1, 0), F(1, 1), B(1, 0), F(1, 2), B(1, 1),
                                                   F(1, 3), B(1, 2), B(1, 3)}));
  expect_lists_eq(s.ranks[2], (std::vector<Action>{F(2, 0), B(2, 0), F(2, 1), B(2, 1), F(2, 2),
                                                   B(2, 2), F(2, 3), B(2, 3)}));
}

TEST(OneFOneB, RefusesMoreThanOneStagePerRank) {
  expect_refused(
      [] { pipesched::schedule::one_f_one_b(Problem{.ranks = 3, .stages = 6, .microbatches = 4}); },
      {"1f1b", "stages = 6", "ranks = 3", "stages = 3"});
}

// ---- Interleaved 1F1B -------------------------------------------------------------------

// The rounds of Interleaved 1F1B: max(1, M / p) of them, the first M mod rounds one larger.
std::vector<int> interleaved_rounds(int p, int m) {
  const int rounds = std::max(1, m / p);
  std::vector<int> size(static_cast<std::size_t>(rounds), m / rounds);
  for (int i = 0; i < m % rounds; ++i)
    ++size[static_cast<std::size_t>(i)];
  return size;
}

// Megatron's and PyTorch's warm-up: min(2(p − r − 1) + (V − 1)·max(g, p), M·V) forwards
// before the steady state, g the first round's size (V >= 2). With V = 1 the schedule is
// 1F1B, whose warm-up is min(p − r − 1, M).
TEST(Interleaved1F1B, MegatronWarmupThenAlternation) {
  for (WGradMode w : {WGradMode::Fused, WGradMode::Split})
    for_each_accepted(generator("interleaved-1f1b"), w, [](const Schedule& s, int p, int m, int v) {
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const auto& list = s.ranks[static_cast<std::size_t>(r)];
        const int warmup =
            v == 1 ? std::min(p - r - 1, m)
                   : std::min(2 * (p - r - 1) + (v - 1) * std::max(interleaved_rounds(p, m)[0], p),
                              m * v);
        EXPECT_EQ(forwards_before_first_backward(list), std::min(warmup + 1, m * v));
        expect_one_f_one_b_shape(list, warmup, m * v);
      }
    });
}

// Forward order: for each round of microbatches, chunk 0..V−1 over the round; backward
// order: the same with the chunks reversed.
TEST(Interleaved1F1B, GroupChunkOrder) {
  for_each_accepted(generator("interleaved-1f1b"), WGradMode::Split,
                    [](const Schedule& s, int p, int m, int v) {
                      for (int r = 0; r < p; ++r) {
                        SCOPED_TRACE("rank " + std::to_string(r));
                        std::vector<Action> fwd, bwd;
                        int first = 0;
                        for (int g : interleaved_rounds(p, m)) {
                          const int last = first + g;
                          for (int c = 0; c < v; ++c)
                            for (int mb = first; mb < last; ++mb)
                              fwd.push_back(F(c * p + r, mb));
                          for (int c = v - 1; c >= 0; --c)
                            for (int mb = first; mb < last; ++mb)
                              bwd.push_back(B(c * p + r, mb));
                          first = last;
                        }
                        const auto& list = s.ranks[static_cast<std::size_t>(r)];
                        expect_lists_eq(forwards_of(list), fwd);
                        expect_lists_eq(backwards_of(list), bwd);
                      }
                    });
}

TEST(Interleaved1F1B, OneChunkIsOneFOneB) {
  for (WGradMode w : {WGradMode::Fused, WGradMode::Split})
    for (int p = 1; p <= max_ranks; ++p)
      for (int m = 1; m <= max_microbatches; ++m) {
        SCOPED_TRACE(grid_point(p, m, 1, w));
        const Problem prob{.ranks = p, .stages = p, .microbatches = m};
        EXPECT_EQ(pipesched::schedule::interleaved_1f1b(prob, w),
                  pipesched::schedule::one_f_one_b(prob, w));
      }
}

TEST(Interleaved1F1B, SmallCaseInFull) {
  // p = 2, V = 2, M = 4: rank 0 warms up with 2·1 + 2 = 4 forwards, rank 1 with 2.
  Schedule s = pipesched::schedule::interleaved_1f1b(Problem{.ranks = 2, .microbatches = 4});
  expect_lists_eq(s.ranks[0],
                  (std::vector<Action>{F(0, 0), F(0, 1), F(2, 0), F(2, 1), F(0, 2), B(2, 0),
                                       F(0, 3), B(2, 1), F(2, 2), B(0, 0), F(2, 3), B(0, 1),
                                       B(2, 2), B(2, 3), B(0, 2), B(0, 3)}));
  expect_lists_eq(s.ranks[1],
                  (std::vector<Action>{F(1, 0), F(1, 1), F(3, 0), B(3, 0), F(3, 1), B(3, 1),
                                       F(1, 2), B(1, 0), F(1, 3), B(1, 1), F(3, 2), B(3, 2),
                                       F(3, 3), B(3, 3), B(1, 2), B(1, 3)}));
}

// Every microbatch count runs: rounds of at least p microbatches, the larger ones first, as
// PyTorch cuts them where M divides evenly (p = 4, M = 10: two rounds of 5). The validator's
// dry run finds no deadlock for any p <= 16, V <= 5, M <= 70, fused or split.
TEST(Interleaved1F1B, EveryMicrobatchCountRunsInRoundsOfAtLeastRanks) {
  for (int p = 2; p <= 16; ++p)
    for (int v = 2; v <= 5; ++v)
      for (int m = 1; m <= 70; ++m)
        for (WGradMode w : {WGradMode::Fused, WGradMode::Split}) {
          if (w == WGradMode::Split && (m % 7 != 0 || p % 3 != 1)) continue;  // a sample
          const Schedule s = pipesched::schedule::interleaved_1f1b(
              Problem{.ranks = p, .stages = p * v, .microbatches = m}, w);
          const pipesched::ValidationReport rep = pipesched::check(s);
          ASSERT_TRUE(rep.ok()) << "p=" << p << " V=" << v << " M=" << m << ": " << rep.summary();
        }
  // p = 4, V = 2, M = 10: rank 0 runs chunk 0 then chunk 1 of microbatches 0-4, then of 5-9;
  // its warm-up is 2·3 + 5 = 11 forwards (PyTorch's (V − 1)·round + 2(p − 1 − r)), and its
  // first pair starts with a twelfth.
  const Schedule s = pipesched::schedule::interleaved_1f1b(Problem{.ranks = 4, .microbatches = 10});
  std::vector<Action> fwd;
  for (int first : {0, 5})
    for (int c = 0; c < 2; ++c)
      for (int mb = first; mb < first + 5; ++mb)
        fwd.push_back(F(c * 4, mb));
  expect_lists_eq(forwards_of(s.ranks[0]), fwd);
  EXPECT_EQ(forwards_before_first_backward(s.ranks[0]), 12);
  // M = 11 (PyTorch refuses: 11 is not a multiple of its 2 rounds): rounds of 6 and 5.
  const Schedule t = pipesched::schedule::interleaved_1f1b(Problem{.ranks = 4, .microbatches = 11});
  EXPECT_EQ(forwards_of(t.ranks[0])[6], F(4, 0));
  EXPECT_EQ(forwards_of(t.ranks[0])[12], F(0, 6));
  EXPECT_TRUE(pipesched::check(t).ok());
}

// ---- Looped BFS ---------------------------------------------------------------------------

TEST(LoopedBFS, ChunkByChunk) {
  Schedule s = pipesched::schedule::looped_bfs(Problem{.ranks = 2, .microbatches = 2});
  expect_lists_eq(s.ranks[0], (std::vector<Action>{F(0, 0), F(0, 1), F(2, 0), F(2, 1), B(2, 0),
                                                   B(2, 1), B(0, 0), B(0, 1)}));
  expect_lists_eq(s.ranks[1], (std::vector<Action>{F(1, 0), F(1, 1), F(3, 0), F(3, 1), B(3, 0),
                                                   B(3, 1), B(1, 0), B(1, 1)}));
  for_each_accepted(generator("looped-bfs"), WGradMode::Split,
                    [](const Schedule& g, int p, int m, int v) {
                      for (int r = 0; r < p; ++r) {
                        SCOPED_TRACE("rank " + std::to_string(r));
                        std::vector<Action> fwd, bwd;
                        for (int c = 0; c < v; ++c)
                          for (int mb = 0; mb < m; ++mb)
                            fwd.push_back(F(c * p + r, mb));
                        for (int c = v - 1; c >= 0; --c)
                          for (int mb = 0; mb < m; ++mb)
                            bwd.push_back(B(c * p + r, mb));
                        const auto& list = g.ranks[static_cast<std::size_t>(r)];
                        expect_lists_eq(forwards_of(list), fwd);
                        expect_lists_eq(backwards_of(list), bwd);
                        EXPECT_EQ(forwards_before_first_backward(list), m * v);
                      }
                    });
}

// ---- DualPipeV ----------------------------------------------------------------------------

TEST(DualPipeV, MatchesPyTorchActionForAction) {
  Schedule ours =
      pipesched::schedule::dualpipe_v(Problem{.ranks = 4, .microbatches = 10}, WGradMode::Split);
  Schedule theirs = pipesched::read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) +
                                             "/pytorch/dualpipev_4rank_10mb.csv");
  ASSERT_EQ(theirs.rank_count(), 4);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_lists_eq(ours.ranks[static_cast<std::size_t>(r)],
                    theirs.ranks[static_cast<std::size_t>(r)]);
  }
  EXPECT_EQ(ours.problem, theirs.problem);
  EXPECT_EQ(ours.placement, theirs.placement);
  EXPECT_EQ(
      pipesched::schedule::dualpipe_v(Problem{.ranks = 4, .microbatches = 10}, WGradMode::Fused),
      fuse(theirs));
}

// Step 4 has M − 2p + i + 1 rounds of two Overlaps on rank i (the last rank's first one run
// as F then B) and step 5 p − i − 1 more; nothing else overlaps.
TEST(DualPipeV, OverlapCountPerRank) {
  for_each_accepted(
      generator("dualpipe-v"), WGradMode::Split, [](const Schedule& s, int p, int m, int) {
        for (int i = 0; i < p; ++i) {
          SCOPED_TRACE("rank " + std::to_string(i));
          const auto& list = s.ranks[static_cast<std::size_t>(i)];
          const auto overlaps = std::count_if(
              list.begin(), list.end(), [](const Action& a) { return a.kind == OpKind::Overlap; });
          const int want = 2 * (m - 2 * p + i + 1) + (p - i - 1) - (i == p - 1 ? 1 : 0);
          EXPECT_EQ(overlaps, want);
          // Each overlap pairs a forward of one chunk with a backward of the other.
          for (const Action& a : list) {
            if (a.kind == OpKind::Overlap) {
              EXPECT_NE(s.placement.chunk_of(a.stage), s.placement.chunk_of(a.b_stage));
            }
          }
        }
      });
}

// Rank i starts with (p − i − 1)·2 forwards of chunk 0, then i + 1 (chunk 0, chunk 1) pairs.
TEST(DualPipeV, WarmupForwards) {
  for_each_accepted(
      generator("dualpipe-v"), WGradMode::Split, [](const Schedule& s, int p, int, int) {
        for (int i = 0; i < p; ++i) {
          SCOPED_TRACE("rank " + std::to_string(i));
          const auto& list = s.ranks[static_cast<std::size_t>(i)];
          std::vector<Action> want;
          for (int k = 0; k < 2 * (p - i - 1); ++k)
            want.push_back(F(i, k));
          for (int k = 0; k < i + 1; ++k) {
            want.push_back(F(i, 2 * (p - i - 1) + k));
            want.push_back(F(2 * p - 1 - i, k));
          }
          ASSERT_GE(list.size(), want.size());
          expect_lists_eq(std::vector<Action>(list.begin(), list.begin() + want.size()), want);
        }
      });
}

TEST(DualPipeV, RefusesTooFewMicrobatches) {
  for (int p = 1; p <= max_ranks; ++p)
    for (int m = 1; m < 2 * p; ++m) {
      SCOPED_TRACE(grid_point(p, m, 2, WGradMode::Split));
      expect_refused(
          [&] { pipesched::schedule::dualpipe_v(Problem{.ranks = p, .microbatches = m}); },
          {"dualpipe-v", "microbatches = " + std::to_string(m), "ranks = " + std::to_string(p),
           ">= 2 × ranks = " + std::to_string(2 * p)});
    }
}

TEST(DualPipeV, RefusesOtherChunkCounts) {
  for (int v : {1, 3, 4}) {
    SCOPED_TRACE("chunks " + std::to_string(v));
    expect_refused(
        [&] {
          pipesched::schedule::dualpipe_v(Problem{.ranks = 4, .stages = 4 * v, .microbatches = 16});
        },
        {"dualpipe-v", "chunks = " + std::to_string(v), "stages = " + std::to_string(4 * v),
         "stages = 8"});
  }
}

}  // namespace

// The warm-up in 1F1B's sense: 1F1B's rank r runs p − r − 1 forwards before its steady
// one-forward-one-backward pairs (min with M); GPipe runs all M before any backward.
TEST(WarmupOf, CountsTheForwardsBeforeEachRanksSteadyPairs) {
  for (int p : {1, 2, 4, 8})
    for (int m : {p + 1, 2 * p}) {
      const pipesched::Schedule s =
          pipesched::schedule::one_f_one_b({.ranks = p, .microbatches = m});
      for (int r = 0; r < p; ++r)
        EXPECT_EQ(pipesched::warmup_of(s, r), std::min(p - r - 1, m)) << p << " " << m << " " << r;
      EXPECT_THROW(pipesched::warmup_of(s, p), pipesched::invalid_problem);
      EXPECT_THROW(pipesched::warmup_of(s, -1), pipesched::invalid_problem);
    }
  const pipesched::Schedule g = pipesched::schedule::gpipe({.ranks = 4, .microbatches = 6});
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(pipesched::warmup_of(g, r), 6);
}

}  // namespace test_classic_generators
