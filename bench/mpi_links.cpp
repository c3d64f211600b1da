// The link microbenchmark over MPI: run under `mpirun -np P mpi_links [options]`. It measures
// the paths pipesched's cost model prices (DeviceSpec::path) that P processes can reach, with
// the MPI point-to-point calls the MPI transport sends its messages with, and writes what it
// measured as a cluster file (`--out FILE`), whose link figures replace the base preset's
// (docs/benchmarks.md, "Links"; docs/cost-model.md, "Links").
//
// - Within a node (the processes MPI_Comm_split_type puts on one host): one pair's one-way
//   time over message sizes 8 B to --max-bytes (half a ping-pong's round trip, the median of
//   --repeats), fitted to both of the cost model's formulas for a path within a node
//   (DeviceSpec::message_seconds): the direct path's L + b / B and the host path's staged
//   2 · L + (b + min(b, 512 KiB)) / B, each through the smallest message (L, link_latency)
//   and the largest (B, link_bandwidth). The one whose worst miss over the sizes is smaller
//   is kept (peer_to_peer says which). Give --max-bytes the size of the messages the figures
//   are for (a pipeline's activation message): caches make mid-sized copies faster than the
//   line through the two ends, which the printed table shows. Then every process of the node
//   in pairs sends the largest message at once; on the host path their total message bytes
//   per second is host_bandwidth when it is clearly less than the pairs' B together.
// - Between nodes (two or more nodes): the first processes of nodes 0 and 1 as a pair, fitted
//   to latency + b / B (node_link_latency, node_link_bandwidth); then every process of node 0
//   sending to its counterpart on node 1 at once, whose total over one pair's B gives the ports
//   the node's senders share (node_ports).
// Rank 0 prints every size's measured time beside the fitted model's, so the fit's error is
// on the page.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "mpi_link_measure.hpp"
#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"

namespace ps = pipesched;
using namespace pipesched::bench::links;

namespace {

constexpr const char* usage =
    "usage: mpirun -np P mpi_links [--out FILE] [--base PRESET] [--repeats N] [--max-bytes B]\n"
    "  --out FILE     write the measured links as a cluster file on PRESET's other figures\n"
    "  --base PRESET  the device preset the file starts from (default h100; pipesched list)\n"
    "  --repeats N    ping-pongs per size, the median kept (default 20, 1 to 10000)\n"
    "  --max-bytes B  the largest message (default 16777216, 1024 to 1073741824)\n"
    "P >= 2: two processes on one node measure the node's path; processes on two or more\n"
    "nodes (the same count on each) also measure the network.\n";

}  // namespace

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  const bool root = session.rank() == 0;
  std::string out_path, base = "h100", repeats_text = "20", max_bytes_text = "16777216";
  int repeats = 20;
  long long max_bytes = 16 << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--out" && has_value) {
      out_path = argv[++i];
    } else if (a == "--base" && has_value) {
      base = argv[++i];
    } else if (a == "--repeats" && has_value) {
      repeats_text = argv[++i];
      char* end = nullptr;
      const long v = std::strtol(repeats_text.c_str(), &end, 10);
      repeats = *end == '\0' && v >= 1 && v <= 10000 ? static_cast<int>(v) : 0;
    } else if (a == "--max-bytes" && has_value) {
      max_bytes_text = argv[++i];
      char* end = nullptr;
      max_bytes = std::strtoll(max_bytes_text.c_str(), &end, 10);
      if (*end != '\0') max_bytes = 0;
    } else {
      if (root) std::fprintf(stderr, "%s", usage);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (repeats < 1 || repeats > 10000) {
    if (root)
      std::fprintf(stderr,
                   "mpi_links: --repeats is '%s'; give a whole number of ping-pongs per size, 1 "
                   "to 10000\n%s",
                   repeats_text.c_str(), usage);
    return 2;
  }
  if (max_bytes < 1024 || max_bytes > (1LL << 30)) {
    if (root)
      std::fprintf(stderr,
                   "mpi_links: --max-bytes is '%s'; give the largest message as a whole number "
                   "of bytes, 1024 to 1073741824\n%s",
                   max_bytes_text.c_str(), usage);
    return 2;
  }
  ps::DeviceSpec device;
  try {
    device = ps::presets::find_device(base);
  } catch (const std::exception& e) {
    if (root) std::fprintf(stderr, "mpi_links: %s\n", e.what());
    return 2;
  }
  const int size = session.size();
  if (size < 2) {
    if (root) std::fprintf(stderr, "mpi_links: needs two or more processes\n%s", usage);
    return 2;
  }

  // The nodes: processes MPI says share memory.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, session.rank(), MPI_INFO_NULL, &node);
  int local = 0, per_node = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &per_node);
  int smallest = 0, largest = 0;
  MPI_Allreduce(&per_node, &smallest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&per_node, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (smallest != largest) {
    if (root)
      std::fprintf(stderr,
                   "mpi_links: the nodes hold %d to %d processes; start the same count on each "
                   "(a cluster is whole nodes of ranks_per_node)\n",
                   smallest, largest);
    return 2;
  }
  // World ranks by node: node k's processes, in local order.
  std::vector<int> local_of(static_cast<std::size_t>(size)), leader(local_of.size());
  int my_leader = session.rank();
  MPI_Bcast(&my_leader, 1, MPI_INT, 0, node);
  MPI_Allgather(&my_leader, 1, MPI_INT, leader.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&local, 1, MPI_INT, local_of.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> leaders;
  for (int r = 0; r < size; ++r)
    if (local_of[static_cast<std::size_t>(r)] == 0) leaders.push_back(r);
  const int nodes = static_cast<int>(leaders.size());
  auto world = [&](int k, int l) {  // world rank of node k's process l
    for (int r = 0; r < size; ++r)
      if (leader[static_cast<std::size_t>(r)] == leaders[static_cast<std::size_t>(k)] &&
          local_of[static_cast<std::size_t>(r)] == l)
        return r;
    return -1;
  };

  const std::size_t top = static_cast<std::size_t>(max_bytes);
  std::vector<char> buffer(top, 1);
  const std::vector<std::size_t> sizes = sizes_up_to(top);
  if (root) {
    std::printf("mpi_links: %d processes, %d node%s of %d\n\n", size, nodes, nodes == 1 ? "" : "s",
                per_node);
  }
  ps::DeviceSpec measured = device;
  measured.name = device.name + "-measured";
  measured.ranks_per_node = per_node;
  measured.gpus_per_switch = 0;
  measured.sockets_per_node = 1;
  measured.socket_bandwidth = 0;
  measured.socket_latency = 0;
  measured.host_bandwidth = 0;
  if (per_node >= 2) {
    const Fit f =
        measure_pair("within a node", world(0, 0), world(0, 1), sizes, repeats, false, buffer);
    measured.peer_to_peer = !f.staged;
    measured.link_latency = f.latency;
    measured.link_bandwidth = f.bandwidth;
    std::vector<int> from, to;
    for (int l = 0; l + 1 < per_node; l += 2) {
      from.push_back(world(0, l));
      to.push_back(world(0, l + 1));
    }
    const double s = all_at_once(from, to, top, repeats, buffer);
    const double pairs = static_cast<double>(from.size());
    const double together = pairs * static_cast<double>(top) / std::max(s, 1e-12);
    if (root)
      std::printf(
          "  %zu pair%s of node 0 at once: %.3g message B/s in all, %.2f of the pairs' B "
          "together\n\n",
          from.size(), from.size() == 1 ? "" : "s", together, together / (pairs * f.bandwidth));
    // Shared host memory only when the pairs together reach clearly less than each alone (and
    // only the host path shares it).
    if (f.staged && from.size() > 1 && together < 0.9 * pairs * f.bandwidth)
      measured.host_bandwidth = together;
  } else if (root) {
    std::printf("one process per node: nothing within a node to measure\n\n");
  }
  if (nodes >= 2) {
    const Fit f =
        measure_pair("between nodes", world(0, 0), world(1, 0), sizes, repeats, true, buffer);
    measured.node_link_latency = f.latency;
    measured.node_link_bandwidth = f.bandwidth;
    std::vector<int> from, to;
    for (int l = 0; l < per_node; ++l) {
      from.push_back(world(0, l));
      to.push_back(world(1, l));
    }
    const double s = all_at_once(from, to, top, repeats, buffer);
    const double together = static_cast<double>(per_node) * static_cast<double>(top) / s;
    const double ports = together / f.bandwidth;
    measured.node_ports =
        ports >= 0.9 * per_node ? 0 : std::clamp(static_cast<int>(std::lround(ports)), 1, per_node);
    if (root)
      std::printf(
          "  %d processes of node 0 to node 1 at once: %.3g B/s in all, %.2f pairs' worth: "
          "node_ports %d\n\n",
          per_node, together, ports, measured.node_ports);
  } else if (root) {
    std::printf("one node: the network is not measured (node_link_* as base \"%s\" says)\n\n",
                base.c_str());
  }
  MPI_Comm_free(&node);

  if (root) {
    try {
      measured.check();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mpi_links: the measured figures are out of range: %s\n", e.what());
      return 1;
    }
    char when[32] = "";
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    const std::string description = "links measured by mpi_links (" + std::to_string(size) +
                                    " processes, " + when + "); the rest as \"" + base + "\"";
    const std::string text = ps::device_json(measured, description, size);
    if (out_path.empty()) {
      std::printf("%s\n", text.c_str());
    } else {
      std::ofstream out(out_path);
      out << text << "\n";
      if (!out) {
        std::fprintf(stderr, "mpi_links: cannot write %s\n", out_path.c_str());
        return 1;
      }
      std::printf("wrote %s\n", out_path.c_str());
    }
  }
  return 0;
}
