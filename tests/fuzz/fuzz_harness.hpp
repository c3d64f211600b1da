// The checks every fuzz target runs on what it could parse: validation (bounded report),
// simulation, lowering, and a write + re-read round trip in both file forms. A pipesched::error
// is an answer; anything else that escapes — another exception, a crash, a sanitizer report, a
// broken invariant — is a finding (abort, so that libFuzzer keeps the input).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/lower_communication.hpp"

namespace pipesched::fuzz {

[[noreturn]] inline void finding(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "pipesched fuzz finding: %s\n%s\n", what, detail.c_str());
  std::abort();
}

inline void require(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) finding(what, detail);
}

//! Runs `f`; a pipesched::error is a legitimate refusal, any other exception a finding.
template <class F>
bool answers(F&& f) {
  try {
    f();
    return true;
  } catch (const error&) {
    return false;
  } catch (const std::exception& e) {
    finding("an exception that is not a pipesched::error", e.what());
  } catch (...) {
    finding("an exception of unknown type");
  }
}

//! Everything a reader's result must survive.
inline void exercise(const Schedule& s) {
  ValidationReport rep = check(s);
  require(rep.violations.size() <= ValidationReport::max_recorded, "the report kept too much");
  require(rep.ok() == (rep.total() == 0), "ok() and total() disagree");
  if (!rep.ok()) {
    require(!rep.summary().empty(), "an invalid schedule with an empty summary");
    answers([&] { simulate(s); });  // bounded on invalid input too
    return;
  }
  SimulationResult sim = simulate(s);
  require(!sim.deadlock, "a valid schedule deadlocks in simulation", sim.deadlock_report);
  require(sim.makespan >= 0 && sim.bubble_ratio >= -1e-9 && sim.bubble_ratio <= 1 + 1e-9,
          "simulation figures out of range");
  // Lowering a valid schedule keeps it valid.
  if (!s.has_comm()) {
    Schedule lowered = lower_communication(s);
    ValidationReport lr = check(lowered);
    require(lr.ok(), "lowering a valid schedule made it invalid", lr.summary());
  }
  // Written and read back, in both forms, the schedule is the same.
  std::string text = to_text(s);
  std::istringstream tin(text);
  Schedule from_text = read_text(tin, s.name);
  require(from_text == s, "the text form does not read back equal", text);
  std::string csv = to_csv(s);
  std::istringstream cin(csv);
  Schedule from_csv = read_csv(cin, s.name);
  require(from_csv.ranks.size() == s.ranks.size(), "the CSV form changed the rank count", csv);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    // A last empty rank is written as one idle cell; everything else comes back as it was.
    const bool empty_last = s.ranks[r].empty() && r + 1 == s.ranks.size();
    require(empty_last || from_csv.ranks[r] == s.ranks[r], "the CSV form changed a rank list", csv);
  }
  require(to_csv(from_csv) == csv, "the CSV form is not stable", csv);
}

}  // namespace pipesched::fuzz
