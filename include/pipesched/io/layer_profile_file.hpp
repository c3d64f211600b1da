// Layer profiles as JSON files (docs/formats.md, "Layer profile"): the model measured, where,
// and one object per sample. The writer's output reads back to the same profile, sample by
// sample.
#pragma once

#include <climits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/analysis/layer_profile.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/io/detail/spec_json.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/model_file.hpp"

namespace pipesched {

//! The "format" marker of a layer profile file.
inline constexpr std::string_view layer_profile_format = "pipesched-layer-profile";

namespace detail::layer_profile_file {

struct Figure {
  const char* name;
  double LayerFigures::*field;
  const char* what;
};

inline const std::vector<Figure>& figures() {
  static const std::vector<Figure> list = {
      {"forward", &LayerFigures::forward, "seconds of F"},
      {"backward_input", &LayerFigures::backward_input, "seconds of I"},
      {"backward_weight", &LayerFigures::backward_weight, "seconds of W"},
      {"recompute", &LayerFigures::recompute, "seconds of R; 0 = as F"},
      {"activation_bytes", &LayerFigures::activation_bytes, "bytes held from F to the backward"},
      {"wgrad_bytes", &LayerFigures::wgrad_bytes, "bytes held from I to W"},
      {"boundary_bytes", &LayerFigures::boundary_bytes, "bytes a checkpointed F keeps"}};
  return list;
}

inline std::string sample_keys() {
  std::string keys = "part, tensor, microbatch_size, tokens, prefix";
  for (const Figure& f : figures())
    keys += std::string(", ") + f.name;
  return keys;
}

inline LayerSample read_sample(const json::Value& v, const std::string& source, std::size_t n) {
  const std::string where = source + ", sample " + std::to_string(n);
  if (v.kind() != json::Kind::Object)
    spec_json::Fields(v, source).fail(v, "sample " + std::to_string(n) + " is " +
                                             json::describe(v.kind()) +
                                             "; each sample is an object with " + sample_keys());
  const spec_json::Fields in(v, where);
  for (const json::Value::Member& m : v.object()) {
    bool known = m.key == "part" || m.key == "tensor" || m.key == "microbatch_size" ||
                 m.key == "tokens" || m.key == "prefix";
    for (const Figure& f : figures())
      known = known || m.key == f.name;
    if (!known) in.fail(m.value, "unknown field \"" + m.key + "\"; a sample has " + sample_keys());
  }
  LayerSample s;
  const json::Value& part = in.need("part", "a sample says which part it measured");
  const std::string& p = in.text("part", part, "first, layer or last");
  if (p == "first")
    s.part = LayerPart::First;
  else if (p == "layer")
    s.part = LayerPart::Layer;
  else if (p == "last")
    s.part = LayerPart::Last;
  else
    in.mistyped("part", part, "it is \"first\", \"layer\" or \"last\"");
  if (const json::Value* t = in.find("tensor"))
    s.at.tensor = in.whole("tensor", *t, 1, 1 << 16, "the tensor-parallel degree");
  s.at.microbatch_size =
      in.whole("microbatch_size", in.need("microbatch_size", "a sample gives its point"), 1,
               ModelShape::max_microbatch_size, "sequences per microbatch");
  s.at.tokens = in.whole("tokens", in.need("tokens", "a sample gives its point"), 1,
                         ModelShape::max_sequence, "the slice's tokens");
  if (const json::Value* o = in.find("prefix"))
    s.at.prefix = in.whole("prefix", *o, 0, ModelShape::max_sequence, "tokens before the slice");
  for (const Figure& f : figures()) {
    const json::Value* x = in.find(f.name);
    if (x == nullptr) {
      if (std::string_view(f.name) == "recompute") continue;
      in.need(f.name, std::string("a sample gives ") + f.what);
    }
    s.figures.*f.field = in.number(f.name, *x, 0, false, 1e15, f.what);
  }
  return s;
}

// The layer profile of the JSON object `doc` (a file's, or a plan's "profile").
inline LayerProfile read_object(const json::Value& doc, const std::string& source) {
  const spec_json::Fields in(doc, source);
  for (const json::Value::Member& m : doc.object())
    if (m.key != "format" && m.key != "device" && m.key != "model" && m.key != "samples")
      in.fail(m.value, "unknown field \"" + m.key +
                           "\"; a layer profile has format, device, model and samples");
  const json::Value& format = in.need("format", "a layer profile says \"pipesched-layer-profile\"");
  if (in.text("format", format, "the file's kind") != layer_profile_format)
    in.mistyped("format", format, "a layer profile says \"pipesched-layer-profile\"");
  std::string device;
  if (const json::Value* d = in.find("device"))
    device = in.text("device", *d, "where the layers were measured");
  const json::Value& model = in.need("model", "a layer profile names the model it measured");
  if (model.kind() != json::Kind::Object)
    in.mistyped("model", model, "it is a pipesched model file's object");
  const ModelShape shape =
      model_file::read_pipesched(model, source + ", field \"model\"", {}).model;
  const json::Value& list = in.need("samples", "a layer profile holds its measured samples");
  if (list.kind() != json::Kind::Array)
    in.mistyped("samples", list, "it is an array of sample objects");
  if (list.array().size() > LayerProfile::max_samples)
    in.fail(list, "the profile has " + std::to_string(list.array().size()) +
                      " samples, more than the " + std::to_string(LayerProfile::max_samples) +
                      " a layer profile may hold; profile a coarser grid");
  std::vector<LayerSample> samples;
  samples.reserve(list.array().size());
  for (std::size_t n = 0; n < list.array().size(); ++n)
    samples.push_back(read_sample(list.array()[n], source, n));
  try {
    return LayerProfile(shape, std::move(device), std::move(samples));
  } catch (const invalid_problem& e) {
    in.fail(list, e.message().text());
  }
}

inline LayerProfile read(std::string_view text, const std::string& source) {
  return read_object(spec_json::parse_object(text, source, "a layer profile"), source);
}

}  // namespace detail::layer_profile_file

//! Reads a layer profile from the JSON text of a layer profile file (`source` names it in
//! messages): an object with "format": "pipesched-layer-profile", "device" (free text), "model"
//! (a pipesched model file's object: the model measured) and "samples", an array of objects
//! with "part" ("first", "layer" or "last"), "tensor" (default 1), "microbatch_size", "tokens",
//! "prefix" (default 0) and the figures "forward", "backward_input", "backward_weight",
//! "recompute" (optional), "activation_bytes", "wgrad_bytes" and "boundary_bytes" (seconds,
//! bytes). Throws parse_error naming `source`, the line and the column for text that is not
//! JSON, a missing, mistyped, unknown or out-of-range field, and samples that are not one grid
//! (LayerProfile's checks).
inline LayerProfile read_layer_profile(std::string_view text,
                                       const std::string& source = "layer profile") {
  return detail::layer_profile_file::read(text, source);
}

//! read_layer_profile on the file at `path`; throws pipesched::error when it cannot be read
//! (no such file, larger than 16 MiB).
inline LayerProfile read_layer_profile_file(const std::string& path) {
  return read_layer_profile(detail::spec_json::read_file(path, "layer profile"), path);
}

//! `profile` as the JSON text of a layer profile file, one sample per line (`lines`) or all on
//! one line; read_layer_profile reads it back to the same samples.
inline std::string layer_profile_json(const LayerProfile& profile, bool lines = true) {
  const char* nl = lines ? "\n" : "";
  std::string out =
      "{\"format\": \"" + std::string(layer_profile_format) + "\"," + nl + "\"device\": ";
  {
    json::Writer w;
    w.value(profile.device());
    out += w.take();
  }
  out += std::string(",") + nl + "\"model\": " + model_json(profile.model(), "profiled") + "," +
         nl + "\"samples\": [";
  bool first = true;
  for (const LayerSample& s : profile.samples()) {
    json::Writer w;
    w.begin_object()
        .field("part", to_string(s.part))
        .field("tensor", s.at.tensor)
        .field("microbatch_size", s.at.microbatch_size)
        .field("tokens", s.at.tokens)
        .field("prefix", s.at.prefix);
    for (const detail::layer_profile_file::Figure& f : detail::layer_profile_file::figures())
      w.field(f.name, s.figures.*f.field);
    w.end_object();
    out += (first ? std::string(nl) : std::string(",") + nl) + w.take();
    first = false;
  }
  out += std::string(nl) + "]}" + nl;
  return out;
}

}  // namespace pipesched
