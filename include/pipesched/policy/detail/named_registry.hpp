// The run-time registry behind register_generator and register_checkpoint: what a program adds
// to the built-in generators or checkpoint policies, by name, kept for the life of the program
// and safe to read while another thread adds.
#pragma once

#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pipesched::detail {

//! True when `name` can be a command-line word: 1 to 64 lower-case letters, digits, '-', '_'
//! and '.', not starting with '-'.
inline bool valid_generator_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
      return false;
  return name.front() != '-';
}

//! The entries a program registered for one kind of `Info` (a struct with string_view `name`
//! and `summary`), in registration order. A deque keeps every entry, and the name and summary
//! it owns, in place as others are added, so a reference from find() stays valid for the life
//! of the program.
template <class Info>
class NamedRegistry {
 public:
  //! The one registry of `Info`.
  static NamedRegistry& instance() {
    static NamedRegistry r;
    return r;
  }

  //! `builtins`, then every registered entry: a copy.
  std::vector<Info> with(std::span<const Info> builtins) const {
    std::vector<Info> out(builtins.begin(), builtins.end());
    const std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      out.push_back(e.info);
    return out;
  }

  //! The registered entry called `name`, or null.
  const Info* find(std::string_view name) const {
    const std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      if (e.name == name) return &e.info;
    return nullptr;
  }

  //! Adds a copy of `info` that owns its name and summary; false (and nothing added) when an
  //! entry of that name is registered already.
  bool add(const Info& info) {
    const std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      if (e.name == info.name) return false;
    Entry& e = entries_.emplace_back();
    e.name = std::string(info.name);
    e.summary = std::string(info.summary);
    e.info = info;
    e.info.name = e.name;
    e.info.summary = e.summary;
    return true;
  }

 private:
  struct Entry {
    std::string name, summary;
    Info info;
  };
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;
};

}  // namespace pipesched::detail
