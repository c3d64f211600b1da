// DeviceSpec: one accelerator and the links between accelerators (within a node and between
// nodes), with its GEMM efficiency curve. What TransformerCost and the tuner read as "the
// device" or "the cluster".
#pragma once

#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! One accelerator and the links between accelerators, as a cost model sees them.
//!
//! GEMM efficiency: a GEMM of F FLOPs runs at peak_flops · efficiency(F), with
//!   efficiency(F) = max_efficiency · F / (F + half_flops),
//! so large GEMMs approach max_efficiency of the datasheet peak and a GEMM of half_flops
//! FLOPs reaches half of that. Its time, F / (peak · efficiency(F)) =
//! (F + half_flops) / (peak · max_efficiency), is the ideal time plus a fixed per-kernel
//! overhead: short sequence slices (small GEMMs) run further below peak.
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
  //! Bytes of memory_bytes the model cannot use: the CUDA context, communication buffers
  //! (NCCL) and the caching allocator's fragmentation. 0 = all of memory_bytes is usable.
  double memory_reserve = 0;
  //! Seconds added to every scheduled action of a rank (kernel launches and framework
  //! dispatch that the FLOP and byte terms leave out). 0 = none.
  double action_overhead = 0;
  double max_efficiency = 0.75;  //!< fraction of peak_flops large GEMMs reach
  double half_flops = 2e9;       //!< GEMM size (FLOPs) reaching half of max_efficiency

  //! Fraction of peak_flops a GEMM of `flops` FLOPs achieves (see above).
  double efficiency(double flops) const noexcept {
    return flops > 0 ? max_efficiency * flops / (flops + half_flops) : 0.0;
  }
  //! Time of a GEMM (or fused attention kernel) of `flops` FLOPs; 0 for no work.
  double gemm_time(double flops) const noexcept {
    return flops > 0 ? (flops + half_flops) / (peak_flops * max_efficiency) : 0.0;
  }

  //! Bytes the model may use: memory_bytes less memory_reserve.
  double usable_memory() const noexcept { return memory_bytes - memory_reserve; }

  //! Throws invalid_problem naming the first field out of range.
  void check() const {
    auto bad = [this](const char* field, double value, const char* want) {
      const std::string key = "DeviceSpec." + std::string(field);
      throw invalid_argument(pipesched::field(key, std::to_string(value)) +
                                 (name.empty() ? std::string() : " (device '" + name + "')") +
                                 " is out of range; " + want + ".",
                             key, std::to_string(value));
    };
    if (!(peak_flops > 0)) bad("peak_flops", peak_flops, "the peak FLOP/s must be positive");
    if (!(memory_bandwidth > 0))
      bad("memory_bandwidth", memory_bandwidth, "the memory bandwidth (B/s) must be positive");
    if (!(memory_bytes > 0)) bad("memory_bytes", memory_bytes, "the capacity must be positive");
    if (!(link_bandwidth > 0))
      bad("link_bandwidth", link_bandwidth, "the intra-node bandwidth (B/s) must be positive");
    if (!(link_latency >= 0)) bad("link_latency", link_latency, "a latency must be >= 0");
    if (ranks_per_node < 1) bad("ranks_per_node", ranks_per_node, "a node holds at least 1 rank");
    if (!(node_link_bandwidth > 0))
      bad("node_link_bandwidth", node_link_bandwidth,
          "the inter-node bandwidth (B/s) must be positive");
    if (!(node_link_latency >= 0))
      bad("node_link_latency", node_link_latency, "a latency must be >= 0");
    if (node_ports < 0) bad("node_ports", node_ports, "use 0 (one per rank) or a positive count");
    if (!(memory_reserve >= 0 && memory_reserve < memory_bytes))
      bad("memory_reserve", memory_reserve,
          "use 0 or more bytes, less than memory_bytes (the capacity)");
    if (!(action_overhead >= 0))
      bad("action_overhead", action_overhead, "use 0 (none) or more seconds");
    if (!(max_efficiency > 0 && max_efficiency <= 1))
      bad("max_efficiency", max_efficiency, "use a fraction in (0, 1]");
    if (!(half_flops >= 0)) bad("half_flops", half_flops, "use 0 (no small-GEMM penalty) or more");
  }
};

}  // namespace pipesched
