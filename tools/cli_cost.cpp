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
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <utility>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/io/layout.hpp"
#include "pipesched/io/model_file.hpp"
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
     "UniformCost parameters, e.g. f=1,b=2,w=1,r=1,comm=0,boundary=0.05,w_memory=0,copy=1 (and "
     "vf, vb, vmem, ef, eb for vocabulary passes); times "
     "from 0 to 1e12",
     "K=V,..."},
    {"--model", true,
     "TransformerCost model: a preset (see pipesched list), a pipesched model file or a Hugging "
     "Face config.json (a value naming a file, or ending in .json, is a file)",
     "NAME|FILE"},
    {"--device", true,
     "TransformerCost device: a preset (see pipesched list) or a device file (JSON, docs/cli.md)",
     "NAME|FILE"},
    {"--cluster", true,
     "instead of --device: a cluster file, a device's fields with the cluster's layout and GPU "
     "count (JSON, docs/cli.md)",
     "FILE"},
    {"--profile", true,
     "the model's own layers as measured (a layer profile, pipesched profile): their times and "
     "bytes replace the formulas'; the model is the profile's unless --model names the same one",
     "FILE"},
    {"--sequence", true, "sequence length for --model (default: the preset's or the file's)", "N"},
    {"--microbatch-size", true, "sequences per microbatch for --model (default 1)", "B"},
    {"--tp", true, "tensor-parallel degree of each pipeline rank, inside a node (default 1)", "T"},
    {"--sp", false, "sequence parallelism with --tp (norm and dropout activations split too)"},
    {"--dp", true,
     "data-parallel replicas of the pipeline; their gradients are all-reduced (default 1)", "D"},
    {"--zero", true,
     "ZeRO stage with --dp: 0 (default), 1 (optimizer state sharded), 2 (+ gradients)", "Z"},
    {"--layers", true,
     "layers of each stage of the model, e.g. 6,6,6,6; the first and last stage may hold 0 "
     "(default: as even as possible)",
     "LIST"},
    {"--layout", true,
     "the model's units on each stage in Megatron-core's layout grammar, e.g. "
     "'Et*3|(t*4|)*6,t*3L' (docs/formats.md), or 'auto': the layers per stage whose plan "
     "simulates fastest, searched",
     "TEXT|auto"},
    {"--gpus-per-node", true, "GPUs of a node, 1 to 1024 (default: the device's)", "G"},
    {"--whole-step", false,
     "also the optimizer step (time) and each rank's largest temporary buffer (memory)"},
};

UniformCost parse_uniform_cost(const std::string& text) {
  UniformCost c;
  std::vector<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  const char* keys = "keys are f, b, w, r, comm, boundary, w_memory, copy, vf, vb, vmem, ef, eb";
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
                    : k == "copy"     ? &c.copy
                    : k == "vf"       ? &c.vf
                    : k == "vb"       ? &c.vb
                    : k == "vmem"     ? &c.vmem
                    : k == "ef"       ? &c.ef
                    : k == "eb"       ? &c.eb
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

namespace {

// A --model or --device value names a file when it is one, or ends in .json; else a preset.
bool names_file(const std::string& value) {
  std::error_code ec;
  return value.ends_with(".json") || std::filesystem::is_regular_file(value, ec);
}

// The model of --model (a preset or a file), with --sequence's length (0: the model's).
ModelShape model_of(const std::string& value, int sequence) {
  try {
    if (!names_file(value)) {
      ModelShape m = presets::find_model(value);
      if (sequence > 0) m.sequence = sequence;
      return m;
    }
    const ModelFile f = read_model_file(value, ModelReadOptions{.sequence = sequence});
    for (const std::string& note : f.notes)
      std::cerr << "note: " << note << "\n";
    return f.model;
  } catch (const parse_error& e) {
    throw usage_error("--model: " + e.message());
  } catch (const invalid_problem& e) {
    if (names_file(value)) throw usage_error("--model: " + e.message());
    throw usage_error(e.message() + " Or give a model file: a path, or a name ending in .json.");
  } catch (const error& e) {
    throw usage_error("--model: " + e.message());
  }
}

// The file of --cluster, read.
DeviceFile cluster_of(const std::string& path) {
  try {
    if (!names_file(path))
      throw usage_error("--cluster " + path +
                        ": there is no such file; --cluster takes a cluster file (JSON, "
                        "docs/cli.md), --device a device preset");
    return read_cluster_file(path);
  } catch (const error& e) {
    throw usage_error("--cluster: " + e.message());
  }
}

// The device of --device (a preset or a file) or --cluster (a file).
DeviceSpec device_of(const Args& a) {
  if (a.has("--cluster")) return cluster_of(a.get("--cluster")).device;
  const std::string value = a.get("--device");
  try {
    if (!names_file(value)) return presets::find_device(value);
    return read_device_file(value).device;
  } catch (const invalid_problem& e) {
    if (names_file(value)) throw usage_error("--device: " + e.message());
    throw usage_error(e.message() + " Or give a device file: a path, or a name ending in .json.");
  } catch (const error& e) {
    throw usage_error("--device: " + e.message());
  }
}

// The layer profile of --profile, read.
std::shared_ptr<const LayerProfile> profile_of(const std::string& path) {
  try {
    return std::make_shared<const LayerProfile>(read_layer_profile_file(path));
  } catch (const error& e) {
    throw usage_error("--profile: " + e.message());
  }
}

}  // namespace

int cluster_gpus(const Args& a) {
  return a.has("--cluster") ? cluster_of(a.get("--cluster")).gpus : 0;
}

AnyCost get_cost(const Args& a) {
  const bool transformer =
      a.has("--model") || a.has("--device") || a.has("--cluster") || a.has("--profile");
  if (transformer && a.has("--cost"))
    throw usage_error(
        "give either --cost (UniformCost) or --model (or --profile) and --device "
        "(TransformerCost), not both");
  if (!transformer) {
    for (const char* o : {"--sequence", "--microbatch-size", "--tp", "--sp", "--dp", "--zero",
                          "--layers", "--layout", "--gpus-per-node", "--whole-step"})
      if (a.has(o))
        throw usage_error(std::string(o) +
                          " describes a transformer on a device; it needs --model and --device");
    return parse_uniform_cost(a.get("--cost"));
  }
  if (a.has("--device") && a.has("--cluster"))
    throw usage_error(
        "give --device (one device) or --cluster (a cluster file: the device's fields with the "
        "cluster's layout), not both");
  if (!(a.has("--model") || a.has("--profile")) || !(a.has("--device") || a.has("--cluster")))
    throw usage_error(
        "TransformerCost needs both --model NAME|FILE (or --profile FILE) and --device NAME|FILE "
        "(or --cluster FILE) (see pipesched list)");
  const int sequence =
      a.has("--sequence") ? parse_int("--sequence", a.get("--sequence"), 1, 1 << 24) : 0;
  std::shared_ptr<const LayerProfile> measured;
  if (a.has("--profile")) measured = profile_of(a.get("--profile"));
  ModelShape m;
  if (a.has("--model")) {
    m = model_of(a.get("--model"), sequence);
  } else {
    m = measured->model();
    if (sequence > 0) m.sequence = sequence;
  }
  const DeviceSpec device = device_of(a);
  try {
    if (a.has("--microbatch-size"))
      m.microbatch_size = parse_int("--microbatch-size", a.get("--microbatch-size"), 1, 1 << 16);
    TransformerCost c{m, device, {}};
    c.measured = measured;
    if (a.has("--gpus-per-node"))
      c.device.ranks_per_node =
          parse_int("--gpus-per-node", a.get("--gpus-per-node"), 1, DeviceSpec::max_ranks_per_node);
    if (a.has("--tp")) c.parallel.tensor = parse_int("--tp", a.get("--tp"), 1, 1 << 16);
    if (a.has("--sp")) {
      if (c.parallel.tensor < 2)
        throw usage_error("--sp splits activations over the tensor group; give --tp 2 or more too");
      if (measured)
        throw usage_error(
            "--sp: a layer profile times the layers as they ran, without sequence parallelism; "
            "leave --sp out with --profile");
      c.parallel.sequence_parallel = true;
    }
    if (a.has("--dp")) c.parallel.data = parse_int("--dp", a.get("--dp"), 1, 1 << 20);
    if (a.has("--zero")) {
      c.parallel.zero = parse_int("--zero", a.get("--zero"), 0, 2);
      if (c.parallel.zero > 0 && c.parallel.data < 2)
        throw usage_error("--zero " + a.get("--zero") +
                          " shards over data-parallel replicas; give --dp 2 or more too");
    }
    if (a.has("--layers") && a.has("--layout"))
      throw usage_error("give --layers (counts) or --layout (a layout), not both");
    if (a.has("--layers"))
      c.parallel.layers = parse_int_list("--layers", a.get("--layers"), 0, 1 << 20);
    if (a.has("--layout") && a.get("--layout") != "auto") {
      Layout layout;
      try {
        layout = parse_layout(a.get("--layout"));
      } catch (const invalid_problem& e) {
        // The reader's sentence names the layout ("layout \"...\": ..."); the option says it.
        std::string why = e.what();
        if (why.starts_with("layout ")) why.erase(0, 7);
        throw usage_error("--layout " + why + " (or give --layout auto)");
      }
      if (layout.layers() != m.layers)
        throw usage_error("--layout: its stages hold " + std::to_string(layout.layers()) +
                          " transformer layers but the model has " + std::to_string(m.layers) +
                          "; give every layer a stage, once");
      c.parallel.layers = layout.stage_layers();
    }
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
