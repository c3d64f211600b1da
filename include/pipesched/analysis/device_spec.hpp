// DeviceSpec: one accelerator and the links between accelerators (within a node and between
// nodes), with its GEMM efficiency curve. What TransformerCost and the tuner read as "the
// device" or "the cluster".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/format.hpp"

namespace pipesched {

//! The path a message between two GPUs takes (DeviceSpec::path), in the terms of NCCL's
//! topology model (src/graph/topo.h: its path types LOC, NVL / PIX / PXB, PHB, SYS, NET).
enum class LinkPath {
  Local,    //!< the same GPU: no transfer
  Direct,   //!< peer-to-peer: NVLink / NVSwitch, or PCIe through one switch (NVL, PIX, PXB)
  Host,     //!< staged through host memory on one socket (PHB; NCCL's SHM transport)
  Socket,   //!< staged through host memory across the CPU interconnect (SYS)
  Network,  //!< to another node, through the NICs (NET)
};

//! The name of `p`: "local", "direct", "host", "socket", "network".
inline const char* to_string(LinkPath p) noexcept {
  switch (p) {
    case LinkPath::Local:
      return "local";
    case LinkPath::Direct:
      return "direct";
    case LinkPath::Host:
      return "host";
    case LinkPath::Socket:
      return "socket";
    case LinkPath::Network:
      return "network";
  }
  return "?";
}

//! One accelerator and the links between accelerators, as a cost model sees them.
//!
//! Compute time of one kernel (docs/cost-model.md gives every figure's source):
//! - A GEMM of M×N×K (2·M·N·K FLOPs) runs as output tiles of gemm_tile_m × gemm_tile_n, one
//!   per streaming multiprocessor at a time, in waves of sm_count tiles (NVIDIA, "Matrix
//!   Multiplication Background User's Guide", Sec. 3: tile and wave quantisation). A GEMM of
//!   fewer tiles than SMs is split along K (split-K) into as many parts as fill the SMs, each
//!   at least gemm_tile_k deep (one step of the tile's K loop). Its time is
//!     (2·M·N·K / q + half_flops) / (peak_flops · max_efficiency),
//!   q = M·N·K / (waves · sm_count · gemm_tile_m · gemm_tile_n · K / splits) the fraction of
//!   the SMs' tile work that is the GEMM's own. With sm_count 0 there is no quantisation.
//!   max_efficiency is the fraction of peak_flops the best-shaped large GEMM reaches;
//!   half_flops is a fixed per-kernel time (launch, prologue and epilogue) in FLOPs at that
//!   rate, so a GEMM of half_flops FLOPs (q = 1) runs at half of max_efficiency.
//! - Fused attention (FlashAttention) of F FLOPs, whose queries attend to `keys` keys each
//!   on average, runs its query tiles of 128 rows over the SMs in waves as a GEMM's output
//!   tiles, at peak_flops · attention_efficiency · keys / (keys + attention_half_keys) per
//!   full wave: each query tile's loop over the keys carries a fixed cost worth
//!   attention_half_keys keys. attention_efficiency 0 = max_efficiency.
//! - gemm_efficiency_table, when not empty, replaces the GEMM model by measured efficiency
//!   against FLOPs (see there).
struct DeviceSpec {
  std::string name;                //!< e.g. "h100"
  double peak_flops = 0;           //!< dense 16-bit tensor-core FLOP/s (datasheet, no sparsity)
  double memory_bandwidth = 0;     //!< device memory bandwidth, B/s
  double memory_bytes = 0;         //!< device memory capacity, bytes
  double link_bandwidth = 0;       //!< between two ranks of one node, B/s per direction
  double link_latency = 0;         //!< between two ranks of one node, s
  int ranks_per_node = 1;          //!< ranks sharing a node; node of a rank = rank / this
  double node_link_bandwidth = 0;  //!< between ranks on different nodes, B/s per direction
  double node_link_latency = 0;    //!< between ranks on different nodes, s
  //! Network ports of a node, shared by the ranks of the node that send to other nodes at
  //! once (a node's inter-node traffic splits its ports' bandwidth among its senders);
  //! 0 = one port per rank, as on DGX / HGX machines.
  int node_ports = 0;
  //! Whether two GPUs of a node copy to each other directly (NVLink, or PCIe peer-to-peer).
  //! GeForce cards have no peer-to-peer: each intra-node transfer is staged through host
  //! memory, a device-to-host copy and a host-to-device copy over PCIe.
  bool peer_to_peer = true;
  //! GPUs behind one PCIe switch, in order (a node's GPUs 0 to k − 1 share the first): they
  //! copy to each other directly when peer_to_peer, and the messages they stage through host
  //! memory at once share the switch's uplink, taken as wide as one GPU's link. 0 = no
  //! switch: each GPU of a node has its own link (NVLink or NVSwitch with peer_to_peer, its
  //! own PCIe root port without).
  int gpus_per_switch = 0;
  //! CPU sockets of a node, its GPUs split evenly over them in order. A message through host
  //! memory between GPUs of different sockets crosses the CPU interconnect.
  int sockets_per_node = 1;
  //! The CPU interconnect between two sockets (UPI, xGMI), B/s per direction, shared by the
  //! messages that cross it at once; 0 = not a limit.
  double socket_bandwidth = 0;
  //! Seconds a message crossing sockets adds; 0 = none.
  double socket_latency = 0;
  //! Message bytes per second one socket's host memory stages at once, shared by the
  //! messages its GPUs stage at the same time; 0 = not a limit (as in NCCL's topology model,
  //! where the CPU itself is never the narrowest link).
  double host_bandwidth = 0;
  //! One GPU's link to host memory (its PCIe link), B/s per direction: what copies of
  //! offloaded activations take (host_copy_seconds). 0 = not known: a schedule that offloads is
  //! refused.
  double host_link_bandwidth = 0;
  //! Bytes of memory_bytes the model cannot use: the CUDA context, communication buffers
  //! (NCCL) and the caching allocator's fragmentation. 0 = all of memory_bytes is usable.
  double memory_reserve = 0;
  //! Seconds added to every scheduled action of a rank (kernel launches and framework
  //! dispatch that the FLOP and byte terms leave out). 0 = none.
  double action_overhead = 0;
  double max_efficiency = 0.75;  //!< fraction of peak_flops large GEMMs reach
  double half_flops = 2e9;       //!< GEMM size (FLOPs) reaching half of max_efficiency
  //! Streaming multiprocessors (compute units) GEMM tiles spread over; 0 = no tile or wave
  //! quantisation (every GEMM of F FLOPs runs as efficiency(F) says).
  int sm_count = 0;
  int gemm_tile_m = 128;  //!< rows of a GEMM's output tile (along M)
  int gemm_tile_n = 256;  //!< columns of a GEMM's output tile (along N)
  int gemm_tile_k = 64;   //!< depth of one step of a tile's K loop; split-K parts are no shorter
  //! Fraction of peak_flops fused attention reaches on long sequences; 0 = max_efficiency.
  double attention_efficiency = 0;
  //! Keys per query at which fused attention runs at half of attention_efficiency (its
  //! per-tile fixed cost, in keys); 0 = none.
  double attention_half_keys = 0;
  //! Measured GEMM efficiency: (FLOPs of one GEMM, fraction of peak_flops it reached) pairs,
  //! FLOPs strictly increasing. When not empty, a GEMM of F FLOPs runs at the fraction
  //! interpolated linearly in log F between the two pairs around it (the first or last
  //! pair's fraction outside them), instead of the quantisation model above.
  std::vector<std::pair<double, double>> gemm_efficiency_table;

  //! Fraction of peak_flops a GEMM of `flops` FLOPs achieves without quantisation (see
  //! above), or as gemm_efficiency_table says when it is not empty.
  double efficiency(double flops) const noexcept {
    if (flops <= 0) return 0.0;
    if (!gemm_efficiency_table.empty()) return table_efficiency(flops);
    return max_efficiency * flops / (flops + half_flops);
  }
  //! Time of a GEMM of `flops` FLOPs without quantisation (its shape unknown); 0 for no
  //! work.
  double gemm_time(double flops) const noexcept {
    if (flops <= 0) return 0.0;
    if (!gemm_efficiency_table.empty()) return flops / (peak_flops * table_efficiency(flops));
    return (flops + half_flops) / (peak_flops * max_efficiency);
  }
  //! Fraction of the SMs' tile work of an M×N×K GEMM that is its own (tile and wave
  //! quantisation, split-K below one wave; see above); 1 without sm_count.
  double gemm_quantisation(double m, double n, double k) const noexcept {
    if (sm_count <= 0 || m <= 0 || n <= 0 || k <= 0) return 1.0;
    const double Tm = std::max(1, gemm_tile_m), Tn = std::max(1, gemm_tile_n);
    const double Tk = std::max(1, gemm_tile_k), S = sm_count;
    const double tiles = std::ceil(m / Tm) * std::ceil(n / Tn);
    double splits = 1;
    if (tiles < S) splits = std::max(1.0, std::min(std::floor(S / tiles), std::floor(k / Tk)));
    const double waves = std::ceil(tiles * splits / S);
    return (m * n * k) / (waves * S * Tm * Tn * (k / splits));
  }
  //! Time of an M×N×K GEMM (2·M·N·K FLOPs; see above); 0 for no work.
  double gemm_time(double m, double n, double k) const noexcept {
    const double flops = 2 * m * n * k;
    if (!(flops > 0)) return 0.0;
    if (!gemm_efficiency_table.empty()) return gemm_time(flops);
    return (flops / gemm_quantisation(m, n, k) + half_flops) / (peak_flops * max_efficiency);
  }
  //! Time of a fused attention kernel of `flops` FLOPs over `query_tiles` tiles of 128 query
  //! rows whose queries attend to `keys` keys on average (see above); 0 for no work.
  double attention_time(double flops, double keys, double query_tiles) const noexcept {
    if (!(flops > 0)) return 0.0;
    const double top = attention_efficiency > 0 ? attention_efficiency : max_efficiency;
    const double length = keys > 0 ? keys / (keys + attention_half_keys) : 1.0;
    double q = 1.0;
    if (sm_count > 0 && query_tiles > 0)
      q = query_tiles / (std::ceil(query_tiles / sm_count) * sm_count);
    return (flops / (q * length) + half_flops) / (peak_flops * top);
  }

  //! gemm_efficiency_table's fraction at `flops` (see there); the table is not empty.
  double table_efficiency(double flops) const noexcept {
    const auto& t = gemm_efficiency_table;
    if (flops <= t.front().first) return t.front().second;
    if (flops >= t.back().first) return t.back().second;
    std::size_t i = 1;
    while (t[i].first < flops)
      ++i;
    const double x0 = std::log(t[i - 1].first), x1 = std::log(t[i].first);
    const double w = (std::log(flops) - x0) / (x1 - x0);
    return t[i - 1].second + w * (t[i].second - t[i - 1].second);
  }

  //! The path a message from GPU `a` to GPU `b` (cluster-wide indices, ranks_per_node to a
  //! node) takes; see LinkPath.
  LinkPath path(long long a, long long b) const noexcept {
    if (a == b) return LinkPath::Local;
    const long long G = std::max(1, ranks_per_node);
    if (a / G != b / G) return LinkPath::Network;
    const long long la = a % G, lb = b % G;
    const bool one_switch = gpus_per_switch <= 0 || la / gpus_per_switch == lb / gpus_per_switch;
    if (peer_to_peer && one_switch) return LinkPath::Direct;
    return socket_of(la) == socket_of(lb) ? LinkPath::Host : LinkPath::Socket;
  }
  //! The socket of a node's GPU `local` (0 to ranks_per_node − 1).
  long long socket_of(long long local) const noexcept {
    const long long G = std::max(1, ranks_per_node);
    const long long per = std::max<long long>(1, G / std::max(1, sockets_per_node));
    return local / per;
  }
  //! GPUs of a node on one socket.
  int gpus_per_socket() const noexcept {
    return std::max(1, std::max(1, ranks_per_node) / std::max(1, sockets_per_node));
  }

  //! Seconds of one message of `bytes` on path `p` while `senders` GPUs send the same way at
  //! once (a pipeline rank's tensor and data-parallel shares):
  //! - Direct: link_latency + bytes / link_bandwidth.
  //! - Host, Socket: staged through host memory as NCCL's SHM transport runs it, 2 ·
  //!   link_latency + (bytes + one 512 KiB slot) / bandwidth (detail::staged_send), at the
  //!   least of link_bandwidth, the switch uplink's share link_bandwidth / min(senders,
  //!   gpus_per_switch), host_bandwidth / min(senders, gpus_per_socket()) and, across
  //!   sockets, socket_bandwidth / min(senders, gpus_per_socket()); socket_latency added.
  //! - Network: node_link_latency + bytes / (node_link_bandwidth · share), the node's
  //!   node_ports shared by the senders.
  //! - Local: 0.
  double message_seconds(double bytes, LinkPath p, int senders) const noexcept;
  //! Seconds of an all-reduce of `bytes` over `n` GPUs as NCCL's ring runs it, 2(n − 1)
  //! steps of bytes / n each, while `rings` such rings run at once, whose members span the
  //! GPUs from `first` to `last` (the ring's slowest step: the path from `first` to `last`).
  //! Direct: 2(n − 1)/n · bytes / link_bandwidth + 2(n − 1) · link_latency. Host, Socket:
  //! each step staged as message_seconds says, the n · rings members staging at once
  //! sharing a switch's uplink and a socket's host memory, the rings sharing the CPU
  //! interconnect. Network: the ring time on node_link_bandwidth, the node's ports shared by
  //! the rings.
  double allreduce_seconds(double bytes, int n, long long first, long long last,
                           int rings = 1) const noexcept;

  //! Seconds of one GPU's copy of `bytes` between its memory and host memory (one direction)
  //! while `copiers` GPUs of its node copy the same way at once (a pipeline rank's tensor and
  //! data-parallel shares): bytes / bandwidth at the least of host_link_bandwidth, a switch
  //! uplink's share host_link_bandwidth / min(copiers, gpus_per_switch) and host memory's
  //! share host_bandwidth / min(copiers, gpus_per_socket()); the GPU's link_latency when its
  //! GPUs stage through host memory (no peer-to-peer: link_latency is that of PCIe), none
  //! otherwise. 0 for no bytes. Throws invalid_argument when host_link_bandwidth is 0.
  double host_copy_seconds(double bytes, int copiers) const;

  //! Bytes the model may use: memory_bytes less memory_reserve.
  double usable_memory() const noexcept { return memory_bytes - memory_reserve; }

  //! Most ranks a node may hold (ranks_per_node) and network ports it may have (node_ports):
  //! the largest NVLink domains are racks of 72 to 576 GPUs.
  static constexpr int max_ranks_per_node = 1024;

  //! Throws invalid_argument naming the first field out of its physical range (see
  //! detail::device_ranges), with the unit, the range and, for a figure that looks like a
  //! unit slip (989.4 peak FLOP/s, i.e. TFLOP/s typed as FLOP/s), what it would be in the
  //! field's unit.
  void check() const;
};

//! Throws invalid_argument when a cluster of `gpus` GPUs (tuning::ClusterRequest::gpus) spread over
//! more than one node of `G` does not fill whole nodes. A cluster is whole nodes (a launcher
//! starts the same number of processes on each); a GPU count that leaves the last node
//! partly used is most likely a mistyped count or node size, and planning it silently would
//! plan a cluster that is not there.
inline void check_whole_nodes(int gpus, int G) {
  if (gpus <= G || gpus % G == 0) return;
  throw invalid_argument(
      std::to_string(gpus) + " GPUs (" + field("tuning::ClusterRequest.gpus", gpus) +
          ") do not fill whole nodes of " + std::to_string(G) + " (" +
          field("DeviceSpec.ranks_per_node", G) + "): the last of " + std::to_string(gpus / G + 1) +
          " nodes would hold " + std::to_string(gpus % G) + " GPU" + (gpus % G == 1 ? "" : "s") +
          "; give a multiple of the node size (" + std::to_string(gpus / G * G) + " or " +
          std::to_string((gpus / G + 1) * G) +
          " GPUs), or a node size that divides the GPU count; a cluster is "
          "whole nodes.",
      "tuning::ClusterRequest.gpus", std::to_string(gpus));
}

namespace detail {

//! A scale a figure of a DeviceSpec field may have been typed in by mistake: `factor` times
//! the typed figure is the figure in the field's unit (989.4 TFLOP/s: 989.4 × 1e12 FLOP/s).
struct UnitSlip {
  double factor;     //!< the field's unit per this unit
  const char* unit;  //!< the unit the figure looks like it is in: "TFLOP/s"
};

//! The physical range of one number of DeviceSpec: from `lo` (excluded when `open`) to `hi`
//! in `unit`, why, and the unit slips a figure outside it may be.
struct DeviceRange {
  const char* field;           //!< the DeviceSpec field's name
  double DeviceSpec::*member;  //!< the field
  double lo;                   //!< the smallest figure (or the bound above which it lies)
  bool open;                   //!< lo itself is out of range
  double hi;                   //!< the largest figure
  const char* unit;            //!< "FLOP/s", "B/s", "bytes", "seconds", "" for a fraction
  const char* reason;          //!< why these bounds: the hardware at both ends
  UnitSlip slips[2];           //!< unit slips to suggest (factor 0: none)
};

//! The ranges DeviceSpec::check holds the number fields to. Wide enough for every accelerator
//! that exists (a consumer GPU to a B200: 1e14 to 2.3e15 dense 16-bit FLOP/s, 0.5 to 8 TB/s,
//! 8 to 192 GB) and for toy or future ones two to three orders of magnitude either side;
//! narrow enough that a figure typed in the wrong unit (989.4 for 989.4 TFLOP/s, 80 for 80 GB,
//! 2 for 2 µs) is caught, and that every time the simulator derives stays finite.
inline const DeviceRange (&device_ranges())[13] {
  static const DeviceRange list[13] = {
      {"peak_flops",
       &DeviceSpec::peak_flops,
       1e9,
       false,
       1e17,
       "FLOP/s",
       "1e9 is a single CPU core, 1e17 about 40 times a B200's 2.25e15 dense 16-bit FLOP/s",
       {{1e12, "TFLOP/s"}, {1e15, "PFLOP/s"}}},
      {"memory_bandwidth",
       &DeviceSpec::memory_bandwidth,
       1e9,
       false,
       1e14,
       "B/s",
       "1e9 is slower than a laptop's memory, 1e14 over 10 times a B200's 8e12 B/s of HBM3e",
       {{1e12, "TB/s"}, {1e9, "GB/s"}}},
      {"memory_bytes",
       &DeviceSpec::memory_bytes,
       1e8,
       false,
       1e14,
       "bytes",
       "1e8 is 100 MB, less than any accelerator has; 1e14 is 100 TB, 500 times a B200's 192 GB",
       {{1e9, "GB"}, {1073741824.0, "GiB"}}},
      {"link_bandwidth",
       &DeviceSpec::link_bandwidth,
       1e8,
       false,
       1e14,
       "B/s per direction",
       "1e8 is slower than one PCIe lane; 1e14 is 100 times NVLink 5's 9e11 B/s",
       {{1e9, "GB/s"}, {0, ""}}},
      {"link_latency",
       &DeviceSpec::link_latency,
       0,
       false,
       0.1,
       "seconds",
       "links within a node take microseconds; 0.1 s is longer than a wide-area round trip",
       {{1e-6, "microseconds"}, {1e-3, "milliseconds"}}},
      {"node_link_bandwidth",
       &DeviceSpec::node_link_bandwidth,
       1e7,
       false,
       1e14,
       "B/s per direction",
       "1e7 is 100 Mb/s Ethernet; 1e14 is 2000 times a 400 Gb/s InfiniBand port's 5e10 B/s",
       {{1e9, "GB/s"}, {1.25e8, "Gb/s"}}},
      {"node_link_latency",
       &DeviceSpec::node_link_latency,
       0,
       false,
       0.1,
       "seconds",
       "networks between nodes take microseconds; 0.1 s is longer than a wide-area round trip",
       {{1e-6, "microseconds"}, {1e-3, "milliseconds"}}},
      {"memory_reserve",
       &DeviceSpec::memory_reserve,
       0,
       false,
       1e14,
       "bytes",
       "0 leaves all of memory_bytes to the model; the reserve is less than memory_bytes",
       {{0, ""}, {0, ""}}},
      {"action_overhead",
       &DeviceSpec::action_overhead,
       0,
       false,
       0.1,
       "seconds",
       "a kernel launch takes microseconds; 0.1 s per action is slower than any framework",
       {{1e-6, "microseconds"}, {1e-3, "milliseconds"}}},
      {"max_efficiency",
       &DeviceSpec::max_efficiency,
       0,
       true,
       1,
       "",
       "a fraction of peak_flops: large GEMMs reach 0.6 to 0.9 of it, never more than all",
       {{0.01, "a percentage"}, {0, ""}}},
      {"half_flops",
       &DeviceSpec::half_flops,
       0,
       false,
       1e18,
       "FLOPs",
       "0 is no small-GEMM penalty; a GEMM of 1e18 FLOPs runs for minutes on any device",
       {{0, ""}, {0, ""}}},
      {"attention_efficiency",
       &DeviceSpec::attention_efficiency,
       0,
       false,
       1,
       "",
       "0 takes max_efficiency; fused attention reaches 0.5 to 0.75 of peak, never more than all",
       {{0.01, "a percentage"}, {0, ""}}},
      {"attention_half_keys",
       &DeviceSpec::attention_half_keys,
       0,
       false,
       1e7,
       "keys",
       "0 is no per-tile cost; 1e7 keys is longer than any sequence trained",
       {{0, ""}, {0, ""}}},
  };
  return list;
}

//! `v` as a message writes a figure: 6 significant digits, the exponent without "+" and
//! leading zeros ("1e9", "2e-6", "989.4").
inline std::string figure_text(double v) {
  std::string t = format_general(v);
  const auto e = t.find('e');
  if (e == std::string::npos) return t;
  std::string exponent = t.substr(e + 1);
  const bool negative = exponent.front() == '-';
  exponent.erase(0, exponent.find_first_not_of("+-0"));
  return t.substr(0, e) + "e" + (negative ? "-" : "") + (exponent.empty() ? "0" : exponent);
}

//! What a figure of `r` must be: "a figure in FLOP/s from 1e9 to 1e17", "a fraction above 0
//! and at most 1".
inline std::string range_text(const DeviceRange& r) {
  return std::string(*r.unit ? std::string("a figure in ") + r.unit : "a fraction") +
         (r.open ? " above " : " from ") + figure_text(r.lo) + (r.open ? " and at most " : " to ") +
         figure_text(r.hi);
}

//! What `value`, out of `r`, would be in r's unit if it was typed in one of r's unit slips
//! that lands in range: "989.4 looks like TFLOP/s: in FLOP/s that is 9.894e14; "; else "".
inline std::string slip_text(const DeviceRange& r, double value) {
  std::string out;
  for (const UnitSlip& s : r.slips) {
    if (s.factor == 0 || !std::isfinite(value)) continue;
    const double v = value * s.factor;
    if (!(r.open ? v > r.lo : v >= r.lo) || v > r.hi || v == 0) continue;
    out += (out.empty() ? figure_text(value) + " looks like " : std::string(", or ")) + s.unit +
           ": " + (*r.unit ? std::string("in ") + r.unit : std::string("as a fraction")) +
           " that is " + figure_text(v);
  }
  return out.empty() ? out : out + "; ";
}

using pipesched::check_whole_nodes;

//! Seconds of an all-reduce of `bytes` over `n` GPUs on a link of `bandwidth` and `latency`,
//! as NCCL's ring runs it: 2(n − 1)/n · bytes / bandwidth + 2(n − 1) · latency.
inline double ring_allreduce(double bytes, int n, double bandwidth, double latency) noexcept {
  if (n < 2 || bytes <= 0) return 0.0;
  return 2.0 * (n - 1) / n * bytes / bandwidth + 2.0 * (n - 1) * latency;
}

//! The share of one network port's bandwidth each of `senders` GPUs of a node of `d` gets
//! when they all send to other nodes at once (DeviceSpec::node_ports; 0 = one port each).
inline double port_share(const DeviceSpec& d, int senders) noexcept {
  if (d.node_ports == 0 || senders <= d.node_ports) return 1.0;
  return static_cast<double>(d.node_ports) / senders;
}

//! Bytes of one staging slot when a message goes through host memory: NCCL's SHM transport
//! pipelines a message through a host buffer of NCCL_BUFFSIZE = 4 MiB (DEFAULT_BUFFSIZE,
//! src/init.cc) cut into NCCL_STEPS = 8 slots (src/include/device.h): 512 KiB.
inline constexpr double host_staging_chunk = 4.0 * 1024 * 1024 / 8;

//! Seconds of sending `bytes` through host memory at `bandwidth`: a device-to-host and a
//! host-to-device copy, pipelined in host_staging_chunk slots as NCCL's SHM transport runs
//! them, 2 · latency + (bytes + one slot) / bandwidth (the two copies overlap but for the
//! first slot, each on its own GPU's link).
inline double staged_send(double bytes, double bandwidth, double latency) noexcept {
  return 2 * latency + (bytes + std::min(bytes, host_staging_chunk)) / bandwidth;
}

//! The bandwidth of a message staged through host memory on `d` (DeviceSpec::message_seconds):
//! link_bandwidth, shared on a switch's uplink and a socket's host memory by `staging` GPUs
//! at once and, `crossing` sockets, on the CPU interconnect by `crossers` messages at once.
inline double staged_bandwidth(const DeviceSpec& d, int staging, int crossers,
                               bool crossing) noexcept {
  const int per_socket = d.gpus_per_socket();
  double bandwidth = d.link_bandwidth;
  if (d.gpus_per_switch > 0)
    bandwidth = std::min(bandwidth, d.link_bandwidth / std::min(staging, d.gpus_per_switch));
  if (d.host_bandwidth > 0)
    bandwidth = std::min(bandwidth, d.host_bandwidth / std::min(staging, per_socket));
  if (crossing && d.socket_bandwidth > 0)
    bandwidth = std::min(bandwidth, d.socket_bandwidth / std::min(crossers, per_socket));
  return bandwidth;
}

}  // namespace detail

inline void DeviceSpec::check() const {
  auto bad = [this](const char* field, const std::string& value, const std::string& want) {
    const std::string key = "DeviceSpec." + std::string(field);
    throw invalid_argument(pipesched::field(key, value) +
                               (name.empty() ? std::string() : " (device '" + name + "')") +
                               " is out of range; " + want + ".",
                           key, value);
  };
  for (const detail::DeviceRange& r : detail::device_ranges()) {
    const double v = this->*r.member;
    const bool above_lo = r.open ? v > r.lo : v >= r.lo;
    if (std::isfinite(v) && above_lo && v <= r.hi) continue;
    bad(r.field, detail::figure_text(v),
        detail::slip_text(r, v) + "give " + detail::range_text(r) + " (" + r.reason + ")");
  }
  if (!(memory_reserve < memory_bytes))
    bad("memory_reserve", detail::format_general(memory_reserve),
        "use 0 or more bytes, less than memory_bytes (the capacity, " +
            detail::figure_text(memory_bytes) + " bytes)");
  if (ranks_per_node < 1 || ranks_per_node > max_ranks_per_node)
    bad("ranks_per_node", std::to_string(ranks_per_node),
        "a node holds from 1 to " + std::to_string(max_ranks_per_node) +
            " ranks (GPUs; the largest NVLink domains hold 72 to 576)");
  if (sm_count < 0 || sm_count > 100000)
    bad("sm_count", std::to_string(sm_count),
        "use 0 (no tile or wave quantisation) or the device's streaming multiprocessors (an "
        "RTX 4090 has 128, an H100 132), at most 100000");
  for (auto [key, v] :
       {std::pair{"gemm_tile_m", gemm_tile_m}, std::pair{"gemm_tile_n", gemm_tile_n},
        std::pair{"gemm_tile_k", gemm_tile_k}})
    if (v < 1 || v > 4096)
      bad(key, std::to_string(v),
          "give a GEMM tile's size in values, from 1 to 4096 (cuBLAS and CUTLASS tiles are 32 "
          "to 256)");
  for (std::size_t i = 0; i < gemm_efficiency_table.size(); ++i) {
    const auto& [flops, fraction] = gemm_efficiency_table[i];
    const std::string at = "gemm_efficiency_table[" + std::to_string(i) + "]";
    if (!(std::isfinite(flops) && flops > 0 && flops <= 1e18))
      bad("gemm_efficiency_table", at + " FLOPs " + detail::figure_text(flops),
          "give each pair's GEMM FLOPs above 0 and at most 1e18");
    if (!(std::isfinite(fraction) && fraction > 0 && fraction <= 1))
      bad("gemm_efficiency_table", at + " fraction " + detail::figure_text(fraction),
          "give each pair's efficiency as a fraction of peak_flops above 0 and at most 1");
    if (i > 0 && !(flops > gemm_efficiency_table[i - 1].first))
      bad("gemm_efficiency_table", at + " FLOPs " + detail::figure_text(flops),
          "list the pairs by strictly increasing FLOPs");
  }
  if (gemm_efficiency_table.size() > 4096)
    bad("gemm_efficiency_table", std::to_string(gemm_efficiency_table.size()) + " pairs",
        "give at most 4096 pairs");
  if (node_ports < 0 || node_ports > max_ranks_per_node)
    bad("node_ports", std::to_string(node_ports),
        "use 0 (one per rank) or a count of network ports from 1 to " +
            std::to_string(max_ranks_per_node));
  if (gpus_per_switch < 0 || gpus_per_switch > ranks_per_node)
    bad("gpus_per_switch", std::to_string(gpus_per_switch),
        "use 0 (no PCIe switch: each GPU has its own link) or the GPUs behind one switch, from "
        "1 to ranks_per_node (" +
            std::to_string(ranks_per_node) + ")");
  if (sockets_per_node < 1 || sockets_per_node > ranks_per_node ||
      ranks_per_node % sockets_per_node != 0)
    bad("sockets_per_node", std::to_string(sockets_per_node),
        "give the CPU sockets of a node, from 1 to ranks_per_node (" +
            std::to_string(ranks_per_node) +
            "), dividing it: a node's GPUs split evenly over them");
  for (auto [key, v] : {std::pair{"socket_bandwidth", socket_bandwidth},
                        std::pair{"host_bandwidth", host_bandwidth},
                        std::pair{"host_link_bandwidth", host_link_bandwidth}})
    if (!(std::isfinite(v) && (v == 0 || (v >= 1e8 && v <= 1e14))))
      bad(key, detail::figure_text(v),
          (v > 0 && v * 1e9 >= 1e8 && v * 1e9 <= 1e14
               ? detail::figure_text(v) + " looks like GB/s: in B/s that is " +
                     detail::figure_text(v * 1e9) + "; "
               : std::string()) +
              std::string(key == std::string_view("host_link_bandwidth")
                              ? "give 0 (not known) or a figure in B/s per direction from 1e8 to "
                                "1e14 (PCIe 4.0 x16 moves 2.4e10 B/s, PCIe 5.0 x16 4.8e10)"
                              : "give 0 (not a limit) or a figure in B/s per direction from 1e8 "
                                "to 1e14 (a CPU interconnect or host memory moves 6e9 to 4e11 "
                                "B/s)"));
  if (!(std::isfinite(socket_latency) && socket_latency >= 0 && socket_latency <= 0.1))
    bad("socket_latency", detail::figure_text(socket_latency),
        "give a figure in seconds from 0 to 0.1 (crossing sockets adds about a microsecond)");
}

inline double DeviceSpec::host_copy_seconds(double bytes, int copiers) const {
  if (!(bytes > 0)) return 0.0;
  if (!(host_link_bandwidth > 0))
    throw invalid_argument(
        "device '" + name +
            "' gives no host_link_bandwidth, the bandwidth of a GPU's link to host "
            "memory, so a copy of offloaded activations cannot be timed; set it "
            "(B/s per direction, 2.4e10 for PCIe 4.0 x16) in the device file, or "
            "plan without offloading.",
        "DeviceSpec.host_link_bandwidth", "0");
  copiers = std::max(1, copiers);
  double bandwidth = host_link_bandwidth;
  if (gpus_per_switch > 0)
    bandwidth = std::min(bandwidth, host_link_bandwidth / std::min(copiers, gpus_per_switch));
  if (host_bandwidth > 0)
    bandwidth = std::min(bandwidth, host_bandwidth / std::min(copiers, gpus_per_socket()));
  return (peer_to_peer ? 0.0 : link_latency) + bytes / bandwidth;
}

inline double DeviceSpec::message_seconds(double bytes, LinkPath p, int senders) const noexcept {
  if (p == LinkPath::Local || !(bytes > 0)) return 0.0;
  senders = std::max(1, senders);
  if (p == LinkPath::Direct) return link_latency + bytes / link_bandwidth;
  if (p == LinkPath::Network)
    return node_link_latency + bytes / (node_link_bandwidth * detail::port_share(*this, senders));
  const double bandwidth = detail::staged_bandwidth(*this, senders, senders, p == LinkPath::Socket);
  return detail::staged_send(bytes, bandwidth, link_latency) +
         (p == LinkPath::Socket ? socket_latency : 0.0);
}

inline double DeviceSpec::allreduce_seconds(double bytes, int n, long long first, long long last,
                                            int rings) const noexcept {
  if (n < 2 || !(bytes > 0)) return 0.0;
  rings = std::max(1, rings);
  const LinkPath p = path(first, last);
  const double steps = 2.0 * (n - 1);
  switch (p) {
    case LinkPath::Local:
    case LinkPath::Direct:
      return detail::ring_allreduce(bytes, n, link_bandwidth, link_latency);
    case LinkPath::Network: {
      const int senders = std::min(rings, std::max(1, ranks_per_node));
      return detail::ring_allreduce(
          bytes, n, node_link_bandwidth * detail::port_share(*this, senders), node_link_latency);
    }
    default: {
      const int staging = static_cast<int>(std::min<long long>(1LL << 30, 1LL * n * rings));
      const double bandwidth =
          detail::staged_bandwidth(*this, staging, rings, p == LinkPath::Socket);
      return steps * (detail::staged_send(bytes / n, bandwidth, link_latency) +
                      (p == LinkPath::Socket ? socket_latency : 0.0));
    }
  }
}

}  // namespace pipesched
