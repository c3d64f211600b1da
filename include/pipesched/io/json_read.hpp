// Reading JSON (RFC 8259) into a tree of values, strictly: objects, arrays, strings with every
// escape (\uXXXX and surrogate pairs included) and valid UTF-8, numbers in JSON's grammar,
// true, false and null; nothing after the value, no trailing commas, no duplicate keys, nesting
// at most json::max_depth deep. Each value keeps the line and column where it starts, so that a
// reader of a format on JSON (a run plan, exec/run_plan.hpp) can say where a field is wrong.
// The writer is io/json.hpp.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/detail/json_text.hpp"

namespace pipesched {

namespace detail::json_read {
class Parser;
}  // namespace detail::json_read

namespace json {

//! The deepest nesting of arrays and objects parse() reads (a value inside 256 open brackets);
//! deeper input is refused rather than risk the stack.
inline constexpr int max_depth = 256;

//! The most values parse() reads from one text (every number, string, literal, array and
//! object counts one): 4,194,304, a few hundred MiB of tree at most, where a plan of
//! `pipesched tune --json` holds a few thousand. More is refused rather than risk the memory.
inline constexpr long long max_values = 1LL << 22;

//! What a JSON value is.
enum class Kind {
  Null,     //!< `null`
  Boolean,  //!< `true` or `false`
  Number,   //!< a number
  String,   //!< a string
  Array,    //!< an array
  Object,   //!< an object
};

//! The kind in words with its article, for messages: "null", "a boolean", "a number",
//! "a string", "an array", "an object".
inline const char* describe(Kind k) noexcept {
  switch (k) {
    case Kind::Null:
      return "null";
    case Kind::Boolean:
      return "a boolean";
    case Kind::Number:
      return "a number";
    case Kind::String:
      return "a string";
    case Kind::Array:
      return "an array";
    case Kind::Object:
      return "an object";
  }
  return "a value";
}

//! One JSON value and, for an array or an object, its elements or members in document order.
//! Reading a value as a kind it is not (array() of a number) throws std::logic_error: check
//! kind() first; that is a bug in the caller, not bad input.
class Value {
 public:
  struct Member;

  //! `null`, at no position.
  Value() = default;

  //! Its kind.
  Kind kind() const noexcept { return kind_; }
  //! True for `null`.
  bool is_null() const noexcept { return kind_ == Kind::Null; }
  //! True for a number with no fractional part and a magnitude of at most 2^53, so that it
  //! is a whole number exactly (`3`, `-2`, `1e3`, `4.0`).
  bool is_integer() const noexcept {
    return kind_ == Kind::Number && std::fabs(number_) <= 9007199254740992.0 &&
           std::trunc(number_) == number_;
  }

  //! `true` or `false`.
  bool boolean() const {
    expect(Kind::Boolean);
    return boolean_;
  }
  //! The number (the nearest double to its literal; a literal too small for a double is 0).
  double number() const {
    expect(Kind::Number);
    return number_;
  }
  //! The number's literal as written (`1e3`, `-0.50`).
  const std::string& number_text() const {
    expect(Kind::Number);
    return text_;
  }
  //! The string, escapes decoded, in UTF-8 (a `\u0000` is a NUL character inside it).
  const std::string& string() const {
    expect(Kind::String);
    return text_;
  }
  //! The elements of an array.
  const std::vector<Value>& array() const {
    expect(Kind::Array);
    return array_;
  }
  //! The members of an object, in document order.
  const std::vector<Member>& object() const;
  //! The value of the member `key` of an object, or nullptr when it has none.
  const Value* find(std::string_view key) const;

  //! 1-based line where the value starts (0 for a value not read from text).
  int line() const noexcept { return line_; }
  //! 1-based column (character) where the value starts (0 for a value not read from text).
  int column() const noexcept { return column_; }

 private:
  friend class detail::json_read::Parser;

  void expect(Kind k) const {
    if (kind_ != k)
      throw std::logic_error(std::string("json::Value: read as ") + describe(k) + " but it is " +
                             describe(kind_));
  }

  Kind kind_ = Kind::Null;
  bool boolean_ = false;
  double number_ = 0;
  std::string text_;  // a string's content or a number's literal
  std::vector<Value> array_;
  std::vector<Member> object_;
  int line_ = 0;
  int column_ = 0;
};

//! One member of an object: its key and its value.
struct Value::Member {
  std::string key;  //!< the key, escapes decoded
  Value value;      //!< the value
  //! 1-based line of the key (0 when not read from text).
  int line = 0;
  //! 1-based column of the key (0 when not read from text).
  int column = 0;
};

inline const std::vector<Value::Member>& Value::object() const {
  expect(Kind::Object);
  return object_;
}

inline const Value* Value::find(std::string_view key) const {
  for (const Member& m : object())
    if (m.key == key) return &m.value;
  return nullptr;
}

}  // namespace json

namespace detail::json_read {

//! What a value may be, for messages.
inline constexpr const char* value_words =
    "a JSON value (an object, an array, a string, a number, true, false or null)";

//! Recursive-descent reader of one JSON text: one call of value() per nesting level, bounded
//! by json::max_depth. Lines and columns are counted only where a value starts or an error is
//! reported, forward from the last place counted, so that counting stays linear.
class Parser {
 public:
  //! A reader of `text`, naming `source` in its messages.
  Parser(std::string_view text, std::string source)
      : text_(detail::io::without_bom(text)), source_(std::move(source)) {}

  //! The one value of the text; throws parse_error where the text is not JSON.
  pipesched::json::Value parse() {
    skip_blanks();
    if (pos_ >= text_.size())
      fail(pos_, std::string(text_.empty() ? "the input is empty" : "the input holds only blanks") +
                     "; expected " + value_words);
    pipesched::json::Value v = value(0);
    skip_blanks();
    if (pos_ < text_.size())
      fail(pos_, "found " + found(pos_) +
                     " after the JSON value; the input holds one value and nothing after it "
                     "but blanks");
    return v;
  }

 private:
  using Value = pipesched::json::Value;
  using Kind = pipesched::json::Kind;

  struct Location {
    int line = 1;
    int column = 1;
  };

  Location locate(std::size_t pos) {
    if (pos < mark_pos_) {  // an error about an earlier place: count again from the start
      mark_pos_ = 0;
      mark_ = {};
    }
    for (; mark_pos_ < pos && mark_pos_ < text_.size(); ++mark_pos_) {
      const auto c = static_cast<unsigned char>(text_[mark_pos_]);
      if (c == '\n') {
        ++mark_.line;
        mark_.column = 1;
      } else if ((c & 0xC0) != 0x80) {  // a character's first byte
        ++mark_.column;
      }
    }
    return mark_;
  }

  [[noreturn]] void fail(std::size_t pos, const std::string& problem) {
    const Location at = locate(pos);
    throw parse_error(detail::io::where(source_, at.line, at.column) + problem + ".", at.line,
                      at.column);
  }

  // "found X; expected Y", or "the input ends; expected Y".
  [[noreturn]] void unexpected(std::size_t pos, const std::string& expected) {
    if (pos >= text_.size()) fail(pos, "the input ends; expected " + expected);
    fail(pos, "found " + found(pos) + "; expected " + expected);
  }

  // The character at `pos` for messages: "'x'", a word ("'True'"), a control character by
  // its code point, or a byte that is not UTF-8.
  std::string found(std::size_t pos) const {
    const auto c = static_cast<unsigned char>(text_[pos]);
    const auto is_word = [](unsigned char b) {
      return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_';
    };
    if (is_word(c)) {
      std::size_t end = pos;
      while (end < text_.size() && end - pos < 20 &&
             is_word(static_cast<unsigned char>(text_[end])))
        ++end;
      return "'" + std::string(text_.substr(pos, end - pos)) + "'";
    }
    if (c >= 0x21 && c <= 0x7E) return "'" + std::string(1, static_cast<char>(c)) + "'";
    if (c < 0x20 || c == 0x7F) return "a control character (" + code_point_name(c) + ")";
    if (const std::size_t len = utf8_length(text_, pos); len > 0)
      return "'" + std::string(text_.substr(pos, len)) + "'";
    return byte_name(c) + ", which is not UTF-8";
  }

  static std::string byte_name(unsigned char c) {
    static constexpr char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
  }

  bool at(char c) const noexcept { return pos_ < text_.size() && text_[pos_] == c; }
  bool at_digit() const noexcept {
    return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9';
  }

  void skip_blanks() noexcept {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  Value value(int depth) {
    if (++values_ > pipesched::json::max_values)
      fail(pos_, "the input holds more than " + std::to_string(pipesched::json::max_values) +
                     " values; pipesched reads JSON of at most that many");
    Value v;
    const Location where = locate(pos_);
    v.line_ = where.line;
    v.column_ = where.column;
    if (pos_ >= text_.size()) unexpected(pos_, value_words);
    switch (text_[pos_]) {
      case '{':
        object(v, depth);
        break;
      case '[':
        array(v, depth);
        break;
      case '"':
        v.kind_ = Kind::String;
        v.text_ = string();
        break;
      case 't':
      case 'f':
      case 'n':
        literal(v);
        break;
      default:
        if (at('-') || at_digit()) {
          number(v);
          break;
        }
        unexpected(pos_, value_words);
    }
    return v;
  }

  void literal(Value& v) {
    for (std::string_view word : {"true", "false", "null"})
      if (text_.substr(pos_, word.size()) == word) {
        v.kind_ = word == "null" ? Kind::Null : Kind::Boolean;
        v.boolean_ = word == "true";
        pos_ += word.size();
        return;
      }
    unexpected(pos_, value_words);
  }

  void open(int depth) {
    if (depth >= pipesched::json::max_depth)
      fail(pos_, "arrays and objects nest deeper than " +
                     std::to_string(pipesched::json::max_depth) +
                     " here; pipesched reads JSON nested at most that deep");
    ++pos_;
    skip_blanks();
  }

  void array(Value& v, int depth) {
    v.kind_ = Kind::Array;
    open(depth);
    if (at(']')) {
      ++pos_;
      return;
    }
    for (;;) {
      v.array_.push_back(value(depth + 1));
      skip_blanks();
      if (at(']')) {
        ++pos_;
        return;
      }
      if (!at(',')) unexpected(pos_, "',' or ']' in the array");
      ++pos_;
      skip_blanks();
      if (at(']'))
        fail(pos_, "found ']' after a ','; expected a value (JSON has no trailing comma)");
    }
  }

  void object(Value& v, int depth) {
    v.kind_ = Kind::Object;
    open(depth);
    if (at('}')) {
      ++pos_;
      return;
    }
    std::unordered_map<std::string, std::size_t> seen;  // keys by member, past a few members
    for (;;) {
      if (at('}')) fail(pos_, "found '}' after a ','; expected a key (JSON has no trailing comma)");
      if (!at('"')) unexpected(pos_, "a key (a string in double quotes)");
      Value::Member m;
      const Location where = locate(pos_);
      m.line = where.line;
      m.column = where.column;
      const std::size_t key_at = pos_;
      m.key = string();
      check_unique(v.object_, seen, m.key, key_at);
      skip_blanks();
      if (!at(':')) unexpected(pos_, "':' after the key " + detail::io::quote_token(m.key));
      ++pos_;
      skip_blanks();
      m.value = value(depth + 1);
      v.object_.push_back(std::move(m));
      skip_blanks();
      if (at('}')) {
        ++pos_;
        return;
      }
      if (!at(',')) unexpected(pos_, "',' or '}' in the object");
      ++pos_;
      skip_blanks();
    }
  }

  // A key given twice makes the object ambiguous (RFC 8259 leaves the meaning open).
  void check_unique(const std::vector<Value::Member>& members,
                    std::unordered_map<std::string, std::size_t>& seen, const std::string& key,
                    std::size_t key_at) {
    constexpr std::size_t few = 8;  // below this a scan is cheaper than the map
    const Value::Member* first = nullptr;
    if (members.size() < few) {
      for (const Value::Member& m : members)
        if (m.key == key) first = &m;
    } else {
      if (seen.empty())
        for (std::size_t i = 0; i < members.size(); ++i)
          seen.emplace(members[i].key, i);
      const auto [it, fresh] = seen.emplace(key, members.size());
      if (!fresh) first = &members[it->second];
    }
    if (first != nullptr)
      fail(key_at, "the key " + detail::io::quote_token(key) +
                       " appears twice in one object (first at line " +
                       std::to_string(first->line) + ", column " + std::to_string(first->column) +
                       "); give each key once");
  }

  // A string literal at pos_ (its opening quote); pos_ ends after the closing quote.
  std::string string() {
    const std::size_t opening = pos_++;
    std::string out;
    for (;;) {
      if (pos_ >= text_.size())
        fail(opening, "this string is not closed: the input ends before its closing '\"'");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20) {
        static constexpr const char* short_form[] = {"", "",    "",    "",    "", "",    "",
                                                     "", "\\b", "\\t", "\\n", "", "\\f", "\\r"};
        std::string form = c < 14 && short_form[c][0] != '\0' ? short_form[c] : "";
        if (form.empty()) form = "\\u" + code_point_name(c).substr(2);
        fail(pos_, "a raw control character (" + code_point_name(c) +
                       ") inside a string; write it as the escape " + form);
      } else if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
      } else {
        const std::size_t len = utf8_length(text_, pos_);
        if (len == 0)
          fail(pos_, byte_name(c) +
                         " inside a string is not UTF-8; JSON text is UTF-8 (write other "
                         "characters as \\u escapes)");
        out.append(text_.substr(pos_, len));
        pos_ += len;
      }
    }
  }

  // The four hex digits after a `\u` that starts at `escape_at`.
  std::uint32_t hex4(std::size_t escape_at) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++pos_) {
      const char h = pos_ < text_.size() ? text_[pos_] : '\0';
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0)
        fail(escape_at, "the escape " +
                            detail::io::quote_token(text_.substr(escape_at, pos_ - escape_at + 1)) +
                            " is cut short; \\u takes four hex digits (\\u00e9)");
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return v;
  }

  // An escape at pos_ (its backslash), decoded onto `out`.
  void escape(std::string& out) {
    const std::size_t escape_at = pos_++;
    if (pos_ >= text_.size())
      fail(escape_at, "the input ends inside an escape; expected a character after '\\'");
    const char e = text_[pos_++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u':
        break;
      default:
        fail(escape_at, "unknown escape '\\" + detail::io::printable(e) +
                            "'; JSON's escapes are \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\u with "
                            "four hex digits");
    }
    std::uint32_t cp = hex4(escape_at);
    const std::string written(text_.substr(escape_at, 6));
    if (cp >= 0xDC00 && cp <= 0xDFFF)
      fail(escape_at, "the escape " + written +
                          " is a low surrogate with no high surrogate (\\uD800 to \\uDBFF) "
                          "before it; a character beyond U+FFFF is a pair such as \\uD83D\\uDE00");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      const std::size_t low_at = pos_;
      const bool pair = text_.substr(pos_, 2) == "\\u";
      std::uint32_t low = 0;
      if (pair) {
        pos_ += 2;
        low = hex4(low_at);
      }
      if (!pair || low < 0xDC00 || low > 0xDFFF)
        fail(escape_at, "the escape " + written +
                            " is a high surrogate without a low surrogate (\\uDC00 to \\uDFFF) "
                            "right after it; a character beyond U+FFFF is a pair such as "
                            "\\uD83D\\uDE00");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  // A number at pos_, in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  void number(Value& v) {
    const std::size_t start = pos_;
    const auto digits = [&] {
      while (at_digit())
        ++pos_;
    };
    if (at('-')) ++pos_;
    if (!at_digit()) unexpected(pos_, "a digit after '-'");
    if (at('0')) {
      ++pos_;
      if (at_digit())
        fail(pos_,
             "found a digit after a leading 0; a JSON number has no leading zeros (write "
             "7, not 07, or 0.7)");
    } else {
      digits();
    }
    if (at('.')) {
      ++pos_;
      if (!at_digit()) unexpected(pos_, "a digit after the decimal point");
      digits();
    }
    if (at('e') || at('E')) {
      ++pos_;
      if (at('+') || at('-')) ++pos_;
      if (!at_digit()) unexpected(pos_, "a digit in the exponent");
      digits();
    }
    const std::string_view literal = text_.substr(start, pos_ - start);
    v.kind_ = Kind::Number;
    v.text_ = std::string(literal);
    const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(),
                                           v.number_, std::chars_format::general);
    if (ec == std::errc() && end == literal.data() + literal.size()) return;
    if (ec == std::errc::result_out_of_range && !overflows_double(literal)) {
      v.number_ = literal.front() == '-' ? -0.0 : 0.0;  // below the smallest double: zero
      return;
    }
    fail(start, "the number " + detail::io::quote_token(literal) +
                    " is out of the range of a double (magnitudes up to about 1.8e308)");
  }

  std::string_view text_;
  std::string source_;
  std::size_t pos_ = 0;
  long long values_ = 0;      // values read so far (bounded by json::max_values)
  std::size_t mark_pos_ = 0;  // where locate() last counted to, and what it found there
  Location mark_;
};

}  // namespace detail::json_read

namespace json {

//! Reads `text` as one JSON value (RFC 8259; a leading UTF-8 byte-order mark is skipped).
//! Throws parse_error naming `source`, the line and column, what was found there and what
//! was expected: for text that is not JSON, a string that is not UTF-8, a bad escape or a lone
//! surrogate, a number out of a double's range, a key given twice in one object, nesting
//! deeper than max_depth, or anything after the value.
inline Value parse(std::string_view text, std::string source = "json") {
  return detail::json_read::Parser(text, std::move(source)).parse();
}

}  // namespace json
}  // namespace pipesched
