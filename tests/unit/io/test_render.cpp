// Schedule pictures: the SVG timeline is well-formed XML with one rectangle per action at its
// simulated time, the Chrome trace is valid JSON whose events match the simulation, and the
// text grid puts the right letters in the right columns.
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
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/policy/registry.hpp"

#include "json_checker.hpp"

namespace pipesched {
namespace {

using test_json::Json;
using test_json::parse_json;

Action F(int s, int m, int k = 0) {
  return Action::make(OpKind::F, s, m, k);
}
Action B(int s, int m, int k = 0) {
  return Action::make(OpKind::B, s, m, k);
}
Action I(int s, int m, int k = 0) {
  return Action::make(OpKind::I, s, m, k);
}
Action W(int s, int m, int k = 0) {
  return Action::make(OpKind::W, s, m, k);
}
Action R(int s, int m, int k = 0) {
  return Action::make(OpKind::R, s, m, k);
}

// 2 ranks, 2 stages, 2 microbatches, 1F1B. Under UniformCost defaults: rank 0 runs F0 [0,1],
// F1 [1,2], B0 [4,6], B1 [7,9]; rank 1 runs F0 [1,2], B0 [2,4], F1 [4,5], B1 [5,7].
Schedule hand_1f1b() {
  Schedule s;
  s.name = "hand-1f1b";
  s.problem = {.ranks = 2, .stages = 2, .microbatches = 2};
  s.placement = Placement::linear(2);
  s.ranks = {{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}, {F(1, 0), B(1, 0), F(1, 1), B(1, 1)}};
  return s;
}

// Split backward, a recompute and an explicit idle slot.
Schedule hand_mixed() {
  Schedule s = hand_1f1b();
  s.name = "hand-mixed";
  s.ranks = {{F(0, 0), F(0, 1), Action::idle(), R(0, 0), I(0, 0), W(0, 0), I(0, 1), W(0, 1)},
             {F(1, 0), I(1, 0), F(1, 1), I(1, 1), W(1, 1), W(1, 0)}};
  return s;
}

// One rank, one microbatch cut into two slices.
Schedule hand_sliced() {
  Schedule s;
  s.name = "sliced";
  s.problem = {.ranks = 1, .stages = 1, .microbatches = 1, .slices = 2};
  s.placement = Placement::linear(1);
  s.ranks = {{F(0, 0, 0), F(0, 0, 1), B(0, 0, 1), B(0, 0, 0)}};
  return s;
}

// Every generator of the registry on a few problem sizes, fused and split where accepted.
std::vector<Schedule> generated_grid() {
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

std::vector<XmlElement> parse_xml(const std::string& x) {
  return XmlChecker(x).parse();
}

bool has_class(const XmlElement& e, const std::string& cls) {
  auto it = e.attrs.find("class");
  if (it == e.attrs.end()) return false;
  std::istringstream words(it->second);
  for (std::string w; words >> w;)
    if (w == cls) return true;
  return false;
}

std::vector<XmlElement> with_class(const std::vector<XmlElement>& all, const std::string& tag,
                                   const std::string& cls) {
  std::vector<XmlElement> out;
  for (const XmlElement& e : all)
    if (e.name == tag && has_class(e, cls)) out.push_back(e);
  return out;
}

std::size_t non_idle(const Schedule& s) {
  std::size_t n = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      n += a.kind != OpKind::Idle;
  return n;
}

std::size_t drawn(const Schedule& s, const SimulationResult& sim) {
  std::size_t n = 0;
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i)
      n += s.ranks[r][i].kind != OpKind::Idle && sim.timing[r][i].end > sim.timing[r][i].start;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

std::string all_text(const std::vector<XmlElement>& els) {
  std::string t;
  for (const XmlElement& e : els)
    t += e.text + "\n";
  return t;
}

// ---- the checkers themselves catch what they are meant to catch ----------------------------

TEST(RenderCheckers, RejectMalformedXmlAndJson) {
  for (const char* bad : {"<svg><g></svg></g>", "<svg a=\"1\" a=\"2\"/>", "<svg>a & b</svg>",
                          "<svg a=1/>", "<svg></svg><svg></svg>", "<svg>"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_xml(bad), std::runtime_error);
  }
  EXPECT_NO_THROW(parse_xml("<?xml version=\"1.0\"?>\n<svg x=\"&amp;\"><t>&lt;</t></svg>\n"));
  for (const char* bad : {"{\"a\": 1,}", "[1 2]", "{\"a\": 01}", "\"a\nb\"", "{\"a\": nan}",
                          "{\"a\": 1} x", "{\"a\": 1, \"a\": 2}", "[1.]", "\"\xff\""}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_json(bad), std::runtime_error);
  }
  EXPECT_EQ(parse_json("{\"a\": [1, -2.5e3, \"x\\\"\", true, null]}").at("a").array[1].number,
            -2500);
}

// ---- formatting helpers ---------------------------------------------------------------------

TEST(RenderFormat, NumbersPercentagesAndMemory) {
  EXPECT_EQ(detail::format_number(9), "9");
  EXPECT_EQ(detail::format_number(28.5), "28.5");
  EXPECT_EQ(detail::format_number(1.0 / 3), "0.333");
  EXPECT_EQ(detail::format_number(33.333333), "33.33");
  EXPECT_EQ(detail::format_number(123456.7), "123457");
  EXPECT_EQ(detail::format_number(-0.0), "0");
  EXPECT_EQ(detail::format_percent(1.0 / 3), "33.3%");
  EXPECT_EQ(detail::format_percent(0.2), "20.0%");
  EXPECT_EQ(detail::format_percent(0), "0.0%");
  EXPECT_EQ(detail::format_memory(2.5, "units"), "2.5 units");
  EXPECT_EQ(detail::format_memory(24, "GiB"), "24 GiB");
  EXPECT_EQ(detail::format_memory(512, "bytes"), "512 B");
  EXPECT_EQ(detail::format_memory(1.5 * 1024 * 1024 * 1024, "bytes"), "1.5 GiB");
  EXPECT_EQ(detail::format_memory(3 * 1024.0 * 1024, "bytes"), "3 MiB");
}

TEST(RenderFormat, TimesAndMemoryInACostModelsUnits) {
  EXPECT_EQ(detail::format_time(0.447, "seconds"), "0.447 s");
  EXPECT_EQ(detail::format_time(0.24755, "seconds", 6), "0.24755 s");
  EXPECT_EQ(detail::format_time(44, "units"), "44 units");
  EXPECT_EQ(detail::format_time(1, "units"), "1 unit");
  EXPECT_EQ(detail::format_time(9, ""), "9");
  EXPECT_EQ(detail::format_memory(4, "microbatches"), "4 microbatches");
  EXPECT_EQ(detail::format_memory(1, "microbatches"), "1 microbatch");
  EXPECT_EQ(detail::format_memory(1.832e10, "bytes"), "17.06 GiB");
  EXPECT_EQ(detail::format_memory(3.5e9, "bytes", 6), "3.25963 GiB");
  EXPECT_EQ(detail::format_memory(3.42255e9, "bytes", 6), "3.1875 GiB");  // trailing 0 dropped
  EXPECT_EQ(detail::format_number(123.456789, 6), "123.457");
  EXPECT_EQ(detail::format_number(0.14595, 6), "0.14595");
  EXPECT_EQ(detail::format_number(2e10, 6), "2e+10");
}

TEST(RenderFormat, SanitizeUtf8KeepsValidTextAndReplacesBadBytes) {
  EXPECT_EQ(detail::sanitize_utf8("plain \xC2\xB7 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "plain \xC2\xB7 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(detail::sanitize_utf8("a\xff"
                                  "b"),
            "a" + fffd + "b");
  EXPECT_EQ(detail::sanitize_utf8("\xC0\xAF"), fffd + fffd);             // overlong '/'
  EXPECT_EQ(detail::sanitize_utf8("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(detail::sanitize_utf8("\xE2\x82"), fffd + fffd);             // cut short
}

// ---- SVG ------------------------------------------------------------------------------------

TEST(RenderSvg, HandMade1F1BIsWellFormedWithOneRectPerActionAtItsTime) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  const std::string svg = render_svg(s, sim);
  std::vector<XmlElement> els;
  ASSERT_NO_THROW(els = parse_xml(svg)) << svg;
  ASSERT_FALSE(els.empty());
  EXPECT_EQ(els[0].name, "svg");
  EXPECT_EQ(els[0].attrs["xmlns"], "http://www.w3.org/2000/svg");

  const std::vector<XmlElement> rects = with_class(els, "rect", "action");
  ASSERT_EQ(rects.size(), 8u);
  // Drawn rank by rank in list order: x = left + start·scale, width = duration·scale.
  const double scale = std::stod(rects[0].attrs.at("width")) / 1.0;  // 0F0 lasts 1
  const double left = std::stod(rects[0].attrs.at("x"));
  std::size_t k = 0;
  double last_y = -1;
  for (int r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i, ++k) {
      SCOPED_TRACE("rank " + std::to_string(r) + " action " + std::to_string(i));
      const XmlElement& e = rects[k];
      const ActionTiming& t = sim.timing[r][i];
      EXPECT_TRUE(has_class(e, std::string(to_string(s.ranks[r][i].kind))));
      EXPECT_NEAR(std::stod(e.attrs.at("x")), left + t.start * scale, 0.1);
      EXPECT_NEAR(std::stod(e.attrs.at("width")), (t.end - t.start) * scale, 0.1);
      const double y = std::stod(e.attrs.at("y"));
      if (i == 0) {
        EXPECT_GT(y, last_y);  // rank r's row lies below rank r − 1's
        last_y = y;
      } else {
        EXPECT_EQ(y, last_y);
      }
    }
  // The tooltip names the action and its times.
  EXPECT_EQ(rects[2].deep_text, "0B0 on rank 0: 4 to 6");

  const std::string text =
      all_text(with_class(els, "text", "title")) + all_text(with_class(els, "text", "figures"));
  for (const char* want : {"hand-1f1b", "2 ranks", "2 stages", "2 microbatches", "makespan 9",
                           "bubble 33.3%", "peak memory 2 units"}) {
    SCOPED_TRACE(want);
    EXPECT_NE(text.find(want), std::string::npos) << text;
  }
  // Every box is wide enough at the default width for its microbatch label.
  const std::vector<XmlElement> labels = with_class(els, "text", "label");
  ASSERT_EQ(labels.size(), 8u);
  EXPECT_EQ(labels[0].text, "0");
  EXPECT_EQ(labels[1].text, "1");
}

TEST(RenderSvg, MemoryCurvesAndPeaksPerRankUnlessTurnedOff) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  std::vector<XmlElement> els = parse_xml(render_svg(s, sim));
  EXPECT_EQ(with_class(els, "path", "memory").size(), 2u);
  const std::vector<XmlElement> peaks = with_class(els, "text", "peak");
  ASSERT_EQ(peaks.size(), 2u);
  EXPECT_EQ(peaks[0].text, "peak 2 units");
  EXPECT_EQ(peaks[1].text, "peak 1 unit");

  // Rank 0's curve reaches the top of its band at its peak (2 = the maximum over ranks) and
  // rank 1's only halfway.
  auto extent = [](const XmlElement& band, const XmlElement& path) {
    const double top = std::stod(band.attrs.at("y"));
    const double h = std::stod(band.attrs.at("height"));
    double lowest_y = 1e9;
    std::string d = path.attrs.at("d");
    for (char& c : d)
      if (c == 'M' || c == 'L' || c == 'Z' || c == ',') c = ' ';
    std::istringstream in(d);
    for (double x, y; in >> x >> y;)
      lowest_y = std::min(lowest_y, y);
    return (top + h - 1 - lowest_y) / (h - 2);
  };
  const std::vector<XmlElement> bands = with_class(els, "rect", "memory-band");
  const std::vector<XmlElement> paths = with_class(els, "path", "memory");
  ASSERT_EQ(bands.size(), 2u);
  EXPECT_NEAR(extent(bands[0], paths[0]), 1.0, 0.02);
  EXPECT_NEAR(extent(bands[1], paths[1]), 0.5, 0.02);

  SvgOptions off;
  off.show_memory = false;
  els = parse_xml(render_svg(s, sim, off));
  EXPECT_TRUE(with_class(els, "path", "memory").empty());
  EXPECT_TRUE(with_class(els, "text", "peak").empty());
  EXPECT_EQ(with_class(els, "rect", "action").size(), 8u);
}

TEST(RenderSvg, OptionsSetTitleSizeAndMemoryUnit) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  SvgOptions opt;
  opt.width = 800;
  opt.row_height = 40;
  opt.title = "My <pipeline>";
  opt.memory_unit = "GiB";
  const std::string svg = render_svg(s, sim, opt);
  const std::vector<XmlElement> els = parse_xml(svg);
  EXPECT_EQ(els[0].attrs.at("width"), "800");
  EXPECT_EQ(with_class(els, "text", "title")[0].text, "My <pipeline>");
  EXPECT_NE(svg.find("My &lt;pipeline&gt;"), std::string::npos);
  EXPECT_NE(all_text(with_class(els, "text", "figures")).find("peak memory 2 GiB"),
            std::string::npos);
  for (const XmlElement& e : with_class(els, "rect", "action"))
    EXPECT_EQ(e.attrs.at("height"), "40");
}

TEST(RenderSvg, TimeUnitInTheTitleTooltipsAndAxisCaption) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  // No unit by default: bare figures, no caption.
  std::vector<XmlElement> els = parse_xml(render_svg(s, sim));
  EXPECT_TRUE(with_class(els, "text", "axis-caption").empty());
  EXPECT_NE(all_text(with_class(els, "text", "figures")).find("makespan 9 "), std::string::npos);
  struct Case {
    const char* unit;
    const char* makespan;
    const char* caption;
    const char* tooltip;  // of rank 0's first forward
  };
  for (const Case& c : {Case{"units", "makespan 9 units", "time (units)", "0 units to 1 unit"},
                        Case{"seconds", "makespan 9 s", "time (s)", "0 s to 1 s"}}) {
    SCOPED_TRACE(c.unit);
    SvgOptions opt;
    opt.time_unit = c.unit;
    els = parse_xml(render_svg(s, sim, opt));
    EXPECT_NE(all_text(with_class(els, "text", "figures")).find(c.makespan), std::string::npos);
    const std::vector<XmlElement> caption = with_class(els, "text", "axis-caption");
    ASSERT_EQ(caption.size(), 1u);
    EXPECT_EQ(caption[0].text, c.caption);
    const std::vector<XmlElement> actions = with_class(els, "rect", "action");
    ASSERT_FALSE(actions.empty());
    EXPECT_NE(actions[0].deep_text.find(c.tooltip), std::string::npos) << actions[0].deep_text;
    // The caption sits left of the chart: it ends before the first tick (time 0) begins.
    const std::vector<XmlElement> ticks = with_class(els, "text", "tick");
    ASSERT_FALSE(ticks.empty());
    const double caption_end =
        std::stod(caption[0].attrs.at("x")) + detail::text_width(caption[0].text, 10);
    EXPECT_LT(caption_end, std::stod(ticks[0].attrs.at("x")) - 3) << caption[0].text;
  }
}

TEST(RenderSvg, KindsSlicesAndLegend) {
  {
    const Schedule s = hand_mixed();
    const SimulationResult sim = simulate(s);
    const std::vector<XmlElement> els = parse_xml(render_svg(s, sim));
    EXPECT_EQ(with_class(els, "rect", "action").size(), non_idle(s));
    std::set<std::string> fills;
    for (OpKind k : {OpKind::F, OpKind::I, OpKind::W, OpKind::R}) {
      const std::vector<XmlElement> of_kind = with_class(els, "rect", std::string(to_string(k)));
      ASSERT_FALSE(of_kind.empty()) << to_string(k);
      fills.insert(of_kind[0].attrs.at("fill"));
    }
    EXPECT_EQ(fills.size(), 4u) << "each kind has its own colour";
    const std::string legend = all_text(with_class(els, "text", "legend"));
    for (const char* want : {"F forward", "I input gradient", "W weight gradient", "R recompute",
                             "idle", "memory held"})
      EXPECT_NE(legend.find(want), std::string::npos) << want;
    EXPECT_EQ(legend.find("B backward"), std::string::npos) << "only kinds that appear";
  }
  {
    const Schedule s = hand_sliced();
    const std::vector<XmlElement> els = parse_xml(render_svg(s, simulate(s)));
    std::vector<std::string> labels;
    for (const XmlElement& e : with_class(els, "text", "label"))
      labels.push_back(e.text);
    EXPECT_EQ(labels, (std::vector<std::string>{"0.0", "0.1", "0.1", "0.0"}));
    EXPECT_NE(all_text(with_class(els, "text", "figures")).find("2 slices"), std::string::npos);
  }
}

TEST(RenderSvg, LaterChunksAreLighterAndOverlapIsTwoTone) {
  {
    Schedule s = find_generator("interleaved-1f1b")
                     .generate({.ranks = 2, .microbatches = 4}, WGradMode::Fused);
    const std::vector<XmlElement> els = parse_xml(render_svg(s, simulate(s)));
    std::set<std::string> forward_fills;
    for (const XmlElement& e : with_class(els, "rect", "F"))
      forward_fills.insert(e.attrs.at("fill"));
    EXPECT_EQ(forward_fills.size(), 2u) << "one shade per chunk";
    EXPECT_NE(all_text(with_class(els, "text", "legend")).find("later chunk"), std::string::npos);
  }
  {
    Schedule s =
        find_generator("dualpipe-v").generate({.ranks = 4, .microbatches = 10}, WGradMode::Split);
    const std::string svg = render_svg(s, simulate(s));
    const std::vector<XmlElement> els = parse_xml(svg);
    const std::vector<XmlElement> overlaps = with_class(els, "rect", "OVERLAP_F_B");
    ASSERT_FALSE(overlaps.empty());
    std::set<std::string> gradient_ids;
    for (const XmlElement& e : els)
      if (e.name == "linearGradient") gradient_ids.insert(e.attrs.at("id"));
    for (const XmlElement& e : overlaps) {
      const std::string fill = e.attrs.at("fill");
      ASSERT_EQ(fill.rfind("url(#", 0), 0u) << fill;
      EXPECT_EQ(gradient_ids.count(fill.substr(5, fill.size() - 6)), 1u) << fill;
    }
  }
}

TEST(RenderSvg, LabelsOnlyWhereTheyFit) {
  Schedule s = find_generator("1f1b").generate({.ranks = 2, .microbatches = 64}, WGradMode::Fused);
  SvgOptions narrow;
  narrow.width = 300;
  const std::vector<XmlElement> els = parse_xml(render_svg(s, simulate(s), narrow));
  EXPECT_EQ(with_class(els, "rect", "action").size(), non_idle(s));
  EXPECT_TRUE(with_class(els, "text", "label").empty());
}

TEST(RenderSvg, EscapesUserTextIntoWellFormedXml) {
  Schedule s = hand_1f1b();
  s.name = "a<b>&\"c\"'d'\x01\nline\xff";
  const std::string svg = render_svg(s, simulate(s));
  std::vector<XmlElement> els;
  ASSERT_NO_THROW(els = parse_xml(svg)) << svg;
  EXPECT_EQ(with_class(els, "text", "title")[0].text, "a<b>&\"c\"'d'  line\xEF\xBF\xBD");
}

TEST(RenderSvg, EveryGeneratedScheduleDrawsEachActionOnce) {
  for (const Schedule& s : generated_grid()) {
    SCOPED_TRACE(s.name);
    const SimulationResult sim = simulate(s);
    const std::string svg = render_svg(s, sim);
    std::vector<XmlElement> els;
    ASSERT_NO_THROW(els = parse_xml(svg));
    EXPECT_EQ(with_class(els, "rect", "action").size(), drawn(s, sim));
    EXPECT_EQ(with_class(els, "path", "memory").size(), s.ranks.size());
    EXPECT_NE(all_text(with_class(els, "text", "figures"))
                  .find("bubble " + detail::format_percent(sim.bubble_ratio)),
              std::string::npos);
  }
}

TEST(RenderSvg, ZeroLengthCommunicationIsNotDrawn) {
  const Schedule s = lower_communication(hand_1f1b());
  ASSERT_TRUE(s.has_comm());
  const SimulationResult sim = simulate(s);
  const std::vector<XmlElement> els = parse_xml(render_svg(s, sim));
  EXPECT_EQ(with_class(els, "rect", "action").size(), 8u);
  EXPECT_EQ(drawn(s, sim), 8u);
}

// ---- Chrome trace ---------------------------------------------------------------------------

// Checks the trace of `s` against `sim`: metadata naming each rank, one X event per non-idle
// action with name, cat, tid and ts / dur (µs) matching the simulation, a memory counter per
// rank starting at 0 and following the curve.
void expect_trace_matches(const Schedule& s, const SimulationResult& sim, double time_scale) {
  TraceOptions opt;
  opt.time_scale = time_scale;
  const std::string text = render_chrome_trace(s, sim, opt);
  Json doc;
  ASSERT_NO_THROW(doc = parse_json(text)) << text.substr(0, 2000);
  ASSERT_EQ(doc.type, Json::Object);
  const Json& events = doc.at("traceEvents");
  ASSERT_EQ(events.type, Json::Array);

  std::map<int, std::vector<const Json*>> complete;  // tid → X events in order
  std::map<int, std::vector<const Json*>> counters;  // rank → C events in order
  std::set<int> named;
  for (const Json& e : events.array) {
    ASSERT_EQ(e.type, Json::Object);
    const std::string ph = e.at("ph").string;
    EXPECT_EQ(e.at("pid").number, 0);
    if (ph == "X") {
      complete[static_cast<int>(e.at("tid").number)].push_back(&e);
    } else if (ph == "C") {
      const std::string name = e.at("name").string;
      ASSERT_EQ(name.rfind("memory rank ", 0), 0u) << name;
      counters[std::stoi(name.substr(12))].push_back(&e);
    } else if (ph == "M") {
      if (e.at("name").string == "thread_name") {
        const int tid = static_cast<int>(e.at("tid").number);
        EXPECT_EQ(e.at("args").at("name").string, "rank " + std::to_string(tid));
        named.insert(tid);
      }
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_EQ(named.size(), s.ranks.size());

  std::size_t x_count = 0;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& xs = complete[static_cast<int>(r)];
    std::size_t k = 0;
    double previous_end = 0;
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      ASSERT_LT(k, xs.size());
      const Json& e = *xs[k++];
      const ActionTiming& t = sim.timing[r][i];
      EXPECT_EQ(e.at("name").string, to_string(a));
      EXPECT_EQ(e.at("cat").string, to_string(a.kind));
      const double ts = e.at("ts").number, dur = e.at("dur").number;
      EXPECT_NEAR(ts, t.start * time_scale, 1e-3 + 1e-12 * ts);
      EXPECT_NEAR(dur, (t.end - t.start) * time_scale, 2e-3 + 1e-12 * ts);
      EXPECT_GE(dur, 0);
      EXPECT_GE(ts, previous_end - 1e-9) << "events on one rank must not overlap";
      previous_end = ts + dur;
      EXPECT_EQ(e.at("args").at("microbatch").number, a.microbatch);
      EXPECT_EQ(e.at("args").at("start").number, t.start);
      EXPECT_EQ(e.at("args").at("end").number, t.end);
    }
    EXPECT_EQ(k, xs.size());
    x_count += k;

    const auto& cs = counters[static_cast<int>(r)];
    const auto& curve = sim.ranks[r].memory;
    ASSERT_EQ(cs.size(), curve.size() + 1);
    EXPECT_EQ(cs[0]->at("ts").number, 0);
    EXPECT_EQ(cs[0]->at("args").at("units").number, 0);
    for (std::size_t p = 0; p < curve.size(); ++p) {
      EXPECT_NEAR(cs[p + 1]->at("ts").number, curve[p].time * time_scale, 1e-3);
      EXPECT_EQ(cs[p + 1]->at("args").at("units").number, curve[p].value);
    }
  }
  EXPECT_EQ(x_count, non_idle(s));

  const Json& other = doc.at("otherData");
  EXPECT_EQ(other.at("makespan").number, sim.makespan);
  EXPECT_EQ(other.at("bubble_ratio").number, sim.bubble_ratio);
  EXPECT_EQ(other.at("peak_memory_max").number, sim.peak_memory_max);
}

TEST(RenderTrace, HandMadeSchedulesMatchTheSimulation) {
  for (const Schedule& s :
       {hand_1f1b(), hand_mixed(), hand_sliced(), lower_communication(hand_1f1b())}) {
    SCOPED_TRACE(s.name);
    expect_trace_matches(s, simulate(s), 1000);
  }
}

TEST(RenderTrace, HandMade1F1BExactTimes) {
  const Schedule s = hand_1f1b();
  const Json doc = parse_json(render_chrome_trace(s, simulate(s)));
  std::vector<std::pair<double, double>> rank0;
  for (const Json& e : doc.at("traceEvents").array)
    if (e.at("ph").string == "X" && e.at("tid").number == 0)
      rank0.emplace_back(e.at("ts").number, e.at("dur").number);
  EXPECT_EQ(rank0, (std::vector<std::pair<double, double>>{
                       {0, 1000}, {1000, 1000}, {4000, 2000}, {7000, 2000}}));
  EXPECT_EQ(doc.at("otherData").at("schedule").string, "hand-1f1b");
}

TEST(RenderTrace, EveryGeneratedScheduleAtSeveralTimeScales) {
  for (const Schedule& s : generated_grid()) {
    const SimulationResult sim = simulate(s);
    for (double scale : {1.0, 1000.0, 0.001, 3.7}) {
      SCOPED_TRACE(s.name + " time_scale " + std::to_string(scale));
      expect_trace_matches(s, sim, scale);
    }
  }
}

TEST(RenderTrace, PyTorchFileWithCommunicationAndIdleSlots) {
  for (const char* file : {"zb1p_2rank_2stagep_comms.csv", "zb1p_2rank_2stagep_compute.csv",
                           "dualpipev_4rank_10mb.csv"}) {
    SCOPED_TRACE(file);
    const Schedule s = read_csv_file(std::string(PIPESCHED_TEST_DATA_DIR) + "/pytorch/" + file);
    const SimulationResult sim = simulate(s);
    ASSERT_FALSE(sim.deadlock) << sim.deadlock_report;
    expect_trace_matches(s, sim, 1000);
    EXPECT_EQ(with_class(parse_xml(render_svg(s, sim)), "rect", "action").size(), drawn(s, sim));
  }
}

TEST(RenderTrace, EscapesNamesAndUnits) {
  Schedule s = hand_1f1b();
  s.name = "q\"b\\s/\n\t\x01\xff";
  TraceOptions opt;
  opt.memory_unit = "GiB \"x\"";
  const std::string text = render_chrome_trace(s, simulate(s), opt);
  Json doc;
  ASSERT_NO_THROW(doc = parse_json(text)) << text;
  // U+FFFD replaces the invalid byte; the test parser reads it back as its three bytes.
  EXPECT_EQ(doc.at("otherData").at("schedule").string, "q\"b\\s/\n\t\x01\xEF\xBF\xBD");
  bool found = false;
  for (const Json& e : doc.at("traceEvents").array)
    if (e.at("ph").string == "C") found = found || e.at("args").find("GiB \"x\"") != nullptr;
  EXPECT_TRUE(found);
}

TEST(RenderTrace, RejectsTimeScalesOutOfRange) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  for (double bad : {0.0, -1.0, std::nan(""), static_cast<double>(INFINITY), 1e300}) {
    SCOPED_TRACE(bad);
    TraceOptions opt;
    opt.time_scale = bad;
    EXPECT_THROW(render_chrome_trace(s, sim, opt), invalid_problem);
  }
}

// ---- text grid and list ---------------------------------------------------------------------

TEST(RenderTextGrid, HandMade1F1BAutomaticColumns) {
  const Schedule s = hand_1f1b();
  const std::string grid = render_text_grid(s, simulate(s));
  const std::vector<std::string> lines = lines_of(grid);
  ASSERT_EQ(lines.size(), 3u) << grid;
  EXPECT_EQ(lines[0], "hand-1f1b: makespan 9, bubble 33.3%, peak memory 2 units, one column = 0.5");
  // Two columns per time unit: a forward shows letter and microbatch, a backward its letter
  // again over the rest.
  EXPECT_EQ(lines[1], "rank 0 |F0F1....B0BB..B1BB| peak 2 units");
  EXPECT_EQ(lines[2], "rank 1 |..F0B0BBF1B1BB....| peak 1 unit");
}

TEST(RenderTextGrid, TimesAndMemoryInTheCostModelsUnits) {
  const Schedule s = hand_1f1b();
  TextGridOptions opt;
  opt.time_unit = "units";
  opt.memory_unit = "microbatches";
  std::vector<std::string> lines = lines_of(render_text_grid(s, simulate(s), opt));
  EXPECT_EQ(lines[0],
            "hand-1f1b: makespan 9 units, bubble 33.3%, peak memory 2 microbatches, one column = "
            "0.5 units");
  EXPECT_EQ(lines[2], "rank 1 |..F0B0BBF1B1BB....| peak 1 microbatch");
  // TransformerCost: seconds and binary byte prefixes, no abstract unit anywhere.
  const TransformerCost cost{
      presets::find_model("gpt3-1.3b"), presets::find_device("a100-80gb"), {}};
  const Schedule big = schedule::one_f_one_b({.ranks = 4, .microbatches = 8});
  const SimulationResult sim = simulate(big, cost);
  opt.time_unit = "seconds";
  opt.memory_unit = "bytes";
  const std::string grid = render_text_grid(big, sim, opt);
  lines = lines_of(grid);
  EXPECT_EQ(lines[0].rfind("1f1b: makespan " + detail::format_number(sim.makespan) + " s, ", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[0].find("peak memory " + detail::format_memory(sim.peak_memory_max, "bytes")),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(" GiB"), std::string::npos) << lines[0];
  EXPECT_EQ(grid.find("units"), std::string::npos) << grid;
  for (std::size_t r = 1; r < lines.size(); ++r)
    EXPECT_NE(lines[r].find(" GiB"), std::string::npos) << lines[r];
}

TEST(RenderTextGrid, ExplicitColumnsQuantiseTime) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  TextGridOptions opt;
  opt.columns = 9;  // one column per time unit: a forward has no room for its microbatch
  std::vector<std::string> lines = lines_of(render_text_grid(s, sim, opt));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "rank 0 |FF..B0.B1| peak 2 units");
  EXPECT_EQ(lines[2], "rank 1 |.FB0FB1..| peak 1 unit");
  opt.columns = 3;  // cells cover [0,3), [3,6), [6,9): the action running at 1.5, 4.5, 7.5
  lines = lines_of(render_text_grid(s, sim, opt));
  EXPECT_EQ(lines[1], "rank 0 |FBB| peak 2 units");
  EXPECT_EQ(lines[2], "rank 1 |FF.| peak 1 unit");
}

TEST(RenderTextGrid, KindLettersSlicesAndOverlap) {
  {
    const Schedule s = hand_mixed();
    const std::vector<std::string> lines = lines_of(render_text_grid(s, simulate(s)));
    ASSERT_EQ(lines.size(), 3u);
    for (char c : {'F', 'R', 'I', 'W'})
      EXPECT_NE(lines[1].find(c), std::string::npos) << c << " in " << lines[1];
  }
  {
    const Schedule s = hand_sliced();
    TextGridOptions opt;
    opt.columns = 12;  // F 0.5 → 2 cells, B 1 → 4 cells, each half a unit's slice
    const std::vector<std::string> lines = lines_of(render_text_grid(s, simulate(s), opt));
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[1], "rank 0 |FFFFB0.1B0.0| peak 1 unit");
  }
  {
    const Schedule s =
        find_generator("dualpipe-v").generate({.ranks = 4, .microbatches = 10}, WGradMode::Split);
    const std::string grid = render_text_grid(s, simulate(s));
    EXPECT_NE(grid.find("O7/3"), std::string::npos) << grid;
  }
}

TEST(RenderTextGrid, EveryGeneratedScheduleHasTheRightLetterInEachCell) {
  for (const Schedule& s : generated_grid()) {
    SCOPED_TRACE(s.name);
    const SimulationResult sim = simulate(s);
    const std::vector<std::string> lines = lines_of(render_text_grid(s, sim));
    ASSERT_EQ(lines.size(), s.ranks.size() + 1);
    for (std::size_t r = 0; r < s.ranks.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::string& line = lines[r + 1];
      const std::size_t open = line.find('|'), close = line.rfind('|');
      ASSERT_NE(open, close);
      const std::string cells = line.substr(open + 1, close - open - 1);
      ASSERT_FALSE(cells.empty());
      const double dt = sim.makespan / static_cast<double>(cells.size());
      int previous = -1;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        SCOPED_TRACE("column " + std::to_string(c));
        const double mid = (static_cast<double>(c) + 0.5) * dt;
        int at = -1;
        for (std::size_t i = 0; i < s.ranks[r].size(); ++i)
          if (s.ranks[r][i].kind != OpKind::Idle && sim.timing[r][i].start <= mid &&
              mid < sim.timing[r][i].end)
            at = static_cast<int>(i);
        if (at < 0) {
          EXPECT_EQ(cells[c], '.');
        } else {
          const char letter = detail::kind_letter(s.ranks[r][at].kind);
          if (at != previous)
            EXPECT_EQ(cells[c], letter);
          else
            EXPECT_TRUE(cells[c] == letter || std::isdigit(static_cast<unsigned char>(cells[c])) ||
                        cells[c] == '/')
                << cells[c];
        }
        previous = at;
      }
    }
  }
}

TEST(RenderTextGrid, AutomaticColumnsAreCapped) {
  const Schedule s =
      find_generator("1f1b").generate({.ranks = 8, .microbatches = 64}, WGradMode::Fused);
  const std::vector<std::string> lines = lines_of(render_text_grid(s, simulate(s)));
  ASSERT_EQ(lines.size(), 9u);
  const std::size_t open = lines[1].find('|'), close = lines[1].rfind('|');
  EXPECT_EQ(close - open - 1, 160u);
  TextGridOptions opt;
  opt.max_columns = 50;
  const std::vector<std::string> capped = lines_of(render_text_grid(s, simulate(s), opt));
  EXPECT_EQ(capped[1].rfind('|') - capped[1].find('|') - 1, 50u);
}

TEST(RenderTextGrid, ColourWrapsRunsAndStripsToThePlainGrid) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  TextGridOptions opt;
  opt.color = true;
  std::string coloured = render_text_grid(s, sim, opt);
  EXPECT_NE(coloured.find("\x1b[34mF0\x1b[0m"), std::string::npos);
  EXPECT_NE(coloured.find("\x1b[32mB0BB\x1b[0m"), std::string::npos);
  std::string stripped;
  for (std::size_t i = 0; i < coloured.size(); ++i) {
    if (coloured[i] == '\x1b') {
      i = coloured.find('m', i);
      continue;
    }
    stripped += coloured[i];
  }
  EXPECT_EQ(stripped, render_text_grid(s, sim));
}

TEST(RenderTextGrid, RejectsColumnsOutOfRange) {
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);
  for (auto [columns, max_columns] : {std::pair{-1, 160}, {100001, 160}, {0, 0}, {0, -5}}) {
    SCOPED_TRACE(std::to_string(columns) + " " + std::to_string(max_columns));
    TextGridOptions opt;
    opt.columns = columns;
    opt.max_columns = max_columns;
    EXPECT_THROW(render_text_grid(s, sim, opt), invalid_problem);
  }
}

TEST(RenderTextList, OneLinePerRankWithIdleSlots) {
  EXPECT_EQ(render_text_list(hand_1f1b()),
            "rank 0: 0F0 0F1 0B0 0B1\n"
            "rank 1: 1F0 1B0 1F1 1B1\n");
  EXPECT_EQ(render_text_list(hand_mixed()),
            "rank 0: 0F0 0F1 - 0R0 0I0 0W0 0I1 0W1\n"
            "rank 1: 1F0 1I0 1F1 1I1 1W1 1W0\n");
  EXPECT_EQ(render_text_list(hand_sliced()), "rank 0: 0F0 0F0.1 0B0.1 0B0\n");
}

// ---- every picture refuses a result that does not belong to the schedule --------------------

TEST(RenderErrors, MismatchedOrDeadlockedSimulationsAndBadOptions) {
  using Renderer = std::function<std::string(const Schedule&, const SimulationResult&)>;
  const std::vector<std::pair<const char*, Renderer>> renderers{
      {"svg", [](const Schedule& s, const SimulationResult& r) { return render_svg(s, r); }},
      {"trace",
       [](const Schedule& s, const SimulationResult& r) { return render_chrome_trace(s, r); }},
      {"grid", [](const Schedule& s, const SimulationResult& r) { return render_text_grid(s, r); }},
  };
  const Schedule s = hand_1f1b();
  const SimulationResult other =
      simulate(find_generator("1f1b").generate({.ranks = 2, .microbatches = 4}, WGradMode::Fused));
  SimulationResult nan_time = simulate(s);
  nan_time.timing[1][2].end = std::nan("");
  SimulationResult backwards = simulate(s);
  backwards.timing[0][1].end = backwards.timing[0][1].start - 1;

  // Rank 1 waits for microbatch 1's forward, which rank 0 runs only after microbatch 0's
  // backward, which needs rank 1's, which rank 1 runs last.
  Schedule stuck = hand_1f1b();
  stuck.ranks[0] = {F(0, 0), B(0, 0), F(0, 1), B(0, 1)};
  stuck.ranks[1] = {F(1, 1), B(1, 1), F(1, 0), B(1, 0)};
  const SimulationResult deadlocked = simulate(stuck);
  ASSERT_TRUE(deadlocked.deadlock);

  for (const auto& [what, render] : renderers) {
    SCOPED_TRACE(what);
    EXPECT_THROW(render(s, other), invalid_schedule);
    EXPECT_THROW(render(s, nan_time), invalid_schedule);
    EXPECT_THROW(render(s, backwards), invalid_schedule);
    try {
      render(stuck, deadlocked);
      ADD_FAILURE() << "a deadlocked simulation was drawn";
    } catch (const invalid_schedule& e) {
      EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    }
  }

  const SimulationResult sim = simulate(s);
  for (auto [width, row_height] : {std::pair{299, 26}, {100001, 26}, {1200, 9}, {1200, 401}}) {
    SCOPED_TRACE(std::to_string(width) + " x " + std::to_string(row_height));
    SvgOptions opt;
    opt.width = width;
    opt.row_height = row_height;
    EXPECT_THROW(render_svg(s, sim, opt), invalid_problem);
  }
}

}  // namespace
}  // namespace pipesched
