// What the picture tests share: hand-made schedules, a grid of generated ones, and a small
// XML well-formedness checker that reads the SVG back into elements.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/svg.hpp"
#include "pipesched/io/text_grid.hpp"
#include "pipesched/io/trace.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"

#include "json_checker.hpp"

namespace pipesched::render_test {

using test_json::Json;
using test_json::parse_json;

inline Action F(int s, int m, int k = 0) {
  return Action::make(OpKind::F, s, m, k);
}
inline Action B(int s, int m, int k = 0) {
  return Action::make(OpKind::B, s, m, k);
}
inline Action I(int s, int m, int k = 0) {
  return Action::make(OpKind::I, s, m, k);
}
inline Action W(int s, int m, int k = 0) {
  return Action::make(OpKind::W, s, m, k);
}
inline Action R(int s, int m, int k = 0) {
  return Action::make(OpKind::R, s, m, k);
}

// 2 ranks, 2 stages, 2 microbatches, 1F1B. Under UniformCost defaults: rank 0 runs F0 [0,1],
// F1 [1,2], B0 [4,6], B1 [7,9]; rank 1 runs F0 [1,2], B0 [2,4], F1 [4,5], B1 [5,7].
inline Schedule hand_1f1b() {
  Schedule s;
  s.name = "hand-1f1b";
  s.problem = {.ranks = 2, .stages = 2, .microbatches = 2};
  s.placement = Placement::linear(2);
  s.ranks = {{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}, {F(1, 0), B(1, 0), F(1, 1), B(1, 1)}};
  return s;
}

// Split backward, a recompute and an explicit idle slot.
inline Schedule hand_mixed() {
  Schedule s = hand_1f1b();
  s.name = "hand-mixed";
  s.ranks = {{F(0, 0), F(0, 1), Action::idle(), R(0, 0), I(0, 0), W(0, 0), I(0, 1), W(0, 1)},
             {F(1, 0), I(1, 0), F(1, 1), I(1, 1), W(1, 1), W(1, 0)}};
  return s;
}

// One rank, one microbatch cut into two slices.
inline Schedule hand_sliced() {
  Schedule s;
  s.name = "sliced";
  s.problem = {.ranks = 1, .stages = 1, .microbatches = 1, .slices = 2};
  s.placement = Placement::linear(1);
  s.ranks = {{F(0, 0, 0), F(0, 0, 1), B(0, 0, 1), B(0, 0, 0)}};
  return s;
}

// Every generator of the registry on a few problem sizes, fused and split where accepted.
inline std::vector<Schedule> generated_grid() {
  std::vector<Schedule> out;
  for (const GeneratorInfo& g : generators())
    for (int ranks : {2, 4})
      for (WGradMode mode : {WGradMode::Fused, WGradMode::Split}) {
        if ((mode == WGradMode::Fused && !g.fused) || (mode == WGradMode::Split && !g.split))
          continue;
        Schedule s = g.generate(Problem{.ranks = ranks, .microbatches = 8}, mode);
        s.name = std::string(g.name) + " p=" + std::to_string(ranks) + " " + to_string(mode);
        out.push_back(std::move(s));
      }
  return out;
}

// ---- a small XML well-formedness checker --------------------------------------------------

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;       // character data directly inside, entities decoded
  std::string deep_text;  // character data inside, children's included
  int depth = 0;
};

// Parses an XML document strictly enough for the pictures: one root element, balanced and
// properly nested tags, quoted attributes without duplicates, only the predefined and
// numeric entities, no raw '<' or '&' in text. Throws std::runtime_error naming the offset.
class XmlChecker {
 public:
  explicit XmlChecker(const std::string& x) : x_(x) {}

  std::vector<XmlElement> parse() {
    skip_space();
    if (x_.compare(i_, 5, "<?xml") == 0) {
      std::size_t end = x_.find("?>", i_);
      if (end == std::string::npos) fail("unterminated XML declaration");
      i_ = end + 2;
    }
    skip_misc();
    if (i_ >= x_.size() || x_[i_] != '<') fail("no root element");
    element(0);
    skip_misc();
    if (i_ != x_.size()) fail("content after the root element");
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("XML: " + why + " at offset " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < x_.size() && std::isspace(static_cast<unsigned char>(x_[i_])))
      ++i_;
  }
  void skip_misc() {
    for (;;) {
      skip_space();
      if (x_.compare(i_, 4, "<!--") != 0) return;
      std::size_t end = x_.find("-->", i_);
      if (end == std::string::npos) fail("unterminated comment");
      i_ = end + 3;
    }
  }
  std::string name() {
    auto start_ok = [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
    };
    auto ok = [&](char c) {
      return start_ok(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
    };
    if (i_ >= x_.size() || !start_ok(x_[i_])) fail("expected a name");
    std::size_t start = i_;
    while (i_ < x_.size() && ok(x_[i_]))
      ++i_;
    return x_.substr(start, i_ - start);
  }
  // Decodes an entity at i_ (which is at '&').
  std::string entity() {
    std::size_t end = x_.find(';', i_);
    if (end == std::string::npos || end - i_ > 10) fail("bad entity");
    std::string e = x_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    if (e == "amp") return "&";
    if (e == "lt") return "<";
    if (e == "gt") return ">";
    if (e == "quot") return "\"";
    if (e == "apos") return "'";
    if (e.size() > 1 && e[0] == '#') {
      const bool hex = e[1] == 'x';
      const std::string digits = e.substr(hex ? 2 : 1);
      if (digits.empty()) fail("empty character reference");
      for (char c : digits)
        if (!(hex ? std::isxdigit(static_cast<unsigned char>(c))
                  : std::isdigit(static_cast<unsigned char>(c))))
          fail("bad character reference");
      return "?";
    }
    fail("unknown entity &" + e + ";");
  }
  void element(int depth) {
    ++i_;  // '<'
    XmlElement el;
    el.name = name();
    el.depth = depth;
    for (;;) {
      const std::size_t before = i_;
      skip_space();
      if (i_ >= x_.size()) fail("unterminated start tag");
      if (x_[i_] == '/' || x_[i_] == '>') break;
      if (i_ == before) fail("expected a blank before an attribute");
      std::string key = name();
      skip_space();
      if (i_ >= x_.size() || x_[i_] != '=') fail("expected '=' after attribute " + key);
      ++i_;
      skip_space();
      if (i_ >= x_.size() || (x_[i_] != '"' && x_[i_] != '\'')) fail("unquoted attribute");
      const char q = x_[i_++];
      std::string value;
      while (i_ < x_.size() && x_[i_] != q) {
        if (x_[i_] == '<') fail("'<' in an attribute value");
        if (x_[i_] == '&') {
          value += entity();
        } else {
          value += x_[i_++];
        }
      }
      if (i_ >= x_.size()) fail("unterminated attribute value");
      ++i_;
      if (!el.attrs.emplace(key, value).second) fail("duplicate attribute " + key);
    }
    const std::size_t index = out_.size();
    out_.push_back(el);
    if (x_[i_] == '/') {
      if (x_.compare(i_, 2, "/>") != 0) fail("expected '/>'");
      i_ += 2;
      return;
    }
    ++i_;  // '>'
    open_.push_back(index);
    auto add_text = [&](const std::string& t) {
      out_[index].text += t;
      for (std::size_t o : open_)
        out_[o].deep_text += t;
    };
    for (;;) {
      if (i_ >= x_.size()) fail("element <" + el.name + "> is not closed");
      if (x_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != el.name) fail("end tag does not match <" + el.name + ">");
        skip_space();
        if (i_ >= x_.size() || x_[i_] != '>') fail("expected '>'");
        ++i_;
        open_.pop_back();
        return;
      }
      if (x_.compare(i_, 4, "<!--") == 0) {
        skip_misc();
        continue;
      }
      if (x_[i_] == '<') {
        element(depth + 1);
        continue;
      }
      if (x_[i_] == '&') {
        add_text(entity());
        continue;
      }
      const unsigned char c = static_cast<unsigned char>(x_[i_]);
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') fail("control character in text");
      add_text(std::string(1, x_[i_++]));
    }
  }

  const std::string& x_;
  std::size_t i_ = 0;
  std::vector<XmlElement> out_;
  std::vector<std::size_t> open_;  // elements whose end tag is still to come
};

inline std::vector<XmlElement> parse_xml(const std::string& x) {
  return XmlChecker(x).parse();
}

inline bool has_class(const XmlElement& e, const std::string& cls) {
  auto it = e.attrs.find("class");
  if (it == e.attrs.end()) return false;
  std::istringstream words(it->second);
  for (std::string w; words >> w;)
    if (w == cls) return true;
  return false;
}

inline std::vector<XmlElement> with_class(const std::vector<XmlElement>& all,
                                          const std::string& tag, const std::string& cls) {
  std::vector<XmlElement> out;
  for (const XmlElement& e : all)
    if (e.name == tag && has_class(e, cls)) out.push_back(e);
  return out;
}

inline std::size_t non_idle(const Schedule& s) {
  std::size_t n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind != OpKind::Idle;
  return n;
}

inline std::size_t drawn(const Schedule& s, const SimulationResult& sim) {
  std::size_t n = 0;
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i)
      n += s.ranks[r][i].kind != OpKind::Idle && sim.timing[r][i].end > sim.timing[r][i].start;
  return n;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

inline std::string all_text(const std::vector<XmlElement>& els) {
  std::string t;
  for (const XmlElement& e : els)
    t += e.text + "\n";
  return t;
}

}  // namespace pipesched::render_test
