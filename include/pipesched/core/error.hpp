// Exceptions thrown by pipesched. Every message is a sentence a user can act on:
// what was wrong, with which value, and what would be right. Each exception keeps its message
// as parts (core/message.hpp): what() is the library's wording, message() the parts, which a
// front end renders in its own words (the pipesched command names flags, not fields).
#pragma once

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipesched/core/message.hpp"

namespace pipesched {

//! Base of every exception pipesched throws.
class error : public std::runtime_error {
 public:
  //! An exception whose message is `what`, kept as its parts.
  explicit error(const Message& what)
      : std::runtime_error(what.text()), message_(std::make_shared<const Message>(what)) {}
  //! An exception whose message is the plain text `what` (one part).
  explicit error(const std::string& what) : error(Message(what)) {}
  //! An exception whose message is the plain text `what` (one part).
  explicit error(const char* what) : error(Message(what)) {}

  ~error() override = default;

  //! The message as parts: its text, the API fields and the amounts it names.
  const Message& message() const noexcept { return *message_; }

  //! Throws this exception again, of its own type and with its own fields, its message after
  //! `prefix` (a caller saying which call refused: "plan<1f1b>: ").
  [[noreturn]] void rethrow_after(const Message& prefix) const {
    throw_after(prefix);
    std::terminate();  // throw_after always throws
  }

 protected:
  //! Throws a copy of this exception with `prefix` before its message (each type its own).
  virtual void throw_after(const Message& prefix) const { throw error(prefix + message()); }

 private:
  std::shared_ptr<const Message> message_;  // shared: copying an exception must not throw
};

//! A run-time parameter that a schedule or policy cannot take (too few microbatches,
//! an odd chunk count for a V-shape placement, ...). The message names the parameter,
//! its value and what would be accepted.
class invalid_problem : public error {
 public:
  //! An exception whose message is `what`, kept as its parts.
  explicit invalid_problem(const Message& what) : error(what) {}
  //! An exception whose message is the plain text `what`.
  explicit invalid_problem(const std::string& what) : error(what) {}
  //! An exception whose message is the plain text `what`.
  explicit invalid_problem(const char* what) : error(what) {}
  void throw_after(const Message& prefix) const override {
    throw invalid_problem(prefix + message());
  }
};

//! A schedule that breaks a rule (missing action, dependency order, deadlock, ...).
class invalid_schedule : public error {
 public:
  //! An exception whose message is `what`, kept as its parts.
  explicit invalid_schedule(const Message& what) : error(what) {}
  //! An exception whose message is the plain text `what`.
  explicit invalid_schedule(const std::string& what) : error(what) {}
  //! An exception whose message is the plain text `what`.
  explicit invalid_schedule(const char* what) : error(what) {}
  void throw_after(const Message& prefix) const override {
    throw invalid_schedule(prefix + message());
  }
};

//! Text that cannot be read as an action, a CSV schedule or another input format.
//! The message gives the line, the column, the bad token and what was expected.
class parse_error : public error {
 public:
  //! An exception whose message is `what`, about the token at `line`, `column`.
  parse_error(const Message& what, int line, int column)
      : error(what), line_(line), column_(column) {}
  //! 1-based line of the offending token (0 when not from a file).
  int line() const noexcept { return line_; }
  //! 1-based column (character) of the offending token.
  int column() const noexcept { return column_; }
  void throw_after(const Message& prefix) const override {
    throw parse_error(prefix + message(), line_, column_);
  }

 private:
  int line_;
  int column_;
};

//! A memory budget a schedule cannot meet: rank `rank()` needs at least `needed()` where the
//! budget allows `allowed()`, both in `unit()` (bytes, or a cost model's abstract units).
class budget_error : public invalid_problem {
 public:
  //! An exception whose message is `what`: `rank` needs `needed` where the budget allows
  //! `allowed`, both in `unit`.
  budget_error(const Message& what, int rank, double needed, double allowed, MemoryUnit unit)
      : invalid_problem(what), rank_(rank), needed_(needed), allowed_(allowed), unit_(unit) {}
  //! The rank whose memory exceeds the budget.
  int rank() const noexcept { return rank_; }
  //! The least memory the rank needs, in `unit()`.
  double needed() const noexcept { return needed_; }
  //! The memory the budget allows the rank, in `unit()`.
  double allowed() const noexcept { return allowed_; }
  //! What `needed()` and `allowed()` count: bytes, or a cost model's abstract units.
  MemoryUnit unit() const noexcept { return unit_; }
  void throw_after(const Message& prefix) const override {
    throw budget_error(prefix + message(), rank_, needed_, allowed_, unit_);
  }

 private:
  int rank_;
  double needed_, allowed_;
  MemoryUnit unit_;
};

//! An argument out of its range or of the wrong form: `field()` names it as the API spells it
//! ("Problem.ranks", "tuning::Request.bases"), `value()` is the value refused.
class invalid_argument : public invalid_problem {
 public:
  //! An exception whose message is `what`, refusing `value` for the argument `field`.
  invalid_argument(const Message& what, std::string field, std::string value)
      : invalid_problem(what),
        field_(std::make_shared<const std::string>(std::move(field))),
        value_(std::make_shared<const std::string>(std::move(value))) {}
  //! The refused argument as the API spells it ("Problem.ranks").
  const std::string& field() const noexcept { return *field_; }
  //! The refused value, as text.
  const std::string& value() const noexcept { return *value_; }
  void throw_after(const Message& prefix) const override {
    throw invalid_argument(prefix + message(), field(), value());
  }

 private:
  std::shared_ptr<const std::string> field_, value_;
};

}  // namespace pipesched
