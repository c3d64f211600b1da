// Fuzz target: the action-string parser. What parses writes back to a string that parses to
// the same action; what does not parse gives a parse_error whose column lies in the token.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_harness.hpp"
#include "pipesched/io/action_string.hpp"

int pipesched_fuzz_action(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view token(reinterpret_cast<const char*>(data), size);
  Action a;
  try {
    a = parse_action(token);
  } catch (const parse_error& e) {
    fuzz::require(e.column() >= 1 && static_cast<std::size_t>(e.column()) <= size + 1,
                  "a parse error's column lies outside the token", e.what());
    fuzz::require(std::string(e.what()).find('\0') == std::string::npos,
                  "a parse error's message holds a NUL byte");
    return 0;
  }
  std::string written;
  fuzz::require(fuzz::answers([&] { written = format_action(a); }),
                "a parsed action cannot be written");
  Action again;
  fuzz::require(fuzz::answers([&] { again = parse_action(written); }),
                "a written action does not parse", written);
  fuzz::require(again == a, "an action does not survive write + read", written);
  fuzz::require(format_action(again) == written, "the action string is not stable", written);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_action(data, size);
}
#endif
