// One entry point for activation checkpointing chosen at run time: a CheckpointMode, a cost
// model and a per-rank memory budget in, the checkpointed schedule out. Also reads the
// mode and the budget from text (the command line's --checkpoint and --memory-budget) and
// derives a per-rank budget from a device's memory.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"

namespace pipesched {

//! A memory budget as written: an amount and whether it is in bytes. A plain number is in
//! the cost model's memory unit (UniformCost: microbatches of one rank's activations); a
//! number with a unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB) is converted to bytes.
struct MemoryBudgetValue {
  double value = 0;    //!< the amount: memory units, or bytes when `bytes`
  bool bytes = false;  //!< true when the text carried a byte unit

  friend bool operator==(const MemoryBudgetValue&, const MemoryBudgetValue&) = default;
};

namespace detail {

inline std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline constexpr const char* memory_budget_forms =
    "give a positive plain number in memory units (2, 0.5; for UniformCost, microbatches of one "
    "rank's activations) or bytes with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, "
    "GiB, TiB (powers of 1024), e.g. 24GB, 24 GB, 512MiB, 1.5GiB, 4096B";

//! Multiplier of a byte unit (lower-case), or 0 when `unit` is none of them.
inline double byte_unit(std::string_view unit) {
  struct Unit {
    std::string_view name;
    double factor;
  };
  constexpr double k = 1000.0, ki = 1024.0;
  const Unit units[] = {{"b", 1},
                        {"kb", k},
                        {"mb", k * k},
                        {"gb", k * k * k},
                        {"tb", k * k * k * k},
                        {"kib", ki},
                        {"mib", ki * ki},
                        {"gib", ki * ki * ki},
                        {"tib", ki * ki * ki * ki}};
  for (const Unit& u : units)
    if (u.name == unit) return u.factor;
  return 0;
}

}  // namespace detail

//! Reads a memory budget: "2" or "0.5" (memory units), "24GB", "24 GB", "512MiB", "1.5GiB",
//! "800MB", "4096B", "3TB" (bytes; decimal kB/MB/GB/TB and binary KiB/MiB/GiB/TiB, the unit
//! in any case). Throws parse_error naming the text and showing the accepted forms when it
//! is none of them (a comma-separated list, one amount per rank, included: one amount holds
//! for every rank), or when the amount is not positive and finite.
inline MemoryBudgetValue parse_memory_budget(std::string_view text) {
  auto fail = [&](const std::string& why, std::size_t at) -> MemoryBudgetValue {
    throw parse_error("memory budget '" + std::string(text) + "' " + why + "; " +
                          detail::memory_budget_forms + ".",
                      0, static_cast<int>(at) + 1);
  };
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto digit = [&](std::size_t at) {
    return at < n && std::isdigit(static_cast<unsigned char>(text[at])) != 0;
  };
  auto space = [&](std::size_t at) {
    return at < n && std::isspace(static_cast<unsigned char>(text[at])) != 0;
  };
  while (space(i))
    ++i;
  if (i == n) return fail("is empty", i);
  // One amount holds for every rank; a list ("2,2,2,2": one per rank) is not read. A single
  // comma between digits may be a decimal comma ("1,5GB"), which the message names too.
  if (const std::size_t comma = text.find(','); comma != std::string_view::npos) {
    const bool decimal = text.find(',', comma + 1) == std::string_view::npos && comma > 0 &&
                         digit(comma - 1) && digit(comma + 1);
    std::string point(text.substr(i));
    point[comma - i] = '.';
    throw parse_error("memory budget '" + std::string(text) +
                          "' is a list; a budget is one amount that holds for every rank, not "
                          "one per rank (to hold each rank to the tightest, give the smallest)" +
                          (decimal ? ", and a fraction is written with a point ('" + point + "')"
                                   : std::string()) +
                          "; " + detail::memory_budget_forms + ".",
                      0, static_cast<int>(comma) + 1);
  }
  // The number: digits, an optional fraction, an optional exponent. Written out rather than
  // left to strtod, which would also take "inf", "nan", hexadecimal and a leading sign.
  const std::size_t number_begin = i;
  bool any_digit = false;
  while (digit(i)) {
    ++i;
    any_digit = true;
  }
  if (i < n && text[i] == '.') {
    ++i;
    while (digit(i)) {
      ++i;
      any_digit = true;
    }
  }
  if (!any_digit) {
    if (i < n && text[number_begin] == '-') return fail("is negative", number_begin);
    return fail("does not start with a number", number_begin);
  }
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < n && (text[j] == '+' || text[j] == '-')) ++j;
    if (digit(j)) {
      while (digit(j))
        ++j;
      i = j;
    }
  }
  const std::string number(text.substr(number_begin, i - number_begin));
  double value = std::strtod(number.c_str(), nullptr);
  while (space(i))
    ++i;
  std::size_t unit_begin = i, unit_end = n;
  while (unit_end > unit_begin && space(unit_end - 1))
    --unit_end;
  const std::string_view unit = text.substr(unit_begin, unit_end - unit_begin);
  MemoryBudgetValue out;
  if (!unit.empty()) {
    const double factor = detail::byte_unit(detail::lower_ascii(unit));
    if (factor == 0) return fail("has an unknown unit '" + std::string(unit) + "'", unit_begin);
    value *= factor;
    out.bytes = true;
  }
  if (!std::isfinite(value)) return fail("is too large", number_begin);
  if (!(value > 0)) return fail("is zero: no activation would fit", number_begin);
  out.value = value;
  return out;
}

//! Every checkpoint mode, in the order messages and help list them.
inline constexpr CheckpointMode checkpoint_modes[] = {
    CheckpointMode::None,  CheckpointMode::Full,      CheckpointMode::Selective,
    CheckpointMode::Mario, CheckpointMode::FullEarly, CheckpointMode::SelectiveEarly};

//! Reads a checkpoint mode: "none", "full", "selective", "mario", "full-early" or
//! "selective-early" (any case). Throws parse_error naming the text and listing the choices.
inline CheckpointMode parse_checkpoint_mode(std::string_view text) {
  const std::string t = detail::lower_ascii(text);
  for (CheckpointMode m : checkpoint_modes)
    if (t == to_string(m)) return m;
  throw parse_error("checkpoint mode '" + std::string(text) +
                        "' is unknown; choose none (keep every activation), full (recompute "
                        "every forward, after its gradient arrives, as Megatron-LM does), "
                        "selective (recompute what a memory budget needs, the same way), mario "
                        "(recompute in the bubbles, within a memory budget), full-early or "
                        "selective-early (as full and selective, the recompute free to run "
                        "before the gradient arrives).",
                    0, 1);
}

//! The activation budget of each rank on `cost.device`: its usable memory (memory_bytes less
//! memory_reserve, DeviceSpec::usable_memory) minus what the rank
//! holds whatever the schedule (weights, gradients and optimizer state of its stages,
//! TransformerCost::static_bytes), as MemoryBudget::per_rank. Throws invalid_problem naming
//! the rank when that alone fills the device.
inline MemoryBudget device_memory_budget(const TransformerCost& cost, const Problem& problem,
                                         const Placement& placement) {
  return cost.memory_budget(problem, placement);
}

namespace detail {

//! Each rank's peak of held memory along its list, the units that have an R in `s` counted
//! as checkpointed (the running sum the simulator reports as peak_memory).
template <cost_model Cost>
std::vector<double> rank_peaks(const Schedule& s, const Cost& cost) {
  const UnitIndex unit(s.problem);
  std::vector<char> checkpointed(unit.size(), 0);
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == OpKind::R) checkpointed[unit(a)] = 1;
  const CostContext ctx{s.problem, s.placement, 1};
  std::vector<double> peaks(static_cast<std::size_t>(s.rank_count()));
  for (int r = 0; r < s.rank_count(); ++r)
    peaks[static_cast<std::size_t>(r)] = list_peak(s, r, cost, ctx, checkpointed);
  return peaks;
}

//! Refuses a budget that is negative or not a number, rank by rank.
inline void check_budget_values(const MemoryBudget& budget) {
  auto check = [](double b, const std::string& name) {
    if (std::isnan(b) || b <= 0)
      throw invalid_argument(field(name, b) +
                                 " is out of range; a memory budget must be positive (infinity "
                                 "for no limit).",
                             name, detail::format_general(b));
  };
  check(budget.all, "MemoryBudget.all");
  for (std::size_t r = 0; r < budget.per_rank.size(); ++r)
    check(budget.per_rank[r], "MemoryBudget.per_rank[" + std::to_string(r) + "]");
}

}  // namespace detail

//! `s` with the checkpointing `mode` asks for, under `cost` and a per-rank `budget` (in the
//! cost model's memory unit):
//! - None: `s` unchanged; with a limited budget, throws invalid_problem when a rank's peak
//!   exceeds it.
//! - Full: every unit recomputed right before its backward, once its gradient is there
//!   (checkpoint_full, RL); a limited budget is checked the same way.
//! - Selective: the units the budget requires (checkpoint_selective, RL).
//! - FullEarly, SelectiveEarly: the same units, recomputed with R (free to run before the
//!   gradient arrives).
//! - Mario: recomputes hoisted into bubbles and forwards preposed (checkpoint_mario).
//! Selective and Mario choose from the budget: under an unlimited one they recompute
//! nothing. Errors are invalid_problem with the rank, what it holds and the budget.
template <cost_model Cost>
Schedule apply_checkpoint(const Schedule& s, CheckpointMode mode, const Cost& cost,
                          const MemoryBudget& budget) {
  detail::check_budget_values(budget);
  // Whether every rank of `out` fits; the message says how far off the first one is.
  auto require_fit = [&](const Schedule& out) {
    if (!budget.limited()) return;
    const std::vector<double> peaks = detail::rank_peaks(out, cost);
    for (int r = 0; r < out.rank_count(); ++r) {
      const double held = peaks[static_cast<std::size_t>(r)], limit = budget.of(r);
      if (held <= limit + 1e-9 * std::max(1.0, std::abs(limit))) continue;
      const MemoryUnit mu = memory_unit_of(cost);
      if (mode == CheckpointMode::None)
        throw budget_error("without checkpointing rank " + std::to_string(r) + " of '" + out.name +
                               "' holds " + memory_amount(held, mu) + ", over the budget " +
                               memory_amount(limit, mu, false) + "; use " +
                               enumerator("CheckpointMode", "Selective", "selective") + " or " +
                               enumerator("CheckpointMode", "Mario", "mario") +
                               ", or give a budget of at least " + memory_amount(held, mu) + ".",
                           r, held, limit, mu);
      throw budget_error("with every forward checkpointed rank " + std::to_string(r) + " of '" +
                             out.name + "' still holds " + memory_amount(held, mu) +
                             ", over the budget " + memory_amount(limit, mu, false) +
                             "; no checkpointing needs less, so give a budget of at least " +
                             memory_amount(held, mu) + ", or more ranks.",
                         r, held, limit, mu);
    }
  };
  switch (mode) {
    case CheckpointMode::None:
      require_fit(s);
      return s;
    case CheckpointMode::Full:
    case CheckpointMode::FullEarly: {
      Schedule out = checkpoint_full(s, timing_of(mode));
      require_fit(out);
      return out;
    }
    case CheckpointMode::Selective:
    case CheckpointMode::SelectiveEarly:
      return checkpoint_selective(s, cost, budget, nullptr, timing_of(mode));
    case CheckpointMode::Mario:
      return checkpoint_mario(s, cost, budget);
  }
  throw invalid_problem("checkpoint mode " + std::to_string(static_cast<int>(mode)) +
                        " is unknown; use None, Full, Selective, Mario, FullEarly or "
                        "SelectiveEarly.");
}

}  // namespace pipesched
