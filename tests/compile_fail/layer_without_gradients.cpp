// expect: a layer needs `parameters()` and `gradients()`
// A layer that does not expose its tensors is named in the error.
#include <cstddef>
#include <vector>

#include "pipesched/exec/concepts.hpp"

struct Opaque {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  void backward_weight(stash_type&) {}
  std::size_t stash_bytes(const stash_type&) const { return 0; }
};

static_assert(pipesched::check_layer<Opaque>());

int main() {}
