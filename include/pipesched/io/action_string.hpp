// Action strings: the text form of one action, shared by the CSV and text schedule formats.
// A superset of torch.distributed.pipelining's strings (`2F0`, `3SEND_F1`,
// `(0F7;7B3)OVERLAP_F_B`) with pipesched's recompute kind and slice / part suffixes.
// The grammar is documented in docs/formats.md.
#pragma once

#include <climits>
#include <cstddef>
#include <string>
#include <string_view>

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"

namespace pipesched {

namespace detail::io {

//! Where and why an action string could not be read. `offset` is 0-based within the token
//! exactly as it was passed (leading whitespace included).
struct ActionSyntaxError {
  std::size_t offset = 0;
  std::string problem;
};

//! Result of reading one action string: either `action` or `error`.
struct ActionParse {
  bool ok = false;
  Action action{};
  ActionSyntaxError error{};
};

constexpr bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}
constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
constexpr bool is_word_char(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

//! `text` without leading and trailing blanks.
constexpr std::string_view trim(std::string_view text) noexcept {
  std::size_t b = 0, e = text.size();
  while (b < e && is_blank(text[b]))
    ++b;
  while (e > b && is_blank(text[e - 1]))
    --e;
  return text.substr(b, e - b);
}

//! `c` as it can appear in a message: itself when printable, else `\xNN` (a NUL byte in a
//! file must not end the message that quotes it, nor a control byte garble a terminal).
inline std::string printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u != 0x7f) return std::string(1, c);
  static constexpr char hex[] = "0123456789abcdef";
  return std::string("\\x") + hex[u >> 4] + hex[u & 0xf];
}

//! `text` in double quotes, control bytes written `\xNN`, cut short when long so that a huge
//! cell cannot flood a message.
inline std::string quote_token(std::string_view text) {
  constexpr std::size_t limit = 60;
  std::string out = "\"";
  for (char c : text.substr(0, limit))
    out += printable(c);
  if (text.size() > limit) out += "...";
  out += '"';
  return out;
}

//! A description of the character at `pos` for messages ("'x'", "a blank" or `end_name`).
inline std::string found_at(std::string_view s, std::size_t pos, std::size_t end,
                            const char* end_name = "the end of the action") {
  if (pos >= end) return end_name;
  if (is_blank(s[pos])) return "a blank";
  if (s[pos] == '\0') return "a NUL byte (\\x00)";
  return "'" + printable(s[pos]) + "'";
}

//! Recursive-descent reader over one token; on failure leaves the first error in `error_`.
class ActionReader {
 public:
  explicit ActionReader(std::string_view token) : s_(token) {
    std::string_view t = trim(token);
    pos_ = t.empty() ? 0 : static_cast<std::size_t>(t.data() - token.data());
    end_ = pos_ + t.size();
  }

  ActionParse read() {
    ActionParse r;
    if (pos_ == end_) {
      fail(pos_,
           "the action is empty; expected one like 2F0 (an idle slot is an empty CSV cell "
           "or '-' in the text form)");
    } else if (s_[pos_] == '(') {
      r.action = read_overlap();
    } else {
      r.action = read_simple(false);
      if (ok_ && pos_ != end_)
        fail(pos_, "unexpected " + found_at(s_, pos_, end_) +
                       " after the action; an action is <stage><kind><microbatch>, then "
                       "optionally .<slice> and, on W only, :<part>, and nothing else");
    }
    r.ok = ok_;
    r.error = error_;
    return r;
  }

 private:
  void fail(std::size_t at, std::string problem) {
    if (!ok_) return;
    ok_ = false;
    error_ = {at, std::move(problem)};
  }

  // A non-negative decimal that fits an int; `what` names it in messages.
  int read_number(const char* what, const std::string& example) {
    if (!ok_) return 0;
    if (pos_ < end_ && s_[pos_] == '-') {
      fail(pos_, std::string("the ") + what + " is negative; indices are non-negative (e.g. " +
                     example + ")");
      return 0;
    }
    if (pos_ >= end_ || !is_digit(s_[pos_])) {
      fail(pos_, std::string("expected the ") + what + " (a number) but found " +
                     found_at(s_, pos_, end_) + "; e.g. " + example);
      return 0;
    }
    std::size_t start = pos_;
    long long value = 0;
    bool too_large = false;
    while (pos_ < end_ && is_digit(s_[pos_])) {
      if (!too_large) {
        value = value * 10 + (s_[pos_] - '0');
        too_large = value > INT_MAX;
      }
      ++pos_;
    }
    if (too_large) {
      fail(start, std::string("the ") + what + " " + std::string(s_.substr(start, pos_ - start)) +
                      " is too large; indices go up to " + std::to_string(INT_MAX));
      return 0;
    }
    return static_cast<int>(value);
  }

  // The kind word after the stage number. BW is read as a full backward (PyTorch 2.15 refuses
  // it: its reader takes 2BW0 as 2B with no microbatch).
  OpKind read_kind(int stage) {
    if (!ok_) return OpKind::Idle;
    std::size_t start = pos_;
    while (pos_ < end_ && is_word_char(s_[pos_]))
      ++pos_;
    std::string_view word = s_.substr(start, pos_ - start);
    static constexpr std::string_view expected =
        "expected one of F, B, BW, I, W, R, RL, SEND_F, RECV_F, SEND_B, RECV_B, WAIT_SEND_F, "
        "WAIT_SEND_B, UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD, OFFLOAD, RELOAD, VOCAB_F, "
        "VOCAB_B, EMBED_F, EMBED_B";
    if (word.empty()) {
      fail(start, "expected a kind after stage " + std::to_string(stage) + " but found " +
                      found_at(s_, start, end_) + "; " + std::string(expected));
      return OpKind::Idle;
    }
    struct Entry {
      std::string_view word;
      OpKind kind;
    };
    static constexpr Entry table[] = {
        {"F", OpKind::F},
        {"B", OpKind::B},
        {"BW", OpKind::B},
        {"I", OpKind::I},
        {"W", OpKind::W},
        {"R", OpKind::R},
        {"RL", OpKind::R},  // a late recompute (read_simple sets Action::late)
        {"SEND_F", OpKind::SendF},
        {"RECV_F", OpKind::RecvF},
        {"SEND_B", OpKind::SendB},
        {"RECV_B", OpKind::RecvB},
        {"WAIT_SEND_F", OpKind::WaitSendF},
        {"WAIT_SEND_B", OpKind::WaitSendB},
        {"UNSHARD", OpKind::Unshard},
        {"RESHARD", OpKind::Reshard},
        {"REDUCE_GRAD", OpKind::ReduceGrad},
        {"WAIT_REDUCE_GRAD", OpKind::WaitReduceGrad},
        {"OFFLOAD", OpKind::Offload},
        {"RELOAD", OpKind::Reload},
        {"VOCAB_F", OpKind::VocabF},
        {"VOCAB_B", OpKind::VocabB},
        {"EMBED_F", OpKind::EmbedF},
        {"EMBED_B", OpKind::EmbedB},
    };
    for (const Entry& e : table)
      if (e.word == word) return e.kind;
    std::string w(word);
    if (w == "OVERLAP_F_B") {
      fail(start,
           "an overlap is written (<F action>;<B action>)OVERLAP_F_B, e.g. (0F7;7B3)OVERLAP_F_B");
      return OpKind::Idle;
    }
    std::string upper = w;
    for (char& c : upper)
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    for (const Entry& e : table)
      if (e.word == upper) {
        fail(start,
             "unknown kind \"" + w + "\"; kinds are case-sensitive, so write \"" + upper + "\"");
        return OpKind::Idle;
      }
    fail(start, "unknown kind " + quote_token(w) + "; " + std::string(expected));
    return OpKind::Idle;
  }

  // <stage><kind><microbatch>[.<slice>][:<part>], stopping at the first character that
  // cannot continue it. Inside an overlap no part suffix exists, which the W-only rule enforces.
  Action read_simple(bool in_overlap) {
    int stage = read_number("stage", "2F0");
    const std::size_t kind_at = pos_;
    OpKind kind = read_kind(stage);
    const bool late = ok_ && kind == OpKind::R && pos_ - kind_at == 2;  // RL
    const bool bw = ok_ && kind == OpKind::B && pos_ - kind_at == 2;    // BW
    if (late && in_overlap)
      fail(kind_at, "a recompute cannot be part of an overlap, which holds one F and one B");
    std::string head = std::to_string(stage) + std::string(to_string(kind)) + (late ? "L" : "");
    if (ok_ && is_stage_action(kind)) {
      // UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD act on a whole stage.
      if (in_overlap)
        fail(pos_ - to_string(kind).size(),
             std::string(to_string(kind)) +
                 " cannot be part of an overlap, which holds one F and "
                 "one B");
      else if (pos_ < end_ && (is_digit(s_[pos_]) || s_[pos_] == '.' || s_[pos_] == ':'))
        fail(pos_, std::string(to_string(kind)) +
                       " acts on a whole stage and takes no microbatch, slice or part; write " +
                       head);
      return Action::make(kind, stage, 0);
    }
    int microbatch = read_number("microbatch", head + "0");
    int slice = 0, part = 0;
    if (ok_ && pos_ < end_ && s_[pos_] == '.') {
      ++pos_;
      slice = read_number("slice after '.'", head + std::to_string(microbatch) + ".1");
    }
    if (ok_ && pos_ < end_ && s_[pos_] == ':') {
      if (kind != OpKind::W) {
        fail(pos_, std::string("a part suffix ':<part>' is only allowed on W actions") +
                       (in_overlap ? ", not inside an overlap" : "") + "; remove it");
      } else {
        ++pos_;
        part = read_number("part after ':'", head + std::to_string(microbatch) + ":1");
      }
    }
    Action a = Action::make(kind, stage, microbatch, slice, part);
    a.late = late;
    a.spelled_bw = bw;
    return a;
  }

  // (<F action>;<B action>)OVERLAP_F_B
  Action read_overlap() {
    static constexpr std::string_view example = "(0F7;7B3)OVERLAP_F_B";
    ++pos_;  // '('
    std::size_t f_at = pos_;
    Action f = read_simple(true);
    if (ok_ && f.kind != OpKind::F)
      fail(f_at, "the first action of an overlap must be a forward (F), found " +
                     std::string(to_string(f.kind)) + "; e.g. " + std::string(example));
    if (ok_ && (pos_ >= end_ || s_[pos_] != ';'))
      fail(pos_, "expected ';' between the forward and the backward of an overlap but found " +
                     found_at(s_, pos_, end_) + "; e.g. " + std::string(example));
    ++pos_;
    std::size_t b_at = pos_;
    Action b = read_simple(true);
    if (ok_ && b.kind != OpKind::B)
      fail(b_at, "the second action of an overlap must be a full backward (B), found " +
                     std::string(to_string(b.kind)) + "; e.g. " + std::string(example));
    if (ok_ && (pos_ >= end_ || s_[pos_] != ')'))
      fail(pos_, "expected ')' after the backward of an overlap but found " +
                     found_at(s_, pos_, end_) + "; e.g. " + std::string(example));
    ++pos_;
    if (ok_) {
      std::string_view rest = s_.substr(pos_, end_ - pos_);
      if (rest != to_string(OpKind::Overlap))
        fail(pos_,
             (rest.empty() ? std::string("missing OVERLAP_F_B after ')'")
                           : "expected OVERLAP_F_B after ')' but found " + quote_token(rest)) +
                 "; an overlap is written like " + std::string(example));
    }
    return Action::overlap(f, b);
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::size_t end_ = 0;
  bool ok_ = true;
  ActionSyntaxError error_;
};

//! Reads one action string without throwing (readers of whole files add line and column).
inline ActionParse try_parse_action(std::string_view token) {
  return ActionReader(token).read();
}

//! Throws invalid_schedule when `a` has a field no action string can carry.
inline void check_writable(const Action& a) {
  auto bad = [&](const std::string& why) {
    throw invalid_schedule("cannot write an action of kind " + std::string(to_string(a.kind)) +
                           ": " + why + ".");
  };
  auto idx = static_cast<int>(a.kind);
  if (idx < 0 || idx >= op_kind_count) bad("its kind value " + std::to_string(idx) + " is unknown");
  if (a.kind == OpKind::Idle) return;
  auto non_negative = [&](const char* field, int v) {
    if (v < 0)
      bad(std::string(field) + " = " + std::to_string(v) + " is negative; indices start at 0");
  };
  non_negative("stage", a.stage);
  non_negative("microbatch", a.microbatch);
  non_negative("slice", a.slice);
  if (a.kind == OpKind::Overlap) {
    non_negative("b_stage", a.b_stage);
    non_negative("b_microbatch", a.b_microbatch);
    non_negative("b_slice", a.b_slice);
    return;
  }
  non_negative("part", a.part);
  if (is_stage_action(a.kind) && (a.microbatch != 0 || a.slice != 0 || a.part != 0))
    bad("it acts on a whole stage, so microbatch, slice and part must be 0 (they are " +
        std::to_string(a.microbatch) + ", " + std::to_string(a.slice) + " and " +
        std::to_string(a.part) + ")");
  if (a.part != 0 && a.kind != OpKind::W)
    bad("part = " + std::to_string(a.part) +
        " is set, but only W actions have parts; use part = 0");
  if (a.late && a.kind != OpKind::R)
    bad("late is set, but only a recompute (R) can be late; use late = false");
}

}  // namespace detail::io

//! Reads one action string such as `2F0`, `0I1`, `1W3`, `3SEND_F1`, `2BW0` (read as B),
//! `2R0`, `2RL0` (a late recompute), `2F0.3` (slice 3), `2W0.3:1` (slice 3, part 1) or
//! `(0F7;7B3)OVERLAP_F_B`. Blanks around the token are ignored; kinds are case-sensitive. An empty
//! token is an error (an idle slot is an empty CSV cell, handled by the CSV reader). Throws
//! parse_error whose message names the token, what was wrong and what was expected; its line() is 0
//! and its column() is the 1-based position, within `token` exactly as passed (leading blanks
//! counted), of the first character that could not be read.
inline Action parse_action(std::string_view token) {
  detail::io::ActionParse r = detail::io::try_parse_action(token);
  if (!r.ok) {
    int column = static_cast<int>(r.error.offset) + 1;
    throw parse_error("cannot read action " + detail::io::quote_token(detail::io::trim(token)) +
                          " (column " + std::to_string(column) + "): " + r.error.problem + ".",
                      0, column);
  }
  return r.action;
}

//! Writes `a` as an action string. Without pipesched's extensions (slice 0, part 0) this is
//! PyTorch's exact form: `2F0`, `0I1`, `1W3`, `3SEND_F1`, `(0F7;7B3)OVERLAP_F_B`; a full
//! backward is written `B`. A slice adds `.k`, a part adds `:j` (W only). An idle slot is
//! the empty string. Throws invalid_schedule for an action no string can carry (a negative
//! index, a part on a kind other than W).
inline std::string format_action(const Action& a) {
  detail::io::check_writable(a);
  return to_string(a);  // the one definition of the form, in core/action.hpp
}

}  // namespace pipesched
