// The toy models' tensor: a shape and a contiguous row-major buffer on the host, plus the
// seeded random streams that fill parameters and data deterministically.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/exec/wire.hpp"

//! Toy models for tests, examples and benchmarks: an MLP, a small GPT and a synthetic stage
//! on the host, with their tensors, data and a sequential reference.
namespace pipesched::toy {

//! A host tensor: `shape` (outermost first) and `data`, contiguous and row-major. A plain
//! value type (copyable, movable, comparable); element access does no bounds checks because
//! the toy models index it in their inner loops.
template <class T>
struct Tensor {
  using value_type = T;  //!< the element type

  std::vector<int> shape;  //!< extents, outermost first; empty for a default tensor
  std::vector<T> data;     //!< product(shape) values, row-major

  Tensor() = default;
  //! A tensor of the given extents with every element `value`.
  explicit Tensor(std::vector<int> extents, T value = T{})
      : shape(std::move(extents)), data(element_count(shape), value) {}

  //! Number of elements.
  std::size_t size() const noexcept { return data.size(); }
  //! Bytes the elements take (size · sizeof(T)); what the stash accounting counts.
  std::size_t bytes() const noexcept { return data.size() * sizeof(T); }
  //! Number of dimensions.
  int rank() const noexcept { return static_cast<int>(shape.size()); }
  //! Extent of dimension `i`.
  int dim(int i) const noexcept { return shape[static_cast<std::size_t>(i)]; }
  //! True when the tensor holds no elements.
  bool empty() const noexcept { return data.empty(); }

  //! Element `i` in row-major order.
  T& operator[](std::size_t i) noexcept { return data[i]; }
  //! Element `i` in row-major order.
  const T& operator[](std::size_t i) const noexcept { return data[i]; }
  //! Element (i, j) of a rank-2 tensor.
  T& operator()(int i, int j) noexcept { return data[index(i, j)]; }
  //! Element (i, j) of a rank-2 tensor.
  const T& operator()(int i, int j) const noexcept { return data[index(i, j)]; }
  //! Element (i, j, k) of a rank-3 tensor.
  T& operator()(int i, int j, int k) noexcept { return data[index(i, j, k)]; }
  //! Element (i, j, k) of a rank-3 tensor.
  const T& operator()(int i, int j, int k) const noexcept { return data[index(i, j, k)]; }

  //! The first element (null when empty), for the layers' loops over raw pointers.
  T* begin_data() noexcept { return data.data(); }
  //! The first element (null when empty), for the layers' loops over raw pointers.
  const T* begin_data() const noexcept { return data.data(); }

  //! Sets every element to `value`.
  void fill(T value) { std::fill(data.begin(), data.end(), value); }

  //! Product of the extents (0 for no extents, as a default tensor holds nothing).
  static std::size_t element_count(const std::vector<int>& extents) noexcept {
    if (extents.empty()) return 0;
    std::size_t n = 1;
    for (int e : extents)
      n *= static_cast<std::size_t>(e > 0 ? e : 0);
    return n;
  }

  friend bool operator==(const Tensor&, const Tensor&) = default;

 private:
  std::size_t index(int i, int j) const noexcept {
    return static_cast<std::size_t>(i) * static_cast<std::size_t>(shape[1]) +
           static_cast<std::size_t>(j);
  }
  std::size_t index(int i, int j, int k) const noexcept {
    return (static_cast<std::size_t>(i) * static_cast<std::size_t>(shape[1]) +
            static_cast<std::size_t>(j)) *
               static_cast<std::size_t>(shape[2]) +
           static_cast<std::size_t>(k);
  }
};

//! The tensors of several layers as one range, in order: what a stage's `parameters()` and
//! `gradients()` return. `Elem` is `Tensor<T>` or `const Tensor<T>`. It refers to the layers'
//! tensors (valid while the stage lives and keeps its layers) and is a forward range whose
//! elements are `Elem&`, so an optimizer can walk parameters and gradients side by side.
template <class Elem>
class TensorRange {
 public:
  //! A forward iterator over the range's tensors.
  class iterator {
   public:
    using iterator_concept = std::forward_iterator_tag;   //!< a forward iterator
    using iterator_category = std::forward_iterator_tag;  //!< a forward iterator
    using value_type = std::remove_const_t<Elem>;         //!< the tensor type
    using difference_type = std::ptrdiff_t;               //!< distances between iterators
    using reference = Elem&;                              //!< what `*it` gives
    using pointer = Elem*;                                //!< what `it.operator->()` gives

    iterator() = default;
    //! An iterator at `at` in the range's list of tensor pointers.
    explicit iterator(Elem* const* at) noexcept : at_(at) {}
    //! The tensor.
    Elem& operator*() const noexcept { return **at_; }
    //! The tensor, for member access.
    Elem* operator->() const noexcept { return *at_; }
    //! Steps to the next tensor.
    iterator& operator++() noexcept {
      ++at_;
      return *this;
    }
    //! Steps to the next tensor and returns where it was.
    iterator operator++(int) noexcept {
      iterator before = *this;
      ++at_;
      return before;
    }
    friend bool operator==(const iterator&, const iterator&) = default;

   private:
    Elem* const* at_ = nullptr;
  };

  TensorRange() = default;
  //! Appends every tensor of `part` (one layer's list).
  void append(std::span<Elem> part) {
    for (Elem& t : part)
      items_.push_back(&t);
  }

  //! The first tensor.
  iterator begin() const noexcept { return iterator(items_.data()); }
  //! One past the last tensor.
  iterator end() const noexcept { return iterator(items_.data() + items_.size()); }
  //! The number of tensors.
  std::size_t size() const noexcept { return items_.size(); }
  //! Tensor `i`.
  Elem& operator[](std::size_t i) const noexcept { return *items_[i]; }

 private:
  std::vector<Elem*> items_;
};

//! A shape as text, `[2, 8, 16]`, for error messages.
inline std::string shape_string(const std::vector<int>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

//! A small, fast, reproducible random stream (SplitMix64). Every parameter tensor and every
//! data set is drawn from a stream named by (seed, stream id), so the values do not depend on
//! how many other tensors were drawn before — the key to partition-independent models.
class Random {
 public:
  //! The stream `stream` of `seed`; distinct (seed, stream) pairs give unrelated sequences.
  Random(std::uint64_t seed, std::uint64_t stream) noexcept
      : state_(mix(seed ^ mix(stream + 0x632be59bd9b4e019ULL))) {}

  //! Next 64 random bits.
  std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  //! Uniform in [0, 1), 53 bits of precision.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  //! Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  //! Uniform integer in [0, n) for n > 0.
  int below(int n) noexcept {
    return static_cast<int>(next() % static_cast<std::uint64_t>(n > 0 ? n : 1));
  }

 private:
  static std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

//! Fills `t` with values uniform in [center − spread, center + spread), drawn in double and
//! rounded to T, so a float and a double model built from one seed hold the same values up to
//! rounding.
template <class T>
void fill_uniform(Tensor<T>& t, Random& random, double spread, double center = 0.0) {
  for (T& v : t.data)
    v = static_cast<T>(center + random.uniform(-spread, spread));
}

//! A tensor of the given extents filled by `fill_uniform`.
template <class T>
Tensor<T> uniform_tensor(std::vector<int> extents, Random& random, double spread,
                         double center = 0.0) {
  Tensor<T> t(std::move(extents));
  fill_uniform(t, random, spread, center);
  return t;
}

}  // namespace pipesched::toy

namespace pipesched {

//! toy::Tensor crosses process boundaries as its extents and its elements (element type code:
//! the element size in bytes, plus 0x100 for floating point).
template <class T>
struct wire<toy::Tensor<T>> {
  //! The header's element type: the element size, + 0x100 for floating point.
  static constexpr std::uint32_t code = sizeof(T) + (std::is_floating_point_v<T> ? 0x100u : 0u);

  //! The header of `x`: its element type, extents and bytes.
  static WireHeader describe(const toy::Tensor<T>& x) {
    return detail::wire_header(code, x.shape, x.bytes(), "toy::Tensor");
  }
  //! The elements' bytes, to send.
  static std::span<const std::byte> payload(const toy::Tensor<T>& x) {
    return std::as_bytes(std::span<const T>(x.data));
  }
  //! The elements' bytes, where the received ones go.
  static std::span<std::byte> payload(toy::Tensor<T>& x) {
    return std::as_writable_bytes(std::span<T>(x.data));
  }
  //! A zero tensor shaped by `h`; throws pipesched::error when `h` does not describe a
  //! toy::Tensor of this element type.
  static toy::Tensor<T> make(const WireHeader& h) {
    toy::Tensor<T> x(detail::wire_extents(h, code, "toy::Tensor of this element type"));
    detail::check_wire_bytes(h, x.bytes());
    return x;
  }
};

}  // namespace pipesched
