// Fuzz target: the layout reader. What reads writes back to text that reads to the same layout,
// within the bounds a layout keeps, and its layers per stage make the same layout again; what
// does not read gives one sentence (invalid_problem), with no line break and no NUL byte.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_harness.hpp"
#include "pipesched/io/layout.hpp"

int pipesched_fuzz_layout(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Layout l;
  try {
    l = parse_layout(text);
  } catch (const invalid_problem& e) {
    const std::string what = e.what();
    fuzz::require(what.find('\0') == std::string::npos, "a layout error holds a NUL byte");
    fuzz::require(what.find('\n') == std::string::npos, "a layout error is not one line", what);
    return 0;
  }
  fuzz::require(!l.stages.empty() && l.stages.size() <= Layout::max_stages,
                "a layout read with a stage count out of bounds");
  fuzz::require(l.layers() <= static_cast<long long>(Layout::max_expanded),
                "a layout read with more layers than its text may expand to");
  fuzz::require(l.stages.front().embedding && l.stages.back().loss,
                "a layout read without E first or L last");
  std::string written;
  fuzz::require(fuzz::answers([&] { written = to_string(l); }), "a layout cannot be written");
  Layout again;
  fuzz::require(fuzz::answers([&] { again = parse_layout(written); }),
                "a written layout does not read", written);
  fuzz::require(again == l, "a layout does not survive write + read", written);
  fuzz::require(to_string(again) == written, "the layout text is not stable", written);
  // The layers per stage (what a cost model and the toy GPT take) give the layout back.
  Layout counted;
  fuzz::require(fuzz::answers([&] { counted = Layout::of_stage_layers(l.stage_layers()); }),
                "a layout's layers per stage do not make a layout", written);
  fuzz::require(counted == l, "a layout does not survive its layers per stage", written);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_layout(data, size);
}
#endif
