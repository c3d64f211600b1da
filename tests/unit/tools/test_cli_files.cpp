// The command with the user's own model and cluster: --model FILE (a Hugging Face config.json
// or a pipesched model file), --device FILE and --cluster FILE; `list --json` prints presets
// in that file form, and a tune plan's command names the files and reproduces its step time.
#include <filesystem>
#include <fstream>
#include <string>

#include "../io/hf_configs.hpp"
#include "cli_support.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/io/model_file.hpp"

namespace test_cli_files {

namespace {

using namespace cli_test;

// The flat object of `array_key` whose "name" is `name` in `list --json`'s output, as text.
std::string list_entry(const std::string& json, const std::string& array_key,
                       const std::string& name) {
  const std::size_t array = json.find("\"" + array_key + "\":[");
  EXPECT_NE(array, std::string::npos);
  const std::size_t at = json.find("\"name\":\"" + name + "\"", array);
  EXPECT_NE(at, std::string::npos) << name;
  const std::size_t open = json.rfind('{', at), close = json.find('}', at);
  return json.substr(open, close - open + 1);
}

TEST(CliFiles, ListJsonPrintsEveryPresetInTheFileFormThatReadsBack) {
  const CliRun r = run("list --json");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const ps::presets::DevicePreset& p : ps::presets::devices()) {
    SCOPED_TRACE(p.name);
    const std::string file = write(p.name + ".json", list_entry(r.out, "devices", p.name));
    const ps::DeviceSpec d = ps::read_device_file(file).device, &want = p.device;
    EXPECT_EQ(d.name, want.name);
    EXPECT_EQ(d.peak_flops, want.peak_flops);
    EXPECT_EQ(d.memory_bandwidth, want.memory_bandwidth);
    EXPECT_EQ(d.memory_bytes, want.memory_bytes);
    EXPECT_EQ(d.link_bandwidth, want.link_bandwidth);
    EXPECT_EQ(d.link_latency, want.link_latency);
    EXPECT_EQ(d.ranks_per_node, want.ranks_per_node);
    EXPECT_EQ(d.node_link_bandwidth, want.node_link_bandwidth);
    EXPECT_EQ(d.node_link_latency, want.node_link_latency);
    EXPECT_EQ(d.node_ports, want.node_ports);
    EXPECT_EQ(d.peer_to_peer, want.peer_to_peer);
    EXPECT_EQ(d.memory_reserve, want.memory_reserve);
    EXPECT_EQ(d.action_overhead, want.action_overhead);
    EXPECT_EQ(d.max_efficiency, want.max_efficiency);
    EXPECT_EQ(d.half_flops, want.half_flops);
  }
  for (const ps::presets::ModelPreset& p : ps::presets::models()) {
    SCOPED_TRACE(p.name);
    const std::string file = write(p.name + ".json", list_entry(r.out, "models", p.name));
    const ps::ModelShape m = ps::read_model_file(file).model, &want = p.model;
    EXPECT_EQ(m.layers, want.layers);
    EXPECT_EQ(m.hidden, want.hidden);
    EXPECT_EQ(m.heads, want.heads);
    EXPECT_EQ(m.kv_heads, want.kv_heads);
    EXPECT_EQ(m.ffn_hidden, want.ffn_hidden);
    EXPECT_EQ(m.gated_mlp, want.gated_mlp);
    EXPECT_EQ(m.sequence, want.sequence);
    EXPECT_EQ(m.vocabulary, want.vocabulary);
    EXPECT_EQ(m.microbatch_size, want.microbatch_size);
    EXPECT_EQ(m.bytes_per_value, want.bytes_per_value);
    EXPECT_EQ(m.flash_attention, want.flash_attention);
    EXPECT_EQ(m.dropout, want.dropout);
    EXPECT_EQ(m.tied_embeddings, want.tied_embeddings);
  }
  // The files stand for the presets on the command line too: the same simulation.
  const std::string model = (scratch() / "llama2-7b.json").string();
  const std::string device = (scratch() / "rtx-4090.json").string();
  const std::string sim = "simulate --json --schedule 1f1b --ranks 4 --microbatches 8 ";
  const CliRun by_name = run(sim + "--model llama2-7b --device rtx-4090");
  const CliRun by_file = run(sim + "--model '" + model + "' --device '" + device + "'");
  ASSERT_EQ(by_name.code, 0) << by_name.err;
  ASSERT_EQ(by_file.code, 0) << by_file.err;
  EXPECT_EQ(by_file.out, by_name.out);
}

TEST(CliFiles, TuneAClusterFromFilesAndRunItsPlansCommand) {
  const std::string config = write("config.json", hf_configs::llama3_8b);
  const std::string cluster =
      write("it's my cluster.json",
            R"({"format": "pipesched-cluster", "name": "lab", "base": "h100", "gpus": 64,
          "memory_reserve": 4e9})");
  // The cluster's path as one shell word: in single quotes, its own ' written '\''.
  std::string quoted_cluster = cluster;
  quoted_cluster.replace(quoted_cluster.find('\''), 1, "'\\''");
  quoted_cluster = "'" + quoted_cluster + "'";
  const std::string files = " --model '" + config + "' --cluster " + quoted_cluster;
  const CliRun r = run("tune --gpus 64" + files + " --global-batch 64 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;  // every key of the config known
  const ps::test_json::Json doc = ps::test_json::parse_json(r.out);
  const ps::test_json::Json& best = doc.at("best");
  EXPECT_EQ(best.at("pp").number * best.at("dp").number * best.at("tp").number, 64);
  const std::string command = best.at("command").string;
  // It names the files, quoted for the shell where they need it (a blank, a quote).
  EXPECT_NE(command.find("--model " + config + " "), std::string::npos) << command;
  EXPECT_NE(command.find("--cluster " + quoted_cluster + " "), std::string::npos) << command;
  ASSERT_EQ(command.rfind("pipesched simulate ", 0), 0u) << command;
  const CliRun sim = run(command.substr(std::string("pipesched ").size()) + " --json");
  ASSERT_EQ(sim.code, 0) << command << "\n" << sim.err;
  EXPECT_DOUBLE_EQ(json_field(sim.out, "makespan"), best.at("step_time_s").number);
  // The cluster file's count is the default of --gpus, and the same search.
  const CliRun implied = run("tune" + files + " --global-batch 64 --json");
  ASSERT_EQ(implied.code, 0) << implied.err;
  EXPECT_DOUBLE_EQ(ps::test_json::parse_json(implied.out).at("best").at("step_time_s").number,
                   best.at("step_time_s").number);
}

TEST(CliFiles, RefusalsAreOneSentence) {
  const std::string config = write("config.json", hf_configs::llama3_8b);
  const std::string cluster = write("c.json", R"({"base": "h100", "gpus": 64})");
  const std::string sim =
      "simulate --schedule 1f1b --ranks 2 --microbatches 4 --model '" + config + "' ";
  CliRun r = run(sim + "--device h100 --cluster '" + cluster + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("give --device (one device) or --cluster"), std::string::npos) << r.err;
  r = run("tune --gpus 32 --global-batch 64 --model '" + config + "' --cluster '" + cluster + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpus 32 but the cluster file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has \"gpus\": 64"), std::string::npos) << r.err;
  // A mixture of experts, a type error, an unknown field: the file, line and column.
  const std::string moe = write("mixtral.json", hf_configs::mixtral_8x7b);
  r = run("simulate --schedule 1f1b --ranks 2 --microbatches 4 --model '" + moe +
          "' --device h100");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(moe + ": line 11, column 17: field \"model_type\" is \"mixtral\""),
            std::string::npos)
      << r.err;
  const std::string bad = write("bad.json", R"({"base": "h100", "link_latency": "5us"})");
  r = run(sim + "--device '" + bad + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(bad + ": line 1, column 34: field \"link_latency\" is \"5us\" (a string)"),
            std::string::npos)
      << r.err;
  std::string text = hf_configs::gpt2;
  text.insert(1, "\"n_embed\": 768, ");
  const std::string odd = write("gpt2.json", text);
  r = run("simulate --schedule 1f1b --ranks 2 --microbatches 4 --model '" + odd +
          "' --device h100");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: " + odd +
                       ": ignored 1 field that pipesched does not read in a "
                       "gpt2 config: \"n_embed\""),
            std::string::npos)
      << r.err;
  r = run(sim + "--device '" + (scratch() / "absent.json").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot read device file"), std::string::npos) << r.err;
  r = run(sim + "--device h1000");
  EXPECT_NE(r.err.find("unknown device 'h1000'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Or give a device file"), std::string::npos) << r.err;
  expect_no_cxx_words(r.err);
}

}  // namespace

}  // namespace test_cli_files
