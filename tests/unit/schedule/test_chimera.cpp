// Chimera: two model replicas piped in opposite directions over the same ranks. The replica
// model (which units exist, where data flows), validation, simulation with the analytic
// anchors, lowering, Mario, the text and CSV forms and the transformer cost's static memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/policy/plan.hpp"
#include "pipesched/schedule/chimera.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/policy/registry.hpp"

namespace test_chimera {

namespace ps = pipesched;

namespace {

ps::Schedule chimera(int ranks, int microbatches, ps::WGradMode w = ps::WGradMode::Fused) {
  return ps::schedule::chimera({.ranks = ranks, .microbatches = microbatches}, w);
}

double makespan(const ps::Schedule& s, const ps::UniformCost& cost = {}) {
  const ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_FALSE(r.deadlock) << r.deadlock_report;
  return r.makespan;
}

}  // namespace

TEST(Chimera, ReplicaModelOfTheProblem) {
  const ps::Problem p{.ranks = 4, .stages = 8, .microbatches = 5, .replicas = 2};
  EXPECT_EQ(p.replica_stages(), 4);
  EXPECT_EQ(p.replica_of_stage(3), 0);
  EXPECT_EQ(p.replica_of_stage(4), 1);
  EXPECT_EQ(p.model_stage(6), 2);
  EXPECT_TRUE(p.first_stage(0));
  EXPECT_TRUE(p.first_stage(4));
  EXPECT_FALSE(p.first_stage(5));
  EXPECT_TRUE(p.last_stage(3));
  EXPECT_TRUE(p.last_stage(7));
  EXPECT_FALSE(p.last_stage(4));
  // Even microbatches down (replica 0), odd ones up; an odd count gives replica 0 one more.
  EXPECT_TRUE(p.has_unit(2, 0));
  EXPECT_FALSE(p.has_unit(2, 1));
  EXPECT_TRUE(p.has_unit(6, 3));
  EXPECT_FALSE(p.has_unit(6, 4));
  EXPECT_EQ(p.microbatches_of_replica(0), 3);
  EXPECT_EQ(p.microbatches_of_replica(1), 2);
  // One replica: every unit exists and only the ends are first and last.
  const ps::Problem one{.ranks = 4, .stages = 8, .microbatches = 5};
  EXPECT_TRUE(one.has_unit(6, 4));
  EXPECT_FALSE(one.last_stage(3));
  EXPECT_TRUE(one.last_stage(7));
  EXPECT_THROW((ps::Problem{.ranks = 4, .stages = 6, .microbatches = 2, .replicas = 2}.check()),
               ps::invalid_problem);
  EXPECT_THROW((ps::Problem{.ranks = 4, .microbatches = 2, .replicas = 0}.check()),
               ps::invalid_problem);
}

TEST(Chimera, PlacementHoldsOneStageOfEachReplicaPerRank) {
  const ps::Schedule s = chimera(4, 4);
  EXPECT_EQ(s.problem.replicas, 2);
  EXPECT_EQ(s.problem.stages, 8);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(s.placement.stages_of(r), (std::vector<int>{r, 7 - r})) << "rank " << r;
    for (const ps::Action& a : s.ranks[r])
      EXPECT_TRUE(s.problem.has_unit(a.stage, a.microbatch)) << a;
  }
}

TEST(Chimera, RefusesWhatItCannotRunWithASentence) {
  auto message = [](ps::Problem p) {
    try {
      ps::schedule::chimera(p);
    } catch (const ps::invalid_problem& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.ranks = 4, .stages = 4, .microbatches = 4}).find("stages = 8"),
            std::string::npos);
  EXPECT_NE(message({.ranks = 4, .microbatches = 4, .replicas = 3}).find("replicas = 2"),
            std::string::npos);
  EXPECT_NE(message({.ranks = 4, .microbatches = 4, .slices = 2}).find("slices = 1"),
            std::string::npos);
  EXPECT_NE(message({.ranks = 4, .microbatches = 0}).find("microbatches"), std::string::npos);
}

TEST(Chimera, EveryMicrobatchCountValidatesFusedAndSplitAndLowered) {
  for (int D = 1; D <= 8; ++D)
    for (int M = 1; M <= 3 * D + 1; ++M)
      for (ps::WGradMode w : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " M=" + std::to_string(M) + " " + ps::to_string(w));
        const ps::Schedule s = chimera(D, M, w);
        const ps::ValidationReport rep = ps::check(s);
        ASSERT_TRUE(rep.ok()) << rep.message(s.name);
        // Each microbatch runs through its replica's D stages: F and B (or I and W) on each.
        EXPECT_EQ(s.action_count(),
                  static_cast<std::size_t>(M) * D * (w == ps::WGradMode::Split ? 3 : 2));
        const ps::Schedule lowered = ps::lower_communication(s);
        const ps::ValidationReport lrep = ps::check(lowered);
        ASSERT_TRUE(lrep.ok()) << lrep.message(lowered.name);
        // Lowering adds no wait: the lowered schedule takes as long as the compute-only one.
        EXPECT_DOUBLE_EQ(makespan(lowered), makespan(s));
        // Data never crosses between replicas.
        for (const auto& list : lowered.ranks)
          for (const ps::Action& a : list) {
            if (a.kind == ps::OpKind::SendF) {
              EXPECT_FALSE(s.problem.last_stage(a.stage)) << a;
            } else if (a.kind == ps::OpKind::SendB) {
              EXPECT_FALSE(s.problem.first_stage(a.stage)) << a;
            }
          }
      }
}

// Chimera's basic unit, D (even) stages and D microbatches, D/2 per direction, under f = 1,
// b = 2. The first microbatch of a direction reaches the far end after D − 1 forwards, its
// backward starts there at D and goes back through D − 1 more ranks, so the first backward of
// rank 0's own stage starts at D + 2(D − 1). Between the ends every rank takes the two
// directions' backwards in turn, so each direction's backwards reach rank 0 one per 2b = 4:
// its last ends at D + 2(D − 1) + 4(D/2 − 1) + 2 = 5D − 4, against 1F1B's 3(2D − 1). In
// general D(f + b) + (D − 2)b: D − 2 bubbles of one step each when f = b, the paper's count.
TEST(Chimera, BasicUnitMakespanIsAnalytic) {
  for (int D = 2; D <= 16; D += 2) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const double chimera_time = makespan(chimera(D, D));
    EXPECT_DOUBLE_EQ(chimera_time, 5.0 * D - 4);
    EXPECT_DOUBLE_EQ(makespan(ps::schedule::one_f_one_b({.ranks = D, .microbatches = D})),
                     3.0 * (2 * D - 1));
    EXPECT_LT(chimera_time, 3.0 * (2 * D - 1));
    // f = b = 1, planned and simulated so: 3D − 2, i.e. D − 2 idle steps on a rank's 2D.
    const ps::UniformCost equal{.b = 1, .w = 0.5};
    const ps::Schedule e =
        ps::schedule::chimera({.ranks = D, .microbatches = D}, ps::WGradMode::Fused, equal);
    EXPECT_DOUBLE_EQ(makespan(e, equal), 3.0 * D - 2);
  }
}

// Concatenated basic units: for M a multiple of D the drain of one unit holds the forwards of
// the next, and the step stays M(f + b) + (D − 2)b — bubble (D − 2)b / (M(f + b) + (D − 2)b),
// with f = b the paper's (D − 2)/(2N + D − 2).
TEST(Chimera, ConcatenatedUnitsKeepTheBasicUnitsBubble) {
  for (int D = 2; D <= 16; D += 2)
    for (int k = 2; k <= 4; ++k) {
      const int M = k * D;
      SCOPED_TRACE("D=" + std::to_string(D) + " M=" + std::to_string(M));
      const ps::SimulationResult r = ps::simulate(chimera(D, M), ps::UniformCost{});
      EXPECT_DOUBLE_EQ(r.makespan, 3.0 * M + 2.0 * (D - 2));
      EXPECT_LT(r.makespan, 3.0 * (M + D - 1));  // 1F1B
      EXPECT_NEAR(r.bubble_ratio, 2.0 * (D - 2) / (3.0 * M + 2.0 * (D - 2)), 1e-12);
      const ps::UniformCost equal{.b = 1, .w = 0.5};
      const ps::Schedule e =
          ps::schedule::chimera({.ranks = D, .microbatches = M}, ps::WGradMode::Fused, equal);
      EXPECT_DOUBLE_EQ(makespan(e, equal), 2.0 * M + D - 2);
    }
}

// Any other count (an odd one sends one more microbatch down) runs too. Every rank computes each
// microbatch once, on one of its two stages (3M of work), and one microbatch's chain through D
// stages and back takes 3D, so neither can be undercut; a count just past a multiple of D
// leaves its last microbatches a pipeline of their own, which costs at most one chain more than
// 1F1B's step.
TEST(Chimera, OtherCountsStayWithinBounds) {
  for (int D = 2; D <= 8; ++D)
    for (int M = 1; M <= 3 * D + 1; ++M) {
      SCOPED_TRACE("D=" + std::to_string(D) + " M=" + std::to_string(M));
      const double t = makespan(chimera(D, M));
      EXPECT_GE(t, std::max(3.0 * M, 3.0 * D));
      EXPECT_LE(t, 3.0 * (M + D - 1) + 3.0 * D);  // at most one chain beyond 1F1B
    }
}

// Activation memory, in microbatches of one rank's share: the basic unit holds
// min(D − r, D/2) + min(r + 1, D/2) on rank r (D/2 + 1 at the ends, D in the middle), the
// paper's range [D/2 + 1, D]; concatenated units never hold more than D (even D), fused or
// split, and never more than D + 1 for odd D.
TEST(Chimera, PeakActivationsStayBetweenHalfAndAllOfThePipeline) {
  for (int D = 2; D <= 16; D += 2) {
    const ps::SimulationResult r = ps::simulate(chimera(D, D), ps::UniformCost{});
    for (int rank = 0; rank < D; ++rank)
      EXPECT_DOUBLE_EQ(r.ranks[rank].peak_memory,
                       std::min(D - rank, D / 2) + std::min(rank + 1, D / 2))
          << "D=" << D << " rank " << rank;
    EXPECT_DOUBLE_EQ(r.ranks[0].peak_memory, D / 2 + 1);
    EXPECT_DOUBLE_EQ(r.peak_memory_max, D);
  }
  for (int D = 1; D <= 9; ++D)
    for (int M = 1; M <= 4 * D + 1; ++M)
      for (ps::WGradMode w : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
        const ps::SimulationResult r = ps::simulate(chimera(D, M, w), ps::UniformCost{});
        EXPECT_LE(r.peak_memory_max, D % 2 == 0 ? D : D + 1) << "D=" << D << " M=" << M;
        EXPECT_LE(r.peak_memory_max, M);
      }
}

TEST(Chimera, ValidationNamesAUnitOfTheWrongReplica) {
  ps::Schedule s = chimera(2, 2);
  // Microbatch 1 runs up (replica 1, stages 2 and 3); put a forward of it on stage 1 instead.
  s.ranks[1].push_back(ps::Action::make(ps::OpKind::F, 1, 1));
  const ps::ValidationReport rep = ps::check(s);
  ASSERT_FALSE(rep.ok());
  EXPECT_TRUE(rep.has("index-range"));
  EXPECT_NE(rep.summary().find("runs through replica 1"), std::string::npos) << rep.summary();
  // A message from replica 0's last stage to replica 1's first is refused too.
  ps::Schedule c = ps::lower_communication(chimera(2, 2));
  c.ranks[1].push_back(ps::Action::make(ps::OpKind::SendF, 1, 0));
  const ps::ValidationReport crep = ps::check(c);
  ASSERT_FALSE(crep.ok());
  EXPECT_NE(crep.summary().find("data flows only between neighbouring stages of one replica"),
            std::string::npos)
      << crep.summary();
  // A missing backward of an existing unit is still missing.
  ps::Schedule m = chimera(2, 2);
  m.ranks[0].pop_back();
  EXPECT_TRUE(ps::check(m).has("missing"));
}

TEST(Chimera, MarioCheckpointsItWithinABudget) {
  const ps::Schedule base = chimera(4, 8);
  const ps::UniformCost cost{};
  const double peak = ps::simulate(base, cost).peak_memory_max;
  ps::MemoryBudget budget;
  budget.all = peak - 1.5;
  const ps::Schedule s = ps::checkpoint_mario(base, cost, budget);
  const ps::ValidationReport rep = ps::check(s);
  ASSERT_TRUE(rep.ok()) << rep.message(s.name);
  const ps::SimulationResult r = ps::simulate(s, cost);
  EXPECT_LE(r.peak_memory_max, budget.all + 1e-9);
  bool recomputes = false;
  for (const auto& list : s.ranks)
    for (const ps::Action& a : list)
      recomputes = recomputes || a.kind == ps::OpKind::R;
  EXPECT_TRUE(recomputes);
  EXPECT_TRUE(ps::find_generator("chimera").mario);
  EXPECT_TRUE(ps::checkpoint::Mario::runs_on<ps::order::Chimera>);
  using MarioPlan = ps::plan<ps::order::Chimera, ps::checkpoint::Mario>;
  const ps::Schedule planned =
      MarioPlan::generate(ps::Problem{.ranks = 4, .microbatches = 8}, cost, budget);
  EXPECT_TRUE(ps::check(planned).ok());
  EXPECT_LE(ps::simulate(planned, cost).peak_memory_max, budget.all + 1e-9);
}

TEST(Chimera, TextRoundTripKeepsTheReplicas) {
  const ps::Schedule s = chimera(3, 5, ps::WGradMode::Split);
  const std::string text = ps::to_text(s);
  EXPECT_NE(text.find("replicas 2"), std::string::npos);
  std::istringstream in(text);
  const ps::Schedule back = ps::read_text(in);
  EXPECT_EQ(back, s);
  EXPECT_EQ(back.problem.replicas, 2);
  // One replica writes no replicas field: the text of every other schedule is unchanged.
  EXPECT_EQ(
      ps::to_text(ps::schedule::one_f_one_b({.ranks = 2, .microbatches = 2})).find("replicas"),
      std::string::npos);
  std::istringstream bad("ranks 2 stages 4 microbatches 2 replicas 3\nplacement 0 1 1 0\n");
  EXPECT_THROW(ps::read_text(bad), ps::parse_error);
}

TEST(Chimera, CsvRoundTripInfersTheReplicasAndPyTorchRefusesThem) {
  for (int D : {1, 2, 4})
    for (int M : {2, 3, 8}) {
      const ps::Schedule s = chimera(D, M);
      std::istringstream in(ps::to_csv(s));
      const ps::Schedule back = ps::read_csv(in);
      EXPECT_EQ(back, s) << "D=" << D << " M=" << M;
      EXPECT_TRUE(ps::check(back).ok());
    }
  // One microbatch names replica 0's stages only: the one-replica schedule of D stages it is.
  {
    std::istringstream in(ps::to_csv(chimera(3, 1)));
    const ps::Schedule back = ps::read_csv(in);
    EXPECT_EQ(back.problem.replicas, 1);
    EXPECT_EQ(back.problem.stages, 3);
    EXPECT_TRUE(ps::check(back).ok());
  }
  // A V-shape schedule runs every microbatch through all stages: read as one replica.
  const ps::Schedule v = ps::schedule::zero_bubble_v({.ranks = 2, .microbatches = 4});
  std::istringstream vin(ps::to_csv(v));
  EXPECT_EQ(ps::read_csv(vin).problem.replicas, 1);
  try {
    ps::check_pytorch_runnable(chimera(2, 2));
    FAIL() << "a two-replica schedule was accepted for PyTorch";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("2 model replicas"), std::string::npos) << e.what();
  }
}

// Both replicas' weights, gradients and optimizer state are counted on each rank: rank r holds
// model stages r and D − 1 − r, so its static bytes are 1F1B's rank r plus rank D − 1 − r.
TEST(Chimera, TransformerCostCountsBothReplicasStaticMemory) {
  const ps::TransformerCost cost{.model = ps::presets::find_model("llama2-13b"),
                                 .device = ps::presets::find_device("rtx-4090"),
                                 .slice_lengths = {}};
  const int D = 8;
  const ps::Schedule c = chimera(D, D);
  const ps::Schedule one = ps::schedule::one_f_one_b({.ranks = D, .microbatches = D});
  const ps::CostContext cc{c.problem, c.placement}, oc{one.problem, one.placement};
  for (int r = 0; r < D; ++r)
    EXPECT_DOUBLE_EQ(cost.static_bytes(cc, r),
                     cost.static_bytes(oc, r) + cost.static_bytes(oc, D - 1 - r))
        << "rank " << r;
  // A stage of replica 1 costs as the same model stage of replica 0: the same forward time and
  // activations (the LM head on both last stages).
  for (int s = 0; s < D; ++s) {
    const ps::Action f0 = ps::Action::make(ps::OpKind::F, s, 0);
    const ps::Action f1 = ps::Action::make(ps::OpKind::F, D + s, 1);
    EXPECT_DOUBLE_EQ(cost.duration(cc, f0), cost.duration(cc, f1));
    EXPECT_DOUBLE_EQ(cost.memory_delta(cc, f0, false), cost.memory_delta(cc, f1, false));
    EXPECT_DOUBLE_EQ(cost.duration(cc, f0),
                     cost.duration(oc, ps::Action::make(ps::OpKind::F, s, 0)));
  }
  // No transfer between replicas: replica 0's last stage sends nothing on.
  EXPECT_EQ(cost.transfer_time(cc, ps::Action::make(ps::OpKind::F, D - 1, 0)), 0.0);
  EXPECT_GT(cost.transfer_time(cc, ps::Action::make(ps::OpKind::F, D, 1)), 0.0);
  const ps::SimulationResult r = ps::simulate(c, cost);
  EXPECT_FALSE(r.deadlock);
}

TEST(Chimera, PlanAndRegistryGenerateIt) {
  const ps::GeneratorInfo& g = ps::find_generator("chimera");
  EXPECT_EQ(g.placement, ps::PlacementKind::VShape);
  EXPECT_EQ(g.default_chunks, 2);
  const ps::Schedule s = g.generate({.ranks = 4, .microbatches = 8}, ps::WGradMode::Fused);
  EXPECT_EQ(s, chimera(4, 8));
  using Plan = ps::plan<ps::order::Chimera>;
  EXPECT_EQ(Plan::generate(ps::Problem{.ranks = 4, .microbatches = 8}), s);
}

}  // namespace test_chimera
