// ProcessGrid: Megatron-LM's numbering of a pp × dp × tp job (the one the cost model charges),
// each process's coordinates, and its pipeline, data-parallel and tensor groups, which
// partition the job; bad degrees, processes and coordinates are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/exec/process_grid.hpp"

namespace test_process_grid {

namespace ps = pipesched;

namespace {

// Every process is in exactly one group of each kind, and each group has the right extent.
void expect_partition(const ps::ProcessGrid& g,
                      std::vector<int> (ps::ProcessGrid::*group)(int) const, int extent) {
  std::set<std::vector<int>> groups;
  for (int p = 0; p < g.size(); ++p) {
    const std::vector<int> mine = (g.*group)(p);
    ASSERT_EQ(static_cast<int>(mine.size()), extent);
    EXPECT_NE(std::find(mine.begin(), mine.end(), p), mine.end()) << "process " << p;
    for (int q : mine)
      EXPECT_EQ((g.*group)(q), mine) << "process " << q << " disagrees with " << p;
    groups.insert(mine);
  }
  EXPECT_EQ(static_cast<int>(groups.size()) * extent, g.size());
}

TEST(ProcessGrid, MegatronNumberingTensorInnermost) {
  const ps::ProcessGrid g{.pipeline = 2, .data = 3, .tensor = 2};
  ASSERT_EQ(g.size(), 12);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) {
        const int p = i + 2 * (j + 3 * r);  // Parallelism's GPU i + t·(j + d·r)
        EXPECT_EQ(g.process({r, j, i}), p);
        EXPECT_EQ(g.coordinates(p), (ps::ProcessGrid::Coordinates{r, j, i}));
      }
  EXPECT_EQ(g.tensor_group(7), (std::vector<int>{6, 7}));
  EXPECT_EQ(g.data_group(7), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(g.pipeline_group(7), (std::vector<int>{1, 7}));
  expect_partition(g, &ps::ProcessGrid::pipeline_group, 2);
  expect_partition(g, &ps::ProcessGrid::data_group, 3);
  expect_partition(g, &ps::ProcessGrid::tensor_group, 2);
}

TEST(ProcessGrid, EveryShapeOfEightProcessesPartitions) {
  for (int p : {1, 2, 4, 8})
    for (int d : {1, 2, 4, 8})
      for (int t : {1, 2, 4, 8}) {
        if (p * d * t != 8) continue;
        const ps::ProcessGrid g{p, d, t};
        SCOPED_TRACE(g.describe());
        expect_partition(g, &ps::ProcessGrid::pipeline_group, p);
        expect_partition(g, &ps::ProcessGrid::data_group, d);
        expect_partition(g, &ps::ProcessGrid::tensor_group, t);
      }
}

// The cost model puts pipeline rank r's first GPU on node (r·t·d) / ranks_per_node: the
// grid's process (r, 0, 0).
TEST(ProcessGrid, AgreesWithTheCostModelsNodes) {
  ps::Parallelism par;
  par.data = 2;
  par.tensor = 2;
  ps::DeviceSpec device = ps::presets::find_device("a100-80gb");
  device.ranks_per_node = 8;
  ps::TransformerCost cost;
  cost.model = ps::presets::find_model("gpt3-1.3b");
  cost.device = device;
  cost.parallel = par;
  const ps::ProcessGrid g = ps::ProcessGrid::of(par, 8);
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(cost.node_of(r), g.process({r, 0, 0}) / device.ranks_per_node) << "rank " << r;
}

TEST(ProcessGrid, BadDegreesProcessesAndCoordinatesAreNamed) {
  try {
    ps::ProcessGrid{.pipeline = 2, .data = 0}.check();
    ADD_FAILURE() << "data = 0 was accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "ProcessGrid.data");
    EXPECT_EQ(e.value(), "0");
  }
  const ps::ProcessGrid g{2, 2, 1};
  try {
    (void)g.coordinates(4);
    ADD_FAILURE() << "process 4 of 4 was accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("processes run from 0 to 3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)g.process({0, 2, 0}), ps::invalid_argument);
  EXPECT_THROW((void)g.data_group(-1), ps::invalid_argument);
}

// Degrees whose product an int cannot count are refused, not wrapped round.
TEST(ProcessGrid, HugeDegreesAreRefused) {
  try {
    ps::ProcessGrid{.pipeline = 70000, .data = 70000, .tensor = 1}.check();
    ADD_FAILURE() << "70000 × 70000 processes were accepted";
  } catch (const ps::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("= 4900000000 processes is more than an MPI job can hold"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)ps::ProcessGrid({2147483647, 2, 1}).coordinates(0), ps::invalid_argument);
  EXPECT_NO_THROW(ps::ProcessGrid({2147483647, 1, 1}).check());
}

}  // namespace

}  // namespace test_process_grid
