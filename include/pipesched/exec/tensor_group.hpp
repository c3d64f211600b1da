// Tensor parallelism as a stage model sees it: which shard of each layer it holds
// (TensorShard) and the group it sums partial results over (TensorGroup). A stage model that
// asks for its group (`tensor_parallel_stage`, exec/concepts.hpp) is given one by a pipeline of a
// pp × dp × tp job (mpi::Pipeline over mpi::Groups::tensor()); stage models that don't ask keep
// working and run with tp = 1.
#pragma once

#include <concepts>
#include <span>
#include <string>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! Which of `size` tensor-parallel shards a layer holds (Megatron-LM's column/row split):
//! shard `rank` of `size`. {0, 1} is the whole layer.
struct TensorShard {
  int rank = 0;  //!< this shard, 0 … size − 1
  int size = 1;  //!< the tensor-parallel degree t
  //! True when the layer is split (size > 1).
  bool split() const noexcept { return size > 1; }
  //! Shards are equal when both fields are.
  friend bool operator==(const TensorShard&, const TensorShard&) = default;
  //! Throws invalid_argument unless 0 ≤ rank < size.
  void check(const char* who) const {
    if (size < 1 || rank < 0 || rank >= size)
      throw invalid_argument(std::string(who) + ": tensor shard " + std::to_string(rank) + " of " +
                                 std::to_string(size) +
                                 " is out of range; give a size of 1 or more and a rank "
                                 "from 0 to size − 1.",
                             "TensorShard", std::to_string(rank) + "/" + std::to_string(size));
  }
};

//! The tensor-parallel group of a stage model: the processes that hold the other shards of its
//! layers. `all_reduce` sums `values` over the group in place (every member calls it with the
//! same length, in the same order); it may throw when the step is being stopped (another
//! process failed), which fails the action that called it.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  //! Members of the group (the tensor-parallel degree).
  virtual int size() const noexcept = 0;
  //! This member's index in the group (the shard it holds).
  virtual int rank() const noexcept = 0;
  //! Sums `values` over the group, in place.
  virtual void all_reduce(std::span<double> values) = 0;
  //! Sums `values` over the group, in place.
  virtual void all_reduce(std::span<float> values) = 0;
};

}  // namespace pipesched
