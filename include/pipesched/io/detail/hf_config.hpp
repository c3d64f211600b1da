// Reading a Hugging Face config.json of a dense decoder into a ModelShape (io/model_file.hpp's
// read_model): the family from "model_type" (or "architectures"), each family's keys, the
// mixture-of-experts configs refused, and the keys that do not change what pipesched counts
// (hf_config_ignored_fields) kept apart from the ones it does not know.
#pragma once

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/io/detail/model_fields.hpp"
#include "pipesched/io/detail/spec_json.hpp"
#include "pipesched/io/json_read.hpp"

namespace pipesched {

//! What a key of a Hugging Face config sets.
enum class HfRole {
  Layers,          //!< ModelShape::layers
  Hidden,          //!< ModelShape::hidden
  Heads,           //!< ModelShape::heads
  KvHeads,         //!< ModelShape::kv_heads
  Ffn,             //!< ModelShape::ffn_hidden (null: 4 x hidden)
  Positions,       //!< ModelShape::sequence unless the caller gives one
  Vocabulary,      //!< ModelShape::vocabulary
  Tied,            //!< ModelShape::tied_embeddings
  Dropout,         //!< a dropout probability: ModelShape::dropout when any is above 0
  HeadDim,         //!< must be hidden / heads (the model's head size)
  Window,          //!< a sliding attention window: the sequence is at most this
  UseWindow,       //!< false: the window is not used (Qwen2)
  Activation,      //!< a string; the family decides whether the MLP is gated
  CrossAttention,  //!< must be false (no cross-attention layers in the cost model)
};

//! One key a family reads.
struct HfField {
  const char* key;  //!< the config's key
  HfRole role;      //!< what it sets
  bool required;    //!< the config must give it
};

//! The keys a family of Hugging Face configs reads: "llama" (also mistral, qwen2), "gpt2" or
//! "gpt_neox". Llama-family MLPs are gated (gate, up and down projections, whatever
//! "hidden_act" says); GPT-2's and GPT-NeoX's are not.
inline const std::vector<HfField>& hf_config_fields(std::string_view family) {
  using R = HfRole;
  static const std::vector<HfField> llama = {
      {"num_hidden_layers", R::Layers, true},
      {"hidden_size", R::Hidden, true},
      {"num_attention_heads", R::Heads, true},
      {"num_key_value_heads", R::KvHeads, false},
      {"intermediate_size", R::Ffn, true},
      {"max_position_embeddings", R::Positions, false},
      {"vocab_size", R::Vocabulary, true},
      {"tie_word_embeddings", R::Tied, false},
      {"attention_dropout", R::Dropout, false},
      {"hidden_dropout", R::Dropout, false},
      {"head_dim", R::HeadDim, false},
      {"sliding_window", R::Window, false},
      {"use_sliding_window", R::UseWindow, false},
      {"hidden_act", R::Activation, false},
  };
  static const std::vector<HfField> gpt2 = {
      {"n_layer", R::Layers, true},
      {"n_embd", R::Hidden, true},
      {"n_head", R::Heads, true},
      {"n_inner", R::Ffn, false},
      {"n_positions", R::Positions, false},
      {"n_ctx", R::Positions, false},
      {"vocab_size", R::Vocabulary, true},
      {"tie_word_embeddings", R::Tied, false},
      {"resid_pdrop", R::Dropout, false},
      {"embd_pdrop", R::Dropout, false},
      {"attn_pdrop", R::Dropout, false},
      {"activation_function", R::Activation, false},
      {"add_cross_attention", R::CrossAttention, false},
  };
  static const std::vector<HfField> neox = {
      {"num_hidden_layers", R::Layers, true},           {"hidden_size", R::Hidden, true},
      {"num_attention_heads", R::Heads, true},          {"intermediate_size", R::Ffn, true},
      {"max_position_embeddings", R::Positions, false}, {"vocab_size", R::Vocabulary, true},
      {"tie_word_embeddings", R::Tied, false},          {"hidden_dropout", R::Dropout, false},
      {"attention_dropout", R::Dropout, false},         {"hidden_act", R::Activation, false},
  };
  static const std::vector<HfField> none;
  if (family == "llama" || family == "mistral" || family == "qwen2") return llama;
  if (family == "gpt2") return gpt2;
  if (family == "gpt_neox") return neox;
  return none;
}

//! Keys of Hugging Face configs that do not change what pipesched counts (token ids, norm
//! epsilons, rotary embedding bases and scaling, initialisation, biases, the checkpoint's
//! storage type, library bookkeeping): read_model ignores them without a note. Any other key
//! a family does not read is named in one of ModelFile::notes.
inline const std::vector<std::string_view>& hf_config_ignored_fields() {
  static const std::vector<std::string_view> list = {
      // bookkeeping and generation
      "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
      "dtype", "auto_map", "tokenizer_class", "bos_token_id", "eos_token_id", "pad_token_id",
      "sep_token_id", "decoder_start_token_id", "use_cache", "output_attentions",
      "output_hidden_states", "return_dict", "torchscript", "task_specific_params", "id2label",
      "label2id", "problem_type", "initializer_range",
      // norms, positions, biases: no FLOPs or activations the cost model counts
      "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "rope_scaling",
      "rotary_pct", "rotary_emb_base", "pretraining_tp", "attention_bias", "mlp_bias",
      "max_window_layers", "use_parallel_residual", "scale_attn_weights",
      "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
      // heads for other tasks than language modelling
      "classifier_dropout", "summary_type", "summary_use_proj", "summary_activation",
      "summary_proj_to_labels", "summary_first_dropout"};
  return list;
}

namespace detail::hf_config {

//! True for a Hugging Face config: it has "model_type" or "architectures", or a width or
//! depth key of a family, and no "format" marker.
inline bool is_hf_config(const json::Value& doc) {
  if (doc.find("format") != nullptr) return false;
  for (const char* key :
       {"model_type", "architectures", "hidden_size", "n_embd", "num_hidden_layers", "n_layer"})
    if (doc.find(key) != nullptr) return true;
  return false;
}

//! Model types of mixture-of-experts models (Hugging Face's names).
inline bool moe_type(std::string_view t) {
  for (const char* m : {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek", "deepseek_v2",
                        "deepseek_v3", "dbrx", "jamba", "olmoe", "phimoe", "granitemoe",
                        "switch_transformers", "nllb_moe", "jetmoe", "gpt_oss", "llama4"})
    if (t == m) return true;
  return false;
}

//! A key that counts experts or configures them, set to something other than none.
inline bool moe_key(const json::Value::Member& m) {
  const bool named = m.key == "num_local_experts" || m.key == "num_experts" ||
                     m.key == "n_routed_experts" || m.key == "n_shared_experts" ||
                     m.key == "num_experts_per_tok" || m.key.starts_with("moe_");
  if (!named || m.value.is_null()) return false;
  if (m.value.kind() == json::Kind::Number) return m.value.number() > 0;
  if (m.value.kind() == json::Kind::Boolean) return m.value.boolean();
  return true;
}

//! The family of the config: its "model_type", else its first architecture's.
inline std::string family_of(const spec_json::Fields& in) {
  if (const json::Value* t = in.find("model_type")) return in.text("model_type", *t, "its family");
  if (const json::Value* a = in.find("architectures");
      a && a->kind() == json::Kind::Array && !a->array().empty() &&
      a->array().front().kind() == json::Kind::String) {
    const std::string& arch = a->array().front().string();
    for (const auto& [prefix, family] :
         {std::pair{"Llama", "llama"}, std::pair{"Mistral", "mistral"},
          std::pair{"Mixtral", "mixtral"}, std::pair{"Qwen2Moe", "qwen2_moe"},
          std::pair{"Qwen2", "qwen2"}, std::pair{"GPT2", "gpt2"}, std::pair{"GPTNeoX", "gpt_neox"}})
      if (arch.starts_with(prefix)) return family;
    in.fail(a->array().front(), "architecture " + spec_json::shown(a->array().front()) +
                                    " is not one pipesched reads, and the config has no "
                                    "\"model_type\"; it reads llama, mistral, qwen2, gpt2 and "
                                    "gpt_neox configs");
  }
  in.fail(in.object(),
          "the config has neither \"model_type\" nor \"architectures\", so its family is "
          "unknown; add \"model_type\" (llama, mistral, qwen2, gpt2 or gpt_neox)");
}

//! The sequence: the caller's (at most the sliding window), else the config's positions cut
//! to the window (with a note in `out`); `positions` is 0 when the config gives none.
inline int sequence_of(const spec_json::Fields& in, ModelFile& out, int positions,
                       const ModelReadOptions& options) {
  const std::string window_why =
      "; pipesched's cost model counts full causal attention, which a windowed model does not "
      "compute beyond its window";
  if (options.sequence > 0) {
    if (out.sliding_window > 0 && options.sequence > out.sliding_window)
      in.fail(*in.find("sliding_window"),
              "the sequence of " + std::to_string(options.sequence) +
                  " tokens asked for is longer than the model's sliding window of " +
                  std::to_string(out.sliding_window) + " tokens (\"sliding_window\")" + window_why +
                  "; give a sequence of at most " + std::to_string(out.sliding_window) + " tokens");
    return options.sequence;
  }
  if (positions == 0)
    in.need(out.family == "gpt2" ? "n_positions" : "max_position_embeddings",
            "it is the sequence length, unless one is given (the command's --sequence)");
  if (out.sliding_window == 0 || positions <= out.sliding_window) return positions;
  out.notes.push_back(in.source() + ": the sequence is " + std::to_string(out.sliding_window) +
                      " tokens, the model's sliding window, not its " + std::to_string(positions) +
                      " positions" + window_why + ".");
  return out.sliding_window;
}

//! The note naming the keys of the config that `family` does not read and that are not known
//! to be irrelevant (hf_config_ignored_fields); empty when there are none.
inline std::string unknown_note(const spec_json::Fields& in, const std::string& family,
                                const std::vector<HfField>& keys) {
  std::vector<std::string> unknown;
  const auto& ignored = hf_config_ignored_fields();
  for (const json::Value::Member& m : in.object().object()) {
    if (std::any_of(keys.begin(), keys.end(), [&](const HfField& f) { return m.key == f.key; }) ||
        std::find(ignored.begin(), ignored.end(), m.key) != ignored.end())
      continue;
    unknown.push_back("\"" + m.key + "\"");
  }
  if (unknown.empty()) return "";
  return in.source() + ": ignored " + std::to_string(unknown.size()) + " field" +
         (unknown.size() == 1 ? "" : "s") + " that pipesched does not read in a " + family +
         " config: " + spec_json::listed(unknown) +
         "; if one changes the model's shape or cost, the plan leaves it out.";
}

//! The member of `object`, or of an object nested in it at most `depth` levels down, that
//! makes the model a mixture of experts: an expert key (moe_key) or a "model_type" of one
//! (moe_type). Multimodal and wrapper configs nest their language model's config under
//! "text_config", "language_config", "language_model", "llm_config", "thinker_config" and
//! the like, so every nested object is looked into. `path` gets the member's dotted key
//! ("text_config.num_local_experts"); nullptr when there is none.
inline const json::Value::Member* moe_member(const json::Value& object, std::string& path,
                                             int depth = 4) {
  for (const json::Value::Member& m : object.object())
    if (moe_key(m) || (m.key == "model_type" && m.value.kind() == json::Kind::String &&
                       moe_type(m.value.string()))) {
      path = m.key;
      return &m;
    }
  if (depth == 0) return nullptr;
  for (const json::Value::Member& m : object.object())
    if (m.value.kind() == json::Kind::Object)
      if (const json::Value::Member* inner = moe_member(m.value, path, depth - 1)) {
        path = m.key + "." + path;
        return inner;
      }
  return nullptr;
}

inline ModelFile read(const json::Value& doc, const std::string& source,
                      const ModelReadOptions& options) {
  const spec_json::Fields in(doc, source);
  const std::string family = family_of(in);
  std::string moe_path;
  const json::Value::Member* moe = moe_member(doc, moe_path);
  // A family known from "architectures" alone ("MixtralForCausalLM") is one too.
  if (moe == nullptr && moe_type(family)) moe_path = "architectures";
  if (!moe_path.empty()) {
    const json::Value& at = moe ? moe->value : *in.find("architectures");
    in.fail(at, "field \"" + moe_path + "\" is " + spec_json::shown(at) +
                    ": a mixture-of-experts model (model_type \"" + family + "\"" +
                    (moe_path.find('.') != std::string::npos
                         ? ", with experts in its nested \"" +
                               moe_path.substr(0, moe_path.find('.')) + "\""
                         : std::string()) +
                    "); pipesched's cost model has no expert layers (routing, expert MLPs, their "
                    "all-to-all), so it cannot plan this model");
  }
  const std::vector<HfField>& keys = hf_config_fields(family);
  if (keys.empty())
    in.fail(in.find("model_type") ? *in.find("model_type") : doc,
            "model_type \"" + family +
                "\" is not a family pipesched reads; it reads llama, mistral, qwen2, gpt2 and "
                "gpt_neox configs (or write the shape as a pipesched model file)");
  ModelFile out;
  out.family = family;
  out.model.gated_mlp = family != "gpt2" && family != "gpt_neox";
  out.model.tied_embeddings = family == "gpt2";  // each family's default in transformers
  out.model.dropout = false;
  out.name = source;
  if (const json::Value* n = in.find("_name_or_path"); n && n->kind() == json::Kind::String)
    out.name = n->string();
  model_file::Origins origins;
  auto set = [&](const char* field, const HfField& f, const json::Value& v, int& into, int lo,
                 const char* what) {
    into = in.whole(f.key, v, lo, INT_MAX, what);
    origins.push_back({field, f.key, &v});
  };
  int positions = 0, head_dim = 0, window = 0;
  const json::Value* head_dim_at = nullptr;
  const json::Value* positions_at = nullptr;
  bool use_window = true;
  for (const HfField& f : keys) {
    const json::Value* v = in.find(f.key);
    if (v == nullptr) {
      if (f.required) in.need(f.key, "a " + family + " config gives it");
      continue;
    }
    switch (f.role) {
      case HfRole::Layers:
        set("layers", f, *v, out.model.layers, 1, "transformer layers");
        break;
      case HfRole::Hidden:
        set("hidden", f, *v, out.model.hidden, 1, "the model width");
        break;
      case HfRole::Heads:
        set("heads", f, *v, out.model.heads, 1, "attention heads");
        break;
      case HfRole::KvHeads:
        set("kv_heads", f, *v, out.model.kv_heads, 1, "key/value heads");
        break;
      case HfRole::Ffn:
        set("ffn_hidden", f, *v, out.model.ffn_hidden, 1, "the MLP width");
        break;
      case HfRole::Vocabulary:
        set("vocabulary", f, *v, out.model.vocabulary, 1, "the vocabulary size");
        break;
      case HfRole::Positions:
        if (positions_at == nullptr) {  // n_positions before n_ctx
          positions = in.whole(f.key, *v, 1, INT_MAX, "the longest sequence");
          positions_at = v;
          origins.push_back({"sequence", f.key, v});
        }
        break;
      case HfRole::Tied:
        out.model.tied_embeddings = in.boolean(f.key, *v, "the LM head shares the embedding");
        break;
      case HfRole::Dropout:
        if (in.number(f.key, *v, 0, false, 1, "a dropout probability") > 0)
          out.model.dropout = true;
        break;
      case HfRole::HeadDim:
        head_dim = in.whole(f.key, *v, 1, INT_MAX, "the attention head size");
        head_dim_at = v;
        break;
      case HfRole::Window:
        window = in.whole(f.key, *v, 1, INT_MAX, "tokens a query sees");
        break;
      case HfRole::UseWindow:
        use_window = in.boolean(f.key, *v, "whether the window is used");
        break;
      case HfRole::Activation:
        in.text(f.key, *v, "the MLP's activation");
        break;
      case HfRole::CrossAttention:
        if (in.boolean(f.key, *v, "cross-attention layers"))
          in.mistyped(f.key, *v,
                      "pipesched's cost model has no cross-attention layers; it plans a "
                      "decoder-only model (false)");
        break;
    }
  }
  if (head_dim_at && out.model.hidden % out.model.heads == 0 &&
      head_dim != out.model.hidden / out.model.heads)
    in.mistyped("head_dim", *head_dim_at,
                "the cost model takes the head size as hidden / heads = " +
                    std::to_string(out.model.hidden / out.model.heads) +
                    ", so it cannot count a model whose heads are " + std::to_string(head_dim) +
                    " wide");
  out.sliding_window = use_window ? window : 0;
  out.model.sequence = sequence_of(in, out, positions_at ? positions : 0, options);
  if (std::string note = unknown_note(in, family, keys); !note.empty())
    out.notes.push_back(std::move(note));
  model_file::check_model(out.model, in, origins);
  return out;
}

}  // namespace detail::hf_config

}  // namespace pipesched
