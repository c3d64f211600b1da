// expect: a stage model needs a member type `stash_type`
// A stage model without a stash type is named in the error.
#include <vector>

#include "pipesched/exec/concepts.hpp"

struct NoStash {
  using tensor_type = std::vector<double>;
};

static_assert(pipesched::check_stage_model<NoStash>());

int main() {}
