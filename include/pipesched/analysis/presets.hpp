// Named devices and model shapes for TransformerCost, with the published figures they come
// from. Figures that no datasheet gives (latencies, GEMM efficiency, node sizes of consumer
// machines) are marked as assumptions; set your own DeviceSpec fields to override them.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/core/error.hpp"

//! Named devices and model shapes for TransformerCost (H100, A100, GPT-3, Llama-2, ...).
namespace pipesched::presets {

//! A device under its preset name, with a one-line description.
struct DevicePreset {
  std::string name;         //!< the name `--device` takes ("h100", "a100-80gb", ...)
  std::string description;  //!< one line saying what the device is
  DeviceSpec device;        //!< its figures
};

//! A model shape under its preset name, with a one-line description.
struct ModelPreset {
  std::string name;         //!< the name `--model` takes ("gpt3-13b", "llama2-13b", ...)
  std::string description;  //!< one line saying what the model is
  ModelShape model;         //!< its shape
};

namespace detail {

inline constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// Compute figures (DeviceSpec's class comment gives the model; docs/cost-model.md each
// source):
// - max_efficiency, the fraction of the dense peak the best-shaped large BF16 GEMM reaches,
//   is the measured "maximum achievable matmul FLOPS" of S. Bekman, "Machine Learning
//   Engineering", compute/accelerator/README.md (mamf-finder.py over torch.matmul): H100 SXM
//   792.1 of 989 TFLOP/s = 0.801, A100 SXM 267.9 of 312 = 0.859. The H200 takes the H100's
//   (the same GH100 die and clocks; the table's GH200 reaches 0.830). No published figure for
//   the RTX 4090: 0.75 is an assumption there.
// - half_flops = peak × 2 µs: a kernel's fixed time (launch, prologue, epilogue) is taken as
//   2 µs, about one kernel launch (an assumption).
// - sm_count: the datasheets' / whitepapers' streaming multiprocessors (H100 and H200 SXM 132,
//   A100 108, RTX 4090 128). The GEMM tile is DeviceSpec's default 128 × 256 × 64, CUTLASS's
//   default threadblock shape for 16-bit tensor-core GEMMs on Ampere and later
//   (cutlass/gemm/device/default_gemm_configuration.h, OpClassTensorOp, Sm80: GemmShape<128,
//   256, 64>), one of the large tiles the NVIDIA guide names most efficient.
// - attention: FlashAttention-3 forward on an H100, head dimension 128, 16 heads, batch ×
//   sequence = 16k tokens, non-causal (pytorch/benchmark pull request 2391): 430.3, 517.1,
//   565.5, 590.2, 614.2 and 620.7 TFLOP/s at 512 to 16384 keys. P · s / (s + c) fits them
//   within 0.9 % at c = 234 keys and P = 629.6 TFLOP/s; that benchmark's 2048 query tiles run
//   as 16 waves of 132 (0.970 of them full), so its per-wave rate is 649.2 TFLOP/s, 0.656 of
//   989.4: attention_efficiency 0.656, attention_half_keys 234 (the H200 the same). A100:
//   FlashAttention-2's forward reaches up to 73 % of the A100's peak (Dao 2023, "FlashAttention-
//   2", Sec. 4.1); attention_half_keys 234 is assumed there and on the RTX 4090, whose
//   attention_efficiency is left at 0 (max_efficiency's 0.75, no published figure).
// - latencies: small messages take 5 µs over NVLink, 10 µs over PCIe or between nodes
//   (assumptions).
// Capacities: the datasheets' "80 GB" etc. are binary sizes (nvidia-smi reports 81920 MiB
// for an A100 80GB), so they are taken as GiB.
inline constexpr double half_time = 2e-6;
inline constexpr double nvlink_latency = 5e-6;
inline constexpr double pcie_latency = 10e-6;
inline constexpr double network_latency = 10e-6;
inline constexpr double attention_half_keys = 234;

inline constexpr double mib = 1024.0 * 1024.0;
// Memory every device preset reserves (DeviceSpec::memory_reserve), 966 MiB:
// - the CUDA context with PyTorch's kernels loaded: 781 MB (745 MiB) in nvidia-smi for a
//   process that only initialises CUDA (pytorch/pytorch issue #34323); CUDA's lazy module
//   loading (CUDA_MODULE_LOADING=LAZY) lowers it, so this is the eager case;
// - NCCL's buffers: per channel and receiving connection 4 MiB for the Simple protocol
//   (DEFAULT_BUFFSIZE = NCCL_BUFFSIZE), 512 KiB for LL and 4.69 MiB for LL128
//   (DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE in NCCL's src/init.cc), 9.19 MiB in all;
//   assumed 8 channels (NCCL picks 2 to 32 by topology) and 3 receiving connections (the
//   previous and next pipeline stage, the ring of the data- or tensor-parallel group):
//   8 × 3 × 9.19 MiB = 221 MiB.
// The caching allocator's fragmentation varies with the run and is left out.
inline constexpr double nccl_connection_buffers = 4 * mib + 0.5 * mib + 4915200.0;
inline constexpr double memory_reserve = 781e6 + 8 * 3 * nccl_connection_buffers;
// Seconds added to every action (DeviceSpec::action_overhead): one kernel launch's latency,
// 2 µs (the half_time assumption above). Megatron-LM synchronises the device after each
// pipeline send / receive (torch.cuda.synchronize() in p2p_communication._communicate, with
// batch_p2p_sync, its default), so the first kernel of the next action is launched onto an
// idle GPU and its launch is not hidden behind earlier work.
inline constexpr double action_overhead = 2e-6;

// The compute figures of a preset: max_efficiency, streaming multiprocessors and
// attention_efficiency (0 = max_efficiency), as the comment above sources them.
struct Compute {
  double max_efficiency;
  int sm_count;
  double attention_efficiency;
};

inline DeviceSpec device(std::string name, double peak, double bandwidth, double capacity,
                         double link, double link_latency, int per_node, double node_link,
                         Compute compute, int node_ports = 0) {
  DeviceSpec d;
  d.name = std::move(name);
  d.peak_flops = peak;
  d.memory_bandwidth = bandwidth;
  d.memory_bytes = capacity;
  d.link_bandwidth = link;
  d.link_latency = link_latency;
  d.ranks_per_node = per_node;
  d.node_link_bandwidth = node_link;
  d.node_link_latency = network_latency;
  d.node_ports = node_ports;
  d.max_efficiency = compute.max_efficiency;
  d.half_flops = peak * half_time;
  d.sm_count = compute.sm_count;
  d.attention_efficiency = compute.attention_efficiency;
  d.attention_half_keys = attention_half_keys;
  d.memory_reserve = memory_reserve;
  d.action_overhead = action_overhead;
  return d;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

template <class Preset>
std::string known_names(const std::vector<Preset>& list) {
  std::string names;
  for (const Preset& p : list)
    names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

}  // namespace detail

namespace detail {
inline constexpr Compute hopper{0.801, 132, 0.656};
inline constexpr Compute ampere{0.859, 108, 0.73};
// Links of a PCIe server, from NCCL's topology model (src/graph/topo.cc, topo.h), which
// prices each link by what NCCL gets from it:
// - a PCIe link at width × per-lane speed / 80 GB/s (ncclTopoAddPci, kvDictPciGen: 120 per
//   lane for 16 GT/s), so Gen4 ×16 = 24 GB/s, not the 31.5 GB/s of the raw signalling rate;
// - the CPU interconnect between two sockets by CPU (ncclTopoGetInterCpuBw): AMD_BW 16 GB/s
//   for AMD EPYC, Intel 10 (Skylake), 22 (Sapphire Rapids), 40 GB/s (Emerald Rapids);
// - host memory as LOC_BW, never the narrowest link (host_bandwidth 0);
// - a NIC at its speed / 8 (net.bw = mbps / 8000 GB/s): 100 Gb/s = 12.5 GB/s.
inline constexpr double pcie4_x16 = 16 * 120 / 80.0 * 1e9;
// A GPU's own link to host memory (DeviceSpec::host_link_bandwidth), priced the same way:
// PCIe 5.0 (32 GT/s, kvDictPciGen 240 per lane) ×16 = 48 GB/s on H100 and H200 SXM (their
// datasheets: PCIe Gen5 128 GB/s, both directions), PCIe 4.0 ×16 = 24 GB/s on A100 SXM4 and
// RTX 4090.
inline constexpr double pcie5_x16 = 16 * 240 / 80.0 * 1e9;
inline DeviceSpec with_host_link(DeviceSpec d, double bandwidth) {
  d.host_link_bandwidth = bandwidth;
  return d;
}
inline constexpr double amd_socket_link = 16e9;
inline DeviceSpec rtx4090() {
  DeviceSpec d = device("rtx-4090", 165.2e12, 1008e9, 24 * gib, pcie4_x16, pcie_latency, 8, 12.5e9,
                        Compute{0.75, 128, 0.0}, 1);
  d.peer_to_peer = false;
  d.sockets_per_node = 2;
  d.socket_bandwidth = amd_socket_link;
  d.host_link_bandwidth = pcie4_x16;
  return d;
}
}  // namespace detail

//! The device presets: h100, h200, a100-80gb, a100-40gb, rtx-4090.
inline const std::vector<DevicePreset>& devices() {
  using detail::device;
  using detail::gib;
  using detail::rtx4090;
  static const std::vector<DevicePreset> list = {
      // NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 tensor 1,979 TFLOP/s with
      // sparsity, so 989.4 dense; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s total, i.e.
      // 450 GB/s each way. HGX / DGX H100: 8 GPUs per node, one 400 Gb/s (50 GB/s)
      // ConnectX-7 NDR InfiniBand port per GPU (DGX H100 user guide).
      {"h100",
       "NVIDIA H100 SXM5 80GB: 989 TFLOP/s BF16, 3.35 TB/s, NVLink 450 GB/s/dir, 8 per node, "
       "400 Gb/s IB",
       detail::with_host_link(device("h100", 989.4e12, 3.35e12, 80 * gib, 450e9,
                                     detail::nvlink_latency, 8, 50e9, detail::hopper),
                              detail::pcie5_x16)},
      // NVIDIA H200 Tensor Core GPU datasheet (SXM): same tensor cores as H100 (BF16 1,979
      // TFLOP/s with sparsity, 989.4 dense); 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s total.
      // HGX H200: 8 GPUs per node, 400 Gb/s InfiniBand per GPU.
      {"h200",
       "NVIDIA H200 SXM 141GB: 989 TFLOP/s BF16, 4.8 TB/s, NVLink 450 GB/s/dir, 8 per node, "
       "400 Gb/s IB",
       detail::with_host_link(device("h200", 989.4e12, 4.8e12, 141 * gib, 450e9,
                                     detail::nvlink_latency, 8, 50e9, detail::hopper),
                              detail::pcie5_x16)},
      // NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): BF16 tensor 312 TFLOP/s dense
      // (624 with sparsity); 80 GB HBM2e at 2,039 GB/s; NVLink 600 GB/s total, 300 each way.
      // DGX A100: 8 GPUs per node, one 200 Gb/s (25 GB/s) HDR InfiniBand port per GPU.
      {"a100-80gb",
       "NVIDIA A100 SXM4 80GB: 312 TFLOP/s BF16, 2.04 TB/s, NVLink 300 GB/s/dir, 8 per node, "
       "200 Gb/s IB",
       detail::with_host_link(device("a100-80gb", 312e12, 2039e9, 80 * gib, 300e9,
                                     detail::nvlink_latency, 8, 25e9, detail::ampere),
                              detail::pcie4_x16)},
      // Same datasheet (SXM4 40GB): 312 TFLOP/s BF16 dense; 40 GB HBM2 at 1,555 GB/s; links
      // as the 80GB part (DGX A100 40GB).
      {"a100-40gb",
       "NVIDIA A100 SXM4 40GB: 312 TFLOP/s BF16, 1.56 TB/s, NVLink 300 GB/s/dir, 8 per node, "
       "200 Gb/s IB",
       detail::with_host_link(device("a100-40gb", 312e12, 1555e9, 40 * gib, 300e9,
                                     detail::nvlink_latency, 8, 25e9, detail::ampere),
                              detail::pcie4_x16)},
      // NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 165.2 TFLOP/s dense
      // FP16 / BF16 tensor with FP32 accumulate (what mixed-precision training uses; 330.3
      // with FP16 accumulate); 24 GB GDDR6X, 384-bit at 21 Gb/s = 1,008 GB/s. No NVLink:
      // PCIe 4.0 x16 at NCCL's 24 GB/s each way (pcie4_x16 above; GeForce cards lack
      // peer-to-peer, peer_to_peer = false: each transfer between two GPUs of a node goes
      // through host memory, two PCIe copies; TransformerCost's class comment).
      // Assumptions: 8 GPUs per server on two AMD EPYC sockets, 4 per socket on their own
      // root ports (no PCIe switch), the sockets linked at NCCL's AMD_BW, 16 GB/s; one
      // 100 Gb/s (12.5 GB/s) network port per node, shared by the node's GPUs (node_ports =
      // 1).
      {"rtx-4090",
       "NVIDIA GeForce RTX 4090 24GB: 165 TFLOP/s BF16, 1.01 TB/s, PCIe 4.0 x16 24 GB/s/dir "
       "through host memory (no P2P), 8 per node on 2 sockets (16 GB/s between), one "
       "100 Gb/s port per node",
       rtx4090()},
  };
  return list;
}

//! The model presets: gpt3-1.3b, gpt3-13b, llama2-7b, llama2-13b, llama2-34b. All with
//! microbatch_size 1, 16-bit activations and flash attention, the Llama 2 shapes without
//! dropout; change the copy you get.
inline const std::vector<ModelPreset>& models() {
  auto gpt3 = [](int layers, int hidden, int heads) {
    // Brown et al. 2020 ("Language Models are Few-Shot Learners"), Sec. 2.1: d_ff = 4 ·
    // d_model, context n_ctx = 2048 for every size, the GPT-2 byte-level BPE vocabulary of
    // 50,257 tokens (Radford et al. 2019); a plain GELU MLP.
    ModelShape m;
    m.layers = layers;
    m.hidden = hidden;
    m.heads = heads;
    m.sequence = 2048;
    m.vocabulary = 50257;
    return m;
  };
  auto llama2 = [](int layers, int hidden, int heads, int kv_heads, int ffn) {
    // Touvron et al. 2023 ("Llama 2: Open Foundation and Fine-Tuned Chat Models"), Table 1
    // and Sec. 2.2: 4k context, SwiGLU MLP, grouped-query attention for 34B and 70B; the
    // released configs (meta-llama/Llama-2-*-hf config.json): vocabulary 32,000. No dropout:
    // the paper names none, and the configs set attention_dropout 0.0.
    ModelShape m;
    m.dropout = false;
    m.layers = layers;
    m.hidden = hidden;
    m.heads = heads;
    m.kv_heads = kv_heads;
    m.ffn_hidden = ffn;
    m.gated_mlp = true;
    m.sequence = 4096;
    m.vocabulary = 32000;
    return m;
  };
  static const std::vector<ModelPreset> list = {
      // Brown et al. 2020, Table 2.1, "GPT-3 XL": 24 layers, d_model 2048, 24 heads of size
      // 128. 24 × 128 ≠ 2048, so the table cannot be taken literally; this keeps the head
      // size 128 (16 heads). Heads only change the attention-score memory without flash.
      {"gpt3-1.3b", "GPT-3 XL 1.3B: 24 layers, h 2048, 16 heads, s 2048, V 50257 (Brown 2020)",
       gpt3(24, 2048, 16)},
      // Brown et al. 2020, Table 2.1, "GPT-3 13B": 40 layers, 40 heads of size 128; the
      // table's d_model 5140 is a misprint for 40 × 128 = 5120.
      {"gpt3-13b", "GPT-3 13B: 40 layers, h 5120, 40 heads, s 2048, V 50257 (Brown 2020)",
       gpt3(40, 5120, 40)},
      // meta-llama/Llama-2-7b-hf config.json: 32 layers, hidden 4096, 32 heads,
      // intermediate 11008.
      {"llama2-7b",
       "Llama 2 7B: 32 layers, h 4096, 32 heads, SwiGLU f 11008, s 4096, V 32000 (Touvron 2023)",
       llama2(32, 4096, 32, 0, 11008)},
      // meta-llama/Llama-2-13b-hf config.json: 40 layers, hidden 5120, 40 heads,
      // intermediate 13824.
      {"llama2-13b",
       "Llama 2 13B: 40 layers, h 5120, 40 heads, SwiGLU f 13824, s 4096, V 32000 (Touvron 2023)",
       llama2(40, 5120, 40, 0, 13824)},
      // Llama 2 34B is described in Touvron et al. 2023 (Table 1: GQA, 4k context) but was
      // not released. Its shape is taken from Code Llama 34B (Rozière et al. 2023, "Code
      // Llama", initialised from that model; codellama/CodeLlama-34b-hf config.json):
      // 48 layers, hidden 8192, 64 heads, 8 key/value heads, intermediate 22016,
      // vocabulary 32000; the context is Llama 2's 4096, not Code Llama's 16k fine-tuning.
      {"llama2-34b",
       "Llama 2 34B (unreleased; Code Llama 34B shape): 48 layers, h 8192, 64 heads, 8 KV heads, "
       "SwiGLU f 22016, s 4096, V 32000",
       llama2(48, 8192, 64, 8, 22016)},
  };
  return list;
}

//! The device preset called `name` (case-insensitive). Throws invalid_problem listing the
//! known names when there is none.
inline DeviceSpec find_device(std::string_view name) {
  const std::string key = detail::lower(name);
  for (const DevicePreset& p : devices())
    if (p.name == key) return p.device;
  throw invalid_problem("unknown device '" + std::string(name) +
                        "'; known devices: " + detail::known_names(devices()) + ".");
}

//! The model preset called `name` (case-insensitive). Throws invalid_problem listing the
//! known names when there is none.
inline ModelShape find_model(std::string_view name) {
  const std::string key = detail::lower(name);
  for (const ModelPreset& p : models())
    if (p.name == key) return p.model;
  throw invalid_problem("unknown model '" + std::string(name) +
                        "'; known models: " + detail::known_names(models()) + ".");
}

}  // namespace pipesched::presets
