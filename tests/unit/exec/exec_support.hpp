// What the executor tests share: the tolerances of the numerics checks, stage construction,
// the per-run checks and two facts about a schedule.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/schedule.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/toy/gpt_vocabulary.hpp"
#include "pipesched/toy/reference.hpp"

namespace exec_test {

inline constexpr double learning_rate = 0.05;
inline constexpr double unlimited = std::numeric_limits<double>::infinity();

// Relative error allowed against the sequential reference. The toy models add every
// weight-gradient contribution into a double sum per tensor (and the GPT its key/value
// gradients too), so a pipelined or sliced float run moves a value by double rounding only.
template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

// One stage model per stage of `stages`.
template <class Stage, class Config>
std::vector<Stage> make_stages(const Config& config, int stages) {
  std::vector<Stage> v;
  for (int s = 0; s < stages; ++s)
    v.emplace_back(config, s, stages);
  return v;
}

// One training step of `pipe` beside the sequential reference.
template <class Grads>
struct ReferenceStep {
  pipesched::StepResult step;  // what the pipeline measured
  double ref_loss = 0;         // the sequential step's loss
  Grads ref_grads;             // the sequential step's gradients, before its update
};

// Runs one step of `pipe` (whose stage models are `piped`) on `training` and one sequential
// step of `ref` (stage models of the whole model) on `data`, updating `ref` with SGD as the
// pipeline's optimizer does; expects the loss, `piped`'s gradients and then its parameters to
// equal the reference's within tolerance<T>().
template <class T, class Pipe, class Piped, class Ref, class Data, class Training>
auto step_against_reference(Pipe& pipe, const Piped& piped, Ref& ref, const Data& data,
                            const Training& training) {
  namespace toy = pipesched::toy;
  const double ref_loss = toy::sequential_step(ref, data);
  auto ref_grads = toy::flat_gradients(ref);
  toy::sgd_update(ref, learning_rate);
  pipesched::StepResult r = pipe.step(training);
  EXPECT_LE(std::abs(r.loss - ref_loss), tolerance<T>() * std::abs(ref_loss));
  EXPECT_LE(toy::max_relative_error(toy::flat_gradients(piped), ref_grads), tolerance<T>());
  EXPECT_LE(toy::max_relative_error(toy::flat_parameters(piped), toy::flat_parameters(ref)),
            tolerance<T>());
  return ReferenceStep<decltype(ref_grads)>{std::move(r), ref_loss, std::move(ref_grads)};
}

struct RunChecks {
  bool exact_peak = true;  // measured peak == simulated peak on every rank
  double budget = unlimited;
};

// True when each stage's weight-gradient work (B or W) runs in increasing microbatch order,
// as the sequential pass does: then the arithmetic is the same, bit for bit.
inline bool accumulates_in_order(const pipesched::Schedule& s) {
  std::vector<int> last(s.problem.stages, -1);
  for (const auto& list : s.ranks)
    for (const pipesched::Action& a : list) {
      if (a.kind != pipesched::OpKind::B && a.kind != pipesched::OpKind::W) continue;
      if (a.microbatch < last[a.stage]) return false;
      last[a.stage] = a.microbatch;
    }
  return true;
}

inline int count_recomputes(const pipesched::Schedule& s) {
  return static_cast<int>(s.count(pipesched::OpKind::R));
}

// A stage model (`Base`) that throws at its `target`-th compute call (forward, backward_input,
// either backward_weight) since `calls` was last reset, or at its `reach_target`-th
// gradients() call (what a data-parallel reduction or an optimizer makes) since `reaches`
// was; 0 never. For the random fault injections of the step-commit tests.
template <class Base>
struct Counting : Base {
  using Base::backward_input;
  using Base::backward_weight;
  using Base::Base;
  using Base::forward;
  using tensor_type = typename Base::tensor_type;
  using stash_type = typename Base::stash_type;
  int calls = 0;
  int target = 0;
  int reaches = 0;
  int reach_target = 0;
  void tick() {
    if (++calls == target) throw std::runtime_error("injected fault");
  }
  tensor_type forward(const tensor_type& x, stash_type& st) {
    tick();
    return Base::forward(x, st);
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    tick();
    return Base::backward_input(dy, st);
  }
  void backward_weight(stash_type& st) {
    tick();
    Base::backward_weight(st);
  }
  void backward_weight(stash_type& st, int part, int parts) {
    tick();
    Base::backward_weight(st, part, parts);
  }
  auto gradients() {
    if (++reaches == reach_target) throw std::runtime_error("injected gradients fault");
    return Base::gradients();
  }
  auto gradients() const { return Base::gradients(); }
  // Clears the counts and the targets.
  void disarm() { calls = target = reaches = reach_target = 0; }
};

// Vocabulary parallelism on the toy GPT: one shard of `config`'s head per rank.
template <class T>
std::vector<pipesched::toy::GptVocabularyShard<T>> vocabulary_shards(
    const pipesched::toy::GptConfig& config, int ranks) {
  std::vector<pipesched::toy::GptVocabularyShard<T>> shards;
  for (int j = 0; j < ranks; ++j)
    shards.emplace_back(config, j, ranks);
  return shards;
}

// Appends the values of every tensor `get` gives of each of `shards` to `all`.
template <class T, class Shards, class Get>
void append_shards(std::vector<T>& all, const Shards& shards, Get get) {
  for (const auto& shard : shards)
    for (const auto& t : get(shard))
      all.insert(all.end(), t.data.begin(), t.data.end());
}
inline constexpr auto gradients_of = [](const auto& x) { return x.gradients(); };
inline constexpr auto parameters_of = [](const auto& x) { return x.parameters(); };

// The gradients (parameters) of `stages`, then of `shards`: in the order of the unsplit model's
// (its head's W, split by rows, comes last). With `inputs`, the input embedding's token table
// split too: its shards first, as the unsplit first stage holds its table before the rest.
template <class Stages, class T, class Get>
std::vector<T> flat_with(const Stages& stages,
                         const std::vector<pipesched::toy::GptVocabularyShard<T>>& shards,
                         const std::vector<pipesched::toy::GptInputShard<T>>& inputs, Get get) {
  std::vector<T> all;
  append_shards(all, inputs, get);
  append_shards(all, stages, get);
  append_shards(all, shards, get);
  return all;
}
template <class Stages, class T>
std::vector<T> gradients_with(const Stages& stages,
                              const std::vector<pipesched::toy::GptVocabularyShard<T>>& shards,
                              const std::vector<pipesched::toy::GptInputShard<T>>& inputs = {}) {
  return flat_with(stages, shards, inputs, gradients_of);
}
template <class Stages, class T>
std::vector<T> parameters_with(const Stages& stages,
                               const std::vector<pipesched::toy::GptVocabularyShard<T>>& shards,
                               const std::vector<pipesched::toy::GptInputShard<T>>& inputs = {}) {
  return flat_with(stages, shards, inputs, parameters_of);
}

}  // namespace exec_test
