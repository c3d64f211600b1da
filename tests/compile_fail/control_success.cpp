// expect: success
// The control: valid plans must compile, so the other files fail for their own reason.
#include "pipesched/policy/policy.hpp"

using namespace pipesched;

using Defaults = plan<>;
using ZeroBubble = plan<wgrad::Split, order::ZeroBubbleH1, checkpoint::None>;
using Interleaved = plan<placement::Interleaved<4>, order::Interleaved1F1B, wgrad::Fused>;
using DualPipe = plan<order::DualPipeV, placement::VShape<2>, slicing::Whole, wgrad::Fused>;

static_assert(std::is_same_v<Defaults::order, order::OneFOneB>);
static_assert(ZeroBubble::placement::chunks == 1);
static_assert(Interleaved::placement::chunks == 4);
static_assert(!DualPipe::wgrad::splits);

int main() {
  return static_cast<int>(
      Defaults::generate(Problem{.ranks = 2, .microbatches = 4}).action_count() != 16);
}
