// pipesched's own schedule text form: small, line-oriented and self-describing (it states the
// problem and the placement, so nothing is inferred), plus file helpers that read either this
// form or PyTorch's CSV. The grammar is documented in docs/formats.md.
#pragma once

#include <cstddef>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/io/csv.hpp"

namespace pipesched {

namespace detail::io {

//! A blank-separated word of a line and its 1-based column.
struct TextWord {
  std::string_view text;
  int column = 0;
};

//! The words of `line` from byte `from` on; columns count from the start of `line`.
inline std::vector<TextWord> split_words(std::string_view line, std::size_t from = 0) {
  std::vector<TextWord> words;
  std::size_t i = from;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i]))
      ++i;
    std::size_t start = i;
    while (i < line.size() && !is_blank(line[i]))
      ++i;
    if (i > start) words.push_back({line.substr(start, i - start), static_cast<int>(start) + 1});
  }
  return words;
}

//! The keywords that start a line of the text form.
inline bool is_text_keyword(std::string_view word) {
  return word == "name" || word == "ranks" || word == "stages" || word == "microbatches" ||
         word == "slices" || word == "replicas" || word == "placement" || word == "rank";
}

//! True when `content` looks like the text form: its first non-blank line is a `#` comment
//! (which a CSV row cannot be) or starts with a keyword of the text form.
inline bool looks_like_text_form(std::string_view content) {
  for (const InputLine& line : split_lines(without_bom(content))) {
    std::string_view t = trim(line.text);
    if (t.empty()) continue;
    if (t.front() == '#') return true;
    std::size_t stop = 0;
    while (stop < t.size() && !is_blank(t[stop]))
      ++stop;
    return is_text_keyword(t.substr(0, stop));
  }
  return false;
}

//! Reads the text form line by line, keeping positions for the checks that need the header.
class TextReader {
 public:
  TextReader(std::string_view content, std::string source)
      : content_(without_bom(content)), source_(std::move(source)) {}

  Schedule read() {
    // The line-end style is the first line's, as for CSV: to_text writes it back.
    const std::size_t nl = content_.find('\n');
    s_.crlf = nl != std::string_view::npos && nl > 0 && content_[nl - 1] == '\r';
    for (const InputLine& line : split_lines(content_))
      read_line(line);
    if (!header_done_) finish_header(0, 0);
    for (int r = 0; r < s_.problem.ranks; ++r)
      if (rank_line_[r] == 0)
        fail(0, 0,
             "rank " + std::to_string(r) + " has no `rank " + std::to_string(r) +
                 ":` line; every rank from 0 to " + std::to_string(s_.problem.ranks - 1) +
                 " needs one (write `rank " + std::to_string(r) +
                 ":` with nothing after it for an empty list)");
    s_.name = name_ ? *name_ : source_;
    return std::move(s_);
  }

 private:
  // Where a header value was given, for messages about it.
  struct Given {
    int value = 0;
    int line = 0;
    int column = 0;
  };

  [[noreturn]] void fail(int line, int column, const std::string& problem) const {
    std::string prefix = line > 0 ? where(source_, line, column) : source_ + ": ";
    throw parse_error(prefix + problem + ".", line, column);
  }

  void read_line(const InputLine& line) {
    // `name` takes the rest of its line verbatim, so a '#' there belongs to the name.
    std::vector<TextWord> raw = split_words(line.text);
    if (!raw.empty() && raw.front().text == "name") {
      read_name(line, raw.front());
      return;
    }
    std::string_view text = line.text;
    if (std::size_t hash = text.find('#'); hash != std::string_view::npos)
      text = text.substr(0, hash);
    std::vector<TextWord> words = split_words(text);
    if (words.empty()) return;
    std::string_view key = words.front().text;
    if (key == "name") {  // `name#...`: the comment rule does not apply to names
      read_name(line, words.front());
    } else if (key == "rank") {
      read_rank(line.number, text, words.front());
    } else if (key == "placement") {
      read_placement(line.number, words);
    } else if (key == "ranks" || key == "stages" || key == "microbatches" || key == "slices" ||
               key == "replicas") {
      read_sizes(line.number, words);
    } else {
      fail(line.number, words.front().column,
           "unknown keyword " + quote_token(key) +
               "; a line starts with name, ranks, stages, microbatches, slices, placement, "
               "rank or '#' (a comment)");
    }
  }

  void before_ranks(int line, const TextWord& key) const {
    if (header_done_)
      fail(line, key.column,
           "`" + std::string(key.text) +
               "` comes after the first `rank` line; the header (name, ranks, stages, "
               "microbatches, slices, placement) comes before the rank lists");
  }

  void read_name(const InputLine& line, const TextWord& key) {
    before_ranks(line.number, key);
    if (name_)
      fail(
          line.number, key.column,
          "`name` is given twice (first on line " + std::to_string(name_line_) + "); give it once");
    name_ = std::string(trim(line.text.substr(static_cast<std::size_t>(key.column - 1) + 4)));
    name_line_ = line.number;
  }

  // `ranks R stages S microbatches M slices K`: key / value pairs, any order, each key once.
  void read_sizes(int line, const std::vector<TextWord>& words) {
    before_ranks(line, words.front());
    for (std::size_t i = 0; i < words.size(); i += 2) {
      const TextWord& key = words[i];
      std::optional<Given>* slot = key.text == "ranks"          ? &ranks_
                                   : key.text == "stages"       ? &stages_
                                   : key.text == "microbatches" ? &microbatches_
                                   : key.text == "slices"       ? &slices_
                                   : key.text == "replicas"     ? &replicas_
                                                                : nullptr;
      if (slot == nullptr)
        fail(line, key.column,
             "expected one of ranks, stages, microbatches, slices, replicas but found " +
                 quote_token(key.text) +
                 "; the sizes line reads like `ranks 4 stages 4 microbatches 8 slices 1`");
      if (*slot)
        fail(line, key.column,
             "`" + std::string(key.text) + "` is given twice (first on line " +
                 std::to_string((*slot)->line) + "); give it once");
      if (i + 1 >= words.size())
        fail(line, key.column + static_cast<int>(key.text.size()),
             "expected a number after `" + std::string(key.text) + "`, found the end of the line");
      const TextWord& value = words[i + 1];
      *slot = Given{read_count(line, value, key.text), line, value.column};
    }
  }

  // A non-negative decimal below max_io_count.
  int read_count(int line, const TextWord& word, std::string_view what) const {
    long long v = 0;
    bool digits = !word.text.empty();
    for (char c : word.text) {
      if (!is_digit(c)) {
        digits = false;
        break;
      }
      v = v * 10 + (c - '0');
      if (v >= max_io_count) {
        fail(line, word.column,
             std::string(what) + " = " + std::string(word.text) +
                 " is beyond what pipesched reads (counts below " + std::to_string(max_io_count) +
                 ")");
      }
    }
    if (!digits)
      fail(line, word.column,
           "expected a non-negative number for `" + std::string(what) + "` but found " +
               quote_token(word.text));
    return static_cast<int>(v);
  }

  // `placement linear | interleaved | v-shape | <rank of stage 0> <rank of stage 1> ...`
  void read_placement(int line, const std::vector<TextWord>& words) {
    before_ranks(line, words.front());
    if (placement_line_ != 0)
      fail(line, words.front().column,
           "`placement` is given twice (first on line " + std::to_string(placement_line_) +
               "); give it once");
    placement_line_ = line;
    placement_column_ = words.front().column;
    if (words.size() < 2)
      fail(line, words.front().column,
           "`placement` needs the rank of each stage (e.g. `placement 0 1 0 1`) or one of "
           "linear, interleaved, v-shape");
    if (words.size() == 2 && !is_digit(words[1].text.front())) {
      std::string_view kind = words[1].text;
      if (kind != "linear" && kind != "interleaved" && kind != "v-shape")
        fail(line, words[1].column,
             "unknown placement " + quote_token(kind) +
                 "; expected linear, interleaved, v-shape or the rank of each stage");
      placement_name_ = std::string(kind);
      return;
    }
    for (std::size_t i = 1; i < words.size(); ++i)
      placement_map_.push_back(
          Given{read_count(line, words[i], "a placement rank"), line, words[i].column});
  }

  // Checks the header once it is complete and builds the problem and placement.
  void finish_header(int line, int column) {
    header_done_ = true;
    auto require = [&](const std::optional<Given>& g, const char* key) {
      if (!g)
        fail(line, column,
             std::string("the header does not give `") + key +
                 "`; a text schedule states `ranks R stages S microbatches M slices K` and "
                 "`placement ...` before its rank lines");
    };
    require(ranks_, "ranks");
    require(stages_, "stages");
    require(microbatches_, "microbatches");
    if (!slices_) slices_ = Given{1, 0, 0};
    auto at_least = [&](const Given& g, const char* key, int min, const std::string& why) {
      if (g.value < min)
        fail(g.line, g.column,
             std::string(key) + " = " + std::to_string(g.value) + " is out of range; " + why);
    };
    at_least(*ranks_, "ranks", 1, "a pipeline needs at least 1 rank");
    at_least(*stages_, "stages", ranks_->value,
             "every rank holds at least one stage, so stages must be >= ranks = " +
                 std::to_string(ranks_->value));
    at_least(*microbatches_, "microbatches", 1, "a step needs at least 1 microbatch");
    at_least(*slices_, "slices", 1, "use 1 for whole sequences or more to cut them");
    if (!replicas_) replicas_ = Given{1, 0, 0};
    at_least(*replicas_, "replicas", 1, "use 1 for one pipeline, or 2 for two (Chimera)");
    // Two at most: Chimera's two pipelines in opposite directions are the schedules of several
    // replicas that pipesched builds and runs (PyTorch's runtime runs none); a larger count
    // is a mistyped header, refused here rather than met later as a schedule missing most of
    // its actions or as one too large to checkpoint.
    if (replicas_->value > 2)
      fail(replicas_->line, replicas_->column,
           "replicas = " + std::to_string(replicas_->value) +
               " is out of range; use 1 for one pipeline, or 2 for Chimera's two pipelines in "
               "opposite directions (the only schedules of several model replicas)");
    const int ranks = ranks_->value, stages = stages_->value;
    if (replicas_->value > 1 && stages % (replicas_->value * ranks) != 0)
      fail(replicas_->line, replicas_->column,
           "replicas = " + std::to_string(replicas_->value) + " needs stages to be a multiple " +
               "of replicas × ranks = " + std::to_string(replicas_->value * ranks) +
               " (each rank holds the same number of stages of every replica), but stages = " +
               std::to_string(stages));
    s_.problem = Problem{.ranks = ranks,
                         .stages = stages,
                         .microbatches = microbatches_->value,
                         .slices = slices_->value,
                         .replicas = replicas_->value};
    if (placement_line_ == 0)
      fail(line, column,
           "the header does not give `placement`; state the rank of each stage (e.g. "
           "`placement 0 1 0 1`) or one of linear, interleaved, v-shape");
    s_.placement = build_placement(ranks, stages);
    s_.ranks.assign(static_cast<std::size_t>(ranks), {});
    rank_line_.assign(static_cast<std::size_t>(ranks), 0);
  }

  Placement build_placement(int ranks, int stages) const {
    std::string counts =
        "stages = " + std::to_string(stages) + " and ranks = " + std::to_string(ranks);
    if (placement_name_ == "linear") {
      if (stages != ranks)
        fail(placement_line_, placement_column_,
             "a linear placement needs stages = ranks, but " + counts +
                 "; use interleaved, v-shape or the rank of each stage");
      return Placement::linear(ranks);
    }
    if (!placement_name_.empty()) {
      if (stages % ranks != 0)
        fail(placement_line_, placement_column_,
             "a " + placement_name_ + " placement needs stages to be a multiple of ranks, but " +
                 counts + "; give the rank of each stage instead");
      int chunks = stages / ranks;
      if (placement_name_ == "interleaved") return Placement::interleaved(ranks, chunks);
      if (chunks % 2 != 0)
        fail(placement_line_, placement_column_,
             "a v-shape placement needs an even number of stages per rank, but " + counts +
                 " give " + std::to_string(chunks));
      return Placement::v_shape(ranks, chunks);
    }
    if (static_cast<int>(placement_map_.size()) != stages)
      fail(placement_line_, placement_column_,
           "`placement` lists " + std::to_string(placement_map_.size()) +
               " ranks but stages = " + std::to_string(stages) + "; give one rank per stage");
    std::vector<int> map;
    for (const Given& g : placement_map_) {
      if (g.value >= ranks)
        fail(g.line, g.column,
             "placement puts stage " + std::to_string(map.size()) + " on rank " +
                 std::to_string(g.value) + ", but ranks run from 0 to " +
                 std::to_string(ranks - 1));
      map.push_back(g.value);
    }
    return Placement::from_map(std::move(map), ranks);
  }

  // `rank N: <action> <action> ...`, with `-` for an idle slot.
  void read_rank(int line, std::string_view text, const TextWord& key) {
    if (!header_done_) finish_header(line, key.column);
    std::size_t pos = static_cast<std::size_t>(key.column - 1) + 4;
    while (pos < text.size() && is_blank(text[pos]))
      ++pos;
    std::size_t start = pos;
    while (pos < text.size() && is_digit(text[pos]))
      ++pos;
    const int number_column = static_cast<int>(start) + 1;
    if (pos == start)
      fail(line, number_column,
           "expected a rank number after `rank`, e.g. `rank 0: 0F0 0B0`, but found " +
               found_at(text, start, text.size(), "the end of the line"));
    const std::string digits(text.substr(start, pos - start));
    // Saturate: any number past the rank count is reported as out of range below.
    long long value = 0;
    for (char c : digits)
      if (value <= s_.problem.ranks) value = value * 10 + (c - '0');
    while (pos < text.size() && is_blank(text[pos]))
      ++pos;
    if (pos >= text.size() || text[pos] != ':')
      fail(line, static_cast<int>(pos) + 1,
           "expected ':' after `rank " + digits + "` but found " +
               found_at(text, pos, text.size(), "the end of the line"));
    if (value >= s_.problem.ranks)
      fail(line, number_column,
           "rank " + digits + " is out of range; this schedule has ranks 0 to " +
               std::to_string(s_.problem.ranks - 1));
    const auto r = static_cast<std::size_t>(value);
    if (rank_line_[r] != 0)
      fail(line, number_column,
           "rank " + digits + " is listed twice (first on line " + std::to_string(rank_line_[r]) +
               "); give each rank one line");
    rank_line_[r] = line;
    std::vector<Action>& list = s_.ranks[r];
    for (const TextWord& w : split_words(text, pos + 1)) {
      if (w.text == "-") {
        list.push_back(Action::idle());
        continue;
      }
      Action a = parse_action_at(w.text, source_, line, w.column);
      check_range(a, w, line);
      list.push_back(a);
    }
  }

  void check_range(const Action& a, const TextWord& w, int line) const {
    auto check = [&](const char* what, int value, int count, const char* key) {
      if (value >= count)
        fail(line, w.column,
             "action " + quote_token(w.text) + " names " + what + " " + std::to_string(value) +
                 ", but the header declares " + key + " = " + std::to_string(count) + " (" + key +
                 " 0 to " + std::to_string(count - 1) + ")");
    };
    const Problem& p = s_.problem;
    check("stage", a.stage, p.stages, "stages");
    check("microbatch", a.microbatch, p.microbatches, "microbatches");
    check("slice", a.slice, p.slices, "slices");
    if (a.kind == OpKind::Overlap) {
      check("stage", a.b_stage, p.stages, "stages");
      check("microbatch", a.b_microbatch, p.microbatches, "microbatches");
      check("slice", a.b_slice, p.slices, "slices");
    }
  }

  std::string_view content_;
  std::string source_;
  Schedule s_;
  std::optional<std::string> name_;
  int name_line_ = 0;
  std::optional<Given> ranks_, stages_, microbatches_, slices_, replicas_;
  int placement_line_ = 0;
  int placement_column_ = 0;
  std::string placement_name_;
  std::vector<Given> placement_map_;
  bool header_done_ = false;
  std::vector<int> rank_line_;
};

}  // namespace detail::io

//! Reads pipesched's text form (see docs/formats.md). `source` names the input in error
//! messages and becomes the schedule's name when the text has no `name` line. Throws
//! parse_error with the line and the 1-based column of the offending word, the bad token and
//! what was expected; also for an inconsistent file (a `rank N:` line out of range or
//! repeated, a placement whose length is not `stages`, an action beyond the declared sizes).
inline Schedule read_text(std::istream& in, std::string source = "text") {
  std::string content = detail::io::read_stream(in, source);
  return detail::io::TextReader(content, std::move(source)).read();
}

//! The text form of `s`: a `# pipesched schedule` line, `name` (omitted when empty; line
//! breaks in it become blanks), the sizes, the placement as the rank of each stage, then one
//! `rank N:` line per rank with `-` for an idle slot. Every line ends in `\n`, or in `\r\n`
//! when `s.crlf` (set when the file it was read from, text or CSV, ended its first line in
//! `\r\n`). read_text gives back a schedule equal to `s`. Throws invalid_schedule when `s` is not
//! self-consistent (rank lists ≠ problem.ranks, placement sizes ≠ problem) or holds an action with
//! no string form.
inline std::string to_text(const Schedule& s) {
  const Problem& p = s.problem;
  auto bad = [](const std::string& why) {
    throw invalid_schedule("cannot write the schedule as text: " + why + ".");
  };
  if (p.ranks < 1 || p.stages < p.ranks || p.microbatches < 1 || p.slices < 1)
    bad("its problem (ranks = " + std::to_string(p.ranks) + ", stages = " +
        std::to_string(p.stages) + ", microbatches = " + std::to_string(p.microbatches) +
        ", slices = " + std::to_string(p.slices) +
        ") is out of range; it needs ranks >= 1, stages >= ranks, microbatches >= 1, slices >= 1");
  if (s.rank_count() != p.ranks)
    bad("it has " + std::to_string(s.rank_count()) +
        " rank lists but problem.ranks = " + std::to_string(p.ranks) + "; give one list per rank");
  if (s.placement.ranks() != p.ranks)
    bad("the placement is for " + std::to_string(s.placement.ranks()) +
        " ranks but problem.ranks = " + std::to_string(p.ranks));
  if (s.placement.stages() != p.stages)
    bad("the placement maps " + std::to_string(s.placement.stages()) +
        " stages but problem.stages = " + std::to_string(p.stages) + "; they must agree");
  const char* const eol = s.crlf ? "\r\n" : "\n";
  std::string out = std::string("# pipesched schedule") + eol;
  std::string name = s.name;
  for (char& c : name)
    if (c == '\n' || c == '\r') c = ' ';
  if (std::string_view t = detail::io::trim(name); !t.empty())
    out += "name " + std::string(t) + eol;
  out += "ranks " + std::to_string(p.ranks) + " stages " + std::to_string(p.stages) +
         " microbatches " + std::to_string(p.microbatches) + " slices " + std::to_string(p.slices);
  if (p.replicas != 1) out += " replicas " + std::to_string(p.replicas);  // Chimera's two
  out += eol;
  out += "placement";
  for (int r : s.placement.rank_of_stage())
    out += " " + std::to_string(r);
  out += "  # " + s.placement.describe() + eol;
  auto in_range = [&](const Action& a, int stage, int microbatch, int slice) {
    if (stage >= p.stages || microbatch >= p.microbatches || slice >= p.slices)
      bad("action " + format_action(a) + " lies outside the problem (stages = " +
          std::to_string(p.stages) + ", microbatches = " + std::to_string(p.microbatches) +
          ", slices = " + std::to_string(p.slices) + ")");
  };
  for (const auto& list : s.ranks)
    for (const Action& a : list) {
      if (a.kind == OpKind::Idle) continue;
      in_range(a, a.stage, a.microbatch, a.slice);
      if (a.kind == OpKind::Overlap) in_range(a, a.b_stage, a.b_microbatch, a.b_slice);
    }
  for (int r = 0; r < s.rank_count(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (const Action& a : s.ranks[r])
      out += " " + (a.kind == OpKind::Idle ? "-" : format_action(a));
    out += eol;
  }
  return out;
}

//! Writes to_text(s) to `out`; throws pipesched::error when the stream fails.
inline void write_text(std::ostream& out, const Schedule& s) {
  detail::io::write_stream(out, to_text(s), "text schedule");
}

//! Reads a schedule file in either form: the text form when the first non-blank line is a
//! `#` comment or starts with one of its keywords, else PyTorch's CSV. The schedule is named
//! by the text's `name` line, else after the file. Throws pipesched::error naming the path
//! and the reason when the file cannot be read, parse_error when its content is wrong.
inline Schedule read_schedule_file(const std::string& path) {
  std::string content = detail::io::read_file(path);
  std::string name = detail::io::file_name_of(path);
  if (detail::io::looks_like_text_form(content))
    return detail::io::TextReader(content, std::move(name)).read();
  return detail::io::read_csv_content(content, std::move(name));
}

//! Writes `s` to `path`: as CSV when the path ends in `.csv` (any case), else in the text
//! form. Throws pipesched::error naming the path and the reason when it cannot be written.
inline void write_schedule_file(const std::string& path, const Schedule& s) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  detail::io::write_file(path, ext == ".csv" ? to_csv(s) : to_text(s));
}

}  // namespace pipesched
