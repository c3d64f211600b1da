// What the readers of model, device and cluster files (io/model_file.hpp, io/device_file.hpp)
// share: reading a small file whole, and the fields of one JSON object, each read with the
// sentence that says where it is (file, line, column), what it holds and what would be right.
#pragma once

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/detail/bounded_file.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"

namespace pipesched::detail::spec_json {

//! The largest model, device or cluster file read: 16 MiB (a config.json is a few kB).
inline constexpr std::uintmax_t max_file_bytes = std::uintmax_t{16} << 20;

//! The content of the file at `path`; throws pipesched::error naming `what` ("model file"),
//! the path and the reason when it cannot be read (missing, a directory, over 16 MiB).
inline std::string read_file(const std::string& path, const std::string& what) {
  return io::read_bounded_file(path, what, max_file_bytes, "give the path of a JSON file",
                               "the 16 MiB pipesched reads as a " + what);
}

//! "4096", "\"4096\" (a string)", "true", "an object": a value as a message shows it.
inline std::string shown(const json::Value& v) {
  switch (v.kind()) {
    case json::Kind::Number: {
      const std::string& t = v.number_text();
      return t.size() <= 40 ? t : t.substr(0, 40) + "...";
    }
    case json::Kind::String:
      return detail::io::quote_token(v.string()) + " (a string)";
    case json::Kind::Boolean:
      return v.boolean() ? "true" : "false";
    default:
      return json::describe(v.kind());
  }
}

//! `names` as a message lists them: "a, b and c".
inline std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

//! The members of one JSON object, read with messages naming `source`, the line and column.
class Fields {
 public:
  //! The fields of `object` (an object, checked by the caller) of the file `source`.
  Fields(const json::Value& object, std::string source)
      : object_(object), source_(std::move(source)) {}

  //! The file's name, as messages give it.
  const std::string& source() const noexcept { return source_; }
  //! The object read.
  const json::Value& object() const noexcept { return object_; }

  //! Throws parse_error at `at`: "<source>: line L, column C: <problem>."
  [[noreturn]] void fail(const json::Value& at, const std::string& problem) const {
    throw parse_error(detail::io::where(source_, at.line(), at.column()) + problem + ".", at.line(),
                      at.column());
  }
  //! Throws parse_error for the member `key` holding `v`: field "key" is <v>; <want>.
  [[noreturn]] void mistyped(std::string_view key, const json::Value& v,
                             const std::string& want) const {
    fail(v, "field \"" + std::string(key) + "\" is " + shown(v) + "; " + want);
  }

  //! The member `key`, or nullptr when it is absent or null (null = "not set").
  const json::Value* find(std::string_view key) const {
    const json::Value* v = object_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  //! The member `key`, which must be there: else parse_error saying `why` it is needed.
  const json::Value& need(std::string_view key, const std::string& why) const {
    const json::Value* v = find(key);
    if (v == nullptr) fail(object_, "field \"" + std::string(key) + "\" is missing; " + why);
    return *v;
  }

  //! A whole number from `lo` to `hi` at `v` (the member `key`), else parse_error saying it
  //! is `what`.
  int whole(std::string_view key, const json::Value& v, int lo, int hi,
            const std::string& what) const {
    if (!v.is_integer() || v.number() < lo || v.number() > hi)
      mistyped(key, v,
               "it is a whole number" + (lo == INT_MIN ? std::string() : ", " + range(lo, hi)) +
                   " (" + what + ")");
    return static_cast<int>(v.number());
  }
  //! A number of at least `lo` (above `lo` when `open`), at most `hi`, at `v`.
  double number(std::string_view key, const json::Value& v, double lo, bool open, double hi,
                const std::string& what) const {
    if (v.kind() != json::Kind::Number || !std::isfinite(v.number()) ||
        (open ? v.number() <= lo : v.number() < lo) || v.number() > hi)
      mistyped(
          key, v,
          "it is a number" +
              (lo < -1e307 ? std::string()
                           : std::string(open ? " above " : " of at least ") + json::number(lo)) +
              (hi < 1e307 ? " and at most " + json::number(hi) : std::string()) + " (" + what +
              ")");
    return v.number();
  }
  //! true or false at `v`.
  bool boolean(std::string_view key, const json::Value& v, const std::string& what) const {
    if (v.kind() != json::Kind::Boolean) mistyped(key, v, "it is true or false (" + what + ")");
    return v.boolean();
  }
  //! A string at `v`.
  const std::string& text(std::string_view key, const json::Value& v,
                          const std::string& what) const {
    if (v.kind() != json::Kind::String) mistyped(key, v, "it is a string (" + what + ")");
    return v.string();
  }

 private:
  static std::string range(int lo, int hi) {
    return hi == INT_MAX ? std::to_string(lo) + " or more"
                         : "from " + std::to_string(lo) + " to " + std::to_string(hi);
  }

  const json::Value& object_;
  std::string source_;
};

//! The JSON object of `text` (a file named `source`), or parse_error saying the file holds
//! `what` (a model, a device) as one object.
inline json::Value parse_object(std::string_view text, const std::string& source,
                                const std::string& what) {
  json::Value doc = json::parse(text, source);
  if (doc.kind() != json::Kind::Object)
    throw parse_error(detail::io::where(source, doc.line(), doc.column()) + "the file holds " +
                          json::describe(doc.kind()) + "; " + what + " is one JSON object.",
                      doc.line(), doc.column());
  return doc;
}

//! The last path component without its extension ("my" for "dir/my.json"), or `path`.
inline std::string stem_of(const std::string& path) {
  const std::string stem = std::filesystem::path(path).stem().string();
  return stem.empty() ? path : stem;
}

}  // namespace pipesched::detail::spec_json
