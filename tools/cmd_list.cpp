// pipesched list: the schedules, placements, policies and cost-model presets, as text or JSON.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/model_file.hpp"

namespace pipesched::cli {

namespace {

struct Entry {
  std::string name;
  std::string summary;
};

// One table per policy, shared by the text and the JSON form.
const std::vector<Entry> placements = {
    {"linear", "one stage per rank: stage s on rank s"},
    {"interleaved", "looped: rank r holds stages r, r+p, r+2p, ..."},
    {"v-shape", "zig-zag: rank r holds stages r and 2p-1-r (and so on)"},
};
// Every checkpoint policy of the registry, its summary from its tag; one that does not run
// on every order says which it runs on, from the orders' own facts (Mario: mario_applies).
std::vector<Entry> checkpoint_entries() {
  std::vector<Entry> out;
  for (const CheckpointInfo& c : pipesched::checkpoint_policies()) {
    std::string summary(c.summary);
    const std::string on =
        builtin_names([&](const GeneratorInfo& g) { return c.runs_on(g); }, ", ");
    if (on != builtin_names([](const GeneratorInfo&) { return true; }, ", "))
      summary += " (" + on + ")";
    out.push_back({std::string(c.name), summary});
  }
  return out;
}
const std::vector<Entry> slicing_policies = {
    {"whole", "whole sequences (one slice per microbatch, --slices 1)"},
    {"uniform", "K slices of equal length, the last taking the remainder (the default)"},
    {"balanced",
     "K slices of equal forward time under causal attention: later slices shorter (--model)"},
    {"terapipe", "K slices minimising TeraPipe's sum + (p-1) x slowest slice time (--model)"},
};
const std::vector<Entry> wgrad_policies = {
    {"fused", "one backward action B"},
    {"split", "input gradient I, then weight gradient W (Zero Bubble)"},
    {"fine", "split, each W cut into --wgrad-parts parts run where a rank would wait (MEPipe)"},
};

std::vector<const char*> wgrad_modes_of(const GeneratorFacts& g) {
  std::vector<const char*> modes;
  if (g.fused) modes.push_back("fused");
  if (g.split) {
    modes.push_back("split");
    modes.push_back("fine");
  }
  return modes;
}

void print_entries(const char* heading, const std::vector<Entry>& entries) {
  std::printf("\n%s:\n", heading);
  for (const Entry& e : entries)
    std::printf("  %-18s %s\n", e.name.c_str(), e.summary.c_str());
}

std::string list_json() {
  json::Writer w;
  w.begin_object().key("schedules").begin_array();
  for (const GeneratorFacts& g : generator_facts()) {
    w.begin_object()
        .field("name", g.name)
        .field("summary", g.summary)
        .field("placement", g.placement)
        .field("chunks", g.default_chunks)
        .field("chunks_vary", g.chunks_vary)
        .field("slices", g.slices)
        .field("warmup", g.warmup)
        .field("mario", g.mario)
        .key("wgrad")
        .begin_array();
    for (const char* m : wgrad_modes_of(g))
      w.value(m);
    w.end_array().field("default_wgrad", g.default_wgrad).end_object();
  }
  w.end_array();
  auto entries = [&](const char* key, const std::vector<Entry>& list) {
    w.key(key).begin_array();
    for (const Entry& e : list)
      w.begin_object().field("name", e.name).field("summary", e.summary).end_object();
    w.end_array();
  };
  entries("placements", placements);
  entries("checkpoint", checkpoint_entries());
  entries("slicing", slicing_policies);
  entries("wgrad", wgrad_policies);
  // Each preset exactly as a model or device file holds it (io/model_file.hpp,
  // io/device_file.hpp): saved and edited, it goes back to --model, --device or --cluster.
  w.key("models").begin_array();
  for (const auto& m : presets::models())
    write_model(w, m.model, m.name, m.description);
  w.end_array().key("devices").begin_array();
  for (const auto& d : presets::devices())
    write_device(w, d.device, d.description);
  w.end_array().end_object();
  return w.take() + "\n";
}

}  // namespace

int cmd_list(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"--json", false,
       "print one JSON object (schema: docs/cli.md); each model and device preset in the form "
       "of a model or device file"},
  };
  if (wants_help(argv)) {
    std::cout << help_text("pipesched list [--json]",
                           "Lists the schedules, placements, policies and cost-model presets.",
                           specs);
    return exit_ok;
  }
  const Args a = parse_args("list", argv, specs, 0);
  if (a.has("--json")) {
    std::cout << list_json();
    return exit_ok;
  }
  std::printf("schedules (--schedule):\n");
  for (const GeneratorFacts& g : generator_facts()) {
    std::string modes;
    for (const char* m : wgrad_modes_of(g))
      modes += (modes.empty() ? "" : "|") + std::string(m);
    std::printf("  %-18s %s [%s%s%s%s; wgrad: %s%s]\n", g.name.c_str(), g.summary.c_str(),
                g.placement.c_str(), g.chunks_vary ? ", --chunks" : "",
                g.slices ? ", --slices" : "", g.warmup ? ", --warmup" : "", modes.c_str(),
                g.mario ? "; mario" : "");
  }
  print_entries("placements", placements);
  print_entries("checkpoint policies (--checkpoint)", checkpoint_entries());
  print_entries("slicing policies (--slices K, --slicing)", slicing_policies);
  print_entries("wgrad policies (--wgrad)", wgrad_policies);
  std::printf("\nmodels (--model NAME, or a model file or Hugging Face config.json):\n");
  for (const auto& m : presets::models())
    std::printf("  %-18s %s\n", m.name.c_str(), m.description.c_str());
  std::printf("\ndevices (--device NAME, or a device file; --cluster FILE):\n");
  for (const auto& d : presets::devices())
    std::printf("  %-18s %s\n", d.name.c_str(), d.description.c_str());
  return exit_ok;
}

}  // namespace pipesched::cli
