// Devices and clusters from files: every preset written and read back field by field, a
// preset as the base of a file, and each mistake placed by line and column.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/device_file.hpp"

namespace test_device_file {

namespace {

namespace ps = pipesched;

std::string refusal(const std::string& text, bool cluster = false) {
  try {
    if (cluster)
      ps::read_cluster(text, "my.json");
    else
      ps::read_device(text, "my.json");
  } catch (const ps::parse_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read without an error: " << text;
  return "";
}

void expect_same(const ps::DeviceSpec& a, const ps::DeviceSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.peak_flops, b.peak_flops);
  EXPECT_EQ(a.memory_bandwidth, b.memory_bandwidth);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.link_bandwidth, b.link_bandwidth);
  EXPECT_EQ(a.link_latency, b.link_latency);
  EXPECT_EQ(a.ranks_per_node, b.ranks_per_node);
  EXPECT_EQ(a.node_link_bandwidth, b.node_link_bandwidth);
  EXPECT_EQ(a.node_link_latency, b.node_link_latency);
  EXPECT_EQ(a.node_ports, b.node_ports);
  EXPECT_EQ(a.peer_to_peer, b.peer_to_peer);
  EXPECT_EQ(a.gpus_per_switch, b.gpus_per_switch);
  EXPECT_EQ(a.sockets_per_node, b.sockets_per_node);
  EXPECT_EQ(a.socket_bandwidth, b.socket_bandwidth);
  EXPECT_EQ(a.socket_latency, b.socket_latency);
  EXPECT_EQ(a.host_bandwidth, b.host_bandwidth);
  EXPECT_EQ(a.memory_reserve, b.memory_reserve);
  EXPECT_EQ(a.action_overhead, b.action_overhead);
  EXPECT_EQ(a.max_efficiency, b.max_efficiency);
  EXPECT_EQ(a.half_flops, b.half_flops);
  EXPECT_EQ(a.sm_count, b.sm_count);
  EXPECT_EQ(a.gemm_tile_m, b.gemm_tile_m);
  EXPECT_EQ(a.gemm_tile_n, b.gemm_tile_n);
  EXPECT_EQ(a.gemm_tile_k, b.gemm_tile_k);
  EXPECT_EQ(a.attention_efficiency, b.attention_efficiency);
  EXPECT_EQ(a.attention_half_keys, b.attention_half_keys);
  EXPECT_EQ(a.gemm_efficiency_table, b.gemm_efficiency_table);
}

// A measured GEMM table in a device file: read, written back the same, and refused with the
// entry and what is right when it is not pairs by increasing FLOPs.
TEST(DeviceFile, AMeasuredGemmTableReadsAndWritesBack) {
  const ps::DeviceFile f = ps::read_device(
      R"({"base": "rtx-4090", "gemm_efficiency_table": [[5.4e8, 0.28], [3.4e10, 0.96]]})",
      "mine.json");
  const std::vector<std::pair<double, double>> want = {{5.4e8, 0.28}, {3.4e10, 0.96}};
  EXPECT_EQ(f.device.gemm_efficiency_table, want);
  expect_same(ps::read_device(ps::device_json(f.device), "x.json").device, f.device);
  auto refused = [](const std::string& text, const std::string& says) {
    try {
      ps::read_device(text, "mine.json");
      ADD_FAILURE() << "taken: " << text;
    } catch (const ps::parse_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(R"({"base": "h100", "gemm_efficiency_table": [[1e9, 0.5], [1e8, 0.6]]})",
          "strictly increasing FLOPs");
  refused(R"({"base": "h100", "gemm_efficiency_table": [[1e9]]})", "[FLOPs, fraction] pairs");
  refused(R"({"base": "h100", "gemm_efficiency_table": [[1e9, 75]]})", "fraction of peak_flops");
  refused(R"({"base": "h100", "gemm_efficiency_table": 3})", "[FLOPs, fraction] pairs");
  refused(R"({"base": "h100", "sm_count": -1})", "sm_count");
}

TEST(DeviceFile, EveryPresetWrittenReadsBackFieldByField) {
  for (const ps::presets::DevicePreset& p : ps::presets::devices()) {
    SCOPED_TRACE(p.name);
    const ps::DeviceFile f = ps::read_device(ps::device_json(p.device, p.description), "x.json");
    expect_same(f.device, p.device);
    EXPECT_EQ(f.description, p.description);
    EXPECT_EQ(f.gpus, 0);
    // As a cluster of 16, the same device with its count.
    const ps::DeviceFile c = ps::read_cluster(ps::device_json(p.device, {}, 16), "c.json");
    expect_same(c.device, p.device);
    EXPECT_EQ(c.gpus, 16);
  }
  // Every field is written, the new ones off their defaults included.
  ps::DeviceSpec d = ps::presets::find_device("rtx-4090");
  d.peer_to_peer = false;
  d.memory_reserve = 1.5e9;
  d.action_overhead = 20e-6;
  d.gpus_per_switch = 4;
  d.socket_latency = 1.5e-6;
  d.host_bandwidth = 9e10;
  expect_same(ps::read_device(ps::device_json(d)).device, d);
}

// A cluster file with a measured link topology: switches, sockets and their links read over a
// preset, and a topology that is not there refused with the field and what is right.
TEST(DeviceFile, LinkTopologyReadsAndIsChecked) {
  const ps::DeviceFile f = ps::read_cluster(
      R"({"base": "rtx-4090", "gpus_per_switch": 2, "sockets_per_node": 4,
          "socket_bandwidth": 22e9, "socket_latency": 1e-6, "host_bandwidth": 1e11})",
      "lab.json");
  EXPECT_EQ(f.device.gpus_per_switch, 2);
  EXPECT_EQ(f.device.sockets_per_node, 4);
  EXPECT_EQ(f.device.path(0, 1), ps::LinkPath::Host);  // no P2P on GeForce, even on one switch
  EXPECT_EQ(f.device.path(1, 2), ps::LinkPath::Socket);
  const std::string socket = refusal(R"({"base": "rtx-4090", "sockets_per_node": 3})", true);
  EXPECT_NE(socket.find("\"sockets_per_node\" is 3"), std::string::npos) << socket;
  EXPECT_NE(socket.find("dividing it"), std::string::npos) << socket;
  const std::string slip = refusal(R"({"base": "rtx-4090", "socket_bandwidth": 16})", true);
  EXPECT_NE(slip.find("looks like GB/s"), std::string::npos) << slip;
  // Garbage and huge numbers: each refused, naming its field, none read as something else.
  const std::pair<const char*, const char*> bad[] = {
      {"gpus_per_switch", "1e12"},     {"gpus_per_switch", "-1"},     {"sockets_per_node", "0"},
      {"sockets_per_node", "\"two\""}, {"socket_bandwidth", "1e300"}, {"host_bandwidth", "5e14"},
      {"socket_latency", "1e30"},      {"socket_latency", "true"}};
  for (const auto& [key, value] : bad) {
    const std::string text = std::string(R"({"base": "rtx-4090", ")") + key + "\": " + value + "}";
    const std::string why = refusal(text, true);
    EXPECT_NE(why.find(std::string("\"") + key + "\""), std::string::npos) << text << ": " << why;
  }
}

TEST(DeviceFile, APresetAsBaseWithFieldsOverridden) {
  const ps::DeviceFile f = ps::read_cluster(
      R"({"format": "pipesched-cluster", "base": "rtx-4090", "peer_to_peer": false,
          "ranks_per_node": 4, "node_ports": 2, "memory_reserve": 2e9, "gpus": 32})",
      "lab.json");
  ps::DeviceSpec want = ps::presets::find_device("rtx-4090");
  want.name = "lab";  // the file's stem, as the file gives no name
  want.peer_to_peer = false;
  want.ranks_per_node = 4;
  want.node_ports = 2;
  want.memory_reserve = 2e9;
  expect_same(f.device, want);
  EXPECT_EQ(f.base, "rtx-4090");
  EXPECT_EQ(f.gpus, 32);
  // A device file written from scratch gives the five figures no default stands for.
  const ps::DeviceFile g = ps::read_device(
      R"({"name": "mine", "peak_flops": 1e15, "memory_bandwidth": 3e12, "memory_bytes": 8e10,
          "link_bandwidth": 4e11, "node_link_bandwidth": 5e10, "ranks_per_node": 8})");
  EXPECT_EQ(g.device.name, "mine");
  EXPECT_EQ(g.device.peak_flops, 1e15);
  EXPECT_EQ(g.device.ranks_per_node, 8);
  EXPECT_EQ(g.device.max_efficiency, ps::DeviceSpec{}.max_efficiency);
}

TEST(DeviceFile, MistakesAreOneSentenceWithLineAndColumn) {
  std::string e = refusal(R"({"base": "h100",
  "memory_bytez": 1})");
  EXPECT_NE(e.find("my.json: line 2, column 19: unknown field \"memory_bytez\"; a device file has "
                   "format, name, description, base, peak_flops"),
            std::string::npos)
      << e;
  e = refusal(R"({"base": "h100", "ranks_per_node": 2.5})");
  EXPECT_NE(e.find("line 1, column 36: field \"ranks_per_node\" is 2.5; it is a whole number (GPUs "
                   "per node)"),
            std::string::npos)
      << e;
  e = refusal(R"({"base": "h100", "peer_to_peer": "yes"})");
  EXPECT_NE(e.find("line 1, column 34: field \"peer_to_peer\" is \"yes\" (a string); it is true or "
                   "false"),
            std::string::npos)
      << e;
  e = refusal(R"({"base": "h100", "memory_reserve": 1e12})");
  EXPECT_NE(e.find("line 1, column 36: field \"memory_reserve\" is 1e12; use 0 or more bytes, less "
                   "than memory_bytes"),
            std::string::npos)
      << e;
  e = refusal(R"({"base": "h1000"})");
  EXPECT_NE(e.find("line 1, column 10: field \"base\" is \"h1000\" (a string); it names a device "
                   "preset: h100, h200"),
            std::string::npos)
      << e;
  e = refusal(R"({"peak_flops": 1e15})");
  EXPECT_NE(e.find("line 1, column 1: field \"memory_bandwidth\" is missing; a file without "
                   "\"base\""),
            std::string::npos)
      << e;
  e = refusal(R"({"base": "h100", "gpus": 64})");
  EXPECT_NE(e.find("field \"gpus\" is a cluster's GPU count"), std::string::npos) << e;
  e = refusal(R"({"format": "pipesched-cluster", "base": "h100"})");
  EXPECT_NE(e.find("this is a cluster file"), std::string::npos) << e;
  e = refusal(R"({"base": "h100", "gpus": 0})", true);
  EXPECT_NE(e.find("field \"gpus\" is 0; it is a whole number, from 1 to 65536"), std::string::npos)
      << e;
}

// Every figure has a physical range, refused with the field, the value, the unit and the
// range; a figure that looks like a unit slip says what it would be in the field's unit.
TEST(DeviceFile, FiguresOutsideTheirPhysicalRangeAreRefused) {
  struct Case {
    const char* field;
    const char* value;
    const char* says;
  };
  const Case cases[] = {
      {"peak_flops", "1e-300",
       "field \"peak_flops\" is 1e-300; give a figure in FLOP/s from 1e9 "
       "to 1e17 (1e9 is a single CPU core"},
      {"peak_flops", "989.4",
       "989.4 looks like TFLOP/s: in FLOP/s that is 9.894e14; give a "
       "figure in FLOP/s from 1e9 to 1e17"},
      {"peak_flops", "1e30", "field \"peak_flops\" is 1e30; give a figure in FLOP/s"},
      {"memory_bandwidth", "3.35", "3.35 looks like TB/s: in B/s that is 3.35e12"},
      {"memory_bytes", "80", "80 looks like GB: in bytes that is 8e10, or GiB"},
      {"link_bandwidth", "450", "450 looks like GB/s: in B/s per direction that is 4.5e11"},
      {"node_link_bandwidth", "400", "or Gb/s: in B/s per direction that is 5e10"},
      {"link_latency", "5", "5 looks like microseconds: in seconds that is 5e-6"},
      {"node_link_latency", "-1", "give a figure in seconds from 0 to 0.1"},
      {"action_overhead", "20", "20 looks like microseconds"},
      {"max_efficiency", "75", "75 looks like a percentage: as a fraction that is 0.75"},
      {"max_efficiency", "0", "give a fraction above 0 and at most 1"},
      {"half_flops", "1e300", "give a figure in FLOPs from 0 to 1e18"},
      {"ranks_per_node", "2147483647", "a node holds from 1 to 1024 ranks"},
      {"node_ports", "100000", "a count of network ports from 1 to 1024"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " " + c.value);
    const std::string e =
        refusal(std::string(R"({"base": "h100", ")") + c.field + "\": " + c.value + "}");
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("field \"") + c.field + "\" is " + c.value), std::string::npos)
        << e;
  }
  // The library refuses the same figures, whatever made the DeviceSpec.
  ps::DeviceSpec d = ps::presets::find_device("h100");
  d.peak_flops = 989.4;
  try {
    d.check();
    ADD_FAILURE() << "989.4 FLOP/s passed";
  } catch (const ps::invalid_argument& e) {
    EXPECT_EQ(e.field(), "DeviceSpec.peak_flops");
    EXPECT_NE(std::string(e.what()).find("looks like TFLOP/s"), std::string::npos) << e.what();
  }
  // Every preset is inside every range.
  for (const ps::presets::DevicePreset& p : ps::presets::devices())
    EXPECT_NO_THROW(p.device.check()) << p.name;
}

}  // namespace

}  // namespace test_device_file
