// JSON text for everything pipesched writes as JSON (the Chrome trace, the command's --json
// output): string literals that are always valid UTF-8 with control characters escaped,
// numbers in their shortest exact form (non-finite ones as null), and a small writer that
// places the commas and colons of nested objects and arrays.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "pipesched/io/detail/utf8.hpp"

namespace pipesched {

namespace detail {

//! `text` with every byte sequence that is not valid UTF-8 replaced by U+FFFD, so that
//! XML and JSON readers accept it.
inline std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (const std::size_t len = utf8_length(text, i); len > 0) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace detail

//! JSON text for the command's output and the trace writer: string literals, numbers and a
//! writer that places the commas.
namespace json {

//! Appends `text` to `out` as a JSON string literal: quotes and backslashes escaped, control
//! characters as `\n`, `\r`, `\t` or `\u00XX`, and bytes that are not valid UTF-8 replaced by
//! U+FFFD (a file name need not be UTF-8; the JSON must be).
inline void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  for (char ch : detail::sanitize_utf8(text)) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          static constexpr char digits[] = "0123456789abcdef";
          out += "\\u00";
          out += digits[c >> 4];
          out += digits[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

//! `text` as a JSON string literal (see append_quoted).
inline std::string quoted(std::string_view text) {
  std::string out;
  append_quoted(out, text);
  return out;
}

//! `v` as a JSON number in the shortest form that reads back to the same double ("0.1",
//! "1e+300"); -0 as "0". JSON has no infinity or NaN: those are written as null.
inline std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  // 64 characters hold any double's shortest form; the check keeps a broken library honest.
  if (ec != std::errc()) return "null";
  std::string s(buf, end);
  return s == "-0" ? "0" : s;
}

//! Writes one JSON value, placing the commas and colons: objects and arrays nest, a key
//! comes before each value inside an object. Compact by default (`{"a":1,"b":[2,3]}`);
//! `spaced` puts a blank after every comma and colon (`{"a": 1, "b": [2, 3]}`).
//!
//!     json::Writer w;
//!     w.begin_object().field("name", s.name).key("ranks").begin_array();
//!     for (double b : busy) w.value(b);
//!     w.end_array().end_object();
//!     std::string text = w.take();
//!
//! Misuse (a value without a key inside an object, a key outside one, an unbalanced end,
//! taking the text before the value is complete) throws std::logic_error: it is a bug in the
//! caller, not bad input.
class Writer {
 public:
  //! An empty writer; `spaced` puts a blank after every comma and colon.
  explicit Writer(bool spaced = false) : spaced_(spaced) {}

  //! Opens an object (as the next value).
  Writer& begin_object() {
    open_value();
    out_ += '{';
    stack_.push_back({'}', true});
    return *this;
  }
  //! Closes the innermost object.
  Writer& end_object() { return close('}'); }
  //! Opens an array (as the next value).
  Writer& begin_array() {
    open_value();
    out_ += '[';
    stack_.push_back({']', true});
    return *this;
  }
  //! Closes the innermost array.
  Writer& end_array() { return close(']'); }

  //! The key of the next value; only inside an object.
  Writer& key(std::string_view k) {
    if (stack_.empty() || stack_.back().close != '}' || key_pending_)
      throw std::logic_error("json::Writer: a key belongs inside an object, before its value");
    separate();
    append_quoted(out_, k);
    out_ += spaced_ ? ": " : ":";
    key_pending_ = true;
    return *this;
  }

  //! A string value, quoted and escaped as append_quoted does.
  Writer& value(std::string_view s) {
    open_value();
    append_quoted(out_, s);
    return *this;
  }
  //! A string value.
  Writer& value(const std::string& s) { return value(std::string_view(s)); }
  //! A string value (`s` is not null).
  Writer& value(const char* s) { return value(std::string_view(s)); }
  //! `true` or `false`.
  Writer& value(bool b) {
    open_value();
    out_ += b ? "true" : "false";
    return *this;
  }
  //! `null`.
  Writer& value(std::nullptr_t) {
    open_value();
    out_ += "null";
    return *this;
  }
  //! An integer, in decimal.
  template <std::integral T>
  requires(!std::same_as<T, bool>) Writer& value(T v) {
    open_value();
    out_ += std::to_string(v);
    return *this;
  }
  //! A floating-point number, as number() writes it (infinity and NaN as null).
  template <std::floating_point T>
  Writer& value(T v) {
    open_value();
    out_ += number(static_cast<double>(v));
    return *this;
  }
  //! A value already written as JSON (a number in a form of the caller's choosing).
  Writer& raw(std::string_view json_text) {
    open_value();
    out_ += json_text;
    return *this;
  }

  //! key(k).value(v).
  template <class T>
  Writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  //! True once one whole value has been written.
  bool complete() const noexcept { return stack_.empty() && !out_.empty(); }

  //! The text written so far (complete or not).
  const std::string& text() const noexcept { return out_; }

  //! The finished text; the writer is empty afterwards.
  std::string take() {
    if (!complete())
      throw std::logic_error(
          "json::Writer: the value is not complete (an object or array is "
          "still open, or nothing was written)");
    std::string out = std::move(out_);
    out_.clear();
    return out;
  }

 private:
  struct Level {
    char close;
    bool first;
  };

  void separate() {
    Level& top = stack_.back();
    if (!top.first) out_ += spaced_ ? ", " : ",";
    top.first = false;
  }
  // Before any value: inside an object it must follow its key, inside an array it needs a
  // comma after the previous element, at the top only one value is allowed.
  void open_value() {
    if (stack_.empty()) {
      if (!out_.empty()) throw std::logic_error("json::Writer: only one top-level value");
      return;
    }
    if (stack_.back().close == '}') {
      if (!key_pending_) throw std::logic_error("json::Writer: a value in an object needs a key");
      key_pending_ = false;
      return;
    }
    separate();
  }
  Writer& close(char c) {
    if (stack_.empty() || stack_.back().close != c || key_pending_)
      throw std::logic_error(std::string("json::Writer: unbalanced '") + c + "'");
    stack_.pop_back();
    out_ += c;
    return *this;
  }

  std::string out_;
  std::vector<Level> stack_;
  bool key_pending_ = false;
  bool spaced_ = false;
};

}  // namespace json
}  // namespace pipesched
