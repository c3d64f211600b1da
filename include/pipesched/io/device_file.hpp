// Devices and clusters as JSON files: every DeviceSpec field under its C++ name, in SI units
// (FLOP/s, B/s, bytes, seconds), optionally on top of a preset ("base"); a cluster file adds
// the cluster's GPU count. The writer prints the same form (`pipesched list --json`), so a
// device written and read back is the same DeviceSpec, field by field.
#pragma once

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/io/detail/spec_json.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"

namespace pipesched {

//! The "format" marker of a device file.
inline constexpr std::string_view device_format = "pipesched-device";
//! The "format" marker of a cluster file.
inline constexpr std::string_view cluster_format = "pipesched-cluster";

//! A device or cluster read from a file.
struct DeviceFile {
  DeviceSpec device;        //!< its figures, checked (DeviceSpec::check)
  std::string description;  //!< the file's "description", or empty
  std::string base;         //!< the preset it started from ("base"), or empty
  //! A cluster's GPU count ("gpus"); 0 when the file does not give one (always for a device).
  int gpus = 0;
};

namespace detail::device_file {

//! One DeviceSpec field: its name and where it lives (exactly one of the members is set).
struct Field {
  const char* name;            //!< the C++ name, also the JSON key
  double DeviceSpec::*number;  //!< a number field, or nullptr
  int DeviceSpec::*whole;      //!< a whole-number field, or nullptr
  bool DeviceSpec::*flag;      //!< a boolean field, or nullptr
  const char* what;            //!< what it is, with its unit, for messages
};

//! Every DeviceSpec field but its name, in the struct's order.
inline const std::vector<Field>& fields() {
  static const std::vector<Field> list = {
      {"peak_flops", &DeviceSpec::peak_flops, nullptr, nullptr, "dense 16-bit FLOP/s"},
      {"memory_bandwidth", &DeviceSpec::memory_bandwidth, nullptr, nullptr,
       "device memory bandwidth, B/s"},
      {"memory_bytes", &DeviceSpec::memory_bytes, nullptr, nullptr, "device memory, bytes"},
      {"link_bandwidth", &DeviceSpec::link_bandwidth, nullptr, nullptr,
       "within a node, B/s per direction"},
      {"link_latency", &DeviceSpec::link_latency, nullptr, nullptr, "within a node, seconds"},
      {"ranks_per_node", nullptr, &DeviceSpec::ranks_per_node, nullptr, "GPUs per node"},
      {"node_link_bandwidth", &DeviceSpec::node_link_bandwidth, nullptr, nullptr,
       "between nodes, B/s per direction"},
      {"node_link_latency", &DeviceSpec::node_link_latency, nullptr, nullptr,
       "between nodes, seconds"},
      {"node_ports", nullptr, &DeviceSpec::node_ports, nullptr,
       "network ports per node, 0 = one per GPU"},
      {"peer_to_peer", nullptr, nullptr, &DeviceSpec::peer_to_peer,
       "GPUs of a node copy to each other directly"},
      {"gpus_per_switch", nullptr, &DeviceSpec::gpus_per_switch, nullptr,
       "GPUs behind one PCIe switch, 0 = none"},
      {"sockets_per_node", nullptr, &DeviceSpec::sockets_per_node, nullptr,
       "CPU sockets of a node"},
      {"socket_bandwidth", &DeviceSpec::socket_bandwidth, nullptr, nullptr,
       "between sockets, B/s per direction, 0 = not a limit"},
      {"socket_latency", &DeviceSpec::socket_latency, nullptr, nullptr,
       "added between sockets, seconds"},
      {"host_bandwidth", &DeviceSpec::host_bandwidth, nullptr, nullptr,
       "staged through one socket's host memory, B/s, 0 = not a limit"},
      {"host_link_bandwidth", &DeviceSpec::host_link_bandwidth, nullptr, nullptr,
       "one GPU's link to host memory, B/s per direction, 0 = not known"},
      {"memory_reserve", &DeviceSpec::memory_reserve, nullptr, nullptr,
       "bytes of memory the model cannot use"},
      {"action_overhead", &DeviceSpec::action_overhead, nullptr, nullptr,
       "seconds added to every action"},
      {"max_efficiency", &DeviceSpec::max_efficiency, nullptr, nullptr,
       "fraction of peak_flops large GEMMs reach"},
      {"half_flops", &DeviceSpec::half_flops, nullptr, nullptr,
       "a kernel's fixed time, in FLOPs at max_efficiency"},
      {"sm_count", nullptr, &DeviceSpec::sm_count, nullptr,
       "streaming multiprocessors, 0 = no tile or wave quantisation"},
      {"gemm_tile_m", nullptr, &DeviceSpec::gemm_tile_m, nullptr, "rows of a GEMM output tile"},
      {"gemm_tile_n", nullptr, &DeviceSpec::gemm_tile_n, nullptr, "columns of a GEMM output tile"},
      {"gemm_tile_k", nullptr, &DeviceSpec::gemm_tile_k, nullptr, "depth of a GEMM tile's K step"},
      {"attention_efficiency", &DeviceSpec::attention_efficiency, nullptr, nullptr,
       "fraction of peak_flops fused attention reaches, 0 = max_efficiency"},
      {"attention_half_keys", &DeviceSpec::attention_half_keys, nullptr, nullptr,
       "keys per query at which attention runs at half its rate"},
  };
  return list;
}

//! The key of DeviceSpec::gemm_efficiency_table: an array of [FLOPs, fraction] pairs.
inline constexpr std::string_view table_key = "gemm_efficiency_table";

//! The fields a file without "base" must give: those whose DeviceSpec default is no device.
inline const std::vector<std::string>& required() {
  static const std::vector<std::string> list = {"peak_flops", "memory_bandwidth", "memory_bytes",
                                                "link_bandwidth", "node_link_bandwidth"};
  return list;
}

//! The keys a file may hold, as messages list them.
inline std::string known_keys(bool cluster) {
  std::string out = "format, name, description, base";
  for (const Field& f : fields())
    out += std::string(", ") + f.name;
  return out + ", " + std::string(table_key) + (cluster ? ", gpus" : "");
}

//! The part of DeviceSpec::check's message after "is out of range; " (what is right).
inline std::string wanted(const std::string& message) {
  const std::string marker = "is out of range; ";
  const auto at = message.find(marker);
  std::string want = at == std::string::npos ? message : message.substr(at + marker.size());
  if (!want.empty() && want.back() == '.') want.pop_back();
  return want;
}

//! The value of the field `key` of `d` as JSON writes it.
inline std::string value_of(const DeviceSpec& d, const std::string& key) {
  for (const Field& f : fields())
    if (key == f.name) {
      if (f.number) return json::number(d.*f.number);
      if (f.whole) return std::to_string(d.*f.whole);
      return d.*f.flag ? "true" : "false";
    }
  return "?";
}

//! The device (cluster) of the JSON object `doc` of `source`, checked as read_device says.
inline DeviceFile read_object(const json::Value& doc, const std::string& source, bool cluster) {
  const spec_json::Fields in(doc, source);
  DeviceFile out;
  if (const json::Value* f = in.find("format")) {
    const std::string& marker = in.text("format", *f, "the file's kind");
    if (marker != device_format && (!cluster || marker != cluster_format))
      in.mistyped("format", *f,
                  cluster ? "a cluster file says \"pipesched-cluster\" (or \"pipesched-device\")"
                  : marker == cluster_format
                      ? "this is a cluster file; read it as a cluster (the command's --cluster), "
                        "or say \"pipesched-device\""
                      : "a device file says \"pipesched-device\"");
  }
  for (const json::Value::Member& m : doc.object()) {
    const bool known = m.key == "format" || m.key == "name" || m.key == "description" ||
                       m.key == "base" || m.key == table_key || (cluster && m.key == "gpus") ||
                       std::any_of(fields().begin(), fields().end(),
                                   [&](const Field& f) { return m.key == f.name; });
    if (known) continue;
    if (m.key == "gpus")
      in.fail(m.value,
              "field \"gpus\" is a cluster's GPU count, which a device file has not; read the "
              "file as a cluster (the command's --cluster), or leave the field out");
    in.fail(m.value, "unknown field \"" + m.key + "\"; a " + (cluster ? "cluster" : "device") +
                         " file has " + known_keys(cluster));
  }
  if (const json::Value* b = in.find("base")) {
    out.base = in.text("base", *b, "the name of a device preset");
    try {
      out.device = presets::find_device(out.base);
    } catch (const invalid_problem& e) {
      in.mistyped("base", *b,
                  "it names a device preset: " + presets::detail::known_names(presets::devices()));
    }
  } else {
    for (const std::string& key : required())
      in.need(key, "a file without \"base\" (a preset to start from) gives " +
                       spec_json::listed(required()));
  }
  out.device.name = spec_json::stem_of(source);
  if (const json::Value* n = in.find("name")) out.device.name = in.text("name", *n, "its name");
  if (const json::Value* d = in.find("description"))
    out.description = in.text("description", *d, "one line saying what it is");
  if (const json::Value* g = cluster ? in.find("gpus") : nullptr)
    out.gpus = in.whole("gpus", *g, 1, 1 << 16, "the cluster's GPUs");
  for (const Field& f : fields()) {
    const json::Value* v = in.find(f.name);
    if (v == nullptr) continue;
    if (f.number) out.device.*f.number = in.number(f.name, *v, -1e308, false, 1e308, f.what);
    if (f.whole) out.device.*f.whole = in.whole(f.name, *v, INT_MIN, INT_MAX, f.what);
    if (f.flag) out.device.*f.flag = in.boolean(f.name, *v, f.what);
  }
  if (const json::Value* t = in.find(table_key)) {
    const std::string want =
        "it is an array of at most 4096 [FLOPs, fraction] pairs: a GEMM's FLOPs and the "
        "fraction of peak_flops it reached, FLOPs increasing ([[1e9, 0.3], [1e12, 0.8]])";
    if (t->kind() != json::Kind::Array || t->array().size() > 4096)
      in.mistyped(table_key, *t, want);
    out.device.gemm_efficiency_table.clear();
    for (const json::Value& pair : t->array()) {
      if (pair.kind() != json::Kind::Array || pair.array().size() != 2 ||
          pair.array()[0].kind() != json::Kind::Number ||
          pair.array()[1].kind() != json::Kind::Number)
        in.fail(pair, "an entry of field \"" + std::string(table_key) + "\" is " +
                          spec_json::shown(pair) + "; " + want);
      out.device.gemm_efficiency_table.emplace_back(pair.array()[0].number(),
                                                    pair.array()[1].number());
    }
  }
  try {
    out.device.check();
  } catch (const invalid_argument& e) {
    // The field out of range, where the file sets it, or where it comes from when it does not.
    const std::string key = e.field().substr(e.field().find('.') + 1);
    if (key == table_key)
      if (const json::Value* at = in.find(key))
        in.fail(*at, "field \"" + key + "\": " + e.value() + "; " + wanted(e.message().text()));
    const std::string want = wanted(e.message().text());
    if (const json::Value* at = in.find(key))
      in.fail(*at, "field \"" + key + "\" is " + spec_json::shown(*at) + "; " + want);
    in.fail(doc, "field \"" + key + "\" is " + value_of(out.device, key) +
                     (out.base.empty() ? " (the default, not given)"
                                       : " (from base \"" + out.base + "\")") +
                     "; " + want);
  }
  return out;
}

inline DeviceFile read(std::string_view text, const std::string& source, bool cluster) {
  return read_object(spec_json::parse_object(text, source, "a device or a cluster"), source,
                     cluster);
}

}  // namespace detail::device_file

//! Reads a device from the JSON text of a device file (`source` names it in messages): an
//! object with "format": "pipesched-device" (optional), "name" (default: the file's stem),
//! "description", "base" (a device preset whose figures are the defaults) and the DeviceSpec
//! fields by their C++ names: numbers in FLOP/s, B/s, bytes and seconds, ranks_per_node and
//! node_ports, gpus_per_switch and sockets_per_node whole numbers, peer_to_peer true or
//! false. Without "base" the file gives
//! peak_flops, memory_bandwidth, memory_bytes, link_bandwidth and node_link_bandwidth (the
//! rest default as DeviceSpec does). Throws parse_error naming `source`, line and column for
//! text that is not JSON, an unknown field (naming the known ones), a mistyped value, an
//! unknown base and a field out of DeviceSpec::check's range.
inline DeviceFile read_device(std::string_view text, const std::string& source = "device") {
  return detail::device_file::read(text, source, false);
}

//! Reads a cluster from the JSON text of a cluster file: a device file (read_device) whose
//! "format" may be "pipesched-cluster" and which may give "gpus", the cluster's GPU count
//! (1 to 65536). The layout is the device's: ranks_per_node GPUs per node, node_link_bandwidth
//! and node_link_latency between nodes, node_ports network ports per node.
inline DeviceFile read_cluster(std::string_view text, const std::string& source = "cluster") {
  return detail::device_file::read(text, source, true);
}

//! read_device on the file at `path`; throws pipesched::error when it cannot be read.
inline DeviceFile read_device_file(const std::string& path) {
  return read_device(detail::spec_json::read_file(path, "device file"), path);
}

//! read_cluster on the file at `path`; throws pipesched::error when it cannot be read.
inline DeviceFile read_cluster_file(const std::string& path) {
  return read_cluster(detail::spec_json::read_file(path, "cluster file"), path);
}

//! Writes `device` as one object of the device file format into `w`: "format", "name",
//! "description" (when not empty), then every DeviceSpec field; with `gpus` > 0 a cluster
//! file ("format": "pipesched-cluster", "gpus"). read_device (read_cluster) reads it back
//! to the same fields.
inline void write_device(json::Writer& w, const DeviceSpec& device,
                         std::string_view description = {}, int gpus = 0) {
  w.begin_object()
      .field("format", gpus > 0 ? cluster_format : device_format)
      .field("name", device.name);
  if (!description.empty()) w.field("description", description);
  for (const detail::device_file::Field& f : detail::device_file::fields()) {
    w.key(f.name);
    if (f.number) w.value(device.*f.number);
    if (f.whole) w.value(device.*f.whole);
    if (f.flag) w.value(device.*f.flag);
  }
  if (!device.gemm_efficiency_table.empty()) {
    w.key(detail::device_file::table_key).begin_array();
    for (const auto& [flops, fraction] : device.gemm_efficiency_table)
      w.begin_array().value(flops).value(fraction).end_array();
    w.end_array();
  }
  if (gpus > 0) w.field("gpus", gpus);
  w.end_object();
}

//! `device` as the JSON text of a device file (a cluster file with `gpus` > 0), one line.
inline std::string device_json(const DeviceSpec& device, std::string_view description = {},
                               int gpus = 0) {
  json::Writer w;
  write_device(w, device, description, gpus);
  return w.take();
}

}  // namespace pipesched
