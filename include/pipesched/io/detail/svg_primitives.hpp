// The drawing primitives of the SVG timeline (io/svg.hpp): colours and their shades, XML
// escaping, pixel coordinates, a rough text measure to decide what fits, axis tick steps and
// their labels (SI-prefixed seconds, binary-prefixed bytes) and greedy line wrapping.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipesched/core/action.hpp"
#include "pipesched/io/detail/render_common.hpp"

namespace pipesched::detail {

//! An sRGB colour.
struct Rgb {
  int r = 0, g = 0, b = 0;
};

//! `c` as "#rrggbb" (each channel clamped to 0..255).
inline std::string hex(Rgb c) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "#";
  for (int v : {c.r, c.g, c.b}) {
    v = std::clamp(v, 0, 255);
    s += digits[v / 16];
    s += digits[v % 16];
  }
  return s;
}

//! `c` moved towards white by `t` (0 = unchanged, 1 = white).
inline Rgb lighten(Rgb c, double t) {
  auto mix = [t](int v) { return static_cast<int>(std::lround(v + (255 - v) * t)); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

//! Labels go dark on light fills, white on dark ones (relative luminance, sRGB weights).
inline bool is_light(Rgb c) {
  return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b > 150;
}

//! Base colour of a kind. Chosen far apart in hue so kinds stay apart when a later chunk is
//! drawn in a lighter shade.
inline Rgb kind_colour(OpKind k) {
  switch (k) {
    case OpKind::F:
      return {47, 107, 176};  // blue
    case OpKind::B:
      return {62, 150, 62};  // green
    case OpKind::I:
      return {20, 160, 170};  // teal
    case OpKind::W:
      return {236, 132, 32};  // orange
    case OpKind::R:
      return {140, 86, 180};  // purple
    case OpKind::SendF:
    case OpKind::SendB:
    case OpKind::RecvF:
    case OpKind::RecvB:
      return {110, 110, 110};  // grey
    case OpKind::VocabF:
      return {196, 58, 122};  // magenta
    case OpKind::VocabB:
      return {226, 140, 180};  // pink
    case OpKind::EmbedF:
      return {60, 150, 80};  // green
    case OpKind::EmbedB:
      return {150, 205, 150};  // light green
    default:
      return {200, 200, 200};
  }
}

//! Text for XML content and attribute values: valid UTF-8, markup characters escaped, and the
//! control characters XML 1.0 forbids (and line breaks, which a one-line text cannot hold)
//! turned into blanks.
inline std::string xml_escape(std::string_view text) {
  std::string out;
  for (char ch : sanitize_utf8(text)) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
        out += ch;
    }
  }
  return out;
}

//! Pixel coordinate with at most two decimals.
inline std::string px(double v) {
  return fixed_number(v, 2);
}

//! Rough width in pixels of `text` in a sans-serif font of size `font` (digits and lowercase
//! letters average a little over half an em). Used only to decide what fits.
inline double text_width(std::string_view text, double font) {
  std::size_t chars = 0;
  for (char c : text)
    chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // count code points
  return static_cast<double>(chars) * font * 0.6;
}

//! A tick step of 1, 2 or 5 × 10^k that puts at most `max_ticks` ticks on [0, span].
inline double tick_step(double span, int max_ticks) {
  if (!(span > 0) || max_ticks < 1) return 1;
  const double raw = span / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

//! Time tick `v` of an axis from 0 to `span`: SI-prefixed seconds for "seconds" ("0",
//! "250 \xC2\xB5s", "12.5 ms", "1.5 s"), the prefix the largest of s, ms, \xC2\xB5s and ns
//! not above the span; for any other unit the bare number (the axis caption names the unit).
inline std::string time_tick(double v, double span, const std::string& unit) {
  if (unit != "seconds" && unit != "s") return format_number(v, 6);
  if (v == 0) return "0";
  struct Prefix {
    double scale;
    const char* name;
  };
  static constexpr Prefix prefixes[] = {{1, "s"}, {1e-3, "ms"}, {1e-6, "\xC2\xB5s"}, {1e-9, "ns"}};
  for (const Prefix& p : prefixes)
    if (span >= p.scale * (1 - 1e-9) || p.scale == 1e-9)
      return format_number(v / p.scale, 6) + " " + p.name;
  return format_number(v, 6) + " s";
}

//! The tick step of a memory axis from 0 to `hi`: with "bytes" 1, 2 or 5 × 10^k of the
//! binary prefix that keeps the numbers under 1024, else as tick_step; at most `max_ticks`.
inline double memory_tick_step(double hi, int max_ticks, const std::string& unit) {
  if (unit != "bytes") return tick_step(hi, max_ticks);
  double scale = 1;
  while (hi / scale >= 1024 && scale < std::pow(1024.0, 6))
    scale *= 1024;
  return scale * tick_step(hi / scale, max_ticks);
}

//! Memory tick `v` of an axis from 0 to `hi`: with "bytes" in the binary prefix of
//! memory_tick_step ("0.5 GiB", "3 GiB"), else the bare number.
inline std::string memory_tick(double v, double hi, const std::string& unit) {
  if (unit != "bytes") return format_number(v, 6);
  if (v == 0) return "0";
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int k = 0;
  double scale = 1;
  while (k < 6 && hi / scale >= 1024) {
    scale *= 1024;
    ++k;
  }
  return format_number(v / scale, 6) + " " + names[k];
}

//! Greedy line breaking of `parts` joined by `sep` into lines no wider than `width` pixels.
inline std::vector<std::string> wrap_parts(const std::vector<std::string>& parts,
                                           std::string_view sep, double font, double width) {
  std::vector<std::string> lines;
  std::string line;
  for (const std::string& p : parts) {
    std::string candidate = line.empty() ? p : line + std::string(sep) + p;
    if (!line.empty() && text_width(candidate, font) > width) {
      lines.push_back(line);
      line = p;
    } else {
      line = std::move(candidate);
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace pipesched::detail
