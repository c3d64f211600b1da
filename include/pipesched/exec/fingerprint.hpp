// A schedule's fingerprint: a 64-bit hash of what running it makes every rank do, which
// processes that each hold a copy of the schedule compare at start-up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/lower_communication.hpp"

namespace pipesched {

namespace detail {

// FNV-1a over integers fed byte by byte, low byte first, so a fingerprint does not depend on
// the machine's endianness or on struct padding.
class Fnv1a {
 public:
  void add(std::int64_t value) {
    const auto v = static_cast<std::uint64_t>(value);
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= (v >> (8 * byte)) & 0xffu;
      hash_ *= 0x100000001b3ull;
    }
  }
  std::uint64_t value() const noexcept { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace detail

//! A 64-bit hash of the problem (ranks, stages, microbatches, slices, replicas), the placement (the
//! rank of every stage) and every rank's list of actions as the executor runs it — lowered to sends
//! and receives, explicit idle slots left out. The name is not part of it, so a schedule and
//! its copy read back from a file, or its lowered form, have the same fingerprint; two that
//! make any rank run something else (another order, count or kind of action) almost surely do
//! not. The process pipelines compare it across processes before the first step.
inline std::uint64_t schedule_fingerprint(const Schedule& schedule) {
  const Schedule lowered = lower_communication(schedule);
  detail::Fnv1a h;
  const Problem& p = lowered.problem;
  for (int v : {p.ranks, p.stages, p.microbatches, p.slices})
    h.add(v);
  if (p.replicas != 1) h.add(-p.replicas);  // one replica hashes as before replicas existed
  const std::vector<int>& map = lowered.placement.rank_of_stage();
  h.add(lowered.placement.ranks());
  h.add(static_cast<std::int64_t>(map.size()));
  for (int r : map)
    h.add(r);
  h.add(static_cast<std::int64_t>(lowered.ranks.size()));
  for (const auto& list : lowered.ranks) {
    // Each list starts with a marker and its length, so actions cannot move between ranks
    // without changing the hash.
    h.add(-1);
    h.add(static_cast<std::int64_t>(std::count_if(
        list.begin(), list.end(), [](const Action& a) { return a.kind != OpKind::Idle; })));
    for (const Action& a : list) {
      if (a.kind == OpKind::Idle) continue;
      for (int v : {static_cast<int>(a.kind), a.stage, a.microbatch, a.slice, a.part, a.b_stage,
                    a.b_microbatch, a.b_slice})
        h.add(v);
    }
  }
  return h.value();
}

}  // namespace pipesched
