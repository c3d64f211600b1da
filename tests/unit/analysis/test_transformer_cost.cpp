// TransformerCost and the device / model presets: FLOP and byte formulas against hand
// computations, slice invariants, transfers across nodes, input checks, and a 1F1B
// simulation under the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace test_transformer_cost {

namespace ps = pipesched;
using ps::Action;
using ps::OpKind;

static_assert(ps::cost_model<ps::TransformerCost>);

namespace {

// A GPT-shaped model small enough to compute by hand: b·s·h = 2·32·64 = 4096.
ps::ModelShape tiny_gpt(bool flash = true) {
  ps::ModelShape m;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.sequence = 32;
  m.vocabulary = 100;
  m.microbatch_size = 2;
  m.flash_attention = flash;
  return m;
}

// A Llama-shaped one: SwiGLU, grouped-query attention, odd layer count and sequence.
ps::ModelShape tiny_llama() {
  ps::ModelShape m;
  m.layers = 7;
  m.hidden = 96;
  m.heads = 8;
  m.kv_heads = 2;
  m.ffn_hidden = 256;
  m.gated_mlp = true;
  m.sequence = 45;
  m.vocabulary = 300;
  m.microbatch_size = 3;
  return m;
}

// Round numbers; two ranks per node so that a 4-rank pipeline crosses one node boundary.
ps::DeviceSpec test_device() {
  ps::DeviceSpec d;
  d.name = "test";
  d.peak_flops = 1e12;
  d.memory_bandwidth = 1e11;
  d.memory_bytes = 1e10;
  d.link_bandwidth = 1e10;
  d.link_latency = 1e-6;
  d.ranks_per_node = 2;
  d.node_link_bandwidth = 1e9;
  d.node_link_latency = 1e-5;
  d.max_efficiency = 0.8;
  d.half_flops = 1e6;
  return d;
}

struct NamedModel {
  const char* name;
  ps::ModelShape model;
};

std::vector<NamedModel> shapes() {
  return {{"tiny-gpt", tiny_gpt()},
          {"tiny-gpt-no-flash", tiny_gpt(false)},
          {"tiny-llama", tiny_llama()}};
}

Action act(OpKind k, int stage, int slice = 0, int part = 0) {
  return Action::make(k, stage, 0, slice, part);
}

// A problem with a linear placement; `ctx()` points into it.
struct Pipeline {
  ps::Problem problem;
  ps::Placement placement;
  int parts = 1;
  Pipeline(int ranks, int slices, int wgrad_parts = 1)
      : problem{.ranks = ranks, .stages = ranks, .microbatches = 1, .slices = slices},
        placement(ps::Placement::linear(ranks)),
        parts(wgrad_parts) {}
  ps::CostContext ctx() const { return ps::CostContext{problem, placement, parts}; }
};

void expect_rel(double actual, double expected, double tol = 1e-12) {
  EXPECT_NEAR(actual, expected, tol * std::max(1.0, std::abs(expected)));
}

}  // namespace

TEST(TransformerCost, WholeSequenceFlopsEqualSumOverSlices) {
  for (const NamedModel& nm : shapes()) {
    for (int stages : {1, 2, 3}) {
      for (int K : {2, 3, 5, 8}) {
        SCOPED_TRACE(std::string(nm.name) + " stages=" + std::to_string(stages) +
                     " slices=" + std::to_string(K));
        ps::TransformerCost cost{nm.model, test_device(), {}};
        Pipeline whole(stages, 1), sliced(stages, K);
        for (int s = 0; s < stages; ++s) {
          for (OpKind k : {OpKind::F, OpKind::R, OpKind::I, OpKind::W, OpKind::B}) {
            double sum = 0;
            for (int j = 0; j < K; ++j)
              sum += cost.flops(sliced.ctx(), act(k, s, j));
            expect_rel(sum, cost.flops(whole.ctx(), act(k, s)));
          }
          // Activations other than the attention scores are linear in the tokens; the
          // scores of slices (queries × prefix keys) are less than the whole s × s.
          const double whole_bytes = cost.unit_activation_bytes(whole.ctx(), s);
          const double sliced_bytes = cost.unit_activation_bytes(sliced.ctx(), s);
          if (nm.model.flash_attention)
            expect_rel(sliced_bytes, whole_bytes);
          else
            EXPECT_LT(sliced_bytes, whole_bytes);
        }
      }
    }
  }
}

TEST(TransformerCost, SliceLengthsOverrideTheUniformCut) {
  ps::TransformerCost cost{tiny_llama(), test_device(), {5, 30, 10}};
  Pipeline whole(2, 1), sliced(2, 3);
  EXPECT_EQ(cost.slice_span(sliced.ctx(), 1).offset, 5);
  EXPECT_EQ(cost.slice_span(sliced.ctx(), 1).length, 30);
  EXPECT_EQ(cost.slice_span(sliced.ctx(), 2).offset, 35);
  ps::TransformerCost whole_cost{tiny_llama(), test_device(), {}};
  for (OpKind k : {OpKind::F, OpKind::I, OpKind::W}) {
    SCOPED_TRACE(std::string(ps::to_string(k)));
    double sum = 0;
    for (int j = 0; j < 3; ++j)
      sum += cost.flops(sliced.ctx(), act(k, 1, j));
    expect_rel(sum, whole_cost.flops(whole.ctx(), act(k, 1)));
  }
  // Uniform cut: s / K each, the last slice takes the remainder (45 = 11 + 11 + 11 + 12).
  ps::TransformerCost uniform{tiny_llama(), test_device(), {}};
  Pipeline four(2, 4);
  EXPECT_EQ(uniform.slice_span(four.ctx(), 2).offset, 22);
  EXPECT_EQ(uniform.slice_span(four.ctx(), 2).length, 11);
  EXPECT_EQ(uniform.slice_span(four.ctx(), 3).length, 12);
}

TEST(TransformerCost, LaterSlicesCostMoreUnderCausalAttention) {
  for (const NamedModel& nm : shapes()) {
    SCOPED_TRACE(nm.name);
    ps::ModelShape m = nm.model;
    m.sequence = 64;  // 4 equal slices of 16 tokens
    ps::TransformerCost cost{m, test_device(), {}};
    Pipeline st(1, 4);
    const double b = m.microbatch_size, h = m.hidden, t = 16;
    for (int j = 0; j + 1 < 4; ++j) {
      SCOPED_TRACE("slice " + std::to_string(j));
      for (OpKind k : {OpKind::F, OpKind::I, OpKind::B}) {
        EXPECT_LT(cost.flops(st.ctx(), act(k, 0, j)), cost.flops(st.ctx(), act(k, 0, j + 1)));
        EXPECT_LT(cost.duration(st.ctx(), act(k, 0, j)), cost.duration(st.ctx(), act(k, 0, j + 1)));
      }
      // The next slice attends to t more keys per query: 2·2·b·h·t·t more per layer.
      expect_rel(cost.flops(st.ctx(), act(OpKind::F, 0, j + 1)) -
                     cost.flops(st.ctx(), act(OpKind::F, 0, j)),
                 m.layers * 4 * b * h * t * t);
      // Weight gradients do not depend on the prefix.
      expect_rel(cost.flops(st.ctx(), act(OpKind::W, 0, j)),
                 cost.flops(st.ctx(), act(OpKind::W, 0, j + 1)));
    }
  }
}

TEST(TransformerCost, ForwardFlopsMatchHandCount) {
  // tiny-gpt, one stage of 4 layers plus the LM head, whole sequence:
  // GEMMs 2·b·s·h·(3h + h) + 2·b·s·h·4h·2 = 24·b·s·h² per layer; attention
  // 4·b·h·s(s+1)/2; head 2·b·s·h·V.
  ps::TransformerCost cost{tiny_gpt(), test_device(), {}};
  Pipeline st(1, 1);
  const double b = 2, s = 32, h = 64, V = 100;
  const double layer = 24 * b * s * h * h + 4 * b * h * s * (s + 1) / 2;
  expect_rel(cost.flops(st.ctx(), act(OpKind::F, 0)), 4 * layer + 2 * b * s * h * V);
  expect_rel(cost.flops(st.ctx(), act(OpKind::W, 0)), 4 * 24 * b * s * h * h + 2 * b * s * h * V);
  expect_rel(cost.flops(st.ctx(), act(OpKind::I, 0)),
             4 * (24 * b * s * h * h + 8 * b * h * s * (s + 1) / 2) + 2 * b * s * h * V);
  expect_rel(cost.flops(st.ctx(), act(OpKind::B, 0)),
             cost.flops(st.ctx(), act(OpKind::I, 0)) + cost.flops(st.ctx(), act(OpKind::W, 0)));
}

TEST(TransformerCost, SmallGemmsRunBelowPeak) {
  const ps::DeviceSpec d = ps::presets::find_device("h100");
  EXPECT_LT(d.efficiency(1e6), d.efficiency(1e9));
  EXPECT_LT(d.efficiency(1e9), d.efficiency(1e13));
  EXPECT_LT(d.efficiency(1e13), d.max_efficiency);
  EXPECT_NEAR(d.efficiency(d.half_flops), d.max_efficiency / 2, 1e-12);
  expect_rel(d.gemm_time(1e12), 1e12 / (d.peak_flops * d.efficiency(1e12)));
  EXPECT_EQ(d.gemm_time(0), 0.0);

  // Achieved FLOP/s of a forward: a 1/16 slice runs further below peak than the sequence.
  ps::TransformerCost cost{ps::presets::find_model("llama2-7b"), d, {}};
  Pipeline whole(4, 1), sliced(4, 16);
  const double rate_whole =
      cost.flops(whole.ctx(), act(OpKind::F, 1)) / cost.duration(whole.ctx(), act(OpKind::F, 1));
  const double rate_slice =
      cost.flops(sliced.ctx(), act(OpKind::F, 1)) / cost.duration(sliced.ctx(), act(OpKind::F, 1));
  EXPECT_LT(rate_slice, rate_whole);
  EXPECT_LT(rate_whole, d.peak_flops * d.max_efficiency);
  EXPECT_GT(rate_whole, 0.5 * d.peak_flops * d.max_efficiency);
}

TEST(TransformerCost, ActivationBytesFollowKorthikanti) {
  // 4 layers over 2 stages: 2 per stage. b·s·h = 4096, a = 4, s = 32.
  Pipeline st(2, 1);
  // Without flash attention: s·b·h·(34 + 5·a·s/h) per layer = 4096·(34 + 10) = 180224.
  ps::TransformerCost no_flash{tiny_gpt(false), test_device(), {}};
  EXPECT_DOUBLE_EQ(no_flash.activation_bytes(st.ctx(), 0, 0), 2 * 180224.0);
  // With it the score term goes: 34·s·b·h.
  ps::TransformerCost flash{tiny_gpt(true), test_device(), {}};
  EXPECT_DOUBLE_EQ(flash.activation_bytes(st.ctx(), 0, 0), 2 * 34 * 4096.0);
  // The last stage adds b·s·(2·v·h + 4·V): norm and head inputs, 32-bit logits.
  EXPECT_DOUBLE_EQ(flash.activation_bytes(st.ctx(), 1, 0),
                   2 * 34 * 4096.0 + 2 * 32 * (2 * 2 * 64 + 4 * 100.0));
  EXPECT_DOUBLE_EQ(flash.unit_activation_bytes(st.ctx(), 0), 2 * 34 * 4096.0);
  // A slice: t = 8 tokens from o = 16: 34·b·t·h + 5·a·b·t·(o + t) per layer.
  Pipeline four(2, 4);
  EXPECT_DOUBLE_EQ(no_flash.activation_bytes(four.ctx(), 0, 2),
                   2 * (34.0 * 2 * 8 * 64 + 5.0 * 4 * 2 * 8 * 24));
  // 32-bit activations: every tensor doubles except the 1-byte dropout masks (2 of 34):
  // 2·32 + 2 = 66 bytes per token and hidden unit.
  ps::ModelShape wide = tiny_gpt(true);
  wide.bytes_per_value = 4;
  ps::TransformerCost fp32{wide, test_device(), {}};
  EXPECT_DOUBLE_EQ(fp32.activation_bytes(st.ctx(), 0, 0), 2 * 66 * 4096.0);
}

TEST(TransformerCost, CheckpointedForwardPlusRecomputeEqualsFullForward) {
  for (const NamedModel& nm : shapes()) {
    for (int K : {1, 3}) {
      Pipeline st(3, K);
      ps::TransformerCost cost{nm.model, test_device(), {}};
      for (int s = 0; s < 3; ++s) {
        for (int j = 0; j < K; ++j) {
          SCOPED_TRACE(std::string(nm.name) + " slices=" + std::to_string(K) +
                       " stage=" + std::to_string(s) + " slice=" + std::to_string(j));
          const auto ctx = st.ctx();
          const double full = cost.memory_delta(ctx, act(OpKind::F, s, j), false);
          const double kept = cost.memory_delta(ctx, act(OpKind::F, s, j), true);
          const double r = cost.memory_delta(ctx, act(OpKind::R, s, j), true);
          EXPECT_GT(full, 0);
          EXPECT_GT(kept, 0);
          EXPECT_LT(kept, full);
          expect_rel(kept + r, full);
          expect_rel(cost.memory_delta(ctx, act(OpKind::B, s, j), true), -full);
          // The boundary: the stage input b·t·h·v, plus the keys and values of the stage's
          // layers for every slice a later slice attends to.
          const ps::ModelShape& m = nm.model;
          const double bt = double(m.microbatch_size) * cost.slice_span(ctx, j).length;
          const double kv = double(m.key_value_heads()) / m.heads;
          const double context =
              j + 1 < K ? cost.layers_of(ctx, s) * bt * 2 * m.hidden * kv * 2 : 0.0;
          expect_rel(kept, bt * m.hidden * 2 + context);
          EXPECT_EQ(cost.duration(ctx, act(OpKind::R, s, j)),
                    cost.duration(ctx, act(OpKind::F, s, j)));
        }
      }
    }
  }
}

TEST(TransformerCost, InputAndWeightGradientsFreeWhatForwardAdded) {
  for (const NamedModel& nm : shapes()) {
    for (int parts : {1, 2, 3}) {
      Pipeline st(2, 2, parts);
      ps::TransformerCost cost{nm.model, test_device(), {}};
      for (int s = 0; s < 2; ++s) {
        for (int j = 0; j < 2; ++j) {
          SCOPED_TRACE(std::string(nm.name) + " parts=" + std::to_string(parts) +
                       " stage=" + std::to_string(s) + " slice=" + std::to_string(j));
          const auto ctx = st.ctx();
          const double f = cost.memory_delta(ctx, act(OpKind::F, s, j), false);
          const double i = cost.memory_delta(ctx, act(OpKind::I, s, j), false);
          double w = 0, w_time = 0, w_flops = 0;
          for (int p = 0; p < parts; ++p) {
            w += cost.memory_delta(ctx, act(OpKind::W, s, j, p), false);
            w_time += cost.duration(ctx, act(OpKind::W, s, j, p));
            w_flops += cost.flops(ctx, act(OpKind::W, s, j, p));
          }
          EXPECT_LT(i, 0);
          EXPECT_LT(w, 0);
          expect_rel(i + w, -f);
          expect_rel(w, -cost.wgrad_bytes(ctx, s, j));
          // B does what I and W do together, in time and FLOPs.
          expect_rel(cost.duration(ctx, act(OpKind::B, s, j)),
                     cost.duration(ctx, act(OpKind::I, s, j)) + w_time);
          expect_rel(cost.flops(ctx, act(OpKind::B, s, j)),
                     cost.flops(ctx, act(OpKind::I, s, j)) + w_flops);
        }
      }
    }
  }
  // GPT shape, a stage without the head: W keeps the inputs and output gradients of the
  // weight GEMMs, 16 values per token and hidden unit: 32·b·t·h bytes per layer.
  Pipeline st(2, 1);
  ps::TransformerCost gpt{tiny_gpt(), test_device(), {}};
  EXPECT_DOUBLE_EQ(gpt.wgrad_bytes(st.ctx(), 0, 0), 2 * 32 * 4096.0);
}

TEST(TransformerCost, TransferUsesTheNodeLinkAcrossNodes) {
  ps::TransformerCost cost{tiny_gpt(), test_device(), {}};  // 2 ranks per node
  Pipeline st(4, 4);                                        // 4 slices of 8 tokens
  const auto ctx = st.ctx();
  const double bytes = 2.0 * 8 * 64 * 2;  // b·t·h·v
  EXPECT_DOUBLE_EQ(cost.message_bytes(ctx, 1), bytes);
  const double intra = 1e-6 + bytes / 1e10, inter = 1e-5 + bytes / 1e9;
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::F, 0, 1)), intra);  // rank 0 → 1
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::F, 1, 1)), inter);  // rank 1 → 2
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::SendF, 1, 1)), inter);
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::F, 2, 1)), intra);  // rank 2 → 3
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::F, 3, 1)), 0.0);    // no next stage
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::B, 2, 1)), inter);  // rank 2 → 1
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::I, 1, 1)), intra);  // rank 1 → 0
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::SendB, 2, 1)), inter);
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::B, 0, 1)), 0.0);  // no previous
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::W, 2, 1)), 0.0);
  EXPECT_DOUBLE_EQ(cost.transfer_time(ctx, act(OpKind::R, 2, 1)), 0.0);

  // Neighbouring stages on the same rank exchange nothing.
  ps::Problem p{.ranks = 2, .stages = 4, .microbatches = 1, .slices = 1};
  ps::Placement pl = ps::Placement::from_map({0, 0, 1, 1}, 2);
  ps::CostContext c2{p, pl};
  EXPECT_DOUBLE_EQ(cost.transfer_time(c2, act(OpKind::F, 0)), 0.0);
  EXPECT_GT(cost.transfer_time(c2, act(OpKind::F, 1)), 0.0);
  EXPECT_DOUBLE_EQ(cost.transfer_time(c2, act(OpKind::B, 3)), 0.0);
}

TEST(TransformerCost, LayersSplitEvenlyEarlierStagesTakeTheRemainder) {
  ps::TransformerCost cost{tiny_llama(), test_device(), {}};  // 7 layers
  Pipeline st(3, 1);
  EXPECT_EQ(cost.layers_of(st.ctx(), 0), 3);
  EXPECT_EQ(cost.layers_of(st.ctx(), 1), 2);
  EXPECT_EQ(cost.layers_of(st.ctx(), 2), 2);
  // Stages 1 and 2 hold the same layers; only the last adds the LM head.
  EXPECT_LT(cost.flops(st.ctx(), act(OpKind::F, 1)), cost.flops(st.ctx(), act(OpKind::F, 2)));
}

TEST(TransformerCost, StaticBytesCountSixteenBytesPerParameter) {
  for (const NamedModel& nm : shapes()) {
    SCOPED_TRACE(nm.name);
    ps::TransformerCost cost{nm.model, test_device(), {}};
    const double all = 16 * nm.model.parameters();
    Pipeline one(1, 1);
    expect_rel(cost.static_bytes(one.ctx(), 0), all);
    // Interleaved: 2 ranks, 4 stages (0 and 2 on rank 0); the ranks share the model.
    ps::Problem p{.ranks = 2, .stages = 4, .microbatches = 1, .slices = 1};
    ps::Placement pl = ps::Placement::interleaved(2, 2);
    ps::CostContext ctx{p, pl};
    expect_rel(cost.static_bytes(ctx, 0) + cost.static_bytes(ctx, 1), all);
    const double layers0 = cost.layers_of(ctx, 0) + cost.layers_of(ctx, 2);
    expect_rel(cost.static_bytes(ctx, 0),
               16 * (layers0 * nm.model.layer_parameters() + nm.model.embedding_parameters()));
    EXPECT_THROW(cost.static_bytes(ctx, 2), ps::invalid_problem);
  }
}

TEST(TransformerCost, RejectsBadInputsNamingTheField) {
  struct Case {
    const char* what;
    std::function<void(ps::TransformerCost&, ps::Problem&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"hidden % heads", [](auto& c, auto&) { c.model.hidden = 65; }, "ModelShape.hidden = 65"},
      {"layers", [](auto& c, auto&) { c.model.layers = 0; }, "ModelShape.layers = 0"},
      {"sequence", [](auto& c, auto&) { c.model.sequence = -3; }, "ModelShape.sequence = -3"},
      {"kv_heads", [](auto& c, auto&) { c.model.kv_heads = 3; }, "ModelShape.kv_heads = 3"},
      {"bytes", [](auto& c, auto&) { c.model.bytes_per_value = 3; }, "bytes_per_value = 3"},
      {"batch", [](auto& c, auto&) { c.model.microbatch_size = 0; }, "microbatch_size = 0"},
      {"peak", [](auto& c, auto&) { c.device.peak_flops = 0; }, "DeviceSpec.peak_flops"},
      {"link", [](auto& c, auto&) { c.device.node_link_bandwidth = -1; }, "node_link_bandwidth"},
      {"efficiency", [](auto& c, auto&) { c.device.max_efficiency = 1.5; }, "max_efficiency"},
      {"per node", [](auto& c, auto&) { c.device.ranks_per_node = 0; }, "ranks_per_node = 0"},
      {"slice sum",
       [](auto& c, auto& p) {
         p.slices = 2, c.slice_lengths = {10, 10};
       },
       "sum to 20"},
      {"slice count",
       [](auto& c, auto& p) {
         p.slices = 3, c.slice_lengths = {16, 16};
       },
       "slice_lengths has 2 entries"},
      {"slice zero",
       [](auto& c, auto& p) {
         p.slices = 2, c.slice_lengths = {0, 32};
       },
       "slice_lengths[0] = 0"},
      {"slices > sequence", [](auto&, auto& p) { p.slices = 33; }, "Problem.slices = 33"},
      {"stages > layers", [](auto& c, auto&) { c.model.layers = 1; }, "cannot be split over 2"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    ps::TransformerCost cost{tiny_gpt(), test_device(), {}};
    ps::Problem p{.ranks = 2, .stages = 2, .microbatches = 1, .slices = 1};
    k.edit(cost, p);
    ps::Placement pl = ps::Placement::linear(2);
    ps::CostContext ctx{p, pl};
    try {
      (void)cost.duration(ctx, act(OpKind::F, 0));
      ADD_FAILURE() << "expected invalid_problem";
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(k.message), std::string::npos) << e.what();
    }
  }
  // An action outside the problem is a schedule error.
  ps::TransformerCost cost{tiny_gpt(), test_device(), {}};
  Pipeline st(2, 2);
  EXPECT_THROW((void)cost.duration(st.ctx(), act(OpKind::F, 2)), ps::invalid_schedule);
  EXPECT_THROW((void)cost.memory_delta(st.ctx(), act(OpKind::F, 0, 2), false),
               ps::invalid_schedule);
}

TEST(Presets, DevicesAndModelsFoundByName) {
  for (const auto& p : ps::presets::devices()) {
    SCOPED_TRACE(p.name);
    EXPECT_FALSE(p.description.empty());
    const ps::DeviceSpec d = ps::presets::find_device(p.name);
    EXPECT_EQ(d.name, p.name);
    EXPECT_NO_THROW(d.check());
    EXPECT_GE(d.ranks_per_node, 1);
    EXPECT_GT(d.link_bandwidth, d.node_link_bandwidth);  // inside a node is faster
  }
  for (const auto& p : ps::presets::models()) {
    SCOPED_TRACE(p.name);
    EXPECT_FALSE(p.description.empty());
    EXPECT_NO_THROW(ps::presets::find_model(p.name).check());
  }
  EXPECT_EQ(ps::presets::devices().size(), 5u);
  EXPECT_EQ(ps::presets::models().size(), 5u);
  EXPECT_EQ(ps::presets::find_device("H100").name, "h100");
  EXPECT_DOUBLE_EQ(ps::presets::find_device("rtx-4090").link_bandwidth,
                   24e9);  // NCCL's PCIe Gen4 ×16 figure
  EXPECT_EQ(ps::presets::find_model("llama2-34b").key_value_heads(), 8);
  EXPECT_TRUE(ps::presets::find_model("Llama2-7B").gated_mlp);
}

TEST(Presets, ModelParameterCountsMatchPublishedSizes) {
  // Released checkpoints (embedding and LM head untied; their norm scales, which the model
  // leaves out, are under 0.01 %): Llama-2-7b 6,738,415,616; Llama-2-13b 13,015,864,320;
  // CodeLlama-34b 33,743,970,304 parameters.
  struct Want {
    const char* name;
    double params;
    double tol;
  };
  for (const Want& w :
       {Want{"llama2-7b", 6738415616.0, 1e-4}, Want{"llama2-13b", 13015864320.0, 1e-4},
        Want{"llama2-34b", 33743970304.0, 1e-4},
        // GPT-3 counts tied embeddings once; the pipeline holds two copies.
        Want{"gpt3-1.3b", 1.3e9, 0.1}, Want{"gpt3-13b", 13e9, 0.05}}) {
    SCOPED_TRACE(w.name);
    EXPECT_NEAR(ps::presets::find_model(w.name).parameters(), w.params, w.tol * w.params);
  }
}

TEST(Presets, UnknownNamesRejectedWithTheKnownList) {
  try {
    (void)ps::presets::find_device("tpu-v9");
    ADD_FAILURE() << "expected invalid_problem";
  } catch (const ps::invalid_problem& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tpu-v9"), std::string::npos) << msg;
    for (const auto& p : ps::presets::devices())
      EXPECT_NE(msg.find(p.name), std::string::npos) << msg;
  }
  try {
    (void)ps::presets::find_model("gpt-5");
    ADD_FAILURE() << "expected invalid_problem";
  } catch (const ps::invalid_problem& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gpt-5"), std::string::npos) << msg;
    for (const auto& p : ps::presets::models())
      EXPECT_NE(msg.find(p.name), std::string::npos) << msg;
  }
}

TEST(TransformerCost, OneFOneBSimulationGivesPlausibleTimeAndMemory) {
  for (ps::WGradMode mode : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    SCOPED_TRACE(ps::to_string(mode));
    const int p = 4, m = 8;
    ps::Schedule s = ps::schedule::one_f_one_b({.ranks = p, .microbatches = m}, mode);
    ps::TransformerCost cost{
        ps::presets::find_model("llama2-7b"), ps::presets::find_device("h100"), {}};
    ps::SimulationResult res = ps::simulate(s, cost);
    ASSERT_FALSE(res.deadlock) << res.deadlock_report;
    ps::CostContext ctx{s.problem, s.placement};
    double slowest = 0;
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      // Linear 1F1B holds p − r microbatches at its peak, and frees everything by the end.
      expect_rel(res.ranks[r].peak_memory, (p - r) * cost.unit_activation_bytes(ctx, r), 1e-9);
      ASSERT_FALSE(res.ranks[r].memory.empty());
      EXPECT_NEAR(res.ranks[r].memory.back().value, 0.0, 1e-9 * cost.unit_activation_bytes(ctx, r));
      const double fb =
          cost.duration(ctx, act(OpKind::F, r)) + cost.duration(ctx, act(OpKind::B, r));
      EXPECT_GE(res.makespan, m * fb);
      slowest = std::max(slowest, fb);
    }
    EXPECT_LT(res.makespan, 2.0 * (m + p - 1) * slowest);
    // Model FLOPs utilisation (6 · parameters · tokens over p GPUs' peak) lands where
    // real 4-stage runs do, between 20 % and 75 %.
    const ps::ModelShape& model = cost.model;
    const double tokens = double(m) * model.microbatch_size * model.sequence;
    const double mfu =
        6 * model.parameters() * tokens / (res.makespan * p * cost.device.peak_flops);
    EXPECT_GT(mfu, 0.2) << "makespan " << res.makespan << " s";
    EXPECT_LT(mfu, 0.75) << "makespan " << res.makespan << " s";
    // Rank 0 of Llama 2 7B on 4 H100s fits: its weights, gradients and Adam states
    // (about 28 GB) plus 4 microbatches of activations (about 18 GB) stay below 80 GiB.
    EXPECT_LT(cost.static_bytes(ctx, 0) + res.ranks[0].peak_memory, cost.device.memory_bytes);
  }
}

// ---------------------------------------------------------------------------------------
// Parallelism: tensor, sequence and data parallelism, ZeRO, layer splits, whole-step costs.

namespace {

// GPT shape (f = 4h, multi-head, plain MLP) in 16-bit with flash attention: Korthikanti et
// al.'s per-layer activation bytes are s·b·h·(10 + 24/t), and s·b·h·34/t with sequence
// parallelism.
ps::TransformerCost tensor_cost(int t, bool sp) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  ps::TransformerCost c{tiny_gpt(), d, {}};
  c.parallel.tensor = t;
  c.parallel.sequence_parallel = sp;
  return c;
}

}  // namespace

TEST(TransformerCostParallel, TensorParallelActivationsFollowKorthikanti) {
  const ps::ModelShape m = tiny_gpt();
  const double sbh = static_cast<double>(m.sequence) * m.microbatch_size * m.hidden;
  Pipeline p(2, 1);  // stage 0: layers only (the embedding adds no activations)
  const int n = ps::TransformerCost{m, test_device(), {}}.layers_of(p.ctx(), 0);
  for (int t : {1, 2, 4}) {
    SCOPED_TRACE("t=" + std::to_string(t));
    expect_rel(tensor_cost(t, false).activation_bytes(p.ctx(), 0, 0), n * sbh * (10 + 24.0 / t));
    expect_rel(tensor_cost(t, true).activation_bytes(p.ctx(), 0, 0), n * sbh * 34.0 / t);
    // FLOPs split evenly; the stage boundary is replicated without sequence parallelism.
    expect_rel(tensor_cost(t, false).flops(p.ctx(), act(OpKind::F, 0)),
               tensor_cost(1, false).flops(p.ctx(), act(OpKind::F, 0)) / t);
    expect_rel(tensor_cost(t, false).boundary_bytes(p.ctx(), 1, 0), sbh * 2);
    expect_rel(tensor_cost(t, true).boundary_bytes(p.ctx(), 1, 0), sbh * 2 / t);
  }
}

TEST(TransformerCostParallel, TensorParallelCollectivesAreRingAllReduces) {
  // The same cost with the fastest link a device may have (1e14 B/s, no latency) isolates the
  // collectives' time: the difference is the ring's time at the two bandwidths.
  Pipeline p(2, 1);
  const ps::ModelShape m = tiny_gpt();
  const double bytes = 2.0 * m.microbatch_size * m.sequence * m.hidden;  // b·s·h·v
  for (int t : {2, 4}) {
    ps::TransformerCost slow = tensor_cost(t, false), free = slow;
    free.device.link_bandwidth = 1e14;
    free.device.link_latency = 0;
    const double ring = 2.0 * (t - 1) / t * bytes *
                            (1 / slow.device.link_bandwidth - 1 / free.device.link_bandwidth) +
                        2.0 * (t - 1) * slow.device.link_latency;
    const int n = slow.layers_of(p.ctx(), 1);
    auto extra = [&](OpKind k, int stage) {
      return slow.duration(p.ctx(), act(k, stage)) - free.duration(p.ctx(), act(k, stage));
    };
    SCOPED_TRACE("t=" + std::to_string(t));
    expect_rel(extra(OpKind::F, 1), 2 * n * ring, 1e-9);
    expect_rel(extra(OpKind::R, 1), 2 * n * ring, 1e-9);
    expect_rel(extra(OpKind::I, 1), (2 * n + 1) * ring, 1e-9);  // + the LM head's input gradient
    expect_rel(extra(OpKind::B, 1), (2 * n + 1) * ring, 1e-9);
    EXPECT_NEAR(extra(OpKind::W, 1), 0.0, 1e-15);
    expect_rel(extra(OpKind::F, 0), (2 * n + 1) * ring, 1e-9);  // + the embedding's
    // Without tensor parallelism, no collective.
    ps::TransformerCost one = tensor_cost(1, false), one_free = one;
    one_free.device.link_bandwidth = 1e14;
    one_free.device.link_latency = 0;
    EXPECT_DOUBLE_EQ(one.duration(p.ctx(), act(OpKind::F, 1)),
                     one_free.duration(p.ctx(), act(OpKind::F, 1)));
  }
}

TEST(TransformerCostParallel, StaticBytesFollowZeroAndTensorSplit) {
  Pipeline p(2, 1);
  ps::TransformerCost c{tiny_llama(), test_device(), {}};
  c.device.ranks_per_node = 8;
  const double params = c.stage_parameters(p.ctx(), 0);
  expect_rel(c.static_bytes(p.ctx(), 0), 16 * params);
  c.parallel.data = 4;
  expect_rel(c.static_bytes(p.ctx(), 0), 16 * params);  // no ZeRO: every replica holds all
  c.parallel.zero = 1;
  expect_rel(c.static_bytes(p.ctx(), 0), (4 + 12.0 / 4) * params);
  c.parallel.zero = 2;
  expect_rel(c.static_bytes(p.ctx(), 0), (2 + 14.0 / 4) * params);
  c.parallel.tensor = 2;
  expect_rel(c.static_bytes(p.ctx(), 0), (2 + 14.0 / 4) * params / 2);
}

TEST(TransformerCostParallel, TiedEmbeddingsAreHeldOnceByOneStageAndTwiceByAPipeline) {
  ps::ModelShape tied = tiny_llama();
  tied.tied_embeddings = true;
  const double layers = tied.layers * tied.layer_parameters(), V_h = tied.embedding_parameters();
  Pipeline one(1, 1), two(2, 1);
  const ps::TransformerCost untied_cost{tiny_llama(), test_device(), {}};
  const ps::TransformerCost tied_cost{tied, test_device(), {}};
  expect_rel(untied_cost.stage_parameters(one.ctx(), 0), layers + 2 * V_h);
  expect_rel(tied_cost.stage_parameters(one.ctx(), 0), layers + V_h);
  // Across stages each end keeps its copy (its gradients are summed between them).
  for (int stage = 0; stage < 2; ++stage)
    EXPECT_DOUBLE_EQ(tied_cost.stage_parameters(two.ctx(), stage),
                     untied_cost.stage_parameters(two.ctx(), stage));
}

TEST(TransformerCostParallel, LayerSplitIsTheOneGiven) {
  Pipeline p(3, 1);
  ps::TransformerCost c{tiny_llama(), test_device(), {}};  // 7 layers
  EXPECT_EQ(c.layers_of(p.ctx(), 0), 3);
  c.parallel.layers = {1, 2, 4};
  EXPECT_EQ(c.layers_of(p.ctx(), 0), 1);
  EXPECT_EQ(c.layers_of(p.ctx(), 2), 4);
  expect_rel(c.flops(p.ctx(), act(OpKind::F, 1)) * 2,
             c.flops(p.ctx(), act(OpKind::F, 2)) - 2.0 * 3 * 45 * 96 * 300);  // LM head
  auto refused = [&](std::vector<int> layers, const std::string& says) {
    ps::TransformerCost bad = c;
    bad.parallel.layers = std::move(layers);
    try {
      (void)bad.flops(p.ctx(), act(OpKind::F, 0));
      ADD_FAILURE() << "accepted a split that " << says;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({3, 4}, "one layer count per stage");
  refused({2, 2, 2}, "sum to 6 layers");
  refused({3, 0, 4}, "at least one layer");
}

TEST(TransformerCostParallel, TensorDegreeMustDivideTheModelAndTheNode) {
  Pipeline p(2, 1);
  for (auto [t, per_node, says] :
       {std::tuple{3, 8, "heads = 8"}, std::tuple{4, 8, "kv_heads) = 2"}}) {
    ps::TransformerCost c{tiny_llama(), test_device(), {}};
    c.device.ranks_per_node = per_node;
    c.parallel.tensor = t;
    try {
      c.check();
      ADD_FAILURE() << "accepted tensor " << t;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  ps::TransformerCost c{tiny_gpt(), test_device(), {}};  // 2 ranks per node
  c.parallel.tensor = 4;
  EXPECT_THROW(c.check(), ps::invalid_problem);  // a tensor group stays inside its node
}

TEST(TransformerCostParallel, GradientSyncIsARingOverTheReplicasLink) {
  // 2 pipeline ranks; 8 GPUs per node. d = 4, t = 1: each pipeline rank's replicas sit on
  // one node (GPUs 0-3 and 4-7); d = 8: rank 0's replicas fill node 0 too; t = 2, d = 8: 16
  // GPUs per rank, over two nodes, each node's 2 rings sharing its port(s).
  Pipeline p(2, 1);
  ps::TransformerCost c{tiny_gpt(), test_device(), {}};
  c.device.ranks_per_node = 8;
  const double grads = 2 * c.stage_parameters(p.ctx(), 1);
  EXPECT_EQ(c.step_tail(p.ctx(), 1), 0.0);  // one replica: nothing to synchronise
  auto ring = [](double bytes, int n, double bw, double lat) {
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
  };
  c.parallel.data = 4;
  expect_rel(c.gradient_sync_seconds(p.ctx(), 1),
             ring(grads, 4, c.device.link_bandwidth, c.device.link_latency));
  c.parallel.data = 8;
  expect_rel(c.gradient_sync_seconds(p.ctx(), 1),
             ring(grads, 8, c.device.link_bandwidth, c.device.link_latency));
  c.parallel.tensor = 2;
  expect_rel(c.gradient_sync_seconds(p.ctx(), 1),
             ring(grads / 2, 8, c.device.node_link_bandwidth, c.device.node_link_latency));
  c.device.node_ports = 1;  // one port for the node's two rings
  expect_rel(c.gradient_sync_seconds(p.ctx(), 1),
             ring(grads / 2, 8, c.device.node_link_bandwidth / 2, c.device.node_link_latency));
  // ZeRO moves the same bytes; the optimizer step comes with whole_step only.
  c.parallel.zero = 2;
  expect_rel(c.step_tail(p.ctx(), 1), c.gradient_sync_seconds(p.ctx(), 1));
  c.parallel.whole_step = true;
  expect_rel(c.optimizer_seconds(p.ctx(), 1),
             28 * c.stage_parameters(p.ctx(), 1) / 2 / 8 / c.device.memory_bandwidth);
  expect_rel(c.step_tail(p.ctx(), 1),
             c.gradient_sync_seconds(p.ctx(), 1) + c.optimizer_seconds(p.ctx(), 1));
}

TEST(TransformerCostParallel, SimulatorAddsTheStepTail) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 16;  // every GPU on one node, with and without replicas
  ps::TransformerCost plain{tiny_gpt(), d, {}}, replicated = plain;
  replicated.parallel.data = 4;
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::SimulationResult a = ps::simulate(s, plain), b = ps::simulate(s, replicated);
  const ps::CostContext ctx{s.problem, s.placement, 1};
  double expected = 0;
  for (int r = 0; r < 4; ++r) {
    expect_rel(b.ranks[r].end, a.ranks[r].end + replicated.step_tail(ctx, r));
    expected = std::max(expected, a.ranks[r].end + replicated.step_tail(ctx, r));
  }
  expect_rel(b.makespan, expected);
  EXPECT_GT(b.makespan, a.makespan);
}

TEST(TransformerCostParallel, WorkspaceIsOneLayerAndTheLogitsGradient) {
  Pipeline p(2, 1);
  ps::TransformerCost c{tiny_gpt(), test_device(), {}};
  const double before = c.static_bytes(p.ctx(), 1);
  EXPECT_EQ(c.workspace_bytes(p.ctx(), 1), 0.0);
  c.parallel.whole_step = true;
  const ps::ModelShape& m = c.model;
  const double sbh = static_cast<double>(m.sequence) * m.microbatch_size * m.hidden;
  const double logits = 4.0 * m.sequence * m.microbatch_size * m.vocabulary;
  expect_rel(c.workspace_bytes(p.ctx(), 0), 34 * sbh);
  expect_rel(c.workspace_bytes(p.ctx(), 1), 34 * sbh + logits);
  expect_rel(c.static_bytes(p.ctx(), 1), before + 34 * sbh + logits);
}

TEST(TransformerCostParallel, TrainingFlopsAreThreeForwards) {
  for (const NamedModel& nm : shapes()) {
    ps::ModelShape m = nm.model;
    m.microbatch_size = 1;
    ps::TransformerCost c{m, test_device(), {}};
    Pipeline p(3, 1);
    double forward = 0;
    for (int s = 0; s < 3; ++s)
      forward += c.flops(p.ctx(), act(OpKind::F, s));
    expect_rel(m.training_flops_per_sequence(), 3 * forward, 1e-12);
  }
}

TEST(TransformerCostParallel, MessagesSplitOverTheTensorGroupAndNodesFollowThePlacement) {
  // 2 pipeline ranks of t·d = 8 GPUs on nodes of 8: the boundary between them crosses nodes.
  Pipeline p(2, 1);
  ps::TransformerCost c{tiny_gpt(), test_device(), {}};
  c.device.ranks_per_node = 8;
  const double bytes = c.message_bytes(p.ctx(), 0);
  expect_rel(c.transfer_time(p.ctx(), act(OpKind::F, 0)), c.device.link_latency + bytes / 1e10);
  c.parallel.tensor = 2;
  c.parallel.data = 4;
  EXPECT_EQ(c.node_of(1), 1);
  expect_rel(c.transfer_time(p.ctx(), act(OpKind::F, 0)),
             c.device.node_link_latency + bytes / 2 / c.device.node_link_bandwidth);
  c.device.node_ports = 2;  // 8 senders share 2 ports
  expect_rel(c.transfer_time(p.ctx(), act(OpKind::F, 0)),
             c.device.node_link_latency + bytes / 2 / (c.device.node_link_bandwidth * 2 / 8));
}

TEST(TransformerCostParallel, BalancedSplitGivesTheLastStageFewerLayersForItsHead) {
  // Llama 2 13B over 16 stages: 40 layers, the head ≈ 0.6 layers' FLOPs.
  ps::TransformerCost c{
      ps::presets::find_model("llama2-13b"), ps::presets::find_device("h100"), {}};
  Pipeline p(16, 1);
  c.parallel.split = ps::LayerSplit::Balanced;
  const double e = c.head_layers();
  EXPECT_GT(e, 0.3);
  EXPECT_LT(e, 1.0);
  int sum = 0;
  for (int s = 0; s < 16; ++s)
    sum += c.layers_of(p.ctx(), s);
  EXPECT_EQ(sum, 40);
  EXPECT_EQ(c.layers_of(p.ctx(), 15), static_cast<int>(std::lround((40 + e) / 16 - e)));
  EXPECT_EQ(c.layers_of(p.ctx(), 15), 2);
  EXPECT_EQ(c.layers_of(p.ctx(), 0), 3);  // 38 over 15: the first eight take 3
  // The slowest stage is faster than under the even split (3 layers + head on the last).
  auto slowest = [&](ps::LayerSplit split) {
    c.parallel.split = split;
    double most = 0;
    for (int s = 0; s < 16; ++s)
      most = std::max(most, c.duration(p.ctx(), act(OpKind::F, s)));
    return most;
  };
  EXPECT_LE(slowest(ps::LayerSplit::Balanced), slowest(ps::LayerSplit::Even));
}

TEST(TransformerCostParallel, PerGemmWeightGradientPartsAddUpToTheWholeW) {
  for (const NamedModel& nm : shapes()) {
    ps::TransformerCost cost{nm.model, test_device(), {}};
    cost.parallel.tensor = 2;
    cost.device.ranks_per_node = 8;
    if (nm.model.key_value_heads() % 2 != 0) cost.parallel.tensor = 1;
    Pipeline whole(2, 1);
    const int G = cost.weight_gemms(whole.ctx(), 1);
    EXPECT_EQ(G, 4 * cost.layers_of(whole.ctx(), 1) + 1);
    EXPECT_EQ(cost.weight_gemms(whole.ctx(), 0), 4 * cost.layers_of(whole.ctx(), 0));
    for (int P : {1, 3, G, G + 5}) {
      SCOPED_TRACE(std::string(nm.name) + " parts " + std::to_string(P));
      Pipeline cut(2, 1, P);
      ps::TransformerCost per = cost;
      per.wgrad_split = ps::WGradSplit::PerGemm;
      for (int stage : {0, 1}) {
        double t = 0, m = 0, fl = 0;
        for (int j = 0; j < P; ++j) {
          t += per.duration(cut.ctx(), act(OpKind::W, stage, 0, j));
          m += per.memory_delta(cut.ctx(), act(OpKind::W, stage, 0, j), false);
          fl += per.flops(cut.ctx(), act(OpKind::W, stage, 0, j));
        }
        expect_rel(t, cost.duration(whole.ctx(), act(OpKind::W, stage)), 1e-12);
        expect_rel(m, cost.memory_delta(whole.ctx(), act(OpKind::W, stage), false), 1e-12);
        expect_rel(fl, cost.flops(whole.ctx(), act(OpKind::W, stage)), 1e-12);
      }
      if (P == G) {
        // One GEMM each: the LM head first on the last stage, then the last layer's MLP out;
        // the MLP's GEMMs take longer than the projection's.
        const double head = per.flops(cut.ctx(), act(OpKind::W, 1, 0, 0));
        EXPECT_NEAR(head,
                    2.0 * nm.model.microbatch_size * nm.model.sequence * nm.model.hidden *
                        nm.model.vocabulary / cost.parallel.tensor,
                    1e-6 * head);
        EXPECT_GT(per.duration(cut.ctx(), act(OpKind::W, 1, 0, 1)),
                  per.duration(cut.ctx(), act(OpKind::W, 1, 0, 3)));
      }
    }
  }
}

}  // namespace test_transformer_cost

// ---- Measured layers: LayerProfile and TransformerCost::measured ----

namespace test_transformer_cost {

namespace {

// An affine figure of the point, different per field and part: trilinear interpolation of an
// affine function is the function itself, so any query inside the grid has a known answer.
ps::LayerFigures affine(ps::LayerPart part, double b, double t, double o) {
  const double k = 1 + static_cast<int>(part);
  auto f = [&](double c) { return k * c * (1 + 2 * b + 3 * t + 0.5 * o); };
  return {f(1e-6), f(2e-6), f(3e-6), f(0.9e-6), f(100), f(40), f(10)};
}

std::vector<ps::LayerSample> affine_samples(const std::vector<int>& tensor = {1}) {
  std::vector<ps::LayerSample> out;
  for (int tp : tensor)
    for (ps::LayerPart part : {ps::LayerPart::First, ps::LayerPart::Layer, ps::LayerPart::Last})
      for (int b : {1, 2, 4})
        for (int t : {8, 16, 32})
          for (int o : {0, 16, 24})
            out.push_back({part, {tp, b, t, o}, affine(part, b, t, o).scaled(1.0 / tp)});
  return out;
}

ps::ModelShape profiled_model() {
  ps::ModelShape m = tiny_gpt();
  m.layers = 8;
  m.flash_attention = false;
  m.dropout = false;
  m.microbatch_size = 1;
  return m;
}

void expect_figures(const ps::LayerFigures& got, const ps::LayerFigures& want) {
  EXPECT_NEAR(got.forward, want.forward, 1e-12 * want.forward);
  EXPECT_NEAR(got.backward_input, want.backward_input, 1e-12 * want.backward_input);
  EXPECT_NEAR(got.backward_weight, want.backward_weight, 1e-12 * want.backward_weight);
  EXPECT_NEAR(got.recompute, want.recompute, 1e-12 * want.recompute);
  EXPECT_NEAR(got.activation_bytes, want.activation_bytes, 1e-9 * want.activation_bytes);
  EXPECT_NEAR(got.wgrad_bytes, want.wgrad_bytes, 1e-9 * want.wgrad_bytes);
  EXPECT_NEAR(got.boundary_bytes, want.boundary_bytes, 1e-9 * want.boundary_bytes);
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const ps::invalid_problem& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST(LayerProfile, GivesSamplesAndInterpolatesBetweenThem) {
  const ps::LayerProfile p(profiled_model(), "test", affine_samples());
  for (ps::LayerPart part : {ps::LayerPart::First, ps::LayerPart::Layer, ps::LayerPart::Last}) {
    expect_figures(p.at(part, 1, 2, 16, 0), affine(part, 2, 16, 0));  // a sample
    expect_figures(p.at(part, 1, 4, 32, 24), affine(part, 4, 32, 24));
    expect_figures(p.at(part, 1, 3, 12, 20), affine(part, 3, 12, 20));  // inside a cell
    expect_figures(p.at(part, 1, 1.5, 32, 5), affine(part, 1.5, 32, 5));
  }
  EXPECT_EQ(p.tensor_degrees(), std::vector<int>{1});
  EXPECT_EQ(p.longest_sequence(1), 32);
}

TEST(LayerProfile, RefusesAUnitOutsideItsGridSayingWhichAxisAndWhatWasMeasured) {
  const ps::LayerProfile p(profiled_model(), "test", affine_samples());
  std::string m = refusal([&] { (void)p.at(ps::LayerPart::Layer, 1, 8, 16, 0); });
  EXPECT_NE(m.find("microbatch size of 8 lies outside"), std::string::npos) << m;
  EXPECT_NE(m.find("1, 2, 4"), std::string::npos) << m;
  EXPECT_NE(m.find("never extrapolated"), std::string::npos) << m;
  m = refusal([&] { (void)p.at(ps::LayerPart::Layer, 1, 1, 4, 0); });
  EXPECT_NE(m.find("slice length of 4"), std::string::npos) << m;
  m = refusal([&] { (void)p.at(ps::LayerPart::Last, 1, 1, 8, 28); });
  EXPECT_NE(m.find("attention prefix of 28"), std::string::npos) << m;
  m = refusal([&] { (void)p.at(ps::LayerPart::Layer, 2, 1, 8, 0); });
  EXPECT_NE(m.find("no samples at tensor degree 2 (it measured 1)"), std::string::npos) << m;
}

TEST(LayerProfile, RefusesSamplesThatAreNotOneGrid) {
  const ps::ModelShape m = profiled_model();
  auto refused = [&](std::vector<ps::LayerSample> s, const std::string& part) {
    const std::string msg = refusal([&] { ps::LayerProfile(m, "", std::move(s)); });
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  refused({}, "needs samples");
  std::vector<ps::LayerSample> s = affine_samples();
  s.erase(s.begin() + 30);
  refused(s, "do not fill their grid");
  s = affine_samples();
  s.push_back(s[5]);
  refused(s, "repeats an earlier sample");
  s = affine_samples();
  s[3].figures.forward = -1;
  refused(s, "forward is -1");
  s = affine_samples();
  s[3].figures.wgrad_bytes = std::nan("");
  refused(s, "wgrad_bytes is");
  s = affine_samples();
  s[7].at.tokens = 0;
  refused(s, "slice length must be between 1");
  s = affine_samples();
  std::erase_if(s, [](const ps::LayerSample& x) { return x.part == ps::LayerPart::Last; });
  refused(s, "but no \"last\" ones");
  s.assign(ps::LayerProfile::max_samples + 1, affine_samples().front());
  refused(s, "more than the");
  // Scattered points whose axes' product is astronomically large: refused, not laid out.
  s.clear();
  for (ps::LayerPart part : {ps::LayerPart::First, ps::LayerPart::Layer, ps::LayerPart::Last})
    for (int n = 1; n <= 10000; ++n)
      s.push_back({part, {1, n, n, n}, affine(part, n, n, n)});
  refused(s, "10000 of 1000000000000 points");
}

TEST(MeasuredTransformerCost, StagesAreTheirLayersPlusTheirEndsExtras) {
  ps::TransformerCost c{profiled_model(), ps::presets::find_device("a100-80gb"), {}};
  c.measured = std::make_shared<const ps::LayerProfile>(c.model, "test", affine_samples({1, 2}));
  const ps::Problem problem{.ranks = 4, .stages = 4, .microbatches = 4, .slices = 2};
  const ps::CostContext ctx{problem, ps::Placement::linear(4), 1};
  const double over = c.device.action_overhead;
  // 8 layers over 4 stages: 2 each; slices of 16 tokens at prefixes 0 and 16.
  for (int stage = 0; stage < 4; ++stage)
    for (int slice = 0; slice < 2; ++slice) {
      SCOPED_TRACE(std::to_string(stage) + "/" + std::to_string(slice));
      const double o = 16.0 * slice;
      ps::LayerFigures want = affine(ps::LayerPart::Layer, 1, 16, o).scaled(2);
      if (stage == 0) want += affine(ps::LayerPart::First, 1, 16, o);
      if (stage == 3) want += affine(ps::LayerPart::Last, 1, 16, o);
      auto act = [&](OpKind k) { return Action::make(k, stage, 0, slice); };
      EXPECT_NEAR(c.duration(ctx, act(OpKind::F)), want.forward + over, 1e-15);
      EXPECT_NEAR(c.duration(ctx, act(OpKind::I)), want.backward_input + over, 1e-15);
      EXPECT_NEAR(c.duration(ctx, act(OpKind::W)), want.backward_weight + over, 1e-15);
      EXPECT_NEAR(c.duration(ctx, act(OpKind::R)), want.recompute + over, 1e-15);
      EXPECT_NEAR(c.memory_delta(ctx, act(OpKind::F), false), want.activation_bytes, 1e-6);
      EXPECT_NEAR(c.memory_delta(ctx, act(OpKind::I), false),
                  -(want.activation_bytes - want.wgrad_bytes), 1e-6);
      // A checkpointed stage keeps its input once, and per further layer what a layer keeps
      // beyond it (the affine layer boundary is below the 16·64·2-byte input: nothing).
      const ps::LayerFigures layer = affine(ps::LayerPart::Layer, 1, 16, o);
      const double input = 16.0 * 64 * 2;
      double boundary =
          want.boundary_bytes - layer.boundary_bytes + std::max(0.0, layer.boundary_bytes - input);
      EXPECT_NEAR(c.memory_delta(ctx, act(OpKind::F), true), boundary, 1e-6);
    }
  // Tensor parallelism: one shard's measured kernels plus the all-reduces priced by the links.
  ps::TransformerCost t = c;
  t.parallel.tensor = 2;
  const double f = t.duration(ctx, Action::make(OpKind::F, 1, 0, 0));
  const double shard = affine(ps::LayerPart::Layer, 1, 16, 0).scaled(2.0 / 2).forward;
  const double one = ps::TransformerCost::ring_allreduce(16.0 * 64 * 2, 2, c.device.link_bandwidth,
                                                         c.device.link_latency);
  EXPECT_NEAR(f, shard + 4 * one + over, 1e-12);
  // The formulas' figures differ: the measured ones replaced them.
  ps::TransformerCost formulas = c;
  formulas.measured = nullptr;
  EXPECT_NE(formulas.duration(ctx, Action::make(OpKind::F, 1, 0, 0)),
            c.duration(ctx, Action::make(OpKind::F, 1, 0, 0)));
}

TEST(MeasuredTransformerCost, RefusesAnotherModelADegreeNotMeasuredAndUnitsOffTheGrid) {
  ps::TransformerCost c{profiled_model(), ps::presets::find_device("a100-80gb"), {}};
  c.measured = std::make_shared<const ps::LayerProfile>(c.model, "test", affine_samples());
  ps::TransformerCost other = c;
  other.model.hidden = 128;
  std::string m = refusal([&] { other.check(); });
  EXPECT_NE(m.find("measured on another model: this one has hidden 128 (the profile's 64)"),
            std::string::npos)
      << m;
  other = c;
  other.model.layers = 40;  // layers, sequence and microbatch size are composed
  other.model.microbatch_size = 4;
  EXPECT_NO_THROW(other.check());
  other = c;
  other.parallel.tensor = 2;
  m = refusal([&] { other.check(); });
  EXPECT_NE(m.find("no samples at tensor degree 2"), std::string::npos) << m;
  other.parallel.tensor = 1;
  // A sequence of 32 in 8 slices: 4-token slices, below the grid's 8.
  const ps::Problem sliced{.ranks = 2, .stages = 2, .microbatches = 2, .slices = 8};
  const ps::CostContext ctx{sliced, ps::Placement::linear(2), 1};
  m = refusal([&] { (void)c.duration(ctx, Action::make(OpKind::F, 0, 0, 0)); });
  EXPECT_NE(m.find("slice length of 4 lies outside"), std::string::npos) << m;
  other.model.sequence = 64;  // an unsliced unit longer than any measured
  const ps::Problem whole{.ranks = 2, .stages = 2, .microbatches = 2};
  m = refusal([&] {
    (void)other.duration({whole, ps::Placement::linear(2), 1}, Action::make(OpKind::F, 0, 0));
  });
  EXPECT_NE(m.find("slice length of 64"), std::string::npos) << m;
}

}  // namespace test_transformer_cost
