// PyTorch's schedule CSV (torch.distributed.pipelining): one row per rank, one cell per
// action in execution order, an empty cell for an idle slot. Reading infers the problem and
// the placement from the actions; writing gives PyTorch's exact bytes. See docs/formats.md.
#pragma once

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <istream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/action_string.hpp"

namespace pipesched {

//! The largest schedule file or stream the readers take: 64 MiB, some ten million actions —
//! far beyond any real step (1F1B over 64 ranks and 512 microbatches, lowered with its
//! communication, is about 2 MiB). Larger input is refused before it is parsed.
inline constexpr std::uint64_t max_schedule_bytes = std::uint64_t{64} << 20;

namespace detail::io {

//! Readers refuse ranks, stages, microbatches or slices beyond this count: the file is
//! surely wrong, and taking it would allocate per-stage tables of absurd size.
inline constexpr int max_io_count = 1 << 20;

using pipesched::max_schedule_bytes;

//! One line of an input, without its terminator, and its 1-based number.
struct InputLine {
  std::string_view text;
  int number = 0;
};

//! Splits `content` at `\n`, dropping the `\r` of a `\r\n`. A final terminator ends the last
//! line rather than starting an empty one.
inline std::vector<InputLine> split_lines(std::string_view content) {
  std::vector<InputLine> lines;
  if (content.size() / 2 + 1 > static_cast<std::size_t>(INT_MAX))
    throw error("the input has more lines than pipesched reads (" + std::to_string(INT_MAX) + ").");
  std::size_t start = 0;
  int number = 1;
  while (start < content.size()) {
    std::size_t nl = content.find('\n', start);
    std::size_t stop = nl == std::string_view::npos ? content.size() : nl;
    std::string_view text = content.substr(start, stop - start);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    lines.push_back({text, number++});
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return lines;
}

//! "<source>: line L, column C: " — the prefix of every file-reading error message.
inline std::string where(const std::string& source, int line, int column) {
  std::string s = source + ": line " + std::to_string(line);
  if (column > 0) s += ", column " + std::to_string(column);
  return s + ": ";
}

//! Reads an action token found at `line`, `column` of `source`; throws parse_error there.
inline Action parse_action_at(std::string_view token, const std::string& source, int line,
                              int column) {
  ActionParse r = try_parse_action(token);
  if (!r.ok)
    throw parse_error(where(source, line, column) + "cannot read action " +
                          quote_token(trim(token)) + ": " + r.error.problem + ".",
                      line, column);
  return r.action;
}

//! The last path component, used as a schedule's name.
inline std::string file_name_of(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  return name.empty() ? path : name;
}

//! The content of a schedule file or stream after its UTF-8 byte-order mark, if any
//! (spreadsheet programs and some editors write one).
inline std::string_view without_bom(std::string_view content) noexcept {
  constexpr std::string_view bom = "\xEF\xBB\xBF";
  return content.substr(0, bom.size()) == bom ? content.substr(bom.size()) : content;
}

inline std::string size_text(std::uint64_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

[[noreturn]] inline void too_large(const std::string& what) {
  throw error("cannot read " + what + ": it is larger than the " + size_text(max_schedule_bytes) +
              " pipesched reads as a schedule; check that it is a schedule file.");
}

//! The whole content of the file at `path`, at most max_schedule_bytes; throws
//! pipesched::error naming the path and the reason when it cannot be read, is a directory or
//! a device, or is larger. Pipes are read up to the limit.
inline std::string read_file(const std::string& path) {
  const std::string what = "schedule file \"" + path + "\"";
  auto fail = [&](int err) {
    throw error("cannot read " + what + ": " + std::strerror(err) + ".");
  };
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec) {
    if (std::filesystem::is_directory(st))
      throw error("cannot read " + what + ": it is a directory; give the path of a schedule file.");
    if (std::filesystem::is_character_file(st) || std::filesystem::is_block_file(st))
      throw error("cannot read " + what +
                  ": it is a device, not a schedule file; give the path of a CSV or text "
                  "schedule.");
    if (std::filesystem::is_regular_file(st)) {
      const std::uintmax_t size = std::filesystem::file_size(path, ec);
      if (!ec && size > max_schedule_bytes) too_large(what);
    }
  }
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(errno != 0 ? errno : EIO);
  std::string content;
  char buffer[1 << 14];
  for (;;) {
    std::size_t n = std::fread(buffer, 1, sizeof buffer, f);
    content.append(buffer, n);
    if (content.size() > max_schedule_bytes) {  // a pipe, or a file that grew
      std::fclose(f);
      too_large(what);
    }
    if (n < sizeof buffer) break;
  }
  if (std::ferror(f)) {
    int err = errno != 0 ? errno : EIO;
    std::fclose(f);
    fail(err);
  }
  std::fclose(f);
  return content;
}

//! Writes `content` to the file at `path`, replacing it; throws pipesched::error naming the
//! path and the operating system's reason on failure.
inline void write_file(const std::string& path, std::string_view content) {
  auto fail = [&](int err) {
    throw error("cannot write schedule file \"" + path + "\": " + std::strerror(err) + ".");
  };
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail(errno != 0 ? errno : EIO);
  std::size_t n = std::fwrite(content.data(), 1, content.size(), f);
  int err = n != content.size() ? (errno != 0 ? errno : EIO) : 0;
  if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  if (err != 0) fail(err);
}

//! Everything left in `in`, at most max_schedule_bytes; throws pipesched::error when the
//! stream fails while reading or holds more.
inline std::string read_stream(std::istream& in, const std::string& source) {
  std::string content;
  char buffer[1 << 14];
  while (in) {
    in.read(buffer, sizeof buffer);
    content.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (content.size() > max_schedule_bytes) too_large(source);
  }
  if (in.bad()) throw error("cannot read " + source + ": the input stream failed while reading.");
  return content;
}

//! Writes `text` to `out`; throws pipesched::error when the stream fails.
inline void write_stream(std::ostream& out, const std::string& text, const char* what) {
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) throw error(std::string("cannot write the ") + what + ": the output stream failed.");
}

//! One CSV cell: its text (quotes removed) and the 1-based column of its first character.
struct CsvCell {
  std::string text;
  int column = 0;
};

//! Splits one line into cells. A cell that starts with `"` is quoted as Python's csv module
//! writes it (`""` inside stands for `"`), which is how a row holding one idle slot appears.
inline std::vector<CsvCell> split_cells(std::string_view line, const std::string& source,
                                        int line_number) {
  std::vector<CsvCell> cells;
  if (line.empty()) return cells;  // a row with no actions, as Python's csv reads it
  std::size_t pos = 0;
  for (;;) {
    CsvCell cell;
    cell.column = static_cast<int>(pos) + 1;
    if (pos < line.size() && line[pos] == '"') {
      std::size_t i = pos + 1;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell.text += '"';
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        cell.text += line[i++];
      }
      if (!closed)
        throw parse_error(where(source, line_number, cell.column) +
                              "the quoted cell has no closing '\"' on this line; close it, or "
                              "write the action without quotes.",
                          line_number, cell.column);
      if (i < line.size() && line[i] != ',')
        throw parse_error(where(source, line_number, static_cast<int>(i) + 1) + "found '" +
                              line[i] +
                              "' after a quoted cell; expected ',' or the end of the row.",
                          line_number, static_cast<int>(i) + 1);
      pos = i;
    } else {
      std::size_t comma = line.find(',', pos);
      std::size_t stop = comma == std::string_view::npos ? line.size() : comma;
      std::string_view raw = line.substr(pos, stop - pos);
      // Point at the action itself, not at blanks before it.
      std::size_t lead = 0;
      while (lead < raw.size() && is_blank(raw[lead]))
        ++lead;
      if (lead < raw.size()) cell.column += static_cast<int>(lead);
      cell.text = std::string(raw);
      pos = stop;
    }
    cells.push_back(std::move(cell));
    if (pos >= line.size()) break;
    ++pos;                     // the ','
    if (pos == line.size()) {  // a trailing ',' ends with one more (idle) cell
      cells.push_back({std::string(), static_cast<int>(pos) + 1});
      break;
    }
  }
  return cells;
}

//! Chimera's two replicas in a CSV, which has no field for them: a schedule whose placement is
//! the two-chunk V-shape (stage D + s on rank D − 1 − s) and every action of which stays within
//! one replica — microbatch m only on stages 0..D−1 for even m and D..2D−1 for odd m
//! (Problem::replica_of_microbatch) — is read with replicas = 2. A V-shape schedule runs every
//! microbatch through all 2D stages, so it is never taken for one. A step of one microbatch
//! names replica 0's stages only and reads back as the one-replica schedule it amounts to.
inline void infer_replicas(Schedule& s) {
  const int ranks = s.problem.ranks;
  // The map, not the kind: on one rank the V-shape map is also the looped one.
  if (s.problem.stages != 2 * ranks || !(s.placement == Placement::v_shape(ranks, 2))) return;
  Problem two = s.problem;
  two.replicas = 2;
  for (const auto& list : s.ranks)
    for (const Action& a : list) {
      if (a.kind == OpKind::Idle || is_stage_action(a.kind)) continue;
      if (!two.has_unit(a.stage, a.microbatch)) return;
      if (a.kind == OpKind::Overlap && !two.has_unit(a.b_stage, a.b_microbatch)) return;
    }
  s.problem.replicas = 2;
}

//! Reads CSV text; `name` names the schedule and prefixes error messages.
inline Schedule read_csv_content(std::string_view content, std::string name) {
  std::vector<InputLine> lines = split_lines(without_bom(content));
  // Blank lines at the end are not ranks: an editor adds them without a thought. (A rank with
  // no actions inside the file is an empty line, as Python's csv module reads one; a last
  // rank with nothing to do is written as one idle cell, `""`.)
  while (!lines.empty() && trim(lines.back().text).empty())
    lines.pop_back();
  if (lines.size() > static_cast<std::size_t>(max_io_count))
    throw parse_error(where(name, lines[max_io_count].number, 0) + "the CSV has more than " +
                          std::to_string(max_io_count) +
                          " rows, and each row is a rank; check the file.",
                      lines[max_io_count].number, 0);
  if (lines.empty())
    throw parse_error(name +
                          ": the CSV is empty; expected one row of actions per rank, e.g. "
                          "\"0F0,0B0\".",
                      0, 0);
  Schedule s;
  s.name = name;
  {
    // The line-end style is the first line's: what a writer of the whole file chose.
    const std::string_view body = without_bom(content);
    const std::size_t nl = body.find('\n');
    s.crlf = nl != std::string_view::npos && nl > 0 && body[nl - 1] == '\r';
  }
  int max_stage = -1, max_microbatch = -1, max_slice = -1;
  std::vector<int> first_row_of_stage;
  // A vocabulary pass names a shard (a rank), not a stage: it says nothing of the placement.
  auto note = [&](int stage, int microbatch, int slice, int row, int line, int column,
                  bool shard = false) {
    auto too_many = [&](const char* what, int value) {
      throw parse_error(where(name, line, column) + what + " " + std::to_string(value) +
                            " is beyond what pipesched reads (indices below " +
                            std::to_string(max_io_count) + "); check the file.",
                        line, column);
    };
    if (stage >= max_io_count) too_many("stage", stage);
    if (microbatch >= max_io_count) too_many("microbatch", microbatch);
    if (slice >= max_io_count) too_many("slice", slice);
    max_microbatch = std::max(max_microbatch, microbatch);
    max_slice = std::max(max_slice, slice);
    if (shard) return;
    max_stage = std::max(max_stage, stage);
    if (static_cast<int>(first_row_of_stage.size()) <= stage)
      first_row_of_stage.resize(static_cast<std::size_t>(stage) + 1, -1);
    if (first_row_of_stage[stage] < 0) first_row_of_stage[stage] = row;
  };
  for (const InputLine& line : lines) {
    int row = static_cast<int>(s.ranks.size());
    std::vector<Action>& list = s.ranks.emplace_back();
    for (const CsvCell& cell : split_cells(line.text, name, line.number)) {
      if (trim(cell.text).empty()) {
        list.push_back(Action::idle());
        continue;
      }
      Action a = parse_action_at(cell.text, name, line.number, cell.column);
      note(a.stage, a.microbatch, a.slice, row, line.number, cell.column, is_vocabulary(a.kind));
      if (a.kind == OpKind::Overlap)
        note(a.b_stage, a.b_microbatch, a.b_slice, row, line.number, cell.column);
      list.push_back(a);
    }
  }
  if (max_stage < 0)
    throw parse_error(name +
                          ": the CSV holds no actions, only empty cells; expected at least "
                          "one action such as 0F0.",
                      0, 0);
  int ranks = static_cast<int>(s.ranks.size());
  std::vector<int> rank_of_stage(first_row_of_stage);
  for (int st = 0; st < static_cast<int>(rank_of_stage.size()); ++st)
    if (rank_of_stage[st] < 0) rank_of_stage[st] = st % ranks;
  s.problem = Problem{.ranks = ranks,
                      .stages = max_stage + 1,
                      .microbatches = max_microbatch + 1,
                      .slices = max_slice + 1};
  if (max_stage + 1 < ranks) {
    // A rank with no stage has no place in the pipeline; name the first such row.
    std::vector<char> holds(static_cast<std::size_t>(ranks), 0);
    for (int r : rank_of_stage)
      holds[static_cast<std::size_t>(r)] = 1;
    for (int r = 0; r < ranks; ++r)
      if (!holds[static_cast<std::size_t>(r)]) {
        const int line = lines[static_cast<std::size_t>(r)].number;
        throw parse_error(
            where(name, line, 0) + "row " + std::to_string(r + 1) + " (rank " + std::to_string(r) +
                ") runs no action, so rank " + std::to_string(r) +
                " holds no stage: " + std::to_string(ranks) + " rows are " + std::to_string(ranks) +
                " ranks, but the actions name only " + std::to_string(max_stage + 1) +
                (max_stage == 0 ? " stage" : " stages") +
                "; every rank needs a stage. Remove the row, or give it its stage's actions.",
            line, 0);
      }
  }
  s.placement = Placement::from_map(std::move(rank_of_stage), ranks);
  infer_replicas(s);
  return s;
}

}  // namespace detail::io

//! Reads PyTorch's schedule CSV: row r is rank r's actions in order, an empty cell is an
//! idle slot. The problem and placement are inferred: ranks = rows; stages, microbatches and
//! slices = the largest index used + 1 (both halves of an overlap count); stage s belongs
//! to the first row where an action of s appears, or to rank s mod ranks when none does (a
//! vocabulary pass names a shard, not a stage, and counts for neither).
//! A stage that also appears in other rows is read as written (validation reports it).
//! Accepts `\n` and `\r\n` line endings and remembers in `crlf` whether the first line ended
//! in `\r\n`. Throws parse_error naming the line, the column of
//! the cell's first character, the bad token and what was expected; `name` becomes the
//! schedule's name and prefixes messages.
inline Schedule read_csv(std::istream& in, std::string name = "csv") {
  std::string content = detail::io::read_stream(in, name);
  return detail::io::read_csv_content(content, std::move(name));
}

//! Reads the CSV file at `path` (see read_csv); the schedule is named after the file.
//! Throws pipesched::error naming the path and the reason when the file cannot be read.
inline Schedule read_csv_file(const std::string& path) {
  return detail::io::read_csv_content(detail::io::read_file(path), detail::io::file_name_of(path));
}

//! The CSV text of `s`: each rank's actions joined by `,` (an idle slot is an empty cell,
//! trailing ones kept), one row per rank, each ending in `\n`, or in `\r\n` when `s.crlf` (set
//! by read_csv for a file whose lines end so). A row holding one idle slot
//! alone is written `""` as Python's csv module does, so that it reads back as one cell.
//! Placement and problem sizes are not stored: read_csv infers them again (Chimera's two
//! replicas included, from where each microbatch runs; see infer_replicas). Throws
//! invalid_schedule for an action that has no string form (see format_action).
inline std::string to_csv(const Schedule& s) {
  const char* const eol = s.crlf ? "\r\n" : "\n";
  std::string out;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& list = s.ranks[r];
    // A trailing empty line would not be read back as a rank: write an idle cell instead.
    const bool last_empty = list.empty() && r + 1 == s.ranks.size();
    if (last_empty || (list.size() == 1 && list.front().kind == OpKind::Idle)) {
      out += "\"\"";
      out += eol;
      continue;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i != 0) out += ',';
      out += format_action(list[i]);
    }
    out += eol;
  }
  return out;
}

//! Throws invalid_schedule when PyTorch's runtime (2.15) cannot run `s` as pipesched does:
//! - an extension it misreads or refuses: a slice suffix (PyTorch reads `2F0.1` as `2F0`, the
//!   whole microbatch), a weight-gradient part (`2W0:1` is read as `2W0`, so the whole W would
//!   run once per part), a recompute (`2R0`, a kind PyTorch's reader refuses), an offload
//!   (`2OFFLOAD0`, `2RELOAD0`, likewise) or a vocabulary pass (`2VOCAB_F0`, `2VOCAB_B0`);
//! - several model replicas (Chimera), which PyTorch would run as one model;
//! - the last stage's forwards out of microbatch order: PyTorch keeps each loss in the order
//!   the last stage's forwards run and gives microbatch k's backward the loss at index k;
//! - with communication actions, an idle slot (PyTorch refuses an empty cell in a lowered
//!   file) or a send without a `WAIT_SEND` after it on its rank (PyTorch 2.15 asks one for
//!   every send);
//! - with `as_written` (a file handed to PyTorch as it stands), a full backward spelled `BW`:
//!   PyTorch 2.15's reader takes `0BW0` as `0B` with no microbatch and refuses it
//!   (spelled_for_pytorch writes `B` instead).
//!
//! The message names the first such action, its rank and position (0-based, idle slots counted),
//! the rule, and what to do instead. Every other kind, overlaps and the FSDP and send-wait
//! actions included, is PyTorch's own. Schedules the validator refuses are not looked at more
//! closely here: check them with validate first.
inline void check_pytorch_runnable(const Schedule& s, bool as_written = false) {
  if (s.problem.replicas > 1)
    throw invalid_schedule(
        "schedule '" + s.name + "' cannot run in PyTorch: it pipelines " +
        std::to_string(s.problem.replicas) +
        " model replicas over the same ranks (Chimera), each microbatch through one of them, and "
        "PyTorch's runtime has no replicas: it would run every microbatch through all " +
        std::to_string(s.problem.stages) +
        " stages as one model. Write it as CSV (--format csv) to read it back with pipesched, or "
        "choose a one-replica schedule for PyTorch.");
  const bool lowered = s.has_comm();
  const int last_stage = s.problem.stages - 1;
  int last_forwards = 0;  // forwards of the last stage so far
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const std::vector<Action>& list = s.ranks[r];
    // Sends not yet followed by their wait: (forward?, stage, microbatch) -> position.
    std::map<std::tuple<bool, int, int>, std::size_t> unwaited;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      auto at = [&] {
        return "schedule '" + s.name + "' cannot run in PyTorch: " +
               (a.kind == OpKind::Idle ? std::string("the idle slot") : to_string(a)) + " (rank " +
               std::to_string(r) + " position " + std::to_string(i) + ") ";
      };
      if (a.kind == OpKind::Idle) {
        if (lowered)
          throw invalid_schedule(at() +
                                 "is an empty cell in a schedule with communication actions, "
                                 "which PyTorch 2.15's runtime refuses (it takes idle slots only "
                                 "in compute-only files); remove the idle slots.");
        continue;
      }
      if (a.kind == OpKind::R)
        throw invalid_schedule(at() +
                               "recomputes a checkpointed forward, an action PyTorch's schedules "
                               "do not have (its reader refuses the kind R); write the schedule "
                               "without pipesched's checkpointing (--checkpoint none) and "
                               "checkpoint inside the stage modules instead.");
      if (is_offload_action(a.kind))
        throw invalid_schedule(at() +
                               "moves a unit's activations between device and host memory, an "
                               "action PyTorch's schedules do not have (its reader refuses the "
                               "kind); write the schedule without --offload and offload inside "
                               "the stage modules instead.");
      if (is_vocabulary(a.kind))
        throw invalid_schedule(at() +
                               "is a vocabulary pass of the output layer split over the ranks, "
                               "an action PyTorch's schedules do not have (its reader refuses the "
                               "kind); write the schedule without --vocab-parallel, with the "
                               "output layer on the last stage.");
      if (a.slice != 0 || (a.kind == OpKind::Overlap && a.b_slice != 0))
        throw invalid_schedule(
            at() +
            "runs one slice of a microbatch's sequence; PyTorch has no slices "
            "and reads the suffix away (" +
            to_string(a) + " as " +
            to_string(Action::make(a.kind == OpKind::Overlap ? OpKind::F : a.kind, a.stage,
                                   a.microbatch)) +
            "), so it would run the whole microbatch once per slice; write a "
            "schedule without slices (--slices 1).");
      if (a.part != 0)
        throw invalid_schedule(at() +
                               "is one part of a split weight gradient; PyTorch reads it as " +
                               to_string(Action::make(a.kind, a.stage, a.microbatch)) +
                               " and would compute the whole weight gradient once per part; "
                               "write each W whole (--wgrad split rather than fine).");
      if (as_written && a.spelled_bw)
        throw invalid_schedule(at() +
                               "spells a full backward BW, which PyTorch 2.15's reader takes as "
                               "B with no microbatch and refuses; write it B (pipesched convert "
                               "--format pytorch does).");
      if (a.kind == OpKind::SendF || a.kind == OpKind::SendB)
        unwaited[{a.kind == OpKind::SendF, a.stage, a.microbatch}] = i;
      if (is_wait_send(a.kind))
        unwaited.erase({a.kind == OpKind::WaitSendF, a.stage, a.microbatch});
      const Action fwd = a.kind == OpKind::Overlap ? a.forward_half() : a;
      if (fwd.kind == OpKind::F && fwd.stage == last_stage) {
        if (fwd.microbatch != last_forwards)
          throw invalid_schedule(
              at() + "is forward number " + std::to_string(last_forwards) +
              " (from 0) of the last stage, " + std::to_string(last_stage) +
              ", but runs microbatch " + std::to_string(fwd.microbatch) +
              ": PyTorch's runtime keeps the losses in the order the last stage's forwards run "
              "and reads microbatch k's loss at index k, so the last stage's forwards must run "
              "in microbatch order (0, 1, 2, ...); reorder them.");
        ++last_forwards;
      }
    }
    if (lowered && !unwaited.empty()) {
      std::size_t i = list.size();
      for (const auto& u : unwaited)
        i = std::min(i, u.second);
      throw invalid_schedule("schedule '" + s.name +
                             "' cannot run in PyTorch: " + to_string(list[i]) + " (rank " +
                             std::to_string(r) + " position " + std::to_string(i) +
                             ") has no WAIT_SEND after it on its rank, and PyTorch 2.15's "
                             "runtime asks one for every send; lower the schedule with its send "
                             "waits (pipesched generate --comm writes them).");
    }
  }
}

//! `s` with every full backward (a B, or an overlap's backward half) spelled `B`: the form
//! PyTorch 2.15 reads (it refuses `BW`, which pipesched reads as B and writes back as read).
inline Schedule spelled_for_pytorch(Schedule s) {
  for (auto& list : s.ranks)
    for (Action& a : list)
      a.spelled_bw = false;
  return s;
}

//! Writes to_csv(s) to `out`; throws pipesched::error when the stream fails.
inline void write_csv(std::ostream& out, const Schedule& s) {
  detail::io::write_stream(out, to_csv(s), "CSV schedule");
}

}  // namespace pipesched
