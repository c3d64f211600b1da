// Reading a whole file of bounded size, with one-sentence messages: what the plan, model,
// device and cluster readers share.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "pipesched/core/error.hpp"

namespace pipesched::detail::io {

//! The content of the file at `path`, at most `max_bytes`. Throws pipesched::error starting
//! "cannot read <what> \"<path>\": " and ending with the reason: "it is a directory;
//! <directory_hint>.", the system's reason, or "it is larger than <too_large>.".
inline std::string read_bounded_file(const std::string& path, const std::string& what,
                                     std::uintmax_t max_bytes, const std::string& directory_hint,
                                     const std::string& too_large) {
  const std::string cannot = "cannot read " + what + " \"" + path + "\": ";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw error(cannot + "it is a directory; " + directory_hint + ".");
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw error(cannot + std::strerror(errno != 0 ? errno : EIO) + ".");
  std::string content;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) {
    content.append(buffer, n);
    if (content.size() > max_bytes) {
      std::fclose(f);
      throw error(cannot + "it is larger than " + too_large + ".");
    }
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno != 0 ? errno : EIO;
  std::fclose(f);
  if (failed) throw error(cannot + std::strerror(err) + ".");
  return content;
}

}  // namespace pipesched::detail::io
