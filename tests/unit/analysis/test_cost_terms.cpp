// TransformerCost's device and model terms: no peer-to-peer (staged through host memory),
// links by path type (switches, sockets, shared host memory and ports), the memory reserve, the
// per-action overhead, dropout masks and the usual MFU convention, each changing what it should and
// nothing else; and the presets' values of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

namespace test_cost_terms {

namespace ps = pipesched;
using ps::Action;
using ps::OpKind;

namespace {

constexpr double chunk = 512.0 * 1024;  // NCCL_BUFFSIZE / NCCL_STEPS

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

// Two ranks per node, so that a 4-rank pipeline crosses one node boundary.
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

Action act(OpKind k, int stage, int slice = 0) {
  return Action::make(k, stage, 0, slice, 0);
}

struct Pipeline {
  ps::Problem problem;
  ps::Placement placement;
  Pipeline(int ranks, int slices)
      : problem{.ranks = ranks, .stages = ranks, .microbatches = 1, .slices = slices},
        placement(ps::Placement::linear(ranks)) {}
  ps::CostContext ctx() const { return ps::CostContext{problem, placement, 1}; }
};

void expect_rel(double actual, double expected, double tol = 1e-12) {
  EXPECT_NEAR(actual, expected, tol * std::max(1.0, std::abs(expected)));
}

}  // namespace

TEST(NoPeerToPeer, IntraNodeSendsGoThroughHostMemory) {
  ps::TransformerCost p2p{tiny_gpt(), test_device(), {}}, host = p2p;
  host.device.peer_to_peer = false;
  Pipeline st(4, 1);
  const auto ctx = st.ctx();
  const double bytes = p2p.message_bytes(ctx, 0);  // 8 KiB: under one staging slot
  ASSERT_LT(bytes, chunk);
  const double lat = 1e-6, bw = 1e10;
  // Small message: both copies in full, one after the other: exactly twice the direct send.
  EXPECT_DOUBLE_EQ(p2p.transfer_time(ctx, act(OpKind::F, 0)), lat + bytes / bw);
  EXPECT_DOUBLE_EQ(host.transfer_time(ctx, act(OpKind::F, 0)), 2 * (lat + bytes / bw));
  EXPECT_DOUBLE_EQ(host.transfer_time(ctx, act(OpKind::B, 3)), 2 * (lat + bytes / bw));
  // Across nodes nothing changes (the network path is the same either way).
  EXPECT_DOUBLE_EQ(host.transfer_time(ctx, act(OpKind::F, 1)),
                   p2p.transfer_time(ctx, act(OpKind::F, 1)));

  // A message of several slots: pipelined, one slot more than the direct send's bytes.
  ps::ModelShape big = tiny_gpt();
  big.hidden = 4096;
  big.heads = 32;
  big.sequence = 2048;
  ps::TransformerCost bp{big, test_device(), {}}, bh = bp;
  bh.device.peer_to_peer = false;
  const double b2 = bp.message_bytes(ctx, 0);  // 32 MiB
  ASSERT_GT(b2, chunk);
  EXPECT_DOUBLE_EQ(bp.transfer_time(ctx, act(OpKind::F, 2)), lat + b2 / bw);
  expect_rel(bh.transfer_time(ctx, act(OpKind::F, 2)), 2 * lat + (b2 + chunk) / bw);

  // Compute, memory and FLOPs are the same.
  for (OpKind k : {OpKind::F, OpKind::B, OpKind::I, OpKind::W}) {
    EXPECT_DOUBLE_EQ(host.duration(ctx, act(k, 1)), p2p.duration(ctx, act(k, 1)));
    EXPECT_DOUBLE_EQ(host.memory_delta(ctx, act(k, 1), false),
                     p2p.memory_delta(ctx, act(k, 1), false));
  }
}

TEST(NoPeerToPeer, IntraNodeAllReducesRunEachRingStepThroughHost) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  Pipeline p(2, 1);
  const ps::ModelShape m = tiny_gpt();
  const double bytes = 2.0 * m.microbatch_size * m.sequence * m.hidden;  // b·s·h·v
  for (int t : {2, 4}) {
    SCOPED_TRACE("t=" + std::to_string(t));
    ps::TransformerCost p2p{m, d, {}};
    p2p.parallel.tensor = t;
    ps::TransformerCost host = p2p;
    host.device.peer_to_peer = false;
    const double lat = d.link_latency, bw = d.link_bandwidth, step = bytes / t;
    const double direct = 2.0 * (t - 1) * (lat + step / bw);
    const double staged = 2.0 * (t - 1) * (2 * lat + (step + std::min(step, chunk)) / bw);
    const int n = p2p.layers_of(p.ctx(), 1);
    auto extra = [&](OpKind k, int stage) {
      return host.duration(p.ctx(), act(k, stage)) - p2p.duration(p.ctx(), act(k, stage));
    };
    expect_rel(extra(OpKind::F, 1), 2 * n * (staged - direct), 1e-9);
    expect_rel(extra(OpKind::I, 1), (2 * n + 1) * (staged - direct), 1e-9);
    EXPECT_DOUBLE_EQ(extra(OpKind::W, 1), 0.0);
  }
  // The data-parallel gradient all-reduce within a node too.
  ps::TransformerCost dp{m, d, {}};
  dp.parallel.data = 4;
  ps::TransformerCost dh = dp;
  dh.device.peer_to_peer = false;
  const double g = 2 * dp.rank_parameters(p.ctx(), 0), step = g / 4;
  expect_rel(dp.gradient_sync_seconds(p.ctx(), 0), 6 * (d.link_latency + step / d.link_bandwidth));
  expect_rel(dh.gradient_sync_seconds(p.ctx(), 0),
             6 * (2 * d.link_latency + (step + std::min(step, chunk)) / d.link_bandwidth));
}

// Paths by type (DeviceSpec::path): direct within a switch or over NVLink, through host
// memory without peer-to-peer, across sockets, over the network; each with its own figure.
TEST(LinkPaths, EachPairOfGpusTakesThePathItsTopologySays) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  // NVLink / NVSwitch: every pair of a node direct, sockets or not.
  d.sockets_per_node = 2;
  EXPECT_EQ(d.path(0, 0), ps::LinkPath::Local);
  EXPECT_EQ(d.path(0, 7), ps::LinkPath::Direct);
  EXPECT_EQ(d.path(7, 8), ps::LinkPath::Network);
  // PCIe switches of 2 with peer-to-peer: direct under one switch, else through the host,
  // across the sockets from GPU 4 on.
  d.gpus_per_switch = 2;
  EXPECT_EQ(d.path(0, 1), ps::LinkPath::Direct);
  EXPECT_EQ(d.path(1, 2), ps::LinkPath::Host);
  EXPECT_EQ(d.path(3, 4), ps::LinkPath::Socket);
  EXPECT_EQ(d.path(12, 13), ps::LinkPath::Direct);  // node 1, its first switch
  // No peer-to-peer: every pair of a node through the host.
  d.peer_to_peer = false;
  EXPECT_EQ(d.path(0, 1), ps::LinkPath::Host);
  EXPECT_EQ(d.path(0, 5), ps::LinkPath::Socket);
  EXPECT_STREQ(ps::to_string(ps::LinkPath::Socket), "socket");
}

TEST(LinkPaths, SharedLinksSplitTheirBandwidthAmongTheirSenders) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  d.peer_to_peer = false;
  const double lat = d.link_latency, bw = d.link_bandwidth, b = 4 * chunk;
  auto staged = [&](double bandwidth) { return 2 * lat + (b + chunk) / bandwidth; };
  // Without a switch, host limit or second socket: the old staged send, whatever the senders.
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 4), staged(bw));
  // A switch's uplink is shared by its GPUs that stage at once.
  d.gpus_per_switch = 4;
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 1), staged(bw));
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 2), staged(bw / 2));
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 8), staged(bw / 4));
  d.gpus_per_switch = 0;
  // Host memory shared by a socket's staging GPUs (here all 8 on one socket).
  d.host_bandwidth = 2.5e10;
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 2), staged(bw));
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 4), staged(2.5e10 / 4));
  d.host_bandwidth = 0;
  // The CPU interconnect, shared by the messages crossing it at once, and its latency.
  d.sockets_per_node = 2;
  d.socket_bandwidth = 1.6e10;
  d.socket_latency = 3e-6;
  expect_rel(d.message_seconds(b, ps::LinkPath::Socket, 1), staged(bw) + 3e-6);
  expect_rel(d.message_seconds(b, ps::LinkPath::Socket, 2), staged(1.6e10 / 2) + 3e-6);
  expect_rel(d.message_seconds(b, ps::LinkPath::Host, 2), staged(bw));  // within a socket
  // The network: the node's ports shared by its senders.
  d.node_ports = 1;
  expect_rel(d.message_seconds(b, ps::LinkPath::Network, 2),
             d.node_link_latency + b / (d.node_link_bandwidth / 2));
  // A ring across sockets: each of its 2(n − 1) steps staged, the rings sharing the
  // interconnect, every member's latency.
  const double ring = 8 * chunk;
  const double step = ring / 8;
  expect_rel(d.allreduce_seconds(ring, 8, 0, 7, 2),
             14 * (2 * lat + (step + std::min(step, chunk)) / (1.6e10 / 2) + 3e-6));
  expect_rel(d.allreduce_seconds(ring, 4, 0, 3, 1),
             6 * (2 * lat + (ring / 4 + std::min(ring / 4, chunk)) / bw));
}

TEST(LinkPaths, APipelineMessageCrossingSocketsPaysTheInterconnect) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 4;
  d.peer_to_peer = false;
  d.sockets_per_node = 2;
  d.socket_bandwidth = 2e9;  // a fifth of the PCIe link
  ps::TransformerCost cost{tiny_gpt(), d, {}};
  Pipeline st(4, 1);
  const auto ctx = st.ctx();
  const double bytes = cost.message_bytes(ctx, 0);
  const double lat = d.link_latency;
  // Ranks 0 -> 1 and 2 -> 3 share a socket; 1 -> 2 crosses to the other.
  expect_rel(cost.transfer_time(ctx, act(OpKind::F, 0)), 2 * lat + 2 * bytes / d.link_bandwidth);
  expect_rel(cost.transfer_time(ctx, act(OpKind::F, 1)), 2 * lat + 2 * bytes / 2e9);
  expect_rel(cost.transfer_time(ctx, act(OpKind::B, 2)), 2 * lat + 2 * bytes / 2e9);
  expect_rel(cost.transfer_time(ctx, act(OpKind::F, 2)), 2 * lat + 2 * bytes / d.link_bandwidth);
  // The simulated step grows by what the crossing adds, and only where it crosses.
  ps::TransformerCost one_socket = cost;
  one_socket.device.sockets_per_node = 1;
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .stages = 4, .microbatches = 4});
  EXPECT_GT(ps::simulate(s, cost).makespan, ps::simulate(s, one_socket).makespan);
}

TEST(LinkPaths, TheRtx4090PresetTakesNcclsPcieAndSocketFigures) {
  const ps::DeviceSpec d = ps::presets::find_device("rtx-4090");
  // NCCL prices PCIe at width × per-lane speed / 80 GB/s: Gen4 ×16 = 16 × 120 / 80.
  EXPECT_DOUBLE_EQ(d.link_bandwidth, 24e9);
  EXPECT_EQ(d.sockets_per_node, 2);
  EXPECT_DOUBLE_EQ(d.socket_bandwidth, 16e9);  // NCCL's AMD_BW
  EXPECT_EQ(d.path(0, 3), ps::LinkPath::Host);
  EXPECT_EQ(d.path(3, 4), ps::LinkPath::Socket);
  // The NVLink presets keep one direct path inside a node.
  const ps::DeviceSpec h = ps::presets::find_device("h100");
  EXPECT_EQ(h.path(0, 7), ps::LinkPath::Direct);
  EXPECT_EQ(h.sockets_per_node, 1);
}

TEST(LinkPaths, CheckRefusesATopologyThatIsNotThere) {
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  auto message = [](const ps::DeviceSpec& x) {
    try {
      x.check();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  d.sockets_per_node = 3;
  EXPECT_NE(message(d).find("sockets_per_node"), std::string::npos) << message(d);
  EXPECT_NE(message(d).find("dividing it"), std::string::npos) << message(d);
  d.sockets_per_node = 2;
  d.gpus_per_switch = 9;
  EXPECT_NE(message(d).find("gpus_per_switch"), std::string::npos) << message(d);
  d.gpus_per_switch = 4;
  d.socket_bandwidth = 16;  // GB/s typed as B/s
  EXPECT_NE(message(d).find("looks like GB/s"), std::string::npos) << message(d);
  d.socket_bandwidth = 16e9;
  d.host_bandwidth = -1;
  EXPECT_NE(message(d).find("host_bandwidth"), std::string::npos) << message(d);
  d.host_bandwidth = 0;
  d.socket_latency = 2;
  EXPECT_NE(message(d).find("socket_latency"), std::string::npos) << message(d);
  d.socket_latency = 1e-6;
  EXPECT_EQ(message(d), "");
}

TEST(MemoryReserve, ShrinksEachRanksBudgetByExactlyTheReserve) {
  ps::TransformerCost all{tiny_gpt(), test_device(), {}}, kept = all;
  kept.device.memory_reserve = 1.5e9;
  EXPECT_DOUBLE_EQ(kept.device.usable_memory(), 1e10 - 1.5e9);
  const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const ps::MemoryBudget a = ps::device_memory_budget(all, s.problem, s.placement);
  const ps::MemoryBudget b = ps::device_memory_budget(kept, s.problem, s.placement);
  ASSERT_EQ(a.per_rank.size(), 4u);
  for (int r = 0; r < 4; ++r)
    EXPECT_DOUBLE_EQ(a.of(r) - b.of(r), 1.5e9) << "rank " << r;
  // Nothing else moves.
  const ps::SimulationResult x = ps::simulate(s, all), y = ps::simulate(s, kept);
  EXPECT_DOUBLE_EQ(x.makespan, y.makespan);
  EXPECT_DOUBLE_EQ(x.ranks[0].peak_memory, y.ranks[0].peak_memory);
  // A reserve that leaves the weights no room is refused with the usable amount named.
  kept.device.memory_reserve = 1e10 - 1;
  try {
    (void)ps::device_memory_budget(kept, s.problem, s.placement);
    FAIL() << "expected a budget error";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
}

TEST(ActionOverhead, AddsItOncePerComputeActionToEachRank) {
  ps::TransformerCost none{tiny_gpt(), test_device(), {}}, some = none;
  some.device.action_overhead = 3e-5;
  for (ps::WGradMode w : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
    const ps::Schedule s = ps::schedule::one_f_one_b({.ranks = 4, .microbatches = 6}, w);
    const ps::SimulationResult x = ps::simulate(s, none), y = ps::simulate(s, some);
    for (int r = 0; r < 4; ++r) {
      int n = 0;
      for (const Action& a : s.ranks[static_cast<std::size_t>(r)])
        n += ps::is_compute(a.kind) ? 1 : 0;
      EXPECT_EQ(n, w == ps::WGradMode::Fused ? 12 : 18);
      expect_rel(y.ranks[r].busy - x.ranks[r].busy, n * 3e-5, 1e-9);
      EXPECT_DOUBLE_EQ(x.ranks[r].peak_memory, y.ranks[r].peak_memory);
    }
  }
  // Sends and receives take no time of the rank; an Overlap (F and B together) pays once.
  Pipeline p(4, 1);
  EXPECT_DOUBLE_EQ(some.duration(p.ctx(), act(OpKind::SendF, 1)), 0.0);
  const Action ov = Action::overlap(act(OpKind::F, 1), act(OpKind::B, 1));
  expect_rel(some.duration(p.ctx(), ov) - none.duration(p.ctx(), ov), 3e-5, 1e-9);
  EXPECT_DOUBLE_EQ(some.flops(p.ctx(), act(OpKind::F, 1)), none.flops(p.ctx(), act(OpKind::F, 1)));
}

TEST(Dropout, WithoutItNoMaskBytesAreKept) {
  for (bool flash : {true, false}) {
    SCOPED_TRACE(flash ? "flash" : "no flash");
    ps::TransformerCost with{tiny_gpt(flash), test_device(), {}}, without = with;
    without.model.dropout = false;
    Pipeline p(2, 2);  // 2 layers a stage, slices of 16 tokens
    const double b = 2, t = 16, h = 64, a = 4, v = 2, n = 2;
    for (int slice : {0, 1}) {
      const double o = slice * t;
      // Two 1-byte masks of b·t·h per layer; without flash also the scores' 1-byte mask and
      // their dropout output (v bytes), a·b·t·(o + t) each.
      const double masks = n * (2 * b * t * h + (flash ? 0.0 : (1 + v) * a * b * t * (o + t)));
      for (int stage : {0, 1}) {
        expect_rel(with.activation_bytes(p.ctx(), stage, slice) -
                       without.activation_bytes(p.ctx(), stage, slice),
                   masks);
        EXPECT_DOUBLE_EQ(with.wgrad_bytes(p.ctx(), stage, slice),
                         without.wgrad_bytes(p.ctx(), stage, slice));
        EXPECT_DOUBLE_EQ(with.boundary_bytes(p.ctx(), stage, slice),
                         without.boundary_bytes(p.ctx(), stage, slice));
        EXPECT_DOUBLE_EQ(with.flops(p.ctx(), act(OpKind::F, stage, slice)),
                         without.flops(p.ctx(), act(OpKind::F, stage, slice)));
      }
    }
  }
  // With tensor parallelism the masks are replicated; sequence parallelism splits them.
  ps::DeviceSpec d = test_device();
  d.ranks_per_node = 8;
  for (bool sp : {false, true}) {
    ps::TransformerCost with{tiny_gpt(), d, {}};
    with.parallel.tensor = 4;
    with.parallel.sequence_parallel = sp;
    ps::TransformerCost without = with;
    without.model.dropout = false;
    Pipeline p(2, 1);
    const double masks = 2 * 2 * (2.0 * 32 * 64) / (sp ? 4 : 1);
    expect_rel(with.activation_bytes(p.ctx(), 0, 0) - without.activation_bytes(p.ctx(), 0, 0),
               masks);
  }
}

TEST(UsualMfu, TrainingFlopsCountAttentionInFull) {
  // 6 · N · s + 12 · L · h · s², N = the layers' and the LM head's weights.
  ps::ModelShape m = tiny_gpt();
  m.microbatch_size = 1;
  const double s = 32, h = 64, L = 4, V = 100;
  const double N = L * 12 * h * h + V * h;  // QKV 3h², projection h², MLP 8h²
  expect_rel(m.usual_training_flops_per_sequence(), 6 * N * s + 12 * L * h * s * s);
  // Narayanan et al. 2021's count without recompute: 72·s·L·h²·(1 + s/(6h)) + 6·s·h·V.
  expect_rel(m.usual_training_flops_per_sequence(),
             72 * s * L * h * h * (1 + s / (6 * h)) + 6 * s * h * V);
  // The causal count differs by the attention over the keys a token does not see:
  // 3 · L · 2·2·h · (s² − s(s + 1)/2).
  expect_rel(m.usual_training_flops_per_sequence() - m.training_flops_per_sequence(),
             3 * L * 4 * h * (s * s - s * (s + 1) / 2));
  // A Llama shape (SwiGLU, grouped-query attention) by its parameter count.
  const ps::ModelShape l = ps::presets::find_model("llama2-34b");
  const double ls = l.sequence;
  expect_rel(l.usual_training_flops_per_sequence(),
             6 * (l.layers * l.layer_parameters() + l.embedding_parameters()) * ls +
                 12.0 * l.layers * l.hidden * ls * ls);
}

TEST(Presets, CostTermsComeFromTheDocumentedFigures) {
  const double mib = 1024.0 * 1024.0;
  const double reserve = 781e6 + 8 * 3 * (4 * mib + 0.5 * mib + 120 * 640 * 8 * 8);
  for (const auto& p : ps::presets::devices()) {
    SCOPED_TRACE(p.name);
    EXPECT_DOUBLE_EQ(p.device.memory_reserve, reserve);
    EXPECT_DOUBLE_EQ(p.device.usable_memory(), p.device.memory_bytes - reserve);
    EXPECT_DOUBLE_EQ(p.device.action_overhead, 2e-6);
    EXPECT_EQ(p.device.peer_to_peer, p.name != "rtx-4090");
  }
  for (const auto& p : ps::presets::models()) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.model.dropout, p.name.rfind("gpt3", 0) == 0);
  }
}

// Tile and wave quantisation (DeviceSpec::gemm_time): whole tiles, whole waves, split-K below
// one wave; without sm_count the FLOP curve alone.
TEST(GemmQuantisation, ChargesWholeTilesAndWholeWaves) {
  ps::DeviceSpec d = test_device();
  d.half_flops = 0;
  d.sm_count = 4;
  d.gemm_tile_m = 128;
  d.gemm_tile_n = 128;
  d.gemm_tile_k = 64;
  const double rate = d.peak_flops * d.max_efficiency;
  // 4 tiles of 128 x 128 on 4 SMs: one full wave, nothing lost.
  EXPECT_DOUBLE_EQ(d.gemm_quantisation(256, 256, 1024), 1.0);
  EXPECT_DOUBLE_EQ(d.gemm_time(256, 256, 1024), 2.0 * 256 * 256 * 1024 / rate);
  // 5 tiles: two waves of 4, the second one-quarter used.
  EXPECT_DOUBLE_EQ(d.gemm_quantisation(640, 128, 1024), 5.0 / 8);
  // 129 rows pay for two tiles of 128 (tile quantisation), then split-K fills the SMs.
  EXPECT_DOUBLE_EQ(d.gemm_quantisation(129, 128, 1024), 129.0 / 256);
  // One tile split along K into 4 parts of 256 (at least gemm_tile_k = 64 deep).
  EXPECT_DOUBLE_EQ(d.gemm_quantisation(128, 128, 1024), 1.0);
  // K = 128 leaves 2 parts of 64: half the SMs idle.
  EXPECT_DOUBLE_EQ(d.gemm_quantisation(128, 128, 128), 0.5);
  // Without sm_count: the FLOP curve, whatever the shape.
  d.sm_count = 0;
  d.half_flops = 1e6;
  EXPECT_DOUBLE_EQ(d.gemm_time(129, 128, 128), d.gemm_time(2.0 * 129 * 128 * 128));
}

TEST(GemmQuantisation, MeasuredTableReplacesTheModel) {
  ps::DeviceSpec d = test_device();
  d.sm_count = 4;
  d.gemm_efficiency_table = {{1e6, 0.2}, {1e8, 0.6}};
  EXPECT_NO_THROW(d.check());
  EXPECT_DOUBLE_EQ(d.efficiency(1e5), 0.2);  // the end pairs' fraction beyond them
  EXPECT_DOUBLE_EQ(d.efficiency(1e9), 0.6);
  EXPECT_NEAR(d.efficiency(1e7), 0.4, 1e-12);  // halfway in log FLOPs
  EXPECT_NEAR(d.gemm_time(100, 100, 500), 1e7 / (d.peak_flops * 0.4), 1e-15);
  d.gemm_efficiency_table = {{1e8, 0.2}, {1e6, 0.6}};
  try {
    d.check();
    FAIL() << "a table out of order was taken";
  } catch (const ps::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("strictly increasing FLOPs"), std::string::npos)
        << e.what();
  }
  d.gemm_efficiency_table = {{1e6, 1.5}};
  EXPECT_THROW(d.check(), ps::invalid_argument);
}

// Fused attention: query tiles of 128 in waves, and the per-tile cost in keys.
TEST(AttentionTime, SlowsOnShortKeyLoopsAndPartWaves) {
  ps::DeviceSpec d = test_device();
  d.half_flops = 0;
  d.attention_efficiency = 0.5;
  d.attention_half_keys = 100;
  const double rate = d.peak_flops * 0.5;
  EXPECT_DOUBLE_EQ(d.attention_time(1e9, 100, 0), 2 * 1e9 / rate);  // half rate at 100 keys
  EXPECT_DOUBLE_EQ(d.attention_time(1e9, 300, 0), 1e9 / (0.75 * rate));
  d.sm_count = 4;
  EXPECT_DOUBLE_EQ(d.attention_time(1e9, 300, 5), 1e9 / (0.75 * (5.0 / 8) * rate));
  d.attention_efficiency = 0;  // = max_efficiency
  EXPECT_DOUBLE_EQ(d.attention_time(1e9, 300, 4), 1e9 / (0.75 * d.peak_flops * d.max_efficiency));
}

// docs/cost-model.md's checks against measurements that set no figure.
TEST(Presets, ComputeModelAgainstMeasurementsItWasNotFittedTo) {
  const ps::DeviceSpec rtx = ps::presets::find_device("rtx-4090");
  auto fraction = [&](double n) { return 2 * n * n * n / rtx.gemm_time(n, n, n) / rtx.peak_flops; };
  EXPECT_NEAR(fraction(2048), 0.736, 0.0005);
  EXPECT_NEAR(fraction(512), 0.232, 0.0005);
  EXPECT_NEAR(fraction(512) / fraction(2048), 0.315, 0.0005);
  // FlashAttention-3 forward on an H100 (pytorch/benchmark pull request 2391): batch x
  // sequence 16k, 16 heads of 128, non-causal; TFLOP/s at 512 to 16384 keys.
  const ps::DeviceSpec h100 = ps::presets::find_device("h100");
  const double keys[] = {512, 1024, 2048, 4096, 8192, 16384};
  const double measured[] = {430.32, 517.099, 565.544, 590.233, 614.234, 620.73};
  double worst = 0;
  for (int i = 0; i < 6; ++i) {
    const double s = keys[i], batch = 16384 / s;
    const double flops = 4 * batch * 16 * s * s * 128;
    const double tiles = batch * 16 * s / 128;
    const double tflops = flops / h100.attention_time(flops, s, tiles) / 1e12;
    worst = std::max(worst, std::fabs(tflops / measured[i] - 1));
  }
  EXPECT_LT(worst, 0.035) << "worst error " << worst;
  EXPECT_GT(worst, 0.0);  // fitted, not looked up
}

// A unit's GEMMs take their own shapes: a slice of fewer tokens than a tile's rows pays
// for the tile in its forward and input gradient, not in its weight gradient (whose M and N
// are the weight's features).
TEST(GemmQuantisation, SlicesPayForTheirTilesInFAndINotW) {
  ps::ModelShape m;
  m.layers = 4;
  m.hidden = 4096;
  m.heads = 32;
  m.sequence = 4096;
  m.vocabulary = 32000;
  const ps::DeviceSpec h100 = ps::presets::find_device("h100");
  auto seconds = [&](int slices, OpKind k) {
    ps::TransformerCost c{m, h100, {}};
    const Pipeline p(1, slices);
    return c.duration(p.ctx(), act(k, 0, 0));
  };
  // 64 slices of 64 tokens: half of every 128-row tile idle in F; W's shapes do not change.
  const double f1 = seconds(1, OpKind::F), f64 = seconds(64, OpKind::F);
  const double w1 = seconds(1, OpKind::W), w64 = seconds(64, OpKind::W);
  EXPECT_GT(f64 * 64 / f1, 1.3);
  EXPECT_LT(w64 * 64 / w1, f64 * 64 / f1);
}

}  // namespace test_cost_terms
