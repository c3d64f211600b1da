// expect: success
// The control of the StageVariant checks: stage models of one tensor type, one of them
// slice-aware, make a stage model.
#include <cstddef>
#include <vector>

#include "pipesched/exec/stage_variant.hpp"

struct Whole {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  void zero_gradients() {}
};

struct Sliced {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  struct context_type {};
  tensor_type forward(const tensor_type& x, stash_type&, context_type&, int) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&, context_type&, int) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  std::size_t context_bytes(const context_type&) const { return 0; }
  void zero_gradients() {}
};

using Stage = pipesched::StageVariant<Whole, Sliced>;
static_assert(pipesched::check_stage_model<Stage>());
static_assert(pipesched::slice_aware_stage_model<Stage>);

int main() {
  std::vector<Stage> stages;
  stages.emplace_back(Whole{});
  stages.emplace_back(Sliced{});
}
