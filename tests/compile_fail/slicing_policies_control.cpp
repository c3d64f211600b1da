// expect: success
// The control for the slicing compile-fail files: slices on the slice-level orders (and one
// slice on any order) compile, so those files fail for the reason they name.
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/policy/policy.hpp"

using namespace pipesched;

int main() {
  const Problem p{.ranks = 2, .microbatches = 4};
  std::size_t n = plan<order::SeqOneFOneB, slicing::Uniform<4>>::generate(p).action_count();
  n += plan<order::GPipe, slicing::Uniform<2>>::generate(p).action_count();
  n += plan<order::SlicePipe, slicing::Uniform<4>>::generate(p).action_count();
  n += plan<slicing::Uniform<4>, order::SlicePipeWarmup<8>>::generate(p).action_count();
  n += plan<order::OneFOneB, slicing::Uniform<1>>::generate(p).action_count();
  n += plan<order::SlicePipe, slicing::Balanced<4>>::generate(p, UniformCost{}, MemoryBudget{})
           .action_count();
  using Balanced = plan<order::SeqOneFOneB, slicing::Balanced<2>>;
  TransformerCost cost;
  cost.model.sequence = 64;
  n += Balanced::sliced_cost(UniformCost{}).f > 0;
  return static_cast<int>(n == 0) + static_cast<int>(cost.slice_lengths.size());
}
