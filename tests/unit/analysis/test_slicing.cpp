// Slice lengths: uniform, balanced (equal forward time under causal attention) and TeraPipe
// (least Σ t_k + (p − 1)·max t_k) cuts of a TransformerCost's sequence, the slicing modes by
// name, and the checks on their inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/slicing.hpp"
#include "pipesched/analysis/transformer_cost.hpp"

namespace test_slicing {

namespace ps = pipesched;

namespace {

// A small Llama-shaped model (SwiGLU, grouped-query attention, 7 layers) on a round device.
ps::TransformerCost small_llama(int sequence) {
  ps::ModelShape m;
  m.layers = 7;
  m.hidden = 256;
  m.heads = 8;
  m.kv_heads = 2;
  m.ffn_hidden = 704;
  m.gated_mlp = true;
  m.sequence = sequence;
  m.vocabulary = 1000;
  ps::DeviceSpec d;
  d.name = "test";
  d.peak_flops = 1e12;
  d.memory_bandwidth = 1e11;
  d.memory_bytes = 1e10;
  d.link_bandwidth = 1e10;
  d.node_link_bandwidth = 1e9;
  d.half_flops = 1e6;
  return {m, d, {}};
}

// A preset on a device without tile or wave quantisation (sm_count 0): a forward time that
// grows smoothly with the slice, on which the cuts' contracts are exact to a token. The
// presets' own quantised devices are cut in whole tiles (QuantisedSlices below).
ps::TransformerCost preset(const char* model, const char* device, int sequence) {
  ps::TransformerCost c{ps::presets::find_model(model), ps::presets::find_device(device), {}};
  c.model.sequence = sequence;
  c.device.sm_count = 0;
  return c;
}

// The costs the tests cut: small and real shapes, with and without flash attention.
struct NamedCost {
  std::string name;
  ps::TransformerCost cost;
};
std::vector<NamedCost> costs() {
  ps::TransformerCost no_flash = small_llama(300);
  no_flash.model.flash_attention = false;
  return {{"small-llama s=45", small_llama(45)},
          {"small-llama s=300 without flash attention", no_flash},
          {"llama2-7b s=4096 on rtx-4090", preset("llama2-7b", "rtx-4090", 4096)},
          {"llama2-7b s=8192 on rtx-4090", preset("llama2-7b", "rtx-4090", 8192)},
          {"gpt3-1.3b s=2048 on h100", preset("gpt3-1.3b", "h100", 2048)}};
}

void expect_cut(const std::vector<int>& lengths, int sequence, int slices) {
  ASSERT_EQ(static_cast<int>(lengths.size()), slices);
  EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), 0), sequence);
  for (int t : lengths)
    EXPECT_GE(t, 1);
}

std::vector<double> forward_times(const ps::TransformerCost& c, const std::vector<int>& lengths) {
  std::vector<double> out;
  int offset = 0;
  for (int t : lengths) {
    out.push_back(ps::slice_forward_time(c, {offset, t}));
    offset += t;
  }
  return out;
}

double spread(const std::vector<double>& x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return *hi - *lo;
}

template <class F>
void expect_invalid_problem(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no invalid_problem thrown";
  } catch (const ps::invalid_problem& e) {
    const std::string what = e.what();
    for (const std::string& x : fragments)
      EXPECT_NE(what.find(x), std::string::npos) << "'" << x << "' missing from: " << what;
  }
}

}  // namespace

TEST(UniformSlices, EqualLengthsTheLastTakingTheRemainderAsTransformerCostCuts) {
  for (int seq : {1, 7, 45, 4096}) {
    for (int k = 1; k <= std::min(seq, 9); ++k) {
      SCOPED_TRACE("sequence " + std::to_string(seq) + ", slices " + std::to_string(k));
      const std::vector<int> u = ps::uniform_slices(seq, k);
      expect_cut(u, seq, k);
      for (int i = 0; i + 1 < k; ++i)
        EXPECT_EQ(u[static_cast<std::size_t>(i)], seq / k);
      // The same cut TransformerCost makes with no slice_lengths of its own.
      ps::TransformerCost c = small_llama(seq);
      const ps::Problem p{.ranks = 1, .stages = 1, .microbatches = 1, .slices = k};
      const ps::Placement pl = ps::Placement::linear(1);
      const ps::CostContext ctx{p, pl, 1};
      for (int i = 0, offset = 0; i < k; offset += u[static_cast<std::size_t>(i)], ++i) {
        EXPECT_EQ(c.slice_span(ctx, i).offset, offset);
        EXPECT_EQ(c.slice_span(ctx, i).length, u[static_cast<std::size_t>(i)]);
      }
    }
  }
}

TEST(BalancedSlices, EqualForwardTimeWithinOneTokenAndShorterLaterSlices) {
  for (const NamedCost& nc : costs()) {
    const ps::TransformerCost& c = nc.cost;
    const int seq = c.model.sequence;
    // The dearest token: the last one, appended to a slice that attends to everything.
    const double token =
        ps::slice_forward_time(c, {0, seq}) - ps::slice_forward_time(c, {0, seq - 1});
    for (int k : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(nc.name + ", slices " + std::to_string(k));
      ASSERT_EQ(ps::detail::slice_granule(c, k), 1);
      const std::vector<int> b = ps::balanced_slices(c, k);
      expect_cut(b, seq, k);
      for (std::size_t i = 0; i + 1 < b.size(); ++i)
        EXPECT_GE(b[i], b[i + 1]) << "slice " << i + 1 << " is longer than slice " << i;
      const std::vector<double> tb = forward_times(c, b);
      EXPECT_LE(spread(tb), token * (1 + 1e-9));
      // Uniform slices are no more even, and their slowest is no faster.
      const std::vector<double> tu = forward_times(c, ps::uniform_slices(seq, k));
      EXPECT_LE(spread(tb), spread(tu) + token * 1e-9);
      EXPECT_LE(*std::max_element(tb.begin(), tb.end()),
                *std::max_element(tu.begin(), tu.end()) * (1 + 1e-12));
      // The cost model itself, given the lengths, times each slice the same way.
      const ps::TransformerCost sliced = ps::with_slicing(c, ps::SlicingMode::Balanced, k);
      EXPECT_EQ(sliced.slice_lengths, b);
      const ps::Problem p{.ranks = 1, .stages = 1, .microbatches = 1, .slices = k};
      const ps::Placement pl = ps::Placement::linear(1);
      for (int i = 0; i < k; ++i)
        EXPECT_DOUBLE_EQ(sliced.duration({p, pl, 1}, ps::Action::make(ps::OpKind::F, 0, 0, i)),
                         tb[static_cast<std::size_t>(i)]);
    }
  }
}

void each_cut(int seq, int k, std::vector<int>& cut, const std::function<void()>& visit);

// On a device that quantises GEMMs the cuts go in whole GEMM tiles of tokens (128 at b = 1,
// 64 at b = 2), every slice but the last; balanced cuts have the least slowest slice among
// such cuts (against every whole-tile cut of a short sequence), and TeraPipe's beat neither
// uniform nor balanced on its objective.
TEST(QuantisedSlices, CutInWholeTilesWithTheLeastSlowestSlice) {
  for (int b : {1, 2}) {
    ps::TransformerCost c{
        ps::presets::find_model("llama2-7b"), ps::presets::find_device("h100"), {}};
    c.model.sequence = 1024;
    c.model.microbatch_size = b;
    const int g = 128 / b;
    EXPECT_EQ(c.slice_granule(), g);
    EXPECT_EQ(ps::detail::slice_granule(c, 4), g);
    EXPECT_EQ(ps::detail::slice_granule(c, 1024 / g + 1), 1);  // too many slices for tiles
    for (int k : {2, 3, 4}) {
      SCOPED_TRACE("b " + std::to_string(b) + ", slices " + std::to_string(k));
      const std::vector<int> cut = ps::balanced_slices(c, k);
      expect_cut(cut, 1024, k);
      for (std::size_t i = 0; i + 1 < cut.size(); ++i)
        EXPECT_EQ(cut[i] % g, 0) << "slice " << i;
      const std::vector<double> tb = forward_times(c, cut);
      const double slowest = *std::max_element(tb.begin(), tb.end());
      // Every cut in whole granules: none has a faster slowest slice.
      std::vector<int> units;
      each_cut(1024 / g, k, units, [&] {
        std::vector<int> lengths;
        for (int u : units)
          lengths.push_back(u * g);
        const std::vector<double> t = forward_times(c, lengths);
        EXPECT_GE(*std::max_element(t.begin(), t.end()), slowest * (1 - 1e-12));
      });
      for (int ranks : {1, 4}) {
        const std::vector<int> t = ps::terapipe_slices(c, k, ranks);
        expect_cut(t, 1024, k);
        const double tera = ps::terapipe_objective(c, t, ranks);
        EXPECT_LE(tera, ps::terapipe_objective(c, ps::uniform_slices(1024, k), ranks));
        EXPECT_LE(tera, ps::terapipe_objective(c, cut, ranks));
      }
    }
  }
}

TEST(BalancedSlices, CausalAttentionMakesTheCutUneven) {
  // At 8192 tokens attention is a large share of a Llama 2 7B layer: the first of four
  // balanced slices is clearly longer than the last, and the uniform cut's last slice is
  // clearly slower than its first.
  const ps::TransformerCost c = preset("llama2-7b", "rtx-4090", 8192);
  const std::vector<int> b = ps::balanced_slices(c, 4);
  EXPECT_GT(b.front(), b.back() * 1.1);
  const std::vector<double> tu = forward_times(c, ps::uniform_slices(8192, 4));
  EXPECT_GT(tu.back(), tu.front() * 1.1);
  // Existing slice_lengths on the input are ignored.
  ps::TransformerCost given = c;
  given.slice_lengths = {8000, 192};
  EXPECT_EQ(ps::balanced_slices(given, 4), b);
}

// Every cut of `seq` tokens into `k` slices, by recursion; `visit` sees each once.
void each_cut(int seq, int k, std::vector<int>& cut, const std::function<void()>& visit) {
  if (k == 1) {
    cut.push_back(seq);
    visit();
    cut.pop_back();
    return;
  }
  for (int t = 1; t <= seq - (k - 1); ++t) {
    cut.push_back(t);
    each_cut(seq - t, k - 1, cut, visit);
    cut.pop_back();
  }
}

TEST(TeraPipeSlices, TheDynamicProgramFindsTheBestCutOfAShortSequence) {
  // Up to 256 tokens every token is on the grid, so the result is the optimum.
  for (int seq : {12, 30}) {
    const ps::TransformerCost c = small_llama(seq);
    for (int ranks : {1, 2, 4, 7}) {
      for (int k : {1, 2, 3, 4}) {
        SCOPED_TRACE("sequence " + std::to_string(seq) + ", ranks " + std::to_string(ranks) +
                     ", slices " + std::to_string(k));
        const std::vector<int> t = ps::terapipe_slices(c, k, ranks);
        expect_cut(t, seq, k);
        double best = std::numeric_limits<double>::infinity();
        std::vector<int> cut;
        each_cut(seq, k, cut,
                 [&] { best = std::min(best, ps::terapipe_objective(c, cut, ranks)); });
        EXPECT_NEAR(ps::terapipe_objective(c, t, ranks), best, best * 1e-12);
      }
    }
  }
}

TEST(TeraPipeSlices, NeverWorseThanUniformOrBalancedOnItsObjective) {
  for (const NamedCost& nc : costs()) {
    const ps::TransformerCost& c = nc.cost;
    const int seq = c.model.sequence;
    for (int ranks : {1, 7}) {
      for (int k : {2, 3, 8}) {
        SCOPED_TRACE(nc.name + ", ranks " + std::to_string(ranks) + ", slices " +
                     std::to_string(k));
        const std::vector<int> t = ps::terapipe_slices(c, k, ranks);
        expect_cut(t, seq, k);
        const double uniform = ps::terapipe_objective(c, ps::uniform_slices(seq, k), ranks);
        const double balanced = ps::terapipe_objective(c, ps::balanced_slices(c, k), ranks);
        EXPECT_LE(ps::terapipe_objective(c, t, ranks), uniform);
        EXPECT_LE(ps::terapipe_objective(c, t, ranks), balanced);
        EXPECT_EQ(ps::with_slicing(c, ps::SlicingMode::TeraPipe, k, ranks).slice_lengths, t);
      }
    }
  }
  // Where attention matters and the pipeline is deep, it is strictly better than uniform.
  const ps::TransformerCost c = preset("llama2-7b", "rtx-4090", 8192);
  EXPECT_LT(ps::terapipe_objective(c, ps::terapipe_slices(c, 4, 8), 8),
            0.99 * ps::terapipe_objective(c, ps::uniform_slices(8192, 4), 8));
}

TEST(TeraPipeSlices, ObjectiveIsTheSumPlusTheStragglerTerm) {
  // t_k: forward plus backward of slice k on the busier of the first and the last stage of
  // an even split, timed by the cost model given the lengths.
  const std::vector<int> lengths = {20, 15, 10};
  for (int ranks : {1, 3, 7}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    ps::TransformerCost c = small_llama(45);
    const double objective = ps::terapipe_objective(c, lengths, ranks);
    c.slice_lengths = lengths;
    const ps::Problem p{.ranks = ranks, .stages = ranks, .microbatches = 1, .slices = 3};
    const ps::Placement pl = ps::Placement::linear(ranks);
    double sum = 0, most = 0;
    for (int k = 0; k < 3; ++k) {
      double t = 0;
      for (int stage : {0, ranks - 1})
        t = std::max(t, c.duration({p, pl, 1}, ps::Action::make(ps::OpKind::F, stage, 0, k)) +
                            c.duration({p, pl, 1}, ps::Action::make(ps::OpKind::B, stage, 0, k)));
      sum += t;
      most = std::max(most, t);
    }
    EXPECT_NEAR(objective, sum + (ranks - 1) * most, objective * 1e-12);
  }
}

TEST(SlicingMode, NamesReadBackAndUnknownOnesAreRefused) {
  for (ps::SlicingMode m :
       {ps::SlicingMode::Uniform, ps::SlicingMode::Balanced, ps::SlicingMode::TeraPipe}) {
    SCOPED_TRACE(ps::to_string(m));
    EXPECT_EQ(ps::parse_slicing_mode(ps::to_string(m)), m);
  }
  EXPECT_EQ(ps::parse_slicing_mode("TeraPipe"), ps::SlicingMode::TeraPipe);
  try {
    ps::parse_slicing_mode("even");
    ADD_FAILURE() << "'even' was accepted";
  } catch (const ps::parse_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'even'"), std::string::npos) << what;
    EXPECT_NE(what.find("uniform"), std::string::npos) << what;
    EXPECT_NE(what.find("terapipe"), std::string::npos) << what;
  }
  // slice_lengths dispatches on the mode.
  const ps::TransformerCost c = small_llama(300);
  EXPECT_EQ(ps::slice_lengths(c, ps::SlicingMode::Uniform, 4), ps::uniform_slices(300, 4));
  EXPECT_EQ(ps::slice_lengths(c, ps::SlicingMode::Balanced, 4), ps::balanced_slices(c, 4));
  EXPECT_EQ(ps::slice_lengths(c, ps::SlicingMode::TeraPipe, 4, 3), ps::terapipe_slices(c, 4, 3));
}

TEST(Slicing, BadInputsAreRefusedWithTheValue) {
  const ps::TransformerCost c = small_llama(45);
  expect_invalid_problem([] { ps::uniform_slices(10, 0); }, {"slices = 0", "use 1"});
  expect_invalid_problem([] { ps::uniform_slices(10, 11); }, {"slices = 11", "10 tokens"});
  expect_invalid_problem([&] { ps::balanced_slices(c, 46); }, {"slices = 46", "45 tokens"});
  expect_invalid_problem([&] { ps::terapipe_slices(c, 4, 0); }, {"ranks = 0"});
  expect_invalid_problem([&] { ps::terapipe_slices(c, ps::terapipe_max_slices + 1, 2); },
                         {"slices = " + std::to_string(ps::terapipe_max_slices + 1), "at most"});
  expect_invalid_problem([&] { ps::terapipe_slices(c, 4, 8); }, {"layers = 7", "8 stages"});
  expect_invalid_problem([&] { ps::terapipe_objective(c, {20, 20}, 2); }, {"sum to 40", "45"});
  expect_invalid_problem([&] { ps::terapipe_objective(c, {45, 0}, 2); }, {"slice 1 has 0"});
  expect_invalid_problem([&] { ps::slice_forward_time(c, {40, 6}); }, {"[40, 46)", "45 tokens"});
  ps::TransformerCost broken = c;
  broken.model.heads = 0;
  expect_invalid_problem([&] { ps::balanced_slices(broken, 2); }, {"ModelShape.heads = 0"});
}

TEST(Slicing, LengthsIgnoreTheCostsOwnLayerSplit) {
  // A cost pricing a schedule of 8 stages (explicit layers, or the balanced split) gives the
  // lengths of the even split: they depend on the model and the rank count only.
  const ps::TransformerCost even = small_llama(300);
  ps::TransformerCost listed = even;
  listed.parallel.layers = {1, 1, 1, 1, 1, 1, 1};
  ps::TransformerCost split = even;
  split.parallel.split = ps::LayerSplit::Balanced;
  for (const ps::TransformerCost* c : {&listed, &split}) {
    EXPECT_EQ(ps::balanced_slices(*c, 4), ps::balanced_slices(even, 4));
    EXPECT_EQ(ps::terapipe_slices(*c, 4, 3), ps::terapipe_slices(even, 4, 3));
    EXPECT_EQ(ps::slice_forward_time(*c, {10, 20}), ps::slice_forward_time(even, {10, 20}));
  }
}

}  // namespace test_slicing
