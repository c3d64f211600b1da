// The cluster search's request in range: a GPU count and a node size that bound its loops, a
// cluster of whole nodes, and pipeline sizes or tensor degrees that fit no factorization
// named with the reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/tune/tune.hpp"

namespace test_cluster_bounds {

namespace {

namespace ps = pipesched;

ps::tuning::ClusterRequest request(int gpus) {
  ps::tuning::ClusterRequest c;
  c.gpus = gpus;
  c.global_batch = 16;
  c.search.bases = {"1f1b"};
  c.search.microbatch_sizes = {1};
  c.search.checkpoints = {ps::CheckpointMode::None};
  return c;
}

// The message of tune_cluster's refusal of `req`, or a failure when it searches.
std::string refusal(const ps::tuning::ClusterRequest& req) {
  ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  model.sequence = 512;
  try {
    (void)ps::tune_cluster(req, model, ps::presets::find_device("h100"));
  } catch (const ps::invalid_problem& e) {
    return e.what();
  }
  ADD_FAILURE() << "searched " << req.gpus << " GPUs";
  return "";
}

TEST(ClusterBounds, CountsBeyondTheirRangeAreRefused) {
  std::string e = refusal(request(1 << 20));
  EXPECT_NE(
      e.find(
          "tuning::ClusterRequest.gpus = 1048576 is out of range; a cluster has from 1 to 65536"),
      std::string::npos)
      << e;
  ps::tuning::ClusterRequest req = request(8);
  req.gpus_per_node = 1 << 30;
  e = refusal(req);
  EXPECT_NE(e.find("tuning::ClusterRequest.gpus_per_node = 1073741824 is out of range; use 0 (the "
                   "device's) or a count from 1 to 1024"),
            std::string::npos)
      << e;
}

TEST(ClusterBounds, AClusterIsWholeNodes) {
  ps::tuning::ClusterRequest req = request(16);
  req.gpus_per_node = 3;
  const std::string e = refusal(req);
  EXPECT_NE(e.find("16 GPUs (tuning::ClusterRequest.gpus = 16) do not fill whole nodes of 3 "
                   "(DeviceSpec.ranks_per_node = 3): the last of 6 nodes would hold 1 GPU"),
            std::string::npos)
      << e;
  // Within one node, fewer GPUs than it holds are searched.
  req = request(4);
  ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  model.sequence = 512;
  EXPECT_TRUE(ps::tune_cluster(req, model, ps::presets::find_device("h100")).best);
}

TEST(ClusterBounds, DegreesThatFitNoFactorizationSayWhy) {
  ps::tuning::ClusterRequest req = request(8);
  req.pipeline = {3, 5};
  std::string e = refusal(req);
  EXPECT_NE(e.find("tuning::ClusterRequest.pipeline = 3,5 does not divide the 8 GPUs"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("pipeline sizes that divide it: 1, 2, 4, 8"), std::string::npos) << e;
  req = request(8);
  req.tensor = {3};
  e = refusal(req);
  EXPECT_NE(
      e.find("tuning::ClusterRequest.tensor = 3 does not divide both the 8 GPUs and the 8 GPUs of "
             "a node"),
      std::string::npos)
      << e;
}

}  // namespace

// Planned plans overlap the data-parallel reduction where it shortens the step.

TEST(ClusterReduction, PlansOverlapTheReductionWhereItShortensTheStepAndBoundsStayBelow) {
  ps::tuning::ClusterRequest req = request(8);
  req.gpus_per_node = 4;
  req.pipeline = {2};
  req.tensor = {1};
  req.search.bases = {"interleaved-1f1b", "1f1b"};
  req.search.chunks = {2};
  ps::ModelShape model = ps::presets::find_model("gpt3-1.3b");
  model.sequence = 512;
  const ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
  const ps::tuning::Result r = ps::tune_cluster(req, model, device);
  ASSERT_TRUE(r.best);
  int overlapped = 0;
  for (const ps::tuning::Baseline& b : r.baselines) {
    if (!b.plan) continue;
    const ps::tuning::Plan& p = *b.plan;
    SCOPED_TRACE(b.base);
    const auto& cost = std::any_cast<const ps::TransformerCost&>(p.cost);
    // The same schedule without the reduction as actions: the serial all-reduce at the end.
    ps::Schedule serial = p.schedule;
    for (auto& list : serial.ranks)
      std::erase_if(list, [](const ps::Action& a) {
        return a.kind == ps::OpKind::ReduceGrad || a.kind == ps::OpKind::WaitReduceGrad;
      });
    const ps::SimulationResult plain = ps::simulate(serial, cost);
    EXPECT_LE(p.makespan, plain.makespan);
    EXPECT_DOUBLE_EQ(ps::simulate(p.schedule, cost).makespan, p.makespan);
    if (p.schedule.has_gradient_reduction()) {
      ++overlapped;
      EXPECT_LT(p.makespan, plain.makespan);
    }
    // The search's lower bound holds for the overlapped step too.
    EXPECT_LE(ps::detail::makespan_lower_bound(serial, cost, plain), p.makespan * (1 + 1e-12));
  }
  // Two chunks per rank: a rank's later chunk finishes its backward early, and its reduction
  // runs under the other chunk's backward.
  EXPECT_GE(overlapped, 1);
}

}  // namespace test_cluster_bounds
