// A table keyed by unit (stage, microbatch, slice) whose size follows the actions that fill
// it, not the problem's dimensions: dense when the problem's units are few compared with the
// entries expected, hashed otherwise. A schedule read from a file may declare a million
// microbatches and a million slices with three actions in it; validation and simulation must
// then cost what the three actions cost, not a table of 10^12 entries.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/core/problem.hpp"

namespace pipesched::detail {

//! stages × microbatches × slices of `p`, saturating at the largest std::uint64_t (a
//! programmatic problem may have three dimensions near INT_MAX).
inline std::uint64_t unit_count(const Problem& p) noexcept {
  if (p.stages <= 0 || p.microbatches <= 0 || p.slices <= 0) return 0;
  constexpr std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t n = static_cast<std::uint64_t>(p.stages);
  for (int d : {p.microbatches, p.slices}) {
    if (n > top / static_cast<std::uint64_t>(d)) return top;
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

//! a + b, saturating.
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > std::numeric_limits<std::uint64_t>::max() - b
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

//! The units the step computes: unit_count(p), less the (stage, microbatch) pairs of different
//! replicas when p.replicas > 1 (each replica's stages × its microbatches × slices), saturating.
inline std::uint64_t step_unit_count(const Problem& p) noexcept {
  if (p.replicas <= 1 || p.stages <= 0 || p.microbatches <= 0 || p.slices <= 0)
    return unit_count(p);
  std::uint64_t n = 0;
  for (int r = 0; r < p.replicas; ++r) {
    Problem one = p;
    one.replicas = 1;
    one.stages = p.replica_stages();
    one.microbatches = p.microbatches_of_replica(r);
    if (one.microbatches > 0) n = saturating_add(n, unit_count(one));
  }
  return n;
}

//! A unit's coordinates; ordered as the dense layout (stage, then microbatch, then slice).
struct UnitKey {
  int stage = 0;
  int microbatch = 0;
  int slice = 0;
  friend bool operator==(const UnitKey&, const UnitKey&) = default;
  friend auto operator<=>(const UnitKey&, const UnitKey&) = default;
};

struct UnitKeyHash {
  std::size_t operator()(const UnitKey& k) const noexcept {
    std::uint64_t h = static_cast<std::uint32_t>(k.stage);
    h = h * 0x9E3779B97F4A7C15ull + static_cast<std::uint32_t>(k.microbatch);
    h = h * 0x9E3779B97F4A7C15ull + static_cast<std::uint32_t>(k.slice);
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

//! Values of type T for units inside `problem`, each starting as `empty`. Callers check that
//! a unit is inside the problem before using it.
template <class T>
class UnitTable {
 public:
  UnitTable() = default;

  //! `entries` is how many units the caller expects to touch (its action count): the table
  //! is dense when the problem has at most a few times that many units.
  UnitTable(const Problem& problem, std::size_t entries, T empty = T{})
      : microbatches_(problem.microbatches), slices_(problem.slices), empty_(std::move(empty)) {
    const std::uint64_t units = unit_count(problem);
    const std::uint64_t dense_limit = 4 * static_cast<std::uint64_t>(entries) + 4096;
    dense_ = units <= dense_limit;
    if (dense_) {
      cells_.assign(static_cast<std::size_t>(units), empty_);
    } else {
      map_.reserve(entries);
    }
  }

  bool dense() const noexcept { return dense_; }

  //! The value of (s, m, k), or the empty value when nothing was stored there.
  const T& get(int s, int m, int k) const {
    if (dense_) return cells_[index(s, m, k)];
    auto it = map_.find(UnitKey{s, m, k});
    return it == map_.end() ? empty_ : it->second;
  }

  //! The value of (s, m, k) for writing (created empty on first use).
  T& at(int s, int m, int k) {
    if (dense_) return cells_[index(s, m, k)];
    return map_.try_emplace(UnitKey{s, m, k}, empty_).first->second;
  }

  //! Calls f(key, value) for every unit written through `at` (dense: every unit whose value
  //! differs from the empty one), in the dense layout's order.
  template <class F>
  void for_each_stored(F&& f) const {
    if (dense_) {
      std::size_t i = 0;
      for (int s = 0; i < cells_.size(); ++s)
        for (int m = 0; m < microbatches_; ++m)
          for (int k = 0; k < slices_; ++k, ++i)
            if (!(cells_[i] == empty_)) f(UnitKey{s, m, k}, cells_[i]);
      return;
    }
    std::vector<const std::pair<const UnitKey, T>*> sorted;
    sorted.reserve(map_.size());
    for (const auto& e : map_)
      sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->first < b->first; });
    for (const auto* e : sorted)
      if (!(e->second == empty_)) f(e->first, e->second);
  }

 private:
  std::size_t index(int s, int m, int k) const {
    return (static_cast<std::size_t>(s) * static_cast<std::size_t>(microbatches_) +
            static_cast<std::size_t>(m)) *
               static_cast<std::size_t>(slices_) +
           static_cast<std::size_t>(k);
  }

  bool dense_ = true;
  int microbatches_ = 0;
  int slices_ = 0;
  T empty_{};
  std::vector<T> cells_;
  std::unordered_map<UnitKey, T, UnitKeyHash> map_;
};

}  // namespace pipesched::detail
