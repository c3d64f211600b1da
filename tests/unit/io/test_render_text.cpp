// Schedule pictures as text: the Chrome trace is valid JSON whose events match the simulation,
// the text grid puts the right letters in the right columns, and every picture refuses a
// simulation that is not of its schedule.
#include "render_support.hpp"

namespace pipesched::test_render_text {
namespace {

using namespace render_test;

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
  EXPECT_EQ(
      lines[0].rfind("1f1b: makespan " + detail::format_time(sim.makespan, "seconds") + ", ", 0),
      0u)
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
}  // namespace pipesched::test_render_text
