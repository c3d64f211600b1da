// The tuner's parallel speed-up: the same cluster search (Llama 2 13B on 64 A100 40GB,
// pipeline x data parallelism without ZeRO, where memory binds and Mario runs; 1F1B,
// interleaved 1F1B and Chimera, checkpointing none / selective / full / Mario, microbatch
// sizes 1-4, a global batch of 256)
// on 1 thread and on N threads (default: every core), alternating, the fastest of three runs
// of each; prints both times and their ratio, measured in this one run.
//
//   build/default/bench/tune_threads [THREADS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;

int main(int argc, char** argv) {
  const int threads = argc > 1
                          ? std::atoi(argv[1])
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads < 1) {
    std::fprintf(stderr, "usage: tune_threads [THREADS >= 1]\n");
    return 2;
  }
  ps::tuning::ClusterRequest req;
  req.gpus = 64;
  req.global_batch = 256;
  req.tensor = {1};
  req.zero = 0;
  req.search.bases = {"1f1b", "interleaved-1f1b", "chimera"};
  req.search.chunks = {2};
  req.search.microbatch_sizes = {1, 2, 4};
  req.search.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective,
                            ps::CheckpointMode::Full, ps::CheckpointMode::Mario};
  const ps::ModelShape model = ps::presets::find_model("llama2-13b");
  const ps::DeviceSpec device = ps::presets::find_device("a100-40gb");
  double one = 1e300, many = 1e300;
  std::string best_one, best_many;
  for (int rep = 0; rep < 3; ++rep) {
    for (int t : {1, threads}) {
      req.search.threads = t;
      const ps::tuning::Result r = ps::tune_cluster(req, model, device);
      (t == 1 ? one : many) = std::min(t == 1 ? one : many, r.seconds);
      (t == 1 ? best_one : best_many) = r.best ? ps::describe(*r.best) : "none";
      if (rep == 0 && t == 1)
        std::printf("search: %d candidates (%d pruned), best %s\n", r.candidates_tried,
                    r.candidates_pruned, best_one.c_str());
    }
  }
  std::printf("1 thread: %.2f s; %d threads: %.2f s; speed-up %.2fx (fastest of 3 each)\n", one,
              threads, many, one / many);
  if (best_one != best_many) {
    std::printf("the plans differ: %s vs %s\n", best_one.c_str(), best_many.c_str());
    return 1;
  }
  return 0;
}
