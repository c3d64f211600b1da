// The pipesched command: its cost models (--cost, --model and --device) (see cli.hpp).
#include "cli.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/registry.hpp"


namespace pipesched::cli {

// ---------------------------------------------------------------------------------------
// Cost models

const std::vector<OptionSpec> cost_options = {
    {"--cost", true,
     "UniformCost parameters, e.g. f=1,b=2,w=1,r=1,comm=0,boundary=0.05,w_memory=0; times from 0 "
     "to 1e12",
     "K=V,..."},
    {"--model", true, "TransformerCost model preset (see pipesched list)", "NAME"},
    {"--device", true, "TransformerCost device preset (see pipesched list)", "NAME"},
    {"--sequence", true, "sequence length for --model (default: the preset's)", "N"},
    {"--microbatch-size", true, "sequences per microbatch for --model (default 1)", "B"},
    {"--tp", true, "tensor-parallel degree of each pipeline rank, inside a node (default 1)", "T"},
    {"--sp", false, "sequence parallelism with --tp (norm and dropout activations split too)"},
    {"--dp", true,
     "data-parallel replicas of the pipeline; their gradients are all-reduced (default 1)", "D"},
    {"--zero", true,
     "ZeRO stage with --dp: 0 (default), 1 (optimizer state sharded), 2 (+ gradients)", "Z"},
    {"--layers", true,
     "layers of each stage of the model, e.g. 6,6,6,6 (default: as even as possible)", "LIST"},
    {"--gpus-per-node", true, "GPUs of a node (default: the device's)", "G"},
    {"--whole-step", false,
     "also the optimizer step (time) and each rank's largest temporary buffer (memory)"},
};

UniformCost parse_uniform_cost(const std::string& text) {
  UniformCost c;
  std::vector<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  const char* keys = "keys are f, b, w, r, comm, boundary, w_memory";
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw usage_error("--cost: '" + item + "' is not KEY=VALUE; " + keys);
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      throw usage_error("--cost gives " + k + " twice; give each key once");
    seen.push_back(k);
    // Times are bounded so that a step of max_actions of them stays finite; the memory
    // shares are fractions of a unit's activations.
    const bool share = k == "boundary" || k == "w_memory";
    double* field = k == "f"          ? &c.f
                    : k == "b"        ? &c.b
                    : k == "w"        ? &c.w
                    : k == "r"        ? &c.r
                    : k == "comm"     ? &c.comm
                    : k == "boundary" ? &c.boundary
                    : k == "w_memory" ? &c.w_memory
                                      : nullptr;
    if (!field) throw usage_error("--cost: unknown key '" + k + "'; " + keys);
    *field = parse_number("--cost " + k, v, 0, share ? 1.0 : max_cost_time);
  }
  try {
    c.check();
  } catch (const invalid_problem& e) {
    throw usage_error("--cost: " + e.message());
  }
  return c;
}

AnyCost get_cost(const Args& a) {
  const bool transformer = a.has("--model") || a.has("--device");
  if (transformer && a.has("--cost"))
    throw usage_error(
        "give either --cost (UniformCost) or --model and --device (TransformerCost), not both");
  if (!transformer) {
    for (const char* o : {"--sequence", "--microbatch-size", "--tp", "--sp", "--dp", "--zero",
                          "--layers", "--gpus-per-node", "--whole-step"})
      if (a.has(o))
        throw usage_error(std::string(o) +
                          " describes a transformer on a device; it needs --model and --device");
    return parse_uniform_cost(a.get("--cost"));
  }
  if (!a.has("--model") || !a.has("--device"))
    throw usage_error(
        "TransformerCost needs both --model NAME and --device NAME (see pipesched list)");
  try {
    ModelShape m = presets::find_model(a.get("--model"));
    if (a.has("--sequence")) m.sequence = parse_int("--sequence", a.get("--sequence"), 1, 1 << 24);
    if (a.has("--microbatch-size"))
      m.microbatch_size = parse_int("--microbatch-size", a.get("--microbatch-size"), 1, 1 << 16);
    TransformerCost c{m, presets::find_device(a.get("--device")), {}};
    if (a.has("--gpus-per-node"))
      c.device.ranks_per_node = parse_int("--gpus-per-node", a.get("--gpus-per-node"), 1, 1 << 16);
    if (a.has("--tp")) c.parallel.tensor = parse_int("--tp", a.get("--tp"), 1, 1 << 16);
    if (a.has("--sp")) {
      if (c.parallel.tensor < 2)
        throw usage_error("--sp splits activations over the tensor group; give --tp 2 or more too");
      c.parallel.sequence_parallel = true;
    }
    if (a.has("--dp")) c.parallel.data = parse_int("--dp", a.get("--dp"), 1, 1 << 20);
    if (a.has("--zero")) {
      c.parallel.zero = parse_int("--zero", a.get("--zero"), 0, 2);
      if (c.parallel.zero > 0 && c.parallel.data < 2)
        throw usage_error("--zero " + a.get("--zero") +
                          " shards over data-parallel replicas; give --dp 2 or more too");
    }
    if (a.has("--layers"))
      c.parallel.layers = parse_int_list("--layers", a.get("--layers"), 1, 1 << 20);
    c.parallel.whole_step = a.has("--whole-step");
    c.check();
    return c;
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

bool is_transformer(const AnyCost& c) {
  return std::holds_alternative<TransformerCost>(c);
}

Units units_of(const AnyCost& c) {
  return is_transformer(c) ? Units{"seconds", "bytes"} : Units{"units", "microbatches"};
}

}  // namespace pipesched::cli
