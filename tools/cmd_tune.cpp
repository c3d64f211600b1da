// pipesched tune: searches base schedule, chunks, microbatch size and count, slices, fine
// weight gradients and checkpointing with the simulator under a per-rank memory budget, with
// progress on standard error. In steps: read the command line (cmd_tune_options.cpp), check
// that the files it will write can be written, search (here; SIGINT and SIGTERM end the
// search early with what it found), print (cmd_tune_report.cpp).
#include <fcntl.h>
#include <unistd.h>

#include <sys/ioctl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cli.hpp"
#include "cmd_tune.hpp"
#include "pipesched/core/format.hpp"
#include "pipesched/tune/tune.hpp"

namespace pipesched::cli {

namespace {

//! Set by the first SIGINT or SIGTERM during the search: the search stops (tuning::Request::
//! stop_flag) and prints what it found. std::atomic<bool> is lock-free, so the handler may set
//! it; the signal's number is kept for the message, and its time (CLOCK_MONOTONIC, ns).
std::atomic<bool> interrupted{false};
volatile std::sig_atomic_t interrupt_signal = 0;
std::atomic<long long> interrupted_at{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<long long>::is_always_lock_free,
              "the signal handler sets these: they must be lock-free");

long long monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

extern "C" void on_interrupt(int sig) {
  if (interrupted.load()) {
    // A second signal a second or more after the first: the user wants out now, as without
    // the handler. Sooner it is the same request sent twice (`timeout` signals the command
    // and then its process group).
    if (monotonic_ns() - interrupted_at.load() < 1000000000LL) return;
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  interrupt_signal = sig;
  interrupted_at.store(monotonic_ns());
  interrupted.store(true);
}

//! SIGINT and SIGTERM set `interrupted` while it lives (the search), and do what they did
//! before once it is gone (the printing ends as any command would).
class InterruptGuard {
 public:
  InterruptGuard() {
    interrupted = false;
    interrupt_signal = 0;
    struct sigaction on {};
    on.sa_handler = on_interrupt;
    sigemptyset(&on.sa_mask);
    on.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &on, &old_int_);
    ::sigaction(SIGTERM, &on, &old_term_);
  }
  ~InterruptGuard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

//! "SIGINT" or "SIGTERM": the signal that cut the search.
std::string interrupt_name() {
  return interrupt_signal == SIGINT    ? "SIGINT"
         : interrupt_signal == SIGTERM ? "SIGTERM"
                                       : "signal " + std::to_string(interrupt_signal);
}

//! Usage error unless `path` can be written, checked before the search so that a long search
//! is not lost to a path that cannot take its result: a file that exists is opened for writing
//! (not truncated), one that does not is created and removed again.
void check_writable(const std::string& path, const std::string& option) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  bool created = fd >= 0;
  if (!created && errno == EEXIST) fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    throw usage_error("cannot write '" + path + "' for " + option + ": " + std::strerror(errno) +
                      "; give a file in a directory that exists and can be written (checked "
                      "before the search, so that its result is not lost)");
  ::close(fd);
  if (created) ::unlink(path.c_str());
}

//! "under 1 s left", "about 12 s left", "about 3 min left": the rest of a search.
std::string time_left(double seconds) {
  if (seconds < 1) return "under 1 s left";
  if (seconds < 120) return "about " + std::to_string(static_cast<int>(seconds + 0.5)) + " s left";
  if (seconds < 7200)
    return "about " + std::to_string(static_cast<int>(seconds / 60 + 0.5)) + " min left";
  return "about " + format_number(seconds / 3600, 2) + " h left";
}

//! The progress line of a search on standard error: rewritten in place with "\r", padded over
//! whatever the previous text left, cut to the terminal's width so that it never wraps (a
//! wrapped line cannot be rewritten), with an estimate of the time left. Ends its line when
//! the search ends, however it ends.
//!
//! The estimate is the candidates left at the rate measured over the last few seconds of
//! settled candidates (setup before the first, and a phase of cheap candidates long past, do
//! not count), and never more than --time-limit leaves; "time left unknown" until a second
//! of candidates has been measured, and again while none has been settled for ten seconds (one
//! long candidate). Once --time-limit has passed, or a signal came, it says the search is
//! finishing. A clock thread redraws the line every second between candidates, so that it
//! follows the time even while one candidate runs long.
class ProgressLine {
 public:
  ProgressLine(bool show, double time_limit, const std::string& time_unit)
      : show_(show), time_limit_(time_limit), time_unit_(time_unit), start_(Clock::now()) {
    winsize ws{};
    if (show_ && ::isatty(2) && ::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
      width_ = ws.ws_col - 1;
    if (show_) clock_ = std::thread([this] { redraw_every_second(); });
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ended_ = true;
    }
    wake_.notify_all();
    if (clock_.joinable()) clock_.join();
    if (printed_ > 0) std::fputc('\n', stderr);
  }

  void update(int done, int total, const tuning::Plan* best) {
    if (!show_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = Clock::now();
    done_ = done;
    total_ = total;
    started_ = true;
    // Described again only when it changes: the calls come once per candidate.
    if (best &&
        (best_.empty() || best->makespan != best_makespan_ || best->order != best_order_ ||
         best->recomputes != best_recomputes_ || checkpoint_name(*best) != best_checkpoint_)) {
      best_ = describe(*best) + ", step " + format_time(best->makespan, time_unit_);
      best_makespan_ = best->makespan;
      best_order_ = best->order;
      best_recomputes_ = best->recomputes;
      best_checkpoint_ = checkpoint_name(*best);
    }
    // A line per candidate would flood a slow terminal: the first, then ten a second.
    if (done != 1 && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    draw(now);
  }

  //! The last line of a search cut short (one that ran to its end has drawn it): what it
  //! settled, and what cut it.
  void end(const tuning::Result& r) {
    if (!show_ || !r.cut) return;
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = r.candidates_tried;
    total_ = r.candidates_total;
    // The best as returned: full checkpointing as the fallback only joins it at the end.
    if (r.best) best_ = describe(*r.best) + ", step " + format_time(r.best->makespan, time_unit_);
    cut_ = r.interrupted ? interrupt_name() : "--time-limit";
    draw(Clock::now());
  }

 private:
  using Clock = std::chrono::steady_clock;

  void redraw_every_second() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!ended_) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      const auto now = Clock::now();
      if (!ended_ && started_ && done_ < total_ && now - last_ >= std::chrono::seconds(1))
        draw(now);
    }
  }

  // The line of the state last reported, at `now`; the mutex held.
  void draw(Clock::time_point now) {
    last_ = now;
    const int done = done_, total = total_;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::string text =
        "tune: " + std::to_string(done) + "/" + std::to_string(total) + " candidates";
    if (!cut_.empty())
      text += " in " + format_number(elapsed, 3) + " s, cut by " + cut_;
    else if (done < total)
      text += ", " + estimate(now, done, total, elapsed);
    else
      text += " in " + format_number(elapsed, 3) + " s";
    if (!best_.empty())
      text += (done < total && cut_.empty() ? ", best so far: " : ", best: ") + best_;
    if (text.size() > width_) text.resize(width_);
    std::string line = "\r" + text;
    if (text.size() < printed_) line.append(printed_ - text.size(), ' ');
    printed_ = text.size();
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

  //! The time left after `done` of `total` candidates, `elapsed` seconds into the search.
  std::string estimate(Clock::time_point now, int done, int total, double elapsed) {
    if (interrupted.load()) return interrupt_name() + ": finishing with the plans found";
    if (time_limit_ > 0 && elapsed >= time_limit_)
      return "--time-limit reached: finishing with the plans found";
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
  std::string time_unit_;
  Clock::time_point start_;
  std::mutex mutex_;  // the state below, between the search's calls and the clock thread
  std::condition_variable wake_;
  std::thread clock_;
  bool ended_ = false, started_ = false;
  int done_ = 0, total_ = 0;
  std::string best_;          // the best plan so far, described
  double best_makespan_ = 0;  // what identifies the plan best_ describes
  std::size_t best_order_ = 0;
  int best_recomputes_ = 0;
  std::string best_checkpoint_;
  std::string cut_;  // what cut the search ("--time-limit", "SIGINT"), once it has ended
  std::vector<Sample> samples_;  // (time, candidates settled), the last 10 s
  Clock::time_point last_{};
  std::size_t width_ = 160;  // off a terminal: long enough for any line, still bounded
  std::size_t printed_ = 0;
};

//! The search `c` asks for, with its progress line; the library's refusals as usage_error.
tuning::Result run_search(const TuneCommand& command) {
  // The first SIGINT or SIGTERM stops the search as --time-limit does.
  InterruptGuard guard;
  TuneCommand c = command;
  c.req.stop_flag = &interrupted;
  c.creq.search.stop_flag = &interrupted;
  const tuning::Request& req = c.req;
  ProgressLine line(c.progress || ::isatty(2), req.time_limit, c.units.time);
  auto progress = [&](int done, int total, const tuning::Plan* best) {
    line.update(done, total, best);
  };
  Step step(c.cluster
                ? "searching " + std::to_string(c.creq.gpus) + " GPUs for a global batch of " +
                      std::to_string(req.global_batch)
                : "searching " + std::to_string(req.ranks) +
                      "-rank pipelines for a global batch of " + std::to_string(req.global_batch));
  try {
    tuning::Result r;
    if (c.cluster) {
      const auto& t = std::get<TransformerCost>(c.cost);
      DeviceSpec device = t.device;
      if (c.creq.gpus_per_node > 0) device.ranks_per_node = c.creq.gpus_per_node;
      r = tune_cluster(c.creq, tuning::TransformerClusterFactory{t.model, device, t.measured},
                       progress);
    } else if (c.transformer) {
      const auto& t = std::get<TransformerCost>(c.cost);
      r = tune(req, tuning::TransformerCostFactory{t.model, t.device, t.parallel, t.measured},
               progress);
    } else {
      r = tune(req, std::get<UniformCost>(c.cost), progress);
    }
    line.end(r);
    return r;
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
  if (!c.report.empty()) check_writable(c.report, "--report");
  const tuning::Result r = run_search(c);
  require_finite(r);
  if (r.interrupted)
    std::cerr << "tune: " << interrupt_name()
              << " cut the search short; the plans below are the best it had found\n";
  if (c.json)
    print_tune_json(r, c);
  else
    print_tune_text(r, c);
  if (!c.report.empty()) write_tune_html(r, c, argv);
  return r.best ? exit_ok : exit_invalid;
}

}  // namespace pipesched::cli
