// Fuzz target: PyTorch's schedule CSV reader, then everything a schedule goes through.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_harness.hpp"

int pipesched_fuzz_csv(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Schedule s;
  if (!fuzz::answers([&] { s = detail::io::read_csv_content(input, "fuzz.csv"); })) return 0;
  fuzz::exercise(s);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_csv(data, size);
}
#endif
