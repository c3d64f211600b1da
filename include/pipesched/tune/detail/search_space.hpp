// The tuner's search space: the pipelines it searches (TuneScenario: a fixed-pipeline search
// has one, a cluster search one per factorization and layer split) and what the request asks
// of each (SearchSpace: the base schedules, the checkpoint modes, and the (base, mode) pairs
// whose best plans the search reports).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipesched/core/memory_budget.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/request.hpp"

namespace pipesched::detail {

//! One pipeline the search runs: its size, its share of the global batch, and how to get
//! the cost model of a microbatch size. A fixed-pipeline search has one; a cluster search
//! one per (pipeline, data, tensor) factorization and layer split.
template <class Cost>
struct TuneScenario {
  int ranks = 1;
  int global_batch = 1;  //!< this pipeline's sequences per step
  std::function<Cost(int)> make_cost;
  // What the plans of this scenario report about the cluster.
  int data = 1, tensor = 1, zero = 0;
  bool sequence_parallel = false;
  std::optional<MemoryBudget> budget{};  //!< as tuning::Request::budget
  bool cluster = false;                  //!< part of a cluster search: labels name the degrees
};

//! The bases and checkpoint modes a request searches. Plans compete for the slot of their
//! (base, mode) pair; full checkpointing is a pair of its own when named, and otherwise,
//! with tuning::Request::full_fallback, a per-base fallback kept outside the pairs.
struct SearchSpace {
  std::vector<const GeneratorInfo*> bases;  //!< the request's bases, without duplicates
  std::vector<CheckpointMode> pair_modes;   //!< the request's modes, without duplicates
  //! The modes a configuration takes part in: the pairs' modes, then full as the fallback.
  std::vector<CheckpointMode> config_modes;
  bool want_none = false, want_full = false, want_selective = false, want_mario = false,
       want_full_early = false, want_selective_early = false;
  //! The program's own policies (tuning::Request::checkpoint_policies), without duplicates: a pair
  //! each after the modes' pairs of a base.
  std::vector<const CheckpointInfo*> policies;
  bool fallback_full = false;  //!< full checkpointing searched as the fallback only
  int modes = 0;               //!< candidates per configuration (one per mode it takes part in)

  //! Reads the bases (unknown names throw invalid_problem) and the modes of `request`.
  static SearchSpace of(const tuning::Request& request) {
    SearchSpace s;
    s.want_none = named_in(request, CheckpointMode::None);
    s.want_full = named_in(request, CheckpointMode::Full);
    s.want_selective = named_in(request, CheckpointMode::Selective);
    s.want_mario = named_in(request, CheckpointMode::Mario);
    s.want_full_early = named_in(request, CheckpointMode::FullEarly);
    s.want_selective_early = named_in(request, CheckpointMode::SelectiveEarly);
    s.fallback_full = !s.want_full && request.full_fallback;
    s.modes = s.want_none + s.want_full + s.want_selective + s.want_mario + s.fallback_full +
              s.want_full_early + s.want_selective_early;
    for (const std::string& name : request.bases) {
      const GeneratorInfo& g = find_generator(name);
      if (std::find(s.bases.begin(), s.bases.end(), &g) == s.bases.end()) s.bases.push_back(&g);
    }
    for (CheckpointMode m : request.checkpoints)
      if (std::find(s.pair_modes.begin(), s.pair_modes.end(), m) == s.pair_modes.end())
        s.pair_modes.push_back(m);
    for (const std::string& name : request.checkpoint_policies) {
      const CheckpointInfo* c = &find_checkpoint(name);
      if (std::find(s.policies.begin(), s.policies.end(), c) == s.policies.end())
        s.policies.push_back(c);
    }
    s.modes += static_cast<int>(s.policies.size());
    s.config_modes = s.pair_modes;
    if (s.fallback_full) s.config_modes.push_back(CheckpointMode::Full);
    return s;
  }

  //! True when the request names `m` among its checkpoint modes.
  bool named(CheckpointMode m) const {
    return std::find(pair_modes.begin(), pair_modes.end(), m) != pair_modes.end();
  }

  //! The index of pair (g, m): bases outermost, in the order of the request's bases and modes.
  std::size_t pair_of(const GeneratorInfo* g, CheckpointMode m) const {
    return base_index(g) * pairs_per_base() + mode_index(m);
  }
  //! The index of pair (g, the program's own policy `j`).
  std::size_t pair_of_policy(const GeneratorInfo* g, std::size_t j) const {
    return base_index(g) * pairs_per_base() + pair_modes.size() + j;
  }
  std::size_t pairs_per_base() const { return pair_modes.size() + policies.size(); }
  //! The index in `policies` of the policy called `name`.
  std::size_t policy_index(std::string_view name) const {
    std::size_t j = 0;
    while (j < policies.size() && policies[j]->name != name)
      ++j;
    return j;
  }
  std::size_t base_index(const GeneratorInfo* g) const {
    return static_cast<std::size_t>(std::find(bases.begin(), bases.end(), g) - bases.begin());
  }
  std::size_t mode_index(CheckpointMode m) const {
    return static_cast<std::size_t>(std::find(pair_modes.begin(), pair_modes.end(), m) -
                                    pair_modes.begin());
  }

 private:
  static bool named_in(const tuning::Request& request, CheckpointMode m) {
    return std::find(request.checkpoints.begin(), request.checkpoints.end(), m) !=
           request.checkpoints.end();
  }
};

}  // namespace pipesched::detail
