// Validation of a schedule: every unit computed exactly once, indices in range, each stage
// on one rank, dependency order, matched communication, and deadlock freedom (a dry run of
// all ranks). The report is in validation_report.hpp, the checks in detail/validate_units.hpp
// (shape, indices, placement, exactly once) and detail/validate_comm.hpp (messages, waits,
// channels, gradient reductions, deadlock).
#pragma once

#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/detail/unit_table.hpp"
#include "pipesched/analysis/detail/validate_comm.hpp"
#include "pipesched/analysis/detail/validate_units.hpp"
#include "pipesched/analysis/validation_report.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"

namespace pipesched {

//! Checks every rule and returns all violations found (the dry run only when the
//! schedule's units and order are consistent, so a deadlock report is about order alone).
inline ValidationReport check(const Schedule& s) {
  ValidationReport rep;
  detail::check_units(s, rep);
  if (rep.has("shape")) return rep;
  if (s.has_comm()) {
    detail::check_comm_pairs(s, rep);
    detail::check_channels(s, rep);
  }
  detail::check_send_waits(s, rep);
  detail::check_gradient_reductions(s, rep);
  detail::DependencyGraph g(s);
  for (const auto& issue : g.issues()) {
    if (issue.at.rank < 0) continue;  // about the whole schedule: check_units reports it
    rep.add({issue.at.rank, issue.at.position, s.ranks[issue.at.rank][issue.at.position],
             issue.rule, issue.message});
  }
  rep.omitted = detail::saturating_add(rep.omitted, g.issues_omitted());
  if (rep.ok()) detail::check_deadlock(g, rep);
  return rep;
}

//! Throws invalid_schedule with every violation's message when `s` breaks a rule.
inline void validate(const Schedule& s) {
  ValidationReport rep = check(s);
  if (!rep.ok()) throw invalid_schedule(rep.message(s.name));
}

}  // namespace pipesched
