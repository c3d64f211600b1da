// A message as a sequence of parts: plain text, mentions of API names (a field and its value,
// an enumerator, a function) and memory amounts. The library's exceptions carry one; what()
// is its text in the library's words, and a front end (the pipesched command) renders the same
// parts in its own words — a flag for a field — without rewriting sentences. Numbers and
// amounts are formatted by core/format.hpp, the one formatter both use.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "pipesched/core/format.hpp"

namespace pipesched {

//! A message: text with the API names and the memory amounts it mentions kept as parts.
class Message {
 public:
  //! A mention of an API name. `key` is what a front end looks it up by ("Problem.ranks",
  //! "CheckpointMode", "pipesched::check"); `value` is the value it names, as a front end
  //! spells it ("4", "selective"; empty for a bare name); `api` is the library's own text
  //! ("Problem.ranks = 4", "CheckpointMode::Selective").
  struct Mention {
    std::string key;    //!< what a front end looks the name up by ("Problem.ranks")
    std::string value;  //!< the value named, as a front end spells it; empty for a bare name
    std::string api;    //!< the library's own text ("Problem.ranks = 4")
  };
  //! A memory amount; `round_up` when the figure must be enough (held, needed), not a given.
  struct Amount {
    double value = 0;                     //!< the amount, in `unit`
    MemoryUnit unit = MemoryUnit::Units;  //!< bytes, or a cost model's abstract units
    bool round_up = true;                 //!< written rounded up (held, needed), else as given
  };
  //! One part of a message: plain text, a mention or an amount.
  using Part = std::variant<std::string, Mention, Amount>;

  //! An empty message.
  Message() = default;
  //! A message of plain text (implicit: any text is a message).
  Message(std::string text) {  // NOLINT(google-explicit-constructor): text is a message
    if (!text.empty()) parts_.emplace_back(std::move(text));
  }
  //! A message of plain text.
  Message(const char* text) : Message(std::string(text)) {}  // NOLINT(google-explicit-constructor)
  //! A message of plain text.
  Message(std::string_view text) : Message(std::string(text)) {}  // NOLINT
  //! A message of one part.
  explicit Message(Part part) { parts_.push_back(std::move(part)); }

  //! Appends `other`'s parts (adjacent text merges).
  Message& operator+=(const Message& other) {
    for (const Part& p : other.parts_)
      append(p);
    return *this;
  }
  friend Message operator+(Message a, const Message& b) { return a += b; }
  friend Message operator+(const std::string& a, const Message& b) { return Message(a) += b; }
  friend Message operator+(Message a, const std::string& b) { return a += Message(b); }
  friend Message operator+(const char* a, const Message& b) { return Message(a) += b; }
  friend Message operator+(Message a, const char* b) { return a += Message(b); }

  //! The parts, in order.
  const std::vector<Part>& parts() const noexcept { return parts_; }

  //! The message with every part rendered by `naming`: `naming.mention(m)` returns the text
  //! of a mention (std::nullopt: the library's, `m.api`), `naming.amount(a)` that of an amount.
  template <class Naming>
  std::string text(const Naming& naming) const {
    std::string out;
    for (const Part& p : parts_) {
      if (const auto* s = std::get_if<std::string>(&p)) {
        out += *s;
      } else if (const auto* m = std::get_if<Mention>(&p)) {
        std::optional<std::string> t = naming.mention(*m);
        out += t ? *t : m->api;
      } else {
        out += naming.amount(std::get<Amount>(p));
      }
    }
    return out;
  }

  //! The library's wording.
  std::string text() const { return text(LibraryNaming{}); }

  //! The library's naming: every mention as the API spells it, amounts by format_amount.
  struct LibraryNaming {
    //! The library's own text of every mention.
    std::optional<std::string> mention(const Mention&) const { return std::nullopt; }
    //! An amount as format_amount writes it.
    std::string amount(const Amount& a) const { return format_amount(a.value, a.unit, a.round_up); }
  };

 private:
  void append(const Part& p) {
    // Adjacent text merges, so that a message compares by what it says.
    if (const auto* s = std::get_if<std::string>(&p)) {
      if (s->empty()) return;
      if (!parts_.empty())
        if (auto* last = std::get_if<std::string>(&parts_.back())) {
          *last += *s;
          return;
        }
    }
    parts_.push_back(p);
  }

  std::vector<Part> parts_;
};

namespace detail {

template <class T>
std::string value_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(v);
  else if constexpr (std::is_floating_point_v<T>)
    return format_general(static_cast<double>(v));
  else
    return std::string(v);
}

}  // namespace detail

//! A field of an API struct with its value: "Problem.ranks = 4" (a front end may write the
//! flag that sets it, "--ranks 4").
template <class T>
Message field(std::string_view key, const T& value) {
  const std::string v = detail::value_text(value);
  return Message(Message::Mention{std::string(key), v, std::string(key) + " = " + v});
}

//! A field of an API struct, by name only: "MemoryBudget.per_rank".
inline Message field(std::string_view key) {
  return Message(Message::Mention{std::string(key), "", std::string(key)});
}

//! An enumerator: "CheckpointMode::Selective", whose value a front end spells `value`
//! ("selective").
inline Message enumerator(std::string_view type, std::string_view name, std::string_view value) {
  return Message(Message::Mention{std::string(type), std::string(value),
                                  std::string(type) + "::" + std::string(name)});
}

//! A name the library prints as `api` and a front end looks up by `key` (a function:
//! "pipesched::check"; a prefix naming the function that refused: "uniform_slices: ").
inline Message api_name(std::string_view key, std::string_view api) {
  return Message(Message::Mention{std::string(key), "", std::string(api)});
}

//! A memory amount in `unit`; `round_up` for an amount that must be enough (held, needed).
inline Message memory_amount(double value, MemoryUnit unit, bool round_up = true) {
  return Message(Message::Amount{value, unit, round_up});
}

}  // namespace pipesched
