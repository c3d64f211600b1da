// Models as JSON files: pipesched's own model file (every ModelShape field under its C++ name)
// and a Hugging Face config.json of a dense decoder (Llama, Mistral, Qwen2, GPT-2, GPT-NeoX).
// The writer prints pipesched's form (`pipesched list --json`), so a model written and read
// back is the same ModelShape, field by field. The Hugging Face reader lives in
// io/detail/hf_config.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/analysis/model_shape.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/io/detail/hf_config.hpp"
#include "pipesched/io/detail/model_fields.hpp"
#include "pipesched/io/detail/spec_json.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"

namespace pipesched {

namespace detail::model_file {

//! The fields a pipesched model file must give: those whose ModelShape default is no model.
inline const std::vector<std::string>& required() {
  static const std::vector<std::string> list = {"layers", "hidden", "heads", "sequence",
                                                "vocabulary"};
  return list;
}

inline ModelFile read_pipesched(const json::Value& doc, const std::string& source,
                                const ModelReadOptions& options) {
  const spec_json::Fields in(doc, source);
  ModelFile out;
  out.family = "pipesched";
  if (const json::Value* f = in.find("format"))
    if (in.text("format", *f, "the file's kind") != model_format)
      in.mistyped("format", *f, "a pipesched model file says \"pipesched-model\"");
  for (const json::Value::Member& m : doc.object()) {
    const bool known = m.key == "format" || m.key == "name" || m.key == "description" ||
                       std::any_of(fields().begin(), fields().end(),
                                   [&](const Field& f) { return m.key == f.name; });
    if (known) continue;
    std::string keys = "format, name, description";
    for (const Field& f : fields())
      keys += std::string(", ") + f.name;
    in.fail(m.value, "unknown field \"" + m.key + "\"; a pipesched model file has " + keys);
  }
  for (const std::string& key : required())
    if (key != "sequence" || options.sequence == 0)
      in.need(key, "a pipesched model file gives " + spec_json::listed(required()));
  out.name = spec_json::stem_of(source);
  if (const json::Value* n = in.find("name")) out.name = in.text("name", *n, "its name");
  if (const json::Value* d = in.find("description"))
    out.description = in.text("description", *d, "one line saying what it is");
  Origins origins;
  for (const Field& f : fields()) {
    const json::Value* v = in.find(f.name);
    if (v == nullptr) continue;
    origins.push_back({f.name, f.name, v});
    if (f.whole) out.model.*f.whole = in.whole(f.name, *v, INT_MIN, INT_MAX, f.what);
    if (f.flag) out.model.*f.flag = in.boolean(f.name, *v, f.what);
  }
  if (options.sequence > 0) out.model.sequence = options.sequence;
  check_model(out.model, in, origins);
  return out;
}

}  // namespace detail::model_file

//! Reads a model from the JSON text of a model file (`source` names it in messages), either
//! - pipesched's own ("format": "pipesched-model", or no Hugging Face keys): "name" (default:
//!   the file's stem), "description" and the ModelShape fields by their C++ names (layers,
//!   hidden, heads, kv_heads, ffn_hidden, gated_mlp, sequence, vocabulary, microbatch_size,
//!   bytes_per_value, flash_attention, dropout, tied_embeddings); layers, hidden, heads,
//!   sequence and vocabulary are required, the rest default as ModelShape does; an unknown
//!   field is an error naming the known ones; or
//! - a Hugging Face config.json (it has "model_type" or "architectures"): see
//!   hf_config_fields() for what each family reads; mixture-of-experts configs are refused
//!   (the cost model has no expert layers); fields pipesched does not know are listed in one
//!   of ModelFile::notes.
//! Throws parse_error naming `source`, the line and the column for text that is not JSON, a
//! missing, mistyped or unknown field and a value out of ModelShape::check's range.
inline ModelFile read_model(std::string_view text, const std::string& source = "model",
                            const ModelReadOptions& options = {}) {
  const json::Value doc = detail::spec_json::parse_object(text, source, "a model");
  if (detail::hf_config::is_hf_config(doc)) return detail::hf_config::read(doc, source, options);
  return detail::model_file::read_pipesched(doc, source, options);
}

//! read_model on the file at `path`; throws pipesched::error when it cannot be read.
inline ModelFile read_model_file(const std::string& path, const ModelReadOptions& options = {}) {
  return read_model(detail::spec_json::read_file(path, "model file"), path, options);
}

//! Writes `model` as one object of pipesched's model file format into `w`: "format", "name",
//! "description" (when not empty), then every ModelShape field. read_model reads it back to
//! the same fields.
inline void write_model(json::Writer& w, const ModelShape& model, std::string_view name,
                        std::string_view description = {}) {
  w.begin_object().field("format", model_format).field("name", name);
  if (!description.empty()) w.field("description", description);
  for (const detail::model_file::Field& f : detail::model_file::fields()) {
    w.key(f.name);
    if (f.whole) w.value(model.*f.whole);
    if (f.flag) w.value(model.*f.flag);
  }
  w.end_object();
}

//! `model` as the JSON text of a pipesched model file, one line.
inline std::string model_json(const ModelShape& model, std::string_view name,
                              std::string_view description = {}) {
  json::Writer w;
  write_model(w, model, name, description);
  return w.take();
}

}  // namespace pipesched
