// Violation and ValidationReport: what `check` (validate.hpp) finds in a schedule, one broken
// rule per Violation, the first ValidationReport::max_recorded of them kept with their
// messages and the rest counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/core/action.hpp"

namespace pipesched {

//! One broken rule. `rank`/`position` locate the action (-1 when the violation is about
//! something absent, e.g. a missing backward); `rule` is a short stable identifier:
//! `shape`, `index-range`, `placement`, `duplicate`, `missing`, `order`, `missing-receive`,
//! `unmatched-comm`, `missing-wait`, `channel-order`, `reduce-grad`, `offload`, `deadlock`.
struct Violation {
  int rank = -1;        //!< the rank whose list holds the action, or -1
  int position = -1;    //!< its index in that list, or -1
  Action action;        //!< the action the violation is about
  std::string rule;     //!< the rule's identifier (see above)
  std::string message;  //!< a full sentence: where, what, and the rule it breaks
};

namespace detail {

//! `n` with its digits in groups of three: 1999990 → "1,999,990".
inline std::string group_digits(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "rank R position P": where a violation's action stands.
inline std::string where(int rank, int position) {
  return "rank " + std::to_string(rank) + " position " + std::to_string(position);
}

}  // namespace detail

//! Everything `check` found; empty when the schedule is valid. A schedule can break a rule
//! billions of times (a file naming a million microbatches and a million slices misses 10^12
//! forwards), so the report keeps the first `max_recorded` violations in `violations` and
//! counts the rest in `omitted`; `total()` is the number found.
struct ValidationReport {
  //! How many violations are kept with their messages.
  static constexpr std::size_t max_recorded = 1000;

  std::vector<Violation> violations;  //!< the first violations found, at most max_recorded
  std::uint64_t omitted = 0;          //!< violations found beyond those kept

  //! True when no violation was found: the schedule is valid.
  bool ok() const noexcept { return violations.empty() && omitted == 0; }
  //! Every violation found, kept or not.
  std::uint64_t total() const noexcept {
    return detail::saturating_add(static_cast<std::uint64_t>(violations.size()), omitted);
  }
  //! True when no further violation would be kept.
  bool full() const noexcept { return violations.size() >= max_recorded; }
  //! Keeps `v` while there is room, else counts it.
  void add(Violation v) {
    if (full()) {
      omitted = detail::saturating_add(omitted, 1);
    } else {
      violations.push_back(std::move(v));
    }
  }
  //! True when some kept violation has this rule identifier.
  bool has(std::string_view rule) const {
    return std::any_of(violations.begin(), violations.end(),
                       [&](const Violation& v) { return v.rule == rule; });
  }
  //! The first `max` messages, one per line, and a count of the rest ("… and 1,999,990 more").
  std::string summary(std::size_t max = 8) const {
    std::string out;
    for (std::size_t i = 0; i < violations.size() && i < max; ++i)
      out += (i ? "\n" : "") + violations[i].message;
    const std::uint64_t shown = std::min<std::uint64_t>(violations.size(), max);
    if (total() > shown) out += "\n… and " + detail::group_digits(total() - shown) + " more";
    return out;
  }
  //! "schedule 'NAME' is invalid (N problems):" and the summary.
  std::string message(const std::string& schedule_name, std::size_t max = 8) const {
    const std::uint64_t n = total();
    return "schedule '" + schedule_name + "' is invalid (" + detail::group_digits(n) + " problem" +
           (n == 1 ? "" : "s") + "):\n" + summary(max);
  }
};

}  // namespace pipesched
