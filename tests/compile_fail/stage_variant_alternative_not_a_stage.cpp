// expect: every alternative of a StageVariant must be a stage model
// A StageVariant whose second alternative forgets zero_gradients() names that alternative
// (index 1, NoZeroGradients) and what it lacks.
#include <cstddef>
#include <vector>

#include "pipesched/exec/stage_variant.hpp"

struct Embedding {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  void zero_gradients() {}
};

struct NoZeroGradients {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
};

int main() {
  std::vector<pipesched::StageVariant<Embedding, NoZeroGradients>> stages;
  stages.emplace_back(Embedding{});
}
