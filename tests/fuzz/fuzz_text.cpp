// Fuzz target: pipesched's text-form reader (and the form detection of schedule files), then
// everything a schedule goes through.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_harness.hpp"

int pipesched_fuzz_text(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Schedule s;
  const bool text = detail::io::looks_like_text_form(input);
  if (!fuzz::answers([&] {
        s = text ? detail::io::TextReader(input, "fuzz.txt").read()
                 : detail::io::read_csv_content(input, "fuzz.csv");
      }))
    return 0;
  fuzz::exercise(s);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_text(data, size);
}
#endif
