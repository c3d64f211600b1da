// pipesched tune: searches base schedule, chunks, microbatch size and count, slices, fine
// weight gradients and checkpointing with the simulator under a per-rank memory budget, with
// progress on standard error. In steps: read the command line (cmd_tune_options.cpp), search
// (here), print (cmd_tune_report.cpp).
#include <unistd.h>

#include <sys/ioctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/io/detail/render_common.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::cli {

namespace {

//! "under 1 s left", "about 12 s left", "about 3 min left": the rest of a search.
std::string time_left(double seconds) {
  if (seconds < 1) return "under 1 s left";
  if (seconds < 120) return "about " + std::to_string(static_cast<int>(seconds + 0.5)) + " s left";
  if (seconds < 7200)
    return "about " + std::to_string(static_cast<int>(seconds / 60 + 0.5)) + " min left";
  return "about " + detail::format_number(seconds / 3600, 2) + " h left";
}

//! The progress line of a search on standard error: rewritten in place with "\r", padded over
//! whatever the previous text left, cut to the terminal's width so that it never wraps (a
//! wrapped line cannot be rewritten), with an estimate of the time left. Ends its line when
//! the search ends, however it ends.
//!
//! The estimate is the candidates left at the rate measured over the last few seconds of
//! settled candidates (setup before the first, and a phase of cheap candidates long past, do
//! not count), and never more than --time-limit leaves; "time left unknown" until a second
//! of candidates has been measured.
class ProgressLine {
 public:
  ProgressLine(bool show, double time_limit)
      : show_(show), time_limit_(time_limit), start_(Clock::now()) {
    winsize ws{};
    if (show_ && ::isatty(2) && ::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
      width_ = ws.ws_col - 1;
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() {
    if (printed_ > 0) std::fputc('\n', stderr);
  }

  void update(int done, int total, const TunePlan* best, const std::string& time_unit) {
    if (!show_) return;
    const auto now = Clock::now();
    // A line per candidate would flood a slow terminal: the first, then ten a second.
    if (done != 1 && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::string text =
        "tune: " + std::to_string(done) + "/" + std::to_string(total) + " candidates";
    if (done < total)
      text += ", " + estimate(now, done, total, elapsed);
    else
      text += " in " + detail::format_number(elapsed, 3) + " s";
    if (best)
      text += (done < total ? ", best so far: " : ", best: ") + describe(*best) + ", step " +
              detail::format_time(best->makespan, time_unit);
    if (text.size() > width_) text.resize(width_);
    std::string line = "\r" + text;
    if (text.size() < printed_) line.append(printed_ - text.size(), ' ');
    printed_ = text.size();
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;

  //! The time left after `done` of `total` candidates, `elapsed` seconds into the search.
  std::string estimate(Clock::time_point now, int done, int total, double elapsed) {
    const double limit_left = time_limit_ > 0 ? std::max(0.0, time_limit_ - elapsed) : -1;
    if (done > 0 && samples_.empty()) samples_.push_back({now, done});
    // The rate over the last 10 s: the oldest sample within them, one older kept as the base.
    while (samples_.size() > 1 && now - samples_[1].at > std::chrono::seconds(10))
      samples_.erase(samples_.begin());
    std::string text = "time left unknown";
    if (!samples_.empty() && now - samples_.front().at >= std::chrono::seconds(1) &&
        done > samples_.front().done) {
      const double seconds = std::chrono::duration<double>(now - samples_.front().at).count();
      const double left = (total - done) * seconds / (done - samples_.front().done);
      text = limit_left >= 0 && limit_left < left ? time_left(limit_left) + " (--time-limit)"
                                                  : time_left(left);
    } else if (limit_left >= 0) {
      text = "at most " + time_left(limit_left).substr(6) + " (--time-limit)";
    }
    if (done > 0 && (samples_.empty() || samples_.back().done != done))
      samples_.push_back({now, done});
    return text;
  }

  struct Sample {
    Clock::time_point at;
    int done;
  };
  bool show_;
  double time_limit_;
  Clock::time_point start_;
  std::vector<Sample> samples_;  // (time, candidates settled), the last 10 s
  Clock::time_point last_{};
  std::size_t width_ = 160;  // off a terminal: long enough for any line, still bounded
  std::size_t printed_ = 0;
};

//! The search `c` asks for, with its progress line; the library's refusals as usage_error.
TuneResult run_search(const TuneCommand& c) {
  const TuneRequest& req = c.req;
  ProgressLine line(c.progress || ::isatty(2), req.time_limit);
  auto progress = [&](int done, int total, const TunePlan* best) {
    line.update(done, total, best, c.units.time);
  };
  Step step(c.cluster
                ? "searching " + std::to_string(c.creq.gpus) + " GPUs for a global batch of " +
                      std::to_string(req.global_batch)
                : "searching " + std::to_string(req.ranks) +
                      "-rank pipelines for a global batch of " + std::to_string(req.global_batch));
  try {
    if (c.cluster) {
      const auto& t = std::get<TransformerCost>(c.cost);
      return tune_cluster(c.creq, t.model, t.device, progress);
    } else if (c.transformer) {
      const auto& t = std::get<TransformerCost>(c.cost);
      return tune(req, TransformerCostFactory{t.model, t.device, t.parallel}, progress);
    } else {
      return tune(req, std::get<UniformCost>(c.cost), progress);
    }
  } catch (const invalid_problem& e) {
    throw usage_error(e.message());
  }
}

}  // namespace

int cmd_tune(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = tune_option_specs();
  if (wants_help(argv)) {
    std::cout << tune_help(specs);
    return exit_ok;
  }
  const TuneCommand c = read_tune_command(argv, specs);
  const TuneResult r = run_search(c);
  require_finite(r);
  if (c.json)
    print_tune_json(r, c);
  else
    print_tune_text(r, c);
  if (!c.report.empty()) write_tune_html(r, c, argv);
  return r.best ? exit_ok : exit_invalid;
}

}  // namespace pipesched::cli
