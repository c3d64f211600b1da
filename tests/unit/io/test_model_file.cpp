// Models from files: Hugging Face config.json files of public models read into the shapes
// their figures give, mixture-of-experts configs refused, unknown fields named, mistakes
// placed by line and column; pipesched's own model file read strictly and written back.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "hf_configs.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/io/model_file.hpp"

namespace test_model_file {

namespace {

namespace ps = pipesched;

// The parse_error of reading `text`, or a failure when there is none.
std::string refusal(const std::string& text, const ps::ModelReadOptions& options = {}) {
  try {
    ps::read_model(text, "config.json", options);
  } catch (const ps::parse_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read without an error: " << text;
  return "";
}

TEST(ModelFile, Llama3_8B) {
  const ps::ModelFile f = ps::read_model(hf_configs::llama3_8b, "config.json");
  EXPECT_EQ(f.family, "llama");
  EXPECT_EQ(f.model.layers, 32);
  EXPECT_EQ(f.model.hidden, 4096);
  EXPECT_EQ(f.model.heads, 32);
  EXPECT_EQ(f.model.kv_heads, 8);
  EXPECT_EQ(f.model.ffn_hidden, 14336);
  EXPECT_TRUE(f.model.gated_mlp);
  EXPECT_EQ(f.model.sequence, 8192);
  EXPECT_EQ(f.model.vocabulary, 128256);
  EXPECT_FALSE(f.model.tied_embeddings);
  EXPECT_FALSE(f.model.dropout);  // attention_dropout 0.0
  EXPECT_EQ(f.model.microbatch_size, 1);
  EXPECT_EQ(f.model.bytes_per_value, 2);
  EXPECT_TRUE(f.model.flash_attention);
  // Every key of the released config is read or known to be irrelevant: no note.
  EXPECT_TRUE(f.notes.empty()) << f.notes.front();
  // About 8.0e9 weights (the name's 8B), embedding and LM head untied.
  EXPECT_NEAR(f.model.parameters() / 1e9, 8.03, 0.01);
}

TEST(ModelFile, Mistral7BCapsTheSequenceAtItsSlidingWindow) {
  ps::ModelFile f = ps::read_model(hf_configs::mistral_7b, "config.json");
  EXPECT_EQ(f.family, "mistral");
  EXPECT_EQ(f.model.layers, 32);
  EXPECT_EQ(f.model.hidden, 4096);
  EXPECT_EQ(f.model.kv_heads, 8);
  EXPECT_EQ(f.model.ffn_hidden, 14336);
  EXPECT_EQ(f.model.vocabulary, 32000);
  EXPECT_TRUE(f.model.gated_mlp);
  EXPECT_FALSE(f.model.dropout);
  EXPECT_EQ(f.sliding_window, 4096);
  EXPECT_EQ(f.model.sequence, 4096);  // not the 32768 positions
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("sliding window"), std::string::npos) << f.notes[0];
  // A shorter sequence is taken; a longer one than the window is refused at the window.
  f = ps::read_model(hf_configs::mistral_7b, "config.json", {.sequence = 2048});
  EXPECT_EQ(f.model.sequence, 2048);
  const std::string e = refusal(hf_configs::mistral_7b, {.sequence = 8192});
  EXPECT_NE(e.find("config.json: line 16, column 21: the sequence of 8192 tokens"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("at most 4096 tokens"), std::string::npos) << e;
}

TEST(ModelFile, Qwen2_7BIgnoresAnUnusedWindow) {
  const ps::ModelFile f = ps::read_model(hf_configs::qwen2_7b, "config.json");
  EXPECT_EQ(f.family, "qwen2");
  EXPECT_EQ(f.model.layers, 28);
  EXPECT_EQ(f.model.hidden, 3584);
  EXPECT_EQ(f.model.heads, 28);
  EXPECT_EQ(f.model.kv_heads, 4);
  EXPECT_EQ(f.model.ffn_hidden, 18944);
  EXPECT_EQ(f.model.vocabulary, 152064);
  EXPECT_EQ(f.model.sequence, 131072);  // use_sliding_window: false
  EXPECT_EQ(f.sliding_window, 0);
  EXPECT_TRUE(f.notes.empty());
}

TEST(ModelFile, Gpt2IsTiedWithDropoutAndAPlainMlp) {
  const ps::ModelFile f = ps::read_model(hf_configs::gpt2, "config.json");
  EXPECT_EQ(f.family, "gpt2");
  EXPECT_EQ(f.model.layers, 12);
  EXPECT_EQ(f.model.hidden, 768);
  EXPECT_EQ(f.model.heads, 12);
  EXPECT_EQ(f.model.ffn_hidden, 0);  // n_inner absent: 4 x hidden
  EXPECT_EQ(f.model.ffn(), 3072);
  EXPECT_FALSE(f.model.gated_mlp);
  EXPECT_EQ(f.model.sequence, 1024);
  EXPECT_EQ(f.model.vocabulary, 50257);
  EXPECT_TRUE(f.model.tied_embeddings);
  EXPECT_TRUE(f.model.dropout);  // resid/embd/attn_pdrop 0.1
  EXPECT_TRUE(f.notes.empty()) << f.notes.front();
}

TEST(ModelFile, PythiaGptNeoX) {
  const ps::ModelFile f = ps::read_model(hf_configs::pythia_1b, "config.json");
  EXPECT_EQ(f.family, "gpt_neox");
  EXPECT_EQ(f.model.layers, 16);
  EXPECT_EQ(f.model.hidden, 2048);
  EXPECT_EQ(f.model.heads, 8);
  EXPECT_EQ(f.model.ffn_hidden, 8192);
  EXPECT_FALSE(f.model.gated_mlp);
  EXPECT_EQ(f.model.sequence, 2048);
  EXPECT_EQ(f.model.vocabulary, 50304);
  EXPECT_FALSE(f.model.tied_embeddings);
  EXPECT_FALSE(f.model.dropout);
  EXPECT_TRUE(f.notes.empty()) << f.notes.front();
}

TEST(ModelFile, MixtureOfExpertsIsRefusedWithTheReason) {
  std::string e = refusal(hf_configs::mixtral_8x7b);
  EXPECT_NE(e.find("config.json: line 11, column 17: field \"model_type\" is \"mixtral\""),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("mixture-of-experts"), std::string::npos) << e;
  EXPECT_NE(e.find("no expert layers"), std::string::npos) << e;
  // An expert count in a family pipesched reads is refused too, at the count.
  e = refusal(R"({"model_type": "qwen2", "num_experts": 60, "hidden_size": 8})");
  EXPECT_NE(e.find("line 1, column 40: field \"num_experts\" is 60"), std::string::npos) << e;
}

// Experts nested in a sub-config (multimodal and wrapper configs nest their language model's
// config) are found too: they passed as a dense model.
TEST(ModelFile, ExpertsInANestedSubConfigAreRefused) {
  for (const char* nest : {"text_config", "language_config", "llm_config", "language_model"}) {
    SCOPED_TRACE(nest);
    std::string text = hf_configs::llama3_8b;
    text.insert(text.find("\"vocab_size\""), std::string("\"") + nest +
                                                 "\": {\"hidden_size\": 4096, "
                                                 "\"num_local_experts\": 16}, ");
    const std::string e = refusal(text);
    EXPECT_NE(e.find(std::string("field \"") + nest + ".num_local_experts\" is 16"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(std::string("with experts in its nested \"") + nest + "\""), std::string::npos)
        << e;
    EXPECT_NE(e.find("no expert layers"), std::string::npos) << e;
  }
  // Deeper, and as a mixture-of-experts model_type of the nested config.
  std::string text = hf_configs::llama3_8b;
  text.insert(text.find("\"vocab_size\""),
              "\"thinker_config\": {\"text_config\": {\"model_type\": \"qwen3_moe\"}}, ");
  std::string e = refusal(text);
  EXPECT_NE(e.find("field \"thinker_config.text_config.model_type\" is \"qwen3_moe\""),
            std::string::npos)
      << e;
  // A nested object without experts (rope scaling, a dense text config) is no refusal.
  text = hf_configs::llama3_8b;
  text.insert(text.find("\"vocab_size\""),
              "\"text_config\": {\"num_experts\": 0, \"moe_layers\": null}, ");
  EXPECT_NO_THROW(ps::read_model(text, "config.json"));
}

// Dimensions are bounded so that everything derived from them is representable: a width of
// 536,870,912 made 4 × hidden overflow an int (the MLP width came out negative).
TEST(ModelFile, DimensionsBeyondAnyModelAreRefused) {
  std::string e = refusal(R"({"layers": 2, "hidden": 536870912, "heads": 8, "sequence": 1024,
                              "vocabulary": 50257})");
  EXPECT_NE(e.find("field \"hidden\" is 536870912; the model width is from 1 to 1048576"),
            std::string::npos)
      << e;
  e = refusal(R"({"model_type": "llama", "num_hidden_layers": 100000, "hidden_size": 4096,
                  "num_attention_heads": 32, "intermediate_size": 11008,
                  "max_position_embeddings": 4096, "vocab_size": 32000})");
  EXPECT_NE(e.find("field \"num_hidden_layers\" is 100000; a model's layer count is from 1 to "
                   "16384"),
            std::string::npos)
      << e;
  e = refusal(R"({"layers": 2, "hidden": 512, "heads": 8, "sequence": 1024,
                  "vocabulary": 2000000000})");
  EXPECT_NE(e.find("the vocabulary size is from 1 to 16777216"), std::string::npos) << e;
  e = refusal(R"({"layers": 2, "hidden": 512, "heads": 8, "sequence": 1024, "vocabulary": 100,
                  "ffn_hidden": 2000000000})");
  EXPECT_NE(e.find("field \"ffn_hidden\" is 2000000000; use 0 (= 4 × hidden) or a width from 1 "
                   "to 4194304"),
            std::string::npos)
      << e;
  // The largest width accepted: its MLP width, 4 × hidden, is exact.
  ps::ModelShape m;
  m.layers = 1;
  m.hidden = ps::ModelShape::max_hidden;
  m.heads = 1;
  m.sequence = 1;
  m.vocabulary = 1;
  EXPECT_NO_THROW(m.check());
  EXPECT_EQ(m.ffn(), 4LL * ps::ModelShape::max_hidden);
  m.hidden = 536870912;  // beyond the bound: still computed without overflow
  EXPECT_EQ(m.ffn(), 2147483648LL);
  EXPECT_THROW(m.check(), ps::invalid_argument);
}

TEST(ModelFile, UnknownFieldsAreNamedInOneNoteAndIrrelevantOnesAreNot) {
  std::string text = hf_configs::llama3_8b;
  text.insert(text.find("\"vocab_size\""), "\"frobnicate\": 3, \"n_embd\": 4096, ");
  const ps::ModelFile f = ps::read_model(text, "config.json");
  ASSERT_EQ(f.notes.size(), 1u);
  const std::string& note = f.notes[0];
  EXPECT_NE(note.find("ignored 2 fields"), std::string::npos) << note;
  // GPT-2's width key means nothing in a Llama config: it is named, as is the unknown one.
  EXPECT_NE(note.find("\"frobnicate\" and \"n_embd\""), std::string::npos) << note;
  for (const char* quiet : {"rope_theta", "torch_dtype", "bos_token_id", "rms_norm_eps"})
    EXPECT_EQ(note.find(quiet), std::string::npos) << quiet << " in " << note;
}

TEST(ModelFile, MistakesAreOneSentenceWithLineAndColumn) {
  std::string text = hf_configs::llama3_8b;
  text.replace(text.find("4096"), 4, "\"4096\"");
  std::string e = refusal(text);
  EXPECT_EQ(e,
            "config.json: line 8, column 18: field \"hidden_size\" is \"4096\" (a string); it is a "
            "whole number, 1 or more (the model width).");
  text = hf_configs::llama3_8b;
  text.replace(text.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": 0");
  e = refusal(text);
  EXPECT_NE(e.find("line 20, column 26: field \"tie_word_embeddings\" is 0; it is true or false"),
            std::string::npos)
      << e;
  text = hf_configs::llama3_8b;
  text.replace(text.find("\"num_key_value_heads\": 8"), 24, "\"num_key_value_heads\": 7");
  e = refusal(text);
  EXPECT_NE(e.find("line 15, column 26: field \"num_key_value_heads\" is 7; use 0 (= heads) or a "
                   "divisor of heads = 32"),
            std::string::npos)
      << e;
  text = hf_configs::llama3_8b;
  text.replace(text.find("\"vocab_size\": 128256"), 20, "\"vocab\": 128256");
  e = refusal(text);
  EXPECT_NE(e.find("line 1, column 1: field \"vocab_size\" is missing"), std::string::npos) << e;
  e = refusal(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    "head_dim": 256, "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 8,
    "max_position_embeddings": 8})");
  EXPECT_NE(e.find("line 2, column 17: field \"head_dim\" is 256; the cost model takes the head "
                   "size as hidden / heads = 128"),
            std::string::npos)
      << e;
  e = refusal(R"({"model_type": "falcon", "hidden_size": 8})");
  EXPECT_NE(e.find("model_type \"falcon\" is not a family pipesched reads"), std::string::npos)
      << e;
}

TEST(ModelFile, PipeschedModelFileIsStrict) {
  const std::string base =
      R"({"format": "pipesched-model", "layers": 4, "hidden": 512, "heads": 8, "sequence": 256,
  "vocabulary": 1000)";
  const ps::ModelFile f = ps::read_model(base + "}", "tiny.json");
  EXPECT_EQ(f.family, "pipesched");
  EXPECT_EQ(f.name, "tiny");
  EXPECT_EQ(f.model.layers, 4);
  EXPECT_EQ(f.model.hidden, 512);
  EXPECT_TRUE(f.model.dropout);  // ModelShape's default
  std::string e = refusal(base + R"(, "dropuot": false})");
  EXPECT_NE(e.find("line 2, column 34: unknown field \"dropuot\"; a pipesched model file has "
                   "format, name, description, layers, hidden"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("dropout, tied_embeddings."), std::string::npos) << e;
  e = refusal(base + R"(, "bytes_per_value": 3})");
  EXPECT_NE(e.find("line 2, column 42: field \"bytes_per_value\" is 3; use 1, 2, 4 or 8"),
            std::string::npos)
      << e;
  e = refusal(R"({"layers": 4, "hidden": 512, "heads": 8, "vocabulary": 1000})");
  EXPECT_NE(e.find("field \"sequence\" is missing"), std::string::npos) << e;
  // The sequence may come from the caller instead.
  EXPECT_EQ(ps::read_model(R"({"layers": 4, "hidden": 512, "heads": 8, "vocabulary": 1000})",
                           "m.json", {.sequence = 77})
                .model.sequence,
            77);
  e = refusal(R"([1, 2])");
  EXPECT_NE(e.find("line 1, column 1: the file holds an array; a model is one JSON object"),
            std::string::npos)
      << e;
}

TEST(ModelFile, EveryPresetWrittenReadsBackFieldByField) {
  for (const ps::presets::ModelPreset& p : ps::presets::models()) {
    SCOPED_TRACE(p.name);
    const std::string text = ps::model_json(p.model, p.name, p.description);
    const ps::ModelFile f = ps::read_model(text, p.name + ".json");
    const ps::ModelShape &a = f.model, &b = p.model;
    EXPECT_EQ(f.name, p.name);
    EXPECT_EQ(f.description, p.description);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.hidden, b.hidden);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.kv_heads, b.kv_heads);
    EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
    EXPECT_EQ(a.gated_mlp, b.gated_mlp);
    EXPECT_EQ(a.sequence, b.sequence);
    EXPECT_EQ(a.vocabulary, b.vocabulary);
    EXPECT_EQ(a.microbatch_size, b.microbatch_size);
    EXPECT_EQ(a.bytes_per_value, b.bytes_per_value);
    EXPECT_EQ(a.flash_attention, b.flash_attention);
    EXPECT_EQ(a.dropout, b.dropout);
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
    EXPECT_TRUE(f.notes.empty());
  }
  // Every field is written, the booleans changed from their defaults included.
  ps::ModelShape m = ps::presets::find_model("llama2-7b");
  m.dropout = !m.dropout;
  m.tied_embeddings = !m.tied_embeddings;
  m.flash_attention = !m.flash_attention;
  m.microbatch_size = 3;
  m.bytes_per_value = 4;
  const ps::ModelShape back = ps::read_model(ps::model_json(m, "x")).model;
  EXPECT_EQ(back.dropout, m.dropout);
  EXPECT_EQ(back.tied_embeddings, m.tied_embeddings);
  EXPECT_EQ(back.flash_attention, m.flash_attention);
  EXPECT_EQ(back.microbatch_size, 3);
  EXPECT_EQ(back.bytes_per_value, 4);
}

TEST(ModelFile, UnreadableFileNamesThePath) {
  try {
    ps::read_model_file("/nonexistent/config.json");
    FAIL();
  } catch (const ps::error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read model file \"/nonexistent/config.json\""),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

}  // namespace test_model_file

// ---- Layer profile files ----

namespace test_model_file {

namespace {

ps::LayerProfile small_profile() {
  ps::ModelShape m = ps::presets::find_model("gpt3-1.3b");
  std::vector<ps::LayerSample> s;
  double x = 0.001;
  for (ps::LayerPart part : {ps::LayerPart::First, ps::LayerPart::Layer, ps::LayerPart::Last})
    for (int t : {128, 256})
      for (int o : {0, 256}) {
        x *= 1.37;  // figures no short decimal writes exactly
        s.push_back({part, {1, 1, t, o}, {x, 2 * x, 3 * x, x / 3, 1e6 * x, 5e5 * x, 1e5 * x}});
      }
  return ps::LayerProfile(m, "a \"quoted\" GPU", std::move(s));
}

std::string profile_error(const std::string& text) {
  try {
    (void)ps::read_layer_profile(text, "prof.json");
  } catch (const ps::parse_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(LayerProfileFile, WrittenAndReadBackIsTheSameProfile) {
  const ps::LayerProfile p = small_profile();
  for (bool lines : {true, false}) {
    const std::string text = ps::layer_profile_json(p, lines);
    const ps::LayerProfile q = ps::read_layer_profile(text, "prof.json");
    EXPECT_EQ(q.device(), p.device());
    EXPECT_EQ(q.model().hidden, p.model().hidden);
    EXPECT_EQ(q.model().vocabulary, p.model().vocabulary);
    ASSERT_EQ(q.samples().size(), p.samples().size());
    for (std::size_t n = 0; n < p.samples().size(); ++n) {
      EXPECT_EQ(q.samples()[n].part, p.samples()[n].part);
      EXPECT_EQ(q.samples()[n].at, p.samples()[n].at);
      EXPECT_EQ(q.samples()[n].figures, p.samples()[n].figures);  // bit for bit
    }
    EXPECT_EQ(ps::layer_profile_json(q, lines), text);
  }
}

TEST(LayerProfileFile, MalformedFilesAreRefusedWithTheLineAndWhatIsWanted) {
  const std::string good = ps::layer_profile_json(small_profile());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  std::string m = profile_error("{\"format\": \"pipesched-layer-profile\"");
  EXPECT_NE(m.find("prof.json: line 1"), std::string::npos) << m;
  m = profile_error(with("\"format\": \"pipesched-layer-profile\"", "\"format\": \"x\""));
  EXPECT_NE(m.find("a layer profile says \"pipesched-layer-profile\""), std::string::npos) << m;
  m = profile_error(with("\"part\":\"layer\"", "\"part\":\"block\""));
  EXPECT_NE(m.find("sample 4"), std::string::npos) << m;
  EXPECT_NE(m.find("\"first\", \"layer\" or \"last\""), std::string::npos) << m;
  m = profile_error(with("\"forward\":", "\"forwards\":"));
  EXPECT_NE(m.find("unknown field \"forwards\""), std::string::npos) << m;
  m = profile_error(with("\"tokens\":256", "\"tokens\":-3"));
  EXPECT_NE(m.find("line 7"), std::string::npos) << m;
  EXPECT_NE(m.find("field \"tokens\" is -3"), std::string::npos) << m;
  m = profile_error(with("\"prefix\":256", "\"prefix\":512"));
  EXPECT_NE(m.find("do not fill their grid"), std::string::npos) << m;
  m = profile_error(with("\"hidden\":2048", "\"hidden\":\"wide\""));
  EXPECT_NE(m.find("field \"hidden\""), std::string::npos) << m;
  m = profile_error(with("\"samples\": [", "\"sample\": 1, \"samples\": ["));
  EXPECT_NE(m.find("unknown field \"sample\""), std::string::npos) << m;
}

}  // namespace test_model_file
