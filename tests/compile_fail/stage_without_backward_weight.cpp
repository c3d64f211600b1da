// expect: a stage model needs `void backward_weight(stash_type& stash)`
// A stage model that forgets the weight-gradient call is named in the error.
#include <vector>

#include "pipesched/transport/inproc/inproc_pipeline.hpp"

struct NoWeightGradient {
  using tensor_type = std::vector<double>;
  struct stash_type {};
  tensor_type forward(const tensor_type& x, stash_type&) { return x; }
  tensor_type backward_input(const tensor_type& dy, stash_type&) { return dy; }
  std::size_t stash_bytes(const stash_type&) const { return 0; }
  void zero_gradients() {}
};

int main() {
  pipesched::Schedule s;
  std::vector<NoWeightGradient> stages(1);
  pipesched::inproc::Pipeline<NoWeightGradient> pipe(s, stages);
}
