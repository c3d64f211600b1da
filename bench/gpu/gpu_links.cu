// The link microbenchmark on GPUs (scripts/gpu-check.sh runs it): the paths of
// DeviceSpec::path this machine's GPUs have, measured as the cost model prices them.
// - Every GPU's copies to and from pinned host memory (cudaMemcpyAsync), over message sizes:
//   the two copies a message through host memory is made of (the Host path), fitted to
//   L + bytes / B per copy.
// - With two or more GPUs, a message from GPU 0 to GPU 1 by NCCL's send and receive (one
//   process, ncclCommInitAll), fitted to L + bytes / B: the Direct path when the GPUs reach each
//   other's memory (cudaDeviceCanAccessPeer), else NCCL's own staging through the host.
// Prints markdown tables, each size's measured time beside the fitted line; `--out FILE`
// writes the measured figures as a device file on `--base`'s other figures (with two or more
// GPUs: the pair's link; with one there is no path between GPUs, and no file is written).
// Exit 0 when it measured, 2 when there is no usable GPU or the command line is wrong.
#include <cuda_runtime.h>
#ifdef PIPESCHED_GPU_LINKS_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../link_fit.hpp"
#include "pipesched/analysis/device_spec.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/device_file.hpp"

namespace ps = pipesched;

namespace {

constexpr const char* usage_text =
    "usage: gpu_links [--out FILE] [--base PRESET] [--repeats N] | --help\n"
    "  --out FILE     with two or more GPUs, write GPU 0 -> 1's measured link as a device\n"
    "                 file on PRESET's other figures\n"
    "  --base PRESET  the device preset the file starts from (default h100)\n"
    "  --repeats N    timings per size, the median kept (default 20, 1 to 1000)\n";

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_links: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// 8 B, then powers of 4, up to 256 MiB.
std::vector<std::size_t> sizes() {
  std::vector<std::size_t> out;
  for (std::size_t b = 8; b <= (std::size_t{256} << 20); b *= 4)
    out.push_back(b);
  return out;
}

using pipesched::bench::links::Fit;

// Fits L + b / B (`staged`: the Host path's 2 L + (b + min(b, 512 KiB)) / B) through the
// smallest and the largest size (bench/link_fit.hpp) and prints the table.
Fit fit_and_print(const char* title, const std::vector<std::size_t>& s,
                  const std::vector<double>& t, bool staged = false) {
  const Fit f = pipesched::bench::links::fit_through_ends(s, t, staged);
  std::printf("### %s\n\n| bytes | measured µs | %s, µs | ratio |\n|---:|---:|---:|---:|\n", title,
              staged ? "2 L + (bytes + min(bytes, 512 KiB)) / B" : "L + bytes / B");
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double model = f.seconds(static_cast<double>(s[i]));
    std::printf("| %zu | %.2f | %.2f | %.3f |\n", s[i], t[i] * 1e6, model * 1e6, t[i] / model);
  }
  std::printf("\nL = %.2f µs, B = %.3g B/s\n\n", f.latency * 1e6, f.bandwidth);
  return f;
}

// Median seconds of `run()` followed by a synchronisation, over `repeats` (one unmeasured).
template <class Run>
double timed(int repeats, Run&& run) {
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!run()) return -1;
    if (r > 0)
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

bool host_copies(int gpu, int repeats) {
  if (!ok(cudaSetDevice(gpu), "cudaSetDevice")) return false;
  const std::vector<std::size_t> s = sizes();
  void *device = nullptr, *host = nullptr;
  cudaStream_t stream{};
  if (!ok(cudaMalloc(&device, s.back()), "cudaMalloc") ||
      !ok(cudaMallocHost(&host, s.back()), "cudaMallocHost") ||
      !ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
    return false;
  bool good = true;
  for (cudaMemcpyKind kind : {cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice}) {
    std::vector<double> t;
    for (std::size_t b : s) {
      const double x = timed(repeats, [&] {
        void* to = kind == cudaMemcpyDeviceToHost ? host : device;
        void* from = kind == cudaMemcpyDeviceToHost ? device : host;
        return ok(cudaMemcpyAsync(to, from, b, kind, stream), "cudaMemcpyAsync") &&
               ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      });
      if (x < 0) good = false;
      t.push_back(x);
    }
    if (!good) break;
    const std::string title =
        "GPU " + std::to_string(gpu) +
        (kind == cudaMemcpyDeviceToHost ? " to pinned host memory" : " from pinned host memory");
    (void)fit_and_print(title.c_str(), s, t);
  }
  cudaStreamDestroy(stream);
  cudaFreeHost(host);
  cudaFree(device);
  return good;
}

#ifdef PIPESCHED_GPU_LINKS_NCCL
bool nccl_ok(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "gpu_links: %s: %s\n", what, ncclGetErrorString(r));
  return false;
}

// GPU 0 -> GPU 1 by ncclSend / ncclRecv; the fit, or latency -1 on failure.
Fit nccl_pair(int repeats) {
  Fit bad;
  bad.latency = -1;
  const int devs[2] = {0, 1};
  ncclComm_t comms[2];
  if (!nccl_ok(ncclCommInitAll(comms, 2, devs), "ncclCommInitAll")) return bad;
  const std::vector<std::size_t> s = sizes();
  void* buf[2] = {nullptr, nullptr};
  cudaStream_t streams[2]{};
  for (int g = 0; g < 2; ++g)
    if (!ok(cudaSetDevice(g), "cudaSetDevice") ||
        !ok(cudaMalloc(&buf[g], s.back()), "cudaMalloc") ||
        !ok(cudaStreamCreate(&streams[g]), "cudaStreamCreate"))
      return bad;
  std::vector<double> t;
  for (std::size_t b : s) {
    const double x = timed(repeats, [&] {
      bool good = nccl_ok(ncclGroupStart(), "ncclGroupStart") &&
                  nccl_ok(ncclSend(buf[0], b, ncclChar, 1, comms[0], streams[0]), "ncclSend") &&
                  nccl_ok(ncclRecv(buf[1], b, ncclChar, 0, comms[1], streams[1]), "ncclRecv") &&
                  nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
      for (int g = 0; g < 2 && good; ++g)
        good = ok(cudaSetDevice(g), "cudaSetDevice") &&
               ok(cudaStreamSynchronize(streams[g]), "cudaStreamSynchronize");
      return good;
    });
    if (x < 0) return bad;
    t.push_back(x);
  }
  int peer = 0;
  cudaDeviceCanAccessPeer(&peer, 0, 1);
  const std::string title =
      std::string("GPU 0 to GPU 1, NCCL send and receive (") +
      (peer ? "peer access: the Direct path" : "no peer access: through host") + ")";
  const Fit f = fit_and_print(title.c_str(), s, t, peer == 0);
  for (int g = 0; g < 2; ++g) {
    cudaSetDevice(g);
    cudaStreamDestroy(streams[g]);
    cudaFree(buf[g]);
    ncclCommDestroy(comms[g]);
  }
  return f;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, base = "h100";
  int repeats = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--base" && i + 1 < argc) {
      base = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "gpu_links: unknown argument '%s'\n%s", a.c_str(), usage_text);
      return 2;
    }
  }
  if (repeats < 1 || repeats > 1000) {
    std::fprintf(stderr, "gpu_links: --repeats %d is out of range (1 to 1000)\n%s", repeats,
                 usage_text);
    return 2;
  }
  ps::DeviceSpec device;
  try {
    device = ps::presets::find_device(base);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_links: %s\n", e.what());
    return 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
    std::fprintf(stderr, "gpu_links: no usable GPU\n");
    return 2;
  }
  std::printf("## Links (%d GPU%s)\n\n", gpus, gpus == 1 ? "" : "s");
  bool good = true;
  for (int g = 0; g < gpus && good; ++g)
    good = host_copies(g, repeats);
  if (!good) return 1;
  if (gpus < 2) {
    std::printf(
        "One GPU: there is no path between GPUs to measure. The copies above are the two halves "
        "of a message through host memory (DeviceSpec's Host path, at the slower copy's B).\n");
    if (!out_path.empty()) std::printf("No file written: --out needs two GPUs.\n");
    return 0;
  }
#ifdef PIPESCHED_GPU_LINKS_NCCL
  const Fit f = nccl_pair(repeats);
  if (f.latency < 0) return 1;
  int peer = 0;
  cudaDeviceCanAccessPeer(&peer, 0, 1);
  if (!out_path.empty()) {
    ps::DeviceSpec measured = device;
    measured.name = device.name + "-measured";
    measured.link_latency = f.latency;
    measured.link_bandwidth = f.bandwidth;
    measured.peer_to_peer = peer != 0;
    try {
      measured.check();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_links: the measured figures are out of range: %s\n", e.what());
      return 1;
    }
    std::ofstream out(out_path);
    out << ps::device_json(measured,
                           "GPU 0 -> 1 link measured by gpu_links over NCCL; the rest "
                           "as \"" +
                               base + "\"")
        << "\n";
    if (!out) {
      std::fprintf(stderr, "gpu_links: cannot write %s\n", out_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", out_path.c_str());
  }
#else
  std::printf("Built without NCCL: the path between GPUs is not measured.\n");
#endif
  return 0;
}
