// What the MPI test programs share: the job's size and this process's rank, the toy GPT they
// train, its stages, a replica's share of a global batch, and generated schedules.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"

namespace mpi_test {

namespace ps = pipesched;
namespace toy = pipesched::toy;

inline constexpr double learning_rate = 0.05;

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

inline toy::GptConfig config_for(int stages) {
  return toy::GptConfig{.vocabulary = 16,
                        .hidden = 8,
                        .heads = 2,
                        .ffn = 16,
                        .sequence = 8,
                        .blocks = stages,
                        .microbatch_size = 2,
                        .seed = 5};
}

template <class T>
std::vector<toy::GptStage<T>> make_stages(const toy::GptConfig& config, int stages) {
  std::vector<toy::GptStage<T>> v;
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages);
  return v;
}

// The stages this process's rank holds, out of `all`.
template <class T>
std::vector<toy::GptStage<T>> own(const ps::Schedule& s, const std::vector<toy::GptStage<T>>& all) {
  std::vector<toy::GptStage<T>> v;
  for (int st : s.placement.stages_of(world_rank()))
    v.push_back(all[static_cast<std::size_t>(st)]);
  return v;
}

// Replica `j`'s share of a global batch of `d` shares: its microbatches, its own mean loss.
template <class T>
toy::StepData<T> share(const toy::StepData<T>& global, int j, int d) {
  toy::StepData<T> mine = global;
  const int m = global.microbatches / d;
  mine.microbatches = m;
  mine.inputs.assign(global.inputs.begin() + j * m, global.inputs.begin() + (j + 1) * m);
  mine.targets.assign(global.targets.begin() + j * m, global.targets.begin() + (j + 1) * m);
  return mine;
}

// Pipeline rank `rank`'s stages out of `all`.
inline std::vector<toy::GptStage<double>> stages_of(const ps::Schedule& s,
                                                    const std::vector<toy::GptStage<double>>& all,
                                                    int rank) {
  std::vector<toy::GptStage<double>> v;
  for (int st : s.placement.stages_of(rank))
    v.push_back(all[static_cast<std::size_t>(st)]);
  return v;
}

inline ps::Schedule generated(const char* name, int ranks, int microbatches, int slices = 1) {
  const ps::GeneratorInfo& g = ps::find_generator(name);
  return g.generate({.ranks = ranks, .microbatches = microbatches, .slices = slices},
                    g.default_wgrad);
}

// Random faults in a job of `grid` roll every step back (test_mpi_jobs.cpp); `zero` 1 or 2, or
// `reducer_steps` with ZeRO-0, runs the reducer's shard optimizer.
void expect_mpi_faults_roll_back(const char* name, const ps::ProcessGrid& grid, int trials,
                                 unsigned seed, int zero = 0, bool reducer_steps = false);

}  // namespace mpi_test
