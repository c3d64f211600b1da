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

//! `text` as a JSON string literal: valid UTF-8, quotes, backslashes and control characters
//! escaped.
inline std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char ch : sanitize_utf8(text)) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char digits[] = "0123456789abcdef";
          out += "\\u00";
          out += digits[c >> 4];
          out += digits[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

//! A finite double as a JSON number, in the shortest form that reads back to the same value.
inline std::string json_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s = ec == std::errc() ? std::string(buf, end) : std::string("0");
  return s == "-0" ? "0" : s;
}

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
    throw invalid_problem("TraceOptions.time_scale = " + std::to_string(opt.time_scale) +
                          " is out of range; use a finite number of microseconds per simulated "
                          "time unit > 0 (1000 shows one unit as one millisecond).");
  check_simulation(s, sim, "a Chrome trace");
  // Times travel as integer nanoseconds so an action's end and the next one's start, equal
  // in the simulation, stay equal after rounding; 2^53 ns keeps every integer exact.
  constexpr double max_ns = 9007199254740992.0;
  auto nanos = [&](double t) -> std::int64_t {
    const double ns = t * opt.time_scale * 1000.0;
    if (!(ns <= max_ns))
      throw invalid_problem("TraceOptions.time_scale = " + std::to_string(opt.time_scale) +
                            " makes simulated time " + std::to_string(t) +
                            " too large for a trace (over 2^53 ns); use a smaller time_scale.");
    return static_cast<std::int64_t>(std::llround(ns));
  };
  nanos(sim.makespan);

  const int nranks = static_cast<int>(s.ranks.size());
  const std::string series = json_string(opt.memory_unit.empty() ? "memory" : opt.memory_unit);
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string& body) {
    out += first ? "  {" : ",\n  {";
    out += body;
    out += "}";
    first = false;
  };

  event("\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": " +
        json_string(s.name.empty() ? "schedule" : s.name) + "}");
  for (int r = 0; r < nranks; ++r) {
    const std::string tid = std::to_string(r);
    event("\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + tid +
          ", \"args\": {\"name\": \"rank " + tid + "\"}");
    event("\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + tid +
          ", \"args\": {\"sort_index\": " + tid + "}");
  }

  for (int r = 0; r < nranks; ++r) {
    const std::string tid = std::to_string(r);
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::Idle) continue;
      const ActionTiming& t = sim.timing[r][i];
      const std::int64_t start = nanos(t.start), end = nanos(t.end);
      std::string args = "\"stage\": " + std::to_string(a.stage) +
                         ", \"microbatch\": " + std::to_string(a.microbatch) +
                         ", \"slice\": " + std::to_string(a.slice);
      if (a.kind == OpKind::W) args += ", \"part\": " + std::to_string(a.part);
      if (a.kind == OpKind::Overlap)
        args += ", \"b_stage\": " + std::to_string(a.b_stage) +
                ", \"b_microbatch\": " + std::to_string(a.b_microbatch) +
                ", \"b_slice\": " + std::to_string(a.b_slice);
      args += ", \"start\": " + json_number(t.start) + ", \"end\": " + json_number(t.end);
      event("\"name\": " + json_string(to_string(a)) +
            ", \"cat\": " + json_string(to_string(a.kind)) +
            ", \"ph\": \"X\", \"pid\": 0, \"tid\": " + tid + ", \"ts\": " + micros_of_nanos(start) +
            ", \"dur\": " + micros_of_nanos(end - start) + ", \"args\": {" + args + "}");
    }
  }

  for (int r = 0; r < nranks; ++r) {
    const std::string head = "\"name\": \"memory rank " + std::to_string(r) +
                             "\", \"ph\": \"C\", \"pid\": 0, \"tid\": " + std::to_string(r) +
                             ", \"ts\": ";
    event(head + "0, \"args\": {" + series + ": 0}");
    for (const MemoryPoint& p : sim.ranks[r].memory)
      event(head + micros_of_nanos(nanos(std::max(p.time, 0.0))) + ", \"args\": {" + series + ": " +
            json_number(p.value) + "}");
  }

  out += "\n],\n\"otherData\": {\"schedule\": " + json_string(s.name) +
         ", \"ranks\": " + std::to_string(s.problem.ranks) +
         ", \"stages\": " + std::to_string(s.problem.stages) +
         ", \"microbatches\": " + std::to_string(s.problem.microbatches) +
         ", \"slices\": " + std::to_string(s.problem.slices) +
         ", \"makespan\": " + json_number(sim.makespan) +
         ", \"bubble_ratio\": " + json_number(sim.bubble_ratio) +
         ", \"peak_memory_max\": " + json_number(sim.peak_memory_max) +
         ", \"memory_unit\": " + json_string(opt.memory_unit) +
         ", \"time_scale_us\": " + json_number(opt.time_scale) + "}\n}\n";
  return out;
}

}  // namespace pipesched
