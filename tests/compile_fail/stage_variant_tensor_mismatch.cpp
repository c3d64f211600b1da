// expect: must have the first alternative's `tensor_type`
// The stages of one pipeline pass one tensor type: a StageVariant over stage models of two
// tensor types gets its own message.
#include <cstddef>
#include <vector>

#include "pipesched/exec/stage_variant.hpp"

template <class T>
struct Identity {
  using tensor_type = std::vector<T>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  void zero_gradients() {}
};

int main() {
  std::vector<pipesched::StageVariant<Identity<double>, Identity<float>>> stages;
  stages.emplace_back(Identity<double>{});
}
