// pipesched profile: measures the toy GPT's layers on this machine over a grid of unit sizes
// and writes a layer profile (docs/formats.md) that --profile FILE reads.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/toy/layer_profile.hpp"

namespace pipesched::cli {

int cmd_profile(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"--layers", true, "the model's blocks (default 8); the profile measures one", "L"},
      {"--hidden", true, "model width (default 64)", "H"},
      {"--heads", true, "attention heads, dividing --hidden (default 4)", "A"},
      {"--ffn", true, "MLP inner width (default 4 x --hidden)", "F"},
      {"--vocabulary", true, "vocabulary size (default 256)", "V"},
      {"--sequence", true, "the model's sequence length (default: the longest of --tokens)", "S"},
      {"--precision", true, "values of the toy's tensors: double (default) or float",
       "double|float"},
      {"--tokens", true, "slice lengths measured (default: S/4, S/2, S)", "LIST"},
      {"--prefixes", true,
       "attention prefixes measured, tokens before a slice (default: 0, S/2, S - S/4: "
       "every slice of up to 4 uniform slices)",
       "LIST"},
      {"--microbatch-sizes", true, "microbatch sizes measured (default 1,2)", "LIST"},
      {"--tp", true, "tensor-parallel degrees measured, one shard's kernels each (default 1)",
       "LIST"},
      {"--repeats", true, "measured steps per point, each figure their median (default 3)", "N"},
      {"-o", true, "the file to write (default: standard output)", "FILE"},
      {"--progress", false, "report each point measured on standard error"},
  };
  if (wants_help(argv)) {
    std::cout << help_text(
        "pipesched profile [--layers L] [--hidden H] [--heads A] [--ffn F] [--vocabulary V] "
        "[--sequence S] [--precision double|float] [--tokens LIST] [--prefixes LIST] "
        "[--microbatch-sizes LIST] [--tp LIST] [--repeats N] [-o FILE] [--progress]",
        "Measures the toy GPT's layers on this machine and writes a layer profile: for each\n"
        "point of the grid (tensor degree x microbatch size x slice length x prefix), the\n"
        "seconds of F, I, W and R and the bytes held of the first-stage extras (embedding), one\n"
        "block, and the last-stage extras (head and loss), run as a one-rank pipeline on one\n"
        "thread. simulate, render and tune read it with --profile FILE (with --device or\n"
        "--cluster): the cost model then composes any partition, layer split, chunk count and\n"
        "slice from the measured layers, interpolating between grid points and refusing a unit\n"
        "outside the grid. The file format is in docs/formats.md.",
        specs);
    return exit_ok;
  }
  const Args a = parse_args("profile", argv, specs, 0);
  auto num = [&](const char* option, int def, int lo, int hi) {
    return a.has(option) ? parse_int(option, a.get(option), lo, hi) : def;
  };
  toy::GptConfig c;
  c.blocks = num("--layers", 8, 1, 4096);
  c.hidden = num("--hidden", 64, 1, 1 << 14);
  c.heads = num("--heads", 4, 1, 1 << 14);
  c.ffn = num("--ffn", 4 * c.hidden, 1, 1 << 16);
  c.vocabulary = num("--vocabulary", 256, 2, 1 << 20);
  if (c.hidden % c.heads != 0)
    throw usage_error("--heads " + std::to_string(c.heads) + " does not divide --hidden " +
                      std::to_string(c.hidden) + "; give heads that divide the width");
  LayerGrid grid;
  const int limit = 1 << 16;
  if (a.has("--tokens")) grid.tokens = parse_int_list("--tokens", a.get("--tokens"), 1, limit);
  int longest = 0;
  for (int t : grid.tokens)
    longest = std::max(longest, t);
  c.sequence = num("--sequence", longest > 0 ? longest : 128, 1, limit);
  const int S = c.sequence;
  if (grid.tokens.empty()) {
    for (int t : {S / 4, S / 2, S})
      if (t >= 1 && std::find(grid.tokens.begin(), grid.tokens.end(), t) == grid.tokens.end())
        grid.tokens.push_back(t);
  }
  if (a.has("--prefixes")) {
    grid.prefixes = parse_int_list("--prefixes", a.get("--prefixes"), 0, limit);
  } else {
    grid.prefixes.clear();
    for (int o : {0, S / 2, S - S / 4})
      if (std::find(grid.prefixes.begin(), grid.prefixes.end(), o) == grid.prefixes.end())
        grid.prefixes.push_back(o);
  }
  grid.microbatch_sizes =
      a.has("--microbatch-sizes")
          ? parse_int_list("--microbatch-sizes", a.get("--microbatch-sizes"), 1, 1 << 12)
          : std::vector<int>{1, 2};
  grid.tensor =
      a.has("--tp") ? parse_int_list("--tp", a.get("--tp"), 1, 1 << 12) : std::vector<int>{1};
  LayerProfileOptions options;
  options.repeats = num("--repeats", 3, 1, 1000);
  const std::string precision = a.get("--precision", "double");
  if (precision != "double" && precision != "float")
    throw usage_error("--precision takes double or float, got '" + precision + "'");
  options.device = "this machine's CPU (pipesched profile, toy GPT in " + precision + ")";
  if (a.has("--progress"))
    options.progress = [](std::size_t done, std::size_t all) {
      std::cerr << "profiled " << done << " of " << all << " points\n";
    };
  LayerProfile profile;
  try {
    Step step("measuring the layers");
    profile = precision == "double" ? toy::gpt_layer_profile<double>(c, grid, options)
                                    : toy::gpt_layer_profile<float>(c, grid, options);
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
  const std::string text = layer_profile_json(profile);
  if (!a.has("-o") || a.get("-o") == "-")
    std::cout << text;
  else
    write_output(a.get("-o"), text);
  return exit_ok;
}

}  // namespace pipesched::cli
