// Layouts: which of a model's units each pipeline stage holds — the embedding, a number of
// transformer layers, the output layer with the loss — read and written as text in
// Megatron-core's grammar (`--pipeline-model-parallel-layout`) where it fits:
//
//   E  the embedding        t  a transformer layer        L  the output layer and the loss
//   |  ends a stage         x*N  the unit x, N times      (...)*N  the group, N times
//   ,  ignored (for the eye)
//
// e.g. "Et*3|(tt|)*2,t|tL" is four stages: E and three layers; two; two; one layer, then L and
// one more. Stages come in stage order; under an interleaved placement stage s runs on rank
// s mod pp, so the first pp stages are every rank's first chunk, as Megatron orders them.
// What Megatron allows and pipesched does not run is refused with the reason: an empty stage,
// the multi-token-prediction unit m, E anywhere but at the start of the first stage, L
// anywhere but at the end of the last.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/io/action_string.hpp"

namespace pipesched {

//! What one pipeline stage of a layout holds, in model order.
struct LayoutStage {
  bool embedding = false;  //!< the input embedding (E), before the layers
  int layers = 0;          //!< transformer layers (t)
  bool loss = false;       //!< the output layer and the loss (L), after the layers
  friend bool operator==(const LayoutStage&, const LayoutStage&) = default;
};

//! A model's units over the pipeline's stages, in stage order.
struct Layout {
  //! The most stages a layout may have (what a schedule may have).
  static constexpr std::size_t max_stages = 1 << 16;
  //! The most units and stage ends a layout's text may expand to: room for the most layers
  //! a model has (ModelShape::max_layers) in the most stages. Each of the at most 64 nested
  //! groups holds two strings of at most this many bytes while it expands.
  static constexpr std::size_t max_expanded = 1 << 18;

  std::vector<LayoutStage> stages;  //!< stage s's units

  //! Transformer layers over every stage.
  long long layers() const noexcept {
    long long n = 0;
    for (const LayoutStage& s : stages)
      n += s.layers;
    return n;
  }

  //! The transformer layers of each stage, in stage order: what Parallelism::layers holds.
  std::vector<int> stage_layers() const {
    std::vector<int> out;
    out.reserve(stages.size());
    for (const LayoutStage& s : stages)
      out.push_back(s.layers);
    return out;
  }

  //! The layout of a model whose stages hold `layers` transformer layers each (in stage
  //! order): the embedding opens the first stage, the output layer and the loss end the last.
  //! Throws invalid_problem for no stage, more than max_stages, a negative count, or a stage
  //! other than the ends with no layer (it would be empty).
  static Layout of_stage_layers(const std::vector<int>& layers) {
    if (layers.empty() || layers.size() > max_stages)
      throw invalid_problem("layout: " + std::to_string(layers.size()) + " stages; give 1 to " +
                            std::to_string(max_stages));
    Layout out;
    out.stages.resize(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const bool end = i == 0 || i + 1 == layers.size();
      if (layers[i] < (end ? 0 : 1))
        throw invalid_problem(
            "layout: stage " + std::to_string(i) + " holds " + std::to_string(layers[i]) +
            " layers; " + (end ? "give 0 or more" : "a stage between the ends needs 1 or more"));
      out.stages[i].layers = layers[i];
    }
    out.stages.front().embedding = true;
    out.stages.back().loss = true;
    return out;
  }

  //! Throws invalid_problem with one sentence unless the layout fits a model of
  //! `model_layers` transformer layers on `ranks` pipeline ranks: its layers add up to the
  //! model's, and its stage count is a whole number of chunks per rank (ranks × chunks).
  void check(int model_layers, int ranks) const {
    if (ranks < 1)
      throw invalid_problem("layout: ranks is " + std::to_string(ranks) + "; give 1 or more");
    if (layers() != model_layers)
      throw invalid_problem("layout: its stages hold " + std::to_string(layers()) +
                            " transformer layers but the model has " +
                            std::to_string(model_layers) + "; give every layer a stage, once");
    if (stages.size() % static_cast<std::size_t>(ranks) != 0)
      throw invalid_problem(
          "layout: " + std::to_string(stages.size()) + " stages on " + std::to_string(ranks) +
          " ranks; give ranks x chunks stages (a multiple of " + std::to_string(ranks) + ")");
  }

  friend bool operator==(const Layout&, const Layout&) = default;
};

namespace detail::layout {

// The text expanded to units and stage ends ('E', 't', 'L', '|'), repeats unrolled.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  std::string expand() {
    std::string out = sequence(0);
    if (pos_ < text_.size()) fail("')' closes no '('; remove it or open a group before it");
    return out;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw invalid_problem("layout " + io::quote_token(text_) + ": at character " +
                          std::to_string(pos_ + 1) + ", " + what +
                          ". A layout is units E (embedding), t (transformer layer) and L "
                          "(output layer and loss), | between stages, x*N or (...)*N to "
                          "repeat, e.g. Et*3|(tt|)*2,t|tL");
  }

 private:
  std::string sequence(int depth) {
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ')') return out;  // the caller closes the group (or refuses a stray ')')
      if (c == ',' || c == ' ') {
        ++pos_;
        continue;
      }
      if (c == '(') {
        if (depth >= 64) fail("groups nest more than 64 deep");
        ++pos_;
        const std::string group = sequence(depth + 1);
        if (pos_ >= text_.size() || text_[pos_] != ')') fail("'(' is not closed; add ')'");
        ++pos_;
        if (pos_ >= text_.size() || text_[pos_] != '*') fail("a group needs its count, (...)*N");
        append(out, group, count());
        continue;
      }
      if (c == 'E' || c == 't' || c == 'L' || c == '|') {
        ++pos_;
        const std::size_t n = pos_ < text_.size() && text_[pos_] == '*' ? count() : 1;
        if (c == '|' && n != 1) fail("'|' cannot repeat; repeat a group, (t|)*N");
        append(out, std::string(1, c), n);
        continue;
      }
      if (c == 'm')
        fail("'m' (a multi-token-prediction layer) is not a unit pipesched's models have");
      if (c == '*') fail("'*' follows no unit or group");
      fail("'" + io::printable(c) + "' is not part of a layout");
    }
    return out;
  }

  // "*N" at pos_: N from 1 to max_expanded.
  std::size_t count() {
    ++pos_;  // '*'
    const std::size_t start = pos_;
    std::size_t n = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = n * 10 + static_cast<std::size_t>(text_[pos_] - '0');
      ++pos_;
      if (n > Layout::max_expanded)
        fail("a count is above " + std::to_string(Layout::max_expanded));
    }
    if (pos_ == start) fail("'*' needs a count, e.g. t*4");
    if (n == 0) fail("a count of 0 repeats nothing; leave the unit out");
    return n;
  }

  void append(std::string& out, const std::string& piece, std::size_t n) {
    if (piece.empty()) return;
    if (n > (Layout::max_expanded - out.size()) / piece.size())
      fail("it expands to more than " + std::to_string(Layout::max_expanded) +
           " units; a model has at most that many");
    for (std::size_t i = 0; i < n; ++i)
      out += piece;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace detail::layout

//! Reads a layout (see the file comment). Throws invalid_problem with one sentence — where in
//! the text, what is wrong and what a layout is — for a symbol that is not a unit, a count
//! that is missing, 0 or too large, an unclosed or unopened group, an empty stage, E other
//! than at the start of the first stage, L other than at the end of the last, a unit twice
//! (E, L), and more than Layout::max_stages stages. A trailing '|' ends the last stage.
inline Layout parse_layout(std::string_view text) {
  detail::layout::Reader reader(text);
  std::string units = reader.expand();
  if (!units.empty() && units.back() == '|') units.pop_back();
  Layout out;
  out.stages.emplace_back();
  auto refuse = [&](const std::string& what) {
    throw invalid_problem("layout " + detail::io::quote_token(text) + ": " + what);
  };
  for (char c : units) {
    LayoutStage& s = out.stages.back();
    const std::string where = "stage " + std::to_string(out.stages.size() - 1);
    if (c == '|') {
      if (s.layers == 0 && !s.embedding && !s.loss)
        refuse(where + " is empty; give every stage a unit (E, t or L)");
      if (s.loss) refuse("L ends " + where + ", but L must end the last stage");
      if (out.stages.size() >= Layout::max_stages)
        refuse("more than " + std::to_string(Layout::max_stages) + " stages");
      out.stages.emplace_back();
    } else if (c == 'E') {
      if (out.stages.size() > 1 || s.layers > 0 || s.embedding || s.loss)
        refuse("E can only open the first stage, once; here it stands in " + where +
               (out.stages.size() > 1 ? "" : " after other units"));
      s.embedding = true;
    } else if (c == 't') {
      if (s.loss) refuse("a layer follows L in " + where + "; L comes after every layer");
      if (s.layers >= (1 << 30)) refuse(where + " holds too many layers");
      ++s.layers;
    } else {  // 'L'
      if (s.loss) refuse("L stands twice in " + where + "; give it once");
      s.loss = true;
    }
  }
  const LayoutStage& last = out.stages.back();
  if (last.layers == 0 && !last.embedding && !last.loss)
    refuse("stage " + std::to_string(out.stages.size() - 1) +
           " is empty; give every stage a unit (E, t or L)");
  if (!out.stages.front().embedding) refuse("E is missing; the first stage opens with E");
  if (!last.loss) refuse("L is missing; the last stage ends with L");
  return out;
}

//! `layout` as text that parse_layout reads back to the same layout: each stage's units (t*N
//! for N > 1 layers), '|' between stages, a run of equal stages as (...|)*N.
inline std::string to_string(const Layout& layout) {
  auto stage_text = [](const LayoutStage& s) {
    std::string t;
    if (s.embedding) t += 'E';
    if (s.layers == 1) t += 't';
    if (s.layers > 1) t += "t*" + std::to_string(s.layers);
    if (s.loss) t += 'L';
    return t;
  };
  std::string out;
  const std::size_t n = layout.stages.size();
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && layout.stages[j] == layout.stages[i])
      ++j;
    const std::string one = stage_text(layout.stages[i]);
    const bool last_run = j == n;
    if (j - i > 1 && !last_run) {
      out += "(" + one + "|)*" + std::to_string(j - i);
    } else if (j - i > 1) {
      out += "(" + one + "|)*" + std::to_string(j - i - 1) + one;
    } else {
      out += one;
      if (!last_run) out += '|';
    }
    i = j;
  }
  return out;
}

}  // namespace pipesched
