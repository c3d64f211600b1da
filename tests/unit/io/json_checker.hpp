// A small strict JSON parser for tests: RFC 8259's grammar (numbers, string escapes, no raw
// control characters, no trailing commas), no duplicate keys, valid UTF-8, nothing after the
// value. Throws std::runtime_error naming the offset of the first fault.
#pragma once

#include <cctype>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pipesched::test_json {

struct Json {
  enum Type { Null, Bool, Number, String, Array, Object } type = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* find(const std::string& key) const {
    for (const auto& [k, v] : object)
      if (k == key) return &v;
    return nullptr;
  }
  const Json& at(const std::string& key) const {
    const Json* v = find(key);
    if (!v) throw std::runtime_error("JSON: no key " + key);
    return *v;
  }
};

// RFC 8259 JSON: the number grammar, string escapes (no raw control characters), no trailing
// commas, no duplicate keys in an object, valid UTF-8, nothing after the value.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& t) : t_(t) {}

  Json parse() {
    check_utf8();
    Json v = value();
    space();
    if (i_ != t_.size()) fail("content after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("JSON: " + why + " at offset " + std::to_string(i_));
  }
  void check_utf8() {
    for (std::size_t k = 0; k < t_.size();) {
      const unsigned char c = static_cast<unsigned char>(t_[k]);
      const int len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
      if (len == 0 || k + len > t_.size()) throw std::runtime_error("JSON: invalid UTF-8");
      for (int j = 1; j < len; ++j)
        if ((static_cast<unsigned char>(t_[k + j]) & 0xC0) != 0x80)
          throw std::runtime_error("JSON: invalid UTF-8");
      k += len;
    }
  }
  void space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t'))
      ++i_;
  }
  bool take(char c) {
    space();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool digit() const { return i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_])); }

  Json value() {
    space();
    if (i_ >= t_.size()) fail("unexpected end");
    Json v;
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      v.type = Json::Object;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        if (v.find(key)) fail("duplicate key " + key);
        expect(':');
        v.object.emplace_back(key, value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.type = Json::Array;
      if (take(']')) return v;
      do {
        v.array.push_back(value());
      } while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type = Json::String;
      v.string = string();
    } else if (t_.compare(i_, 4, "true") == 0 || t_.compare(i_, 5, "false") == 0) {
      v.type = Json::Bool;
      v.boolean = c == 't';
      i_ += v.boolean ? 4 : 5;
    } else if (t_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      v.type = Json::Number;
      const std::size_t start = i_;
      if (t_[i_] == '-') ++i_;
      if (!digit()) fail("bad number");
      if (t_[i_] == '0') {
        ++i_;
      } else {
        while (digit())
          ++i_;
      }
      if (i_ < t_.size() && t_[i_] == '.') {
        ++i_;
        if (!digit()) fail("bad fraction");
        while (digit())
          ++i_;
      }
      if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
        ++i_;
        if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
        if (!digit()) fail("bad exponent");
        while (digit())
          ++i_;
      }
      v.number = std::stod(t_.substr(start, i_ - start));
    }
    return v;
  }

  std::string string() {
    if (i_ >= t_.size() || t_[i_] != '"') fail("expected a string");
    ++i_;
    std::string s;
    for (;;) {
      if (i_ >= t_.size()) fail("unterminated string");
      const char c = t_[i_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (i_ >= t_.size()) fail("unterminated escape");
      const char e = t_[i_++];
      switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'n':
          s += '\n';
          break;
        case 'r':
          s += '\r';
          break;
        case 't':
          s += '\t';
          break;
        case 'u': {
          if (i_ + 4 > t_.size()) fail("short \\u escape");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = t_[i_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad \\u escape");
            cp = cp * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
          }
          if (cp >= 0x80) fail("test parser reads \\u escapes only below 0x80");
          s += static_cast<char>(cp);
          break;
        }
        default:
          fail(std::string("bad escape \\") + e);
      }
    }
  }

  const std::string& t_;
  std::size_t i_ = 0;
};

inline Json parse_json(const std::string& t) {
  return JsonChecker(t).parse();
}

}  // namespace pipesched::test_json
