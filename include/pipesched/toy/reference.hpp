// The sequential reference a pipelined run is judged against: one training step run microbatch
// by microbatch through every stage in order, and flat views of parameters and gradients to
// compare element by element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/exec/executor_options.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy {

//! The element type of a toy stage's tensors.
template <class Stage>
using stage_value_t = typename Stage::tensor_type::value_type;

namespace detail {
template <class Stage>
void require_stages(const std::vector<Stage>& stages, const char* who) {
  if (stages.empty())
    throw invalid_problem(std::string(who) +
                          ": no stages were given; pass every stage of the "
                          "model, first to last");
}

//! The values of `get(stage)`'s tensors for every stage of `stages` (any range of stages, or of
//! references to them), in order.
template <class Stage, class Range, class Get>
std::vector<stage_value_t<Stage>> flatten(const Range& stages, Get get) {
  std::vector<stage_value_t<Stage>> flat;
  for (const Stage& stage : stages)
    for (const auto& tensor : get(stage))
      flat.insert(flat.end(), tensor.data.begin(), tensor.data.end());
  return flat;
}
}  // namespace detail

//! One training step, sequentially: zeroes the gradients, then for each microbatch in order runs
//! forward through every stage, the loss, and backward_input then backward_weight through every
//! stage in reverse. Returns the step loss; the stages hold the step's gradients.
template <class Stage>
double sequential_step(std::vector<Stage>& stages, const StepData<stage_value_t<Stage>>& data) {
  detail::require_stages(stages, "sequential_step");
  for (Stage& stage : stages)
    stage.zero_gradients();
  double loss = 0;
  std::vector<typename Stage::stash_type> stashes(stages.size());
  for (int mb = 0; mb < data.microbatches; ++mb) {
    auto x = data.input(mb);
    for (std::size_t s = 0; s < stages.size(); ++s)
      x = stages[s].forward(x, stashes[s]);
    auto dy = data.loss_gradient(x, mb, loss);
    for (std::size_t s = stages.size(); s-- > 0;) {
      dy = stages[s].backward_input(dy, stashes[s]);
      stages[s].backward_weight(stashes[s]);
    }
  }
  return loss;
}

//! One replica's share of a step with several model replicas (Chimera): sequential_step over
//! the microbatches m with m mod replicas == replica only, each with its share of the whole
//! step's loss. Summed over the replicas, the gradients are those of sequential_step (up to the
//! rounding of that sum). Returns the share of the step loss.
template <class Stage>
double sequential_replica_step(std::vector<Stage>& stages,
                               const StepData<stage_value_t<Stage>>& data, int replicas,
                               int replica) {
  detail::require_stages(stages, "sequential_replica_step");
  if (replicas < 1 || replica < 0 || replica >= replicas)
    throw invalid_problem("sequential_replica_step: replica " + std::to_string(replica) + " of " +
                          std::to_string(replicas) + " does not exist; replicas run from 0 to " +
                          "replicas - 1");
  for (Stage& stage : stages)
    stage.zero_gradients();
  double loss = 0;
  std::vector<typename Stage::stash_type> stashes(stages.size());
  for (int mb = replica; mb < data.microbatches; mb += replicas) {
    auto x = data.input(mb);
    for (std::size_t s = 0; s < stages.size(); ++s)
      x = stages[s].forward(x, stashes[s]);
    auto dy = data.loss_gradient(x, mb, loss);
    for (std::size_t s = stages.size(); s-- > 0;) {
      dy = stages[s].backward_input(dy, stashes[s]);
      stages[s].backward_weight(stashes[s]);
    }
  }
  return loss;
}

//! The step loss alone (forward only; gradients untouched), e.g. for finite differences.
template <class Stage>
double sequential_loss(std::vector<Stage>& stages, const StepData<stage_value_t<Stage>>& data) {
  detail::require_stages(stages, "sequential_loss");
  double loss = 0;
  for (int mb = 0; mb < data.microbatches; ++mb) {
    auto x = data.input(mb);
    for (Stage& stage : stages) {
      typename Stage::stash_type stash;
      x = stage.forward(x, stash);
    }
    data.loss_gradient(x, mb, loss);
  }
  return loss;
}

//! One replica's stages of a pipeline with `replicas` replicas (see sum_replica_gradients):
//! references to stages[q·S/R .. (q + 1)·S/R), e.g. to compare with the sequential model.
template <class Stage>
std::vector<std::reference_wrapper<const Stage>> replica_stages(const std::vector<Stage>& stages,
                                                                int replicas, int replica) {
  if (replicas < 1 || replica < 0 || replica >= replicas ||
      stages.size() % static_cast<std::size_t>(replicas) != 0)
    throw invalid_problem("replica_stages: replica " + std::to_string(replica) + " of " +
                          std::to_string(replicas) + " does not fit " +
                          std::to_string(stages.size()) +
                          " stages; they must split into equal replicas");
  const std::size_t per = stages.size() / static_cast<std::size_t>(replicas);
  std::vector<std::reference_wrapper<const Stage>> out;
  for (std::size_t s = 0; s < per; ++s)
    out.emplace_back(stages[static_cast<std::size_t>(replica) * per + s]);
  return out;
}

//! Every gradient value of one replica (replica_stages), in the order of `flat_gradients`.
template <class Stage>
std::vector<stage_value_t<Stage>> flat_replica_gradients(const std::vector<Stage>& stages,
                                                         int replicas, int replica) {
  return detail::flatten<Stage>(replica_stages(stages, replicas, replica),
                                [](const Stage& s) { return s.gradients(); });
}

//! Every parameter value of one replica, in the order of `flat_parameters`.
template <class Stage>
std::vector<stage_value_t<Stage>> flat_replica_parameters(const std::vector<Stage>& stages,
                                                          int replicas, int replica) {
  return detail::flatten<Stage>(replica_stages(stages, replicas, replica),
                                [](const Stage& s) { return s.parameters(); });
}

//! Every parameter value of the model: stage order, then layer, then tensor, then element.
template <class Stage>
std::vector<stage_value_t<Stage>> flat_parameters(const std::vector<Stage>& stages) {
  return detail::flatten<Stage>(stages, [](const Stage& s) { return s.parameters(); });
}

//! Every gradient value, in the order of `flat_parameters`.
template <class Stage>
std::vector<stage_value_t<Stage>> flat_gradients(const std::vector<Stage>& stages) {
  return detail::flatten<Stage>(stages, [](const Stage& s) { return s.gradients(); });
}

//! The gradient all-reduce of a pipeline with several model replicas (Chimera): `stages` are
//! indexed by global stage, stage q·(S/R) + s being replica q's copy of model stage s (S stages,
//! R = `replicas`). For every model stage, the gradients of its R copies are summed in replica
//! order and every copy is given the sum, so that the same update keeps the copies equal.
//! Throws invalid_problem when the stages do not split into `replicas` equal replicas.
template <class Stage>
void sum_replica_gradients(std::vector<Stage>& stages, int replicas) {
  if (replicas < 1 || stages.size() % static_cast<std::size_t>(replicas) != 0)
    throw invalid_problem("sum_replica_gradients: " + std::to_string(stages.size()) +
                          " stages do not split into replicas = " + std::to_string(replicas) +
                          "; pass every stage of every replica and the problem's replica count");
  const std::size_t per = stages.size() / static_cast<std::size_t>(replicas);
  for (std::size_t s = 0; s < per; ++s)
    for (int q = 1; q < replicas; ++q) {
      auto sum = stages[s].gradients();
      auto add = stages[s + static_cast<std::size_t>(q) * per].gradients();
      auto a = add.begin();
      for (auto t = sum.begin(); t != sum.end(); ++t, ++a)
        for (std::size_t i = 0; i < (*t).size(); ++i)
          (*t)[i] += (*a)[i];
    }
  for (std::size_t s = 0; s < per; ++s)
    for (int q = 1; q < replicas; ++q) {
      auto from = stages[s].gradients();
      auto to = stages[s + static_cast<std::size_t>(q) * per].gradients();
      auto f = from.begin();
      for (auto t = to.begin(); t != to.end(); ++t, ++f)
        for (std::size_t i = 0; i < (*t).size(); ++i)
          (*t)[i] = (*f)[i];
    }
}

//! Plain SGD on one stage model: parameter −= learning_rate · gradient.
template <class Stage>
void sgd_update_stage(Stage& stage, double learning_rate) {
  auto params = stage.parameters();
  auto grads = stage.gradients();
  auto g = grads.begin();
  for (auto p = params.begin(); p != params.end(); ++p, ++g)
    for (std::size_t i = 0; i < (*p).size(); ++i)
      (*p)[i] -= static_cast<stage_value_t<Stage>>(learning_rate) * (*g)[i];
}

//! Plain SGD on every stage.
template <class Stage>
void sgd_update(std::vector<Stage>& stages, double learning_rate) {
  for (Stage& stage : stages)
    sgd_update_stage(stage, learning_rate);
}

//! An `ExecutorOptions::optimizer` hook: plain SGD on the stages (of `stages`, indexed by
//! stage, kept by reference) that rank r holds under `placement`.
template <class Stage>
std::function<void(int)> sgd_optimizer(const Placement& placement, std::vector<Stage>& stages,
                                       double learning_rate) {
  return [placement, &stages, learning_rate](int rank) {
    for (int s : placement.stages_of(rank))
      sgd_update_stage(stages[static_cast<std::size_t>(s)], learning_rate);
  };
}

//! Sets `options`' optimizer to plain SGD on the stages (of `stages`, indexed by stage, kept by
//! reference) that rank r holds under `placement`, its snapshot to copy those stages'
//! parameters, and its rollback to put the copy back, so that a pipeline's step commits on
//! every rank or on none.
template <class Stage>
void use_sgd(ExecutorOptions& options, const Placement& placement, std::vector<Stage>& stages,
             double learning_rate) {
  using Copy = std::vector<std::vector<stage_value_t<Stage>>>;  // one rank's parameters
  // One slot per rank, made here: each rank's calls touch only its own slot.
  auto saved = std::make_shared<std::vector<Copy>>(static_cast<std::size_t>(placement.ranks()));
  options.optimizer = sgd_optimizer(placement, stages, learning_rate);
  options.snapshot = [placement, &stages, saved](int rank) {
    Copy& copy = saved->at(static_cast<std::size_t>(rank));
    copy.clear();
    for (int s : placement.stages_of(rank))
      for (const auto& p : stages[static_cast<std::size_t>(s)].parameters())
        copy.push_back(p.data);
  };
  options.rollback = [placement, &stages, saved](int rank) {
    const Copy& copy = saved->at(static_cast<std::size_t>(rank));
    std::size_t k = 0;
    for (int s : placement.stages_of(rank))
      for (auto&& p : stages[static_cast<std::size_t>(s)].parameters())
        if (k < copy.size()) p.data = copy[k++];
  };
}

//! max_i |a_i − b_i| / max(|a_i|, |b_i|, floor). The default floor (a negative `floor`) is
//! 1e-3 of the largest magnitude in either vector: a gradient that sums to nearly zero from
//! large terms is judged against the vector's scale, where a different summation order can
//! only move it by rounding of those terms. A NaN or infinity anywhere gives infinity; vectors
//! of different lengths throw `invalid_problem`.
template <class T>
double max_relative_error(const std::vector<T>& a, const std::vector<T>& b, double floor = -1) {
  if (a.size() != b.size())
    throw invalid_problem("max_relative_error: the vectors have " + std::to_string(a.size()) +
                          " and " + std::to_string(b.size()) +
                          " values; compare runs of the same model");
  constexpr double inf = std::numeric_limits<double>::infinity();
  double scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = std::abs(double(a[i]));
    const double y = std::abs(double(b[i]));
    if (!std::isfinite(x) || !std::isfinite(y)) return inf;
    scale = std::max({scale, x, y});
  }
  const double lower = floor >= 0 ? floor : 1e-3 * scale;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = double(a[i]);
    const double y = double(b[i]);
    const double denominator = std::max({std::abs(x), std::abs(y), lower});
    if (denominator > 0) worst = std::max(worst, std::abs(x - y) / denominator);
  }
  return worst;
}

}  // namespace pipesched::toy
