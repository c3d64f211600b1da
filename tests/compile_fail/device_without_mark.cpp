// expect: a device needs `mark_type mark()`
// A device that cannot mark its timeline is named in the error.
#include "pipesched/exec/concepts.hpp"

struct Clockless {
  using mark_type = double;
  void synchronize() {}
  double seconds_between(const double& a, const double& b) const { return b - a; }
};

static_assert(pipesched::check_device<Clockless>());

int main() {}
