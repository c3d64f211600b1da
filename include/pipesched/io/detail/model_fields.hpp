// The public types of model files (io/model_file.hpp) and what its two readers (pipesched's
// form there, Hugging Face's in io/detail/hf_config.hpp) share: the ModelShape fields by name,
// and ModelShape::check's refusal turned into a sentence naming the file's field and where
// it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/io/detail/spec_json.hpp"
#include "pipesched/io/json_read.hpp"

namespace pipesched {

//! The "format" marker of a pipesched model file.
inline constexpr std::string_view model_format = "pipesched-model";

//! What reading a model file may change of what the file says.
struct ModelReadOptions {
  //! Tokens per sequence instead of the file's (0: the file's; for a Hugging Face config its
  //! max_position_embeddings / n_positions, at most its sliding window).
  int sequence = 0;
};

//! A model read from a file.
struct ModelFile {
  ModelShape model;         //!< its shape, checked (ModelShape::check)
  std::string name;         //!< "name", a config's "_name_or_path", or the file's stem
  std::string description;  //!< the file's "description", or empty
  //! "pipesched" for pipesched's own file; a Hugging Face config's family: "llama",
  //! "mistral", "qwen2", "gpt2" or "gpt_neox".
  std::string family;
  //! A config's sliding attention window in tokens (the sequence is at most this); 0 = none.
  int sliding_window = 0;
  //! What the reader noticed and the caller may show (fields it ignored, the sequence it
  //! shortened to the window), one sentence each.
  std::vector<std::string> notes;
};

namespace detail::model_file {

//! One ModelShape field: its name and where it lives (one of the members is set).
struct Field {
  const char* name;        //!< the C++ name, also the JSON key
  int ModelShape::*whole;  //!< a whole-number field, or nullptr
  bool ModelShape::*flag;  //!< a boolean field, or nullptr
  const char* what;        //!< what it is, for messages
};

//! Every ModelShape field, in the struct's order.
inline const std::vector<Field>& fields() {
  static const std::vector<Field> list = {
      {"layers", &ModelShape::layers, nullptr, "transformer layers"},
      {"hidden", &ModelShape::hidden, nullptr, "the model width"},
      {"heads", &ModelShape::heads, nullptr, "attention heads"},
      {"kv_heads", &ModelShape::kv_heads, nullptr, "key/value heads, 0 = heads"},
      {"ffn_hidden", &ModelShape::ffn_hidden, nullptr, "MLP inner width, 0 = 4 x hidden"},
      {"gated_mlp", nullptr, &ModelShape::gated_mlp, "a SwiGLU MLP of three matrices"},
      {"sequence", &ModelShape::sequence, nullptr, "tokens per sequence"},
      {"vocabulary", &ModelShape::vocabulary, nullptr, "the vocabulary size"},
      {"microbatch_size", &ModelShape::microbatch_size, nullptr, "sequences per microbatch"},
      {"bytes_per_value", &ModelShape::bytes_per_value, nullptr,
       "bytes per stored activation value"},
      {"flash_attention", nullptr, &ModelShape::flash_attention, "fused attention"},
      {"dropout", nullptr, &ModelShape::dropout, "dropout masks kept for the backward"},
      {"tied_embeddings", nullptr, &ModelShape::tied_embeddings,
       "the LM head shares the embedding's weights"},
  };
  return list;
}

//! Which key of the file set a ModelShape field, and its value there.
struct Origin {
  std::string field;         //!< the ModelShape field ("hidden")
  std::string key;           //!< the file's key ("hidden_size")
  const json::Value* value;  //!< the value in the file
};
//! The fields the file set.
using Origins = std::vector<Origin>;

//! The part of a check()'s message after "is out of range; " (what is right).
inline std::string wanted(const std::string& message) {
  const std::string marker = "is out of range; ";
  const auto at = message.find(marker);
  std::string want = at == std::string::npos ? message : message.substr(at + marker.size());
  if (!want.empty() && want.back() == '.') want.pop_back();
  return want;
}

//! model.check(), its refusal as parse_error at the file's key that set the field (`origins`),
//! else at the object.
inline void check_model(const ModelShape& model, const spec_json::Fields& in,
                        const Origins& origins) {
  try {
    model.check();
  } catch (const invalid_argument& e) {
    const std::string field = e.field().substr(e.field().find('.') + 1);
    const std::string want = wanted(e.message().text());
    for (const Origin& o : origins)
      if (o.field == field)
        in.fail(*o.value, "field \"" + o.key + "\" is " + spec_json::shown(*o.value) + "; " + want);
    in.fail(in.object(), "the model's " + field + " is " + e.value() + "; " + want);
  }
}

}  // namespace detail::model_file

}  // namespace pipesched
