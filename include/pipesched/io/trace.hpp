// Chrome trace (Trace Event Format) JSON of a simulated schedule, for chrome://tracing and
// Perfetto: a thread per rank with a complete ("X") event per action, a memory counter ("C")
// per rank, and metadata ("M") events naming the threads.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/io/json.hpp"

namespace pipesched {

//! How render_chrome_trace writes times and counters.
struct TraceOptions {
  //! Microseconds per simulated time unit (the trace's own unit is the microsecond); the
  //! default shows one unit as one millisecond. Must be finite and > 0.
  double time_scale = 1000.0;
  //! Name of the memory counters' series ("units", "GiB", "bytes", ...).
  std::string memory_unit = "units";
};

namespace detail {

//! Nanoseconds as microseconds with up to three decimals, exactly ("1500.25").
inline std::string micros_of_nanos(std::int64_t ns) {
  std::string s = std::to_string(ns / 1000);
  if (const std::int64_t frac = ns % 1000; frac != 0) {
    std::string f = std::to_string(frac);
    f.insert(0, 3 - f.size(), '0');
    while (f.back() == '0')
      f.pop_back();
    s += "." + f;
  }
  return s;
}

}  // namespace detail

//! The Trace Event Format JSON of `s` as simulated in `sim` (the result of `simulate(s, ...)`):
//! `{"traceEvents": [...], "otherData": {...}}` with, for every rank r, metadata events
//! naming thread r "rank r" (pid 0, tid r) and keeping the threads in rank order; an "X"
//! event per action that is not an idle slot (name = its action string, cat = its kind,
//! ts / dur in microseconds = simulated time × `time_scale`, args = its indices and its
//! simulated start and end); and "C" events "memory rank r" tracing the rank's held memory
//! from 0 at time 0. Times are rounded to whole nanoseconds, from the start and end, so
//! consecutive actions on a rank never overlap in the trace. "otherData" holds the schedule's
//! name and headline figures. Throws invalid_schedule when `sim` does not belong to `s` or
//! records a deadlock, and invalid_problem when `time_scale` is not finite and > 0 or makes
//! a time too large to write.
inline std::string render_chrome_trace(const Schedule& s, const SimulationResult& sim,
                                       const TraceOptions& opt = {}) {
  using namespace detail;
  if (!(std::isfinite(opt.time_scale) && opt.time_scale > 0))
    throw invalid_argument(field("TraceOptions.time_scale", std::to_string(opt.time_scale)) +
                               " is out of range; use a finite number of microseconds per simulated "
                          "time unit > 0 (1000 shows one unit as one millisecond).",
                           "TraceOptions.time_scale", std::to_string(opt.time_scale));
  check_simulation(s, sim, "a Chrome trace");
  // Times travel as integer nanoseconds so an action's end and the next one's start, equal
  // in the simulation, stay equal after rounding; 2^53 ns keeps every integer exact.
  constexpr double max_ns = 9007199254740992.0;
  auto nanos = [&](double t) -> std::int64_t {
    const double ns = t * opt.time_scale * 1000.0;
    if (!(ns <= max_ns))
      throw invalid_problem(field("TraceOptions.time_scale", std::to_string(opt.time_scale)) +
                            " makes simulated time " + std::to_string(t) +
                            " too large for a trace (over 2^53 ns); use a smaller time_scale.");
    return static_cast<std::int64_t>(std::llround(ns));
  };
  nanos(sim.makespan);

  const int nranks = static_cast<int>(s.ranks.size());
  const std::string series = opt.memory_unit.empty() ? "memory" : opt.memory_unit;
  // One event per line, each written by its own spaced json::Writer.
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto event = [&](json::Writer& w) {
    out += first ? "  " : ",\n  ";
    out += w.take();
    first = false;
  };
  auto begin_event = [](const char* name, const char* phase) {
    json::Writer w(true);
    w.begin_object().field("name", name).field("ph", phase).field("pid", 0);
    return w;
  };

  {
    json::Writer w = begin_event("process_name", "M");
    w.key("args").begin_object().field("name", s.name.empty() ? "schedule" : s.name);
    w.end_object().end_object();
    event(w);
  }
  for (int r = 0; r < nranks; ++r) {
    json::Writer name = begin_event("thread_name", "M");
    name.field("tid", r).key("args").begin_object().field("name", "rank " + std::to_string(r));
    name.end_object().end_object();
    event(name);
    json::Writer order = begin_event("thread_sort_index", "M");
    order.field("tid", r).key("args").begin_object().field("sort_index", r);
    order.end_object().end_object();
    event(order);
  }

  for (int r = 0; r < nranks; ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      const ActionTiming& t = sim.timing[r][i];
      const std::int64_t start = nanos(t.start), end = nanos(t.end);
      json::Writer w(true);
      w.begin_object().field("name", to_string(a)).field("cat", to_string(a.kind));
      w.field("ph", "X").field("pid", 0).field("tid", r);
      w.key("ts").raw(micros_of_nanos(start)).key("dur").raw(micros_of_nanos(end - start));
      w.key("args").begin_object();
      w.field("stage", a.stage).field("microbatch", a.microbatch).field("slice", a.slice);
      if (a.kind == OpKind::W) w.field("part", a.part);
      if (a.kind == OpKind::Overlap)
        w.field("b_stage", a.b_stage)
            .field("b_microbatch", a.b_microbatch)
            .field("b_slice", a.b_slice);
      w.field("start", t.start).field("end", t.end);
      w.end_object().end_object();
      event(w);
    }
  }

  for (int r = 0; r < nranks; ++r) {
    const std::string name = "memory rank " + std::to_string(r);
    auto counter = [&](const std::string& ts, double value) {
      json::Writer w(true);
      w.begin_object().field("name", name).field("ph", "C").field("pid", 0).field("tid", r);
      w.key("ts").raw(ts).key("args").begin_object().field(series, value);
      w.end_object().end_object();
      event(w);
    };
    counter("0", 0.0);
    for (const MemoryPoint& p : sim.ranks[r].memory)
      counter(micros_of_nanos(nanos(std::max(p.time, 0.0))), p.value);
  }

  json::Writer other(true);
  other.begin_object()
      .field("schedule", s.name)
      .field("ranks", s.problem.ranks)
      .field("stages", s.problem.stages)
      .field("microbatches", s.problem.microbatches)
      .field("slices", s.problem.slices)
      .field("makespan", sim.makespan)
      .field("bubble_ratio", sim.bubble_ratio)
      .field("peak_memory_max", sim.peak_memory_max)
      .field("memory_unit", opt.memory_unit)
      .field("time_scale_us", opt.time_scale)
      .end_object();
  out += "\n],\n\"otherData\": " + other.take() + "\n}\n";
  return out;
}

}  // namespace pipesched
