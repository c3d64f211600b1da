// The cost-model terms a report applies (--terms): the device presets' peer_to_peer,
// memory_reserve, action_overhead, per-operator compute and link figures and the model presets'
// dropout, each switched back to the value that leaves it out, to show what each term does to
// a report's figures.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/model_shape.hpp"

namespace pipesched::bench {

// Which terms apply (true: the preset's value; false: the value that leaves the term out).
struct CostTerms {
  bool no_p2p = true;    // peer_to_peer as the preset says (false: every device has P2P)
  bool reserve = true;   // memory_reserve as the preset says (false: 0)
  bool overhead = true;  // action_overhead as the preset says (false: 0)
  bool dropout = true;   // dropout as the preset says (false: masks kept, as before)
  // The per-operator compute model as the preset says (docs/cost-model.md; false: no tile or
  // wave quantisation, every kernel at the flat 0.75 of the peak less its 2 µs, as before).
  bool operators = true;
  // Links by path type as the preset says (docs/cost-model.md, "Links": NCCL's PCIe and
  // CPU-interconnect figures; false: one socket, no switch, the datasheet's 31.5 GB/s PCIe
  // 4.0 ×16 for the RTX 4090, as before).
  bool links = true;
};

// "all", "none", or a comma-separated list of no-p2p, reserve, overhead, dropout (those
// apply, the rest not); nullopt for anything else.
inline std::optional<CostTerms> parse_terms(std::string_view text) {
  if (text == "all") return CostTerms{};
  CostTerms t{false, false, false, false, false, false};
  if (text == "none") return t;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    if (name == "no-p2p")
      t.no_p2p = true;
    else if (name == "reserve")
      t.reserve = true;
    else if (name == "overhead")
      t.overhead = true;
    else if (name == "dropout")
      t.dropout = true;
    else if (name == "operators")
      t.operators = true;
    else if (name == "links")
      t.links = true;
    else
      return std::nullopt;
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return t;
}

// `device` with the terms left out that `t` leaves out.
inline DeviceSpec with_terms(DeviceSpec device, const CostTerms& t) {
  if (!t.no_p2p) device.peer_to_peer = true;
  if (!t.reserve) device.memory_reserve = 0;
  if (!t.overhead) device.action_overhead = 0;
  if (!t.operators) {
    device.sm_count = 0;
    device.max_efficiency = 0.75;
    device.attention_efficiency = 0;
    device.attention_half_keys = 0;
  }
  if (!t.links) {
    // The datasheet's PCIe 4.0 ×16 signalling rate, 16 GT/s × 16 × 128/130 / 8, where the
    // preset takes NCCL's PCIe figure.
    if (device.link_bandwidth == 24e9) device.link_bandwidth = 31.5e9;
    device.gpus_per_switch = 0;
    device.sockets_per_node = 1;
    device.socket_bandwidth = 0;
    device.socket_latency = 0;
    device.host_bandwidth = 0;
  }
  return device;
}

// `model` with the terms left out that `t` leaves out.
inline ModelShape with_terms(ModelShape model, const CostTerms& t) {
  if (!t.dropout) model.dropout = true;
  return model;
}

// The terms that apply, as --terms takes them ("none" when none does).
inline std::string describe(const CostTerms& t) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : ",") + std::string(name);
  };
  add(t.no_p2p, "no-p2p");
  add(t.reserve, "reserve");
  add(t.overhead, "overhead");
  add(t.dropout, "dropout");
  add(t.operators, "operators");
  add(t.links, "links");
  return s.empty() ? "none" : s;
}

// The usage line of --terms.
inline constexpr const char* terms_usage =
    "  --terms T  cost-model terms applied: all (default), none, or a comma-separated list of\n"
    "             no-p2p, reserve, overhead, dropout, operators, links (the presets'\n"
    "             peer_to_peer, memory_reserve, action_overhead, dropout, per-operator compute\n"
    "             and path-typed link figures; the rest left out)\n";

// What a report was asked for on its command line.
struct ReportArgs {
  bool quick = false;  // --quick: the report's smaller run
  CostTerms terms;     // --terms T
  std::string model;   // --model M, where the report takes it ("" = every model)
};

// Reads --quick, --terms T and, where `takes_model`, --model M. On --help, -h or anything else
// prints `usage` (its first lines, naming the report's own options) and the --terms lines to
// stderr and exits: 0 for help, 2 for a mistake.
inline ReportArgs read_report_args(int argc, char** argv, const char* usage, bool takes_model) {
  ReportArgs out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::optional<CostTerms> t;
    if (a == "--quick") {
      out.quick = true;
    } else if (a == "--terms" && i + 1 < argc && (t = parse_terms(argv[i + 1]))) {
      out.terms = *t;
      ++i;
    } else if (takes_model && a == "--model" && i + 1 < argc) {
      out.model = argv[++i];
    } else {
      std::fprintf(stderr, "%s%s", usage, terms_usage);
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return out;
}

}  // namespace pipesched::bench
