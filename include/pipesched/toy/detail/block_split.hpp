// How a tensor-parallel shard cuts a toy GPT block's tensors (Megatron-LM's split): rows of
// the column-parallel weights (Wqkv per q/k/v part, W1) and columns of the row-parallel ones
// (Wo, W2). GptBlock::shard_of applies it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy::detail {

// The first index and count of a shard's part of an axis.
struct AxisPart {
  int first = 0;
  int count = 0;
};

struct BlockSplit {
  int hidden = 0;
  int ffn = 0;
  TensorShard shard;

  // The shard's attention width (its heads') and MLP units.
  AxisPart attention() const {
    const int w = hidden / shard.size;
    return {shard.rank * w, w};
  }
  AxisPart mlp() const {
    const int w = ffn / shard.size;
    return {shard.rank * w, w};
  }

  // Rows `part` of each of `parts` equal row blocks (of `block` rows) of `x`, side by side.
  template <class T>
  static Tensor<T> rows(const Tensor<T>& x, int parts, int block, AxisPart part) {
    const int cols = x.shape.size() > 1 ? x.dim(1) : 1;
    std::vector<int> extents = x.shape;
    extents[0] = parts * part.count;
    Tensor<T> y(extents);
    T* to = y.begin_data();
    for (int p = 0; p < parts; ++p) {
      const T* from = x.begin_data() + static_cast<std::ptrdiff_t>(p * block + part.first) * cols;
      to = std::copy(from, from + static_cast<std::ptrdiff_t>(part.count) * cols, to);
    }
    return y;
  }

  // Columns `part` of a matrix.
  template <class T>
  static Tensor<T> columns(const Tensor<T>& x, AxisPart part) {
    const int n = x.dim(0), cols = x.dim(1);
    Tensor<T> y({n, part.count});
    for (int i = 0; i < n; ++i)
      std::copy_n(x.begin_data() + static_cast<std::ptrdiff_t>(i) * cols + part.first, part.count,
                  y.begin_data() + static_cast<std::ptrdiff_t>(i) * part.count);
    return y;
  }
};

}  // namespace pipesched::toy::detail
