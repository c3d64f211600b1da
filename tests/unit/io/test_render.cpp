// Schedule pictures: the SVG timeline is well-formed XML with one rectangle per action at its
// simulated time; the checkers the picture tests use, and the number formatting they share
// (the Chrome trace and the text grid: test_render_text.cpp).
#include "render_support.hpp"

namespace pipesched::test_render {
namespace {

using namespace render_test;

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

TEST(RenderFormat, TimesBelowASecondKeepTheirDigitsInMillisecondsAndMicroseconds) {
  // Seconds with three decimals wrote 1.205 ms as "0.001 s".
  EXPECT_EQ(detail::format_time(0.001205, "seconds"), "1.205 ms");
  EXPECT_EQ(detail::format_time(0.0012051234, "seconds", 6), "1.20512 ms");
  EXPECT_EQ(detail::format_time(0.0125, "s"), "12.5 ms");
  EXPECT_EQ(detail::format_time(0.00025, "seconds"), "250 \xC2\xB5s");
  EXPECT_EQ(detail::format_time(4.567e-6, "seconds"), "4.567 \xC2\xB5s");
  EXPECT_EQ(detail::format_time(-0.0125, "seconds"), "-12.5 ms");
  // The prefix is chosen after rounding: never "1000 ms" or "1000 µs".
  EXPECT_EQ(detail::format_time(0.9999999, "seconds"), "1 s");
  EXPECT_EQ(detail::format_time(0.0009999999, "seconds"), "1 ms");
  EXPECT_EQ(detail::format_time(9.9999999e-7, "seconds"), "1 \xC2\xB5s");
  // Below a microsecond and from a second up, seconds.
  EXPECT_EQ(detail::format_time(5e-7, "seconds"), "5e-07 s");
  EXPECT_EQ(detail::format_time(12.25, "seconds"), "12.25 s");
  // Other units are untouched by the prefixes.
  EXPECT_EQ(detail::format_time(0.001205, "units"), "0.001 units");
}

TEST(RenderFormat, TimesAndMemoryInACostModelsUnits) {
  EXPECT_EQ(detail::format_time(0.447, "seconds"), "447 ms");
  EXPECT_EQ(detail::format_time(0.24755, "seconds", 6), "247.55 ms");
  EXPECT_EQ(detail::format_time(1.5, "seconds"), "1.5 s");
  EXPECT_EQ(detail::format_time(0, "seconds"), "0 s");
  EXPECT_EQ(detail::format_time(44, "units"), "44 units");
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

TEST(RenderSvg, TimeTicksCarryTheirUnit) {
  // Seconds: SI-prefixed ticks, the prefix set by the span; units: bare numbers, which the
  // caption "time (units)" names.
  const Schedule s = hand_1f1b();
  const SimulationResult sim = simulate(s);  // makespan 9
  struct Case {
    double scale;
    const char* unit;
    const char* second_tick;
  };
  for (const Case& c : {Case{1, "units", "1"}, Case{1, "seconds", "1 s"},
                        Case{1e-3, "seconds", "1 ms"}, Case{1e-6, "seconds", "1 \xC2\xB5s"}}) {
    SCOPED_TRACE(std::string(c.unit) + " " + std::to_string(c.scale));
    SimulationResult scaled = sim;
    scaled.makespan *= c.scale;
    for (auto& rank : scaled.timing)
      for (ActionTiming& t : rank) {
        t.start *= c.scale;
        t.end *= c.scale;
      }
    for (RankSummary& rs : scaled.ranks)
      for (MemoryPoint& m : rs.memory)
        m.time *= c.scale;
    SvgOptions opt;
    opt.time_unit = c.unit;
    const std::vector<XmlElement> ticks =
        with_class(parse_xml(render_svg(s, scaled, opt)), "text", "tick");
    ASSERT_GE(ticks.size(), 3u);
    EXPECT_EQ(ticks[0].text, "0");
    EXPECT_EQ(ticks[1].text, c.second_tick);
  }
  EXPECT_EQ(detail::time_tick(0.0125, 0.02, "seconds"), "12.5 ms");
  EXPECT_EQ(detail::time_tick(1.5, 2, "seconds"), "1.5 s");
  EXPECT_EQ(detail::time_tick(2.5e-4, 8e-4, "seconds"), "250 \xC2\xB5s");
  EXPECT_EQ(detail::time_tick(5, 10, "units"), "5");
  const double GiB = 1024.0 * 1024 * 1024;
  EXPECT_EQ(detail::memory_tick(3.2 * GiB, 4 * GiB, "bytes"), "3.2 GiB");
  EXPECT_EQ(detail::memory_tick(0.5 * GiB, 2 * GiB, "bytes"), "0.5 GiB");
  EXPECT_EQ(detail::memory_tick(512 * 1024, 900 * 1024, "bytes"), "512 KiB");
  EXPECT_EQ(detail::memory_tick(2.5, 3, "microbatches"), "2.5");
  EXPECT_DOUBLE_EQ(detail::memory_tick_step(3.2 * GiB, 8, "bytes"), 0.5 * GiB);
}

TEST(RenderSvg, MeasuredStepInSecondsAndBytes) {
  // A measured step (the executor's timeline) read as seconds and bytes, as the README draws it.
  const Schedule s = hand_1f1b();
  SimulationResult sim = simulate(s);
  for (auto& rank : sim.timing)
    for (ActionTiming& t : rank) {
      t.start *= 1e-3;
      t.end *= 1e-3;
    }
  sim.makespan *= 1e-3;
  for (RankSummary& rs : sim.ranks) {
    rs.peak_memory *= 3 << 20;
    for (MemoryPoint& m : rs.memory) {
      m.time *= 1e-3;
      m.value *= 3 << 20;
    }
  }
  sim.peak_memory_max *= 3 << 20;
  SvgOptions options;
  options.memory_unit = "bytes";
  options.time_unit = "seconds";
  const std::vector<XmlElement> els = parse_xml(render_svg(s, sim, options));
  const std::string figures = all_text(with_class(els, "text", "figures"));
  EXPECT_NE(figures.find("makespan 9 ms"), std::string::npos) << figures;
  EXPECT_NE(figures.find("peak memory 6 MiB"), std::string::npos) << figures;
  EXPECT_NE(all_text(with_class(els, "text", "peak")).find("MiB"), std::string::npos);
  EXPECT_EQ(with_class(els, "text", "tick")[1].text, "1 ms");
  EXPECT_EQ(all_text(with_class(els, "text", "figures")).find("units"), std::string::npos);
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

// Vocabulary passes have colours and legend entries of their own.
TEST(RenderSvg, VocabularyPassesHaveColoursOfTheirOwn) {
  Schedule s;
  s.name = "vocab";
  s.problem = {.ranks = 2, .stages = 2, .microbatches = 1};
  s.placement = Placement::linear(2);
  auto act = [](OpKind k, int stage) { return Action::make(k, stage, 0); };
  s.ranks = {
      {act(OpKind::F, 0), act(OpKind::VocabF, 0), act(OpKind::VocabB, 0), act(OpKind::B, 0)},
      {act(OpKind::F, 1), act(OpKind::VocabF, 1), act(OpKind::B, 1), act(OpKind::VocabB, 1)}};
  ASSERT_TRUE(check(s).ok()) << check(s).summary();
  const std::vector<XmlElement> els = parse_xml(render_svg(s, simulate(s)));
  std::set<std::string> fills;
  for (OpKind k : {OpKind::F, OpKind::B, OpKind::VocabF, OpKind::VocabB}) {
    const std::vector<XmlElement> of_kind = with_class(els, "rect", std::string(to_string(k)));
    ASSERT_FALSE(of_kind.empty()) << to_string(k);
    fills.insert(of_kind[0].attrs.at("fill"));
  }
  EXPECT_EQ(fills.size(), 4u) << "each kind has its own colour";
  const std::string legend = all_text(with_class(els, "text", "legend"));
  for (const char* want : {"S vocabulary forward", "T vocabulary backward"})
    EXPECT_NE(legend.find(want), std::string::npos) << want;
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

}  // namespace
}  // namespace pipesched::test_render
