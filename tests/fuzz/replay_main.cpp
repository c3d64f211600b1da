// The fuzz targets without libFuzzer: `pipesched_fuzz_replay TARGET FILE|DIR...` runs one
// target (csv, text, action, json, model, device, checkpoint or layout) on every file named
// (directories: every file in them), so that the seed corpus and the saved regressions run as
// ordinary tests with any compiler. A finding aborts, as under libFuzzer; the file being run is
// printed first.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int pipesched_fuzz_csv(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_text(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_action(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_json(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_model(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_device(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_checkpoint(const std::uint8_t* data, std::size_t size);
int pipesched_fuzz_layout(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  using Target = int (*)(const std::uint8_t*, std::size_t);
  Target target = nullptr;
  if (argc >= 2) {
    if (std::strcmp(argv[1], "csv") == 0) target = pipesched_fuzz_csv;
    if (std::strcmp(argv[1], "text") == 0) target = pipesched_fuzz_text;
    if (std::strcmp(argv[1], "action") == 0) target = pipesched_fuzz_action;
    if (std::strcmp(argv[1], "json") == 0) target = pipesched_fuzz_json;
    if (std::strcmp(argv[1], "model") == 0) target = pipesched_fuzz_model;
    if (std::strcmp(argv[1], "device") == 0) target = pipesched_fuzz_device;
    if (std::strcmp(argv[1], "checkpoint") == 0) target = pipesched_fuzz_checkpoint;
    if (std::strcmp(argv[1], "layout") == 0) target = pipesched_fuzz_layout;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  if (target == nullptr || files.empty()) {
    std::fprintf(stderr,
                 "usage: %s csv|text|action|json|model|device|checkpoint|layout FILE|DIR...\n"
                 "runs one fuzz target on each file (directories: each file in them)\n",
                 argv[0]);
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 2;
    }
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "%s\n", f.c_str());
    target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: ran %zu inputs, no finding\n", argv[1], files.size());
  return 0;
}
