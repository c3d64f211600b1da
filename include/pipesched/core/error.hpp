// Exceptions thrown by pipesched. Every message is a sentence a user can act on:
// what was wrong, with which value, and what would be right.
#pragma once

#include <stdexcept>
#include <string>

namespace pipesched {

//! Base of every exception pipesched throws.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

//! A run-time parameter that a schedule or policy cannot take (too few microbatches,
//! an odd chunk count for a V-shape placement, ...). The message names the parameter,
//! its value and what would be accepted.
class invalid_problem : public error {
 public:
  explicit invalid_problem(const std::string& what) : error(what) {}
};

//! A schedule that breaks a rule (missing action, dependency order, deadlock, ...).
class invalid_schedule : public error {
 public:
  explicit invalid_schedule(const std::string& what) : error(what) {}
};

//! Text that cannot be read as an action, a CSV schedule or another input format.
//! The message gives the line, the column, the bad token and what was expected.
class parse_error : public error {
 public:
  parse_error(const std::string& what, int line, int column)
      : error(what), line_(line), column_(column) {}
  //! 1-based line of the offending token (0 when not from a file).
  int line() const noexcept { return line_; }
  //! 1-based column (character) of the offending token.
  int column() const noexcept { return column_; }

 private:
  int line_;
  int column_;
};

}  // namespace pipesched
