// How numbers, times and memory amounts are written, locale-independent: figures for tables and
// reports (format_number, format_time, format_memory, format_percent: "447 ms", "1.5 GiB"), the
// numbers of messages (format_general, as %g), and memory amounts as messages give them
// (format_amount: "24GB", echoed as --memory-budget takes them).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>

namespace pipesched {

//! How a memory amount is measured: in a cost model's abstract units (UniformCost:
//! microbatches of one rank's activations) or in bytes.
enum class MemoryUnit { Units, Bytes };

namespace detail {

//! `v` with `decimals` digits after the point, trailing zeros (and a bare point) dropped.
//! Locale-independent, unlike printf.
inline std::string fixed_number(double v, int decimals) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  if (ec != std::errc()) {
    auto [end2, ec2] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
    return ec2 == std::errc() ? std::string(buf, end2) : std::string("?");
  }
  std::string out(buf, end);
  if (out.find('.') != std::string::npos) {
    while (out.back() == '0')
      out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  if (out == "-0") out = "0";
  return out;
}

}  // namespace detail

//! A figure for people to read: about `digits` significant digits (at most `digits` − 1
//! decimals), no exponent from 10^-3 up to 10^9.
inline std::string format_number(double v, int digits = 4) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  digits = digits < 1 ? 1 : digits > 17 ? 17 : digits;
  const double a = std::fabs(v);
  if (a >= 1e9 || (a > 0 && a < 1e-3)) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, digits);
    return ec == std::errc() ? std::string(buf, end) : std::string("?");
  }
  // Digits before the point of a in [1, 1e9); below 1 the decimals stay at digits − 1.
  int whole = 1;
  for (double x = a; x >= 10.0; x /= 10.0)
    ++whole;
  const int decimals = a >= 1 ? std::max(digits - whole, 0) : digits - 1;
  return detail::fixed_number(v, decimals);
}

//! `v` as printf's %.6g writes it (`digits` significant digits, an exponent when shorter),
//! locale-independent: the numbers of messages.
inline std::string format_general(double v, int digits = 6) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, digits);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

namespace detail {

//! `number` (the figure `v` written out) followed by `unit`, singular for exactly 1 ("1 unit",
//! "1 microbatch", "2 units"); a bare number for an empty unit.
inline std::string with_unit(std::string number, double v, const std::string& unit) {
  if (unit.empty()) return number;
  if (v != 1 || unit.size() < 2 || unit.back() != 's') return number + " " + unit;
  // English plurals in -es after a sibilant ("microbatches", "boxes"); the rest in -s.
  auto ends = [&](std::string_view tail) {
    return unit.size() > tail.size() &&
           unit.compare(unit.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool es = ends("ches") || ends("shes") || ends("sses") || ends("xes") || ends("zes");
  return number + " " + unit.substr(0, unit.size() - (es ? 2 : 1));
}

// The public figures by the names the library used inside.
using pipesched::format_general;
using pipesched::format_number;

}  // namespace detail

//! `ratio` (0.2) as a percentage with one decimal ("20.0%").
inline std::string format_percent(double ratio) {
  std::string s = detail::fixed_number(ratio * 100.0, 1);
  if (s.find('.') == std::string::npos) s += ".0";
  return s + "%";
}

//! A memory figure in a cost model's unit: with unit "bytes" the value is a byte count
//! written with a binary prefix ("1.5 GiB"); any other unit is written after the number
//! ("2.5 microbatches", singular for 1), an empty one not at all. `digits` as for
//! format_number.
inline std::string format_memory(double v, const std::string& unit, int digits = 4) {
  if (unit != "bytes") return detail::with_unit(format_number(v, digits), v, unit);
  static constexpr const char* prefixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = v;
  int k = 0;
  while (std::fabs(x) >= 1024.0 && k < 6) {
    x /= 1024.0;
    ++k;
  }
  return format_number(x, digits) + " " + prefixes[k];
}

//! A time figure in a cost model's unit: with unit "seconds" (or "s") the value is written in
//! seconds from 1 s up ("1.5 s"), in milliseconds or microseconds between 1 µs and 1 s
//! ("447 ms", "1.205 ms", "250 µs": `digits` significant digits, the prefix chosen
//! after rounding, so 0.99999 s is "1 s"), below 1 µs in seconds again ("5e-07 s"); any
//! other unit is written after the number ("44 units", singular for 1), an empty one not at
//! all (a bare number). `digits` as for format_number.
inline std::string format_time(double v, const std::string& unit, int digits = 4) {
  if (unit != "seconds" && unit != "s") return detail::with_unit(format_number(v, digits), v, unit);
  // `v` / `scale` rounded to `digits` as written, and whether it rounds to 1000 or more (then
  // the next larger prefix says it: "1 s", not "1000 ms").
  auto in = [&](double scale, std::string& number) {
    number = format_number(v / scale, digits);
    double rounded = 0;
    const bool minus = !number.empty() && number[0] == '-';
    std::from_chars(number.data() + minus, number.data() + number.size(), rounded);
    return rounded;
  };
  const double a = std::fabs(v);
  std::string number;
  if (std::isfinite(a) && a < 1 && a > 0) {
    if (a >= 1e-3 * (1 - 1e-12) && in(1e-3, number) < 1000) return number + " ms";
    if (a >= 1e-3 * (1 - 1e-12)) return format_number(v, digits) + " s";
    if (in(1e-6, number) >= 1000) {
      in(1e-3, number);
      return number + " ms";
    }
    if (in(1e-6, number) >= 1) return number + " \xC2\xB5s";
  }
  return format_number(v, digits) + " s";
}

namespace detail {

struct ByteUnit {
  const char* name;
  double size;
};
inline constexpr ByteUnit byte_units[] = {{"TiB", 1099511627776.0},
                                          {"GiB", 1073741824.0},
                                          {"MiB", 1048576.0},
                                          {"KiB", 1024.0},
                                          {"TB", 1e12},
                                          {"GB", 1e9},
                                          {"MB", 1e6},
                                          {"kB", 1e3},
                                          {"B", 1.0}};

}  // namespace detail

//! The one formatter of memory amounts in messages. Units: 6 significant digits. Bytes: an
//! amount that is given (`round_up` false: a budget, a device's memory) in the unit that
//! states it exactly in the fewest characters (24GB, 512MiB, 0.001GiB, 100B: a budget echoed
//! as the user wrote it), else in GiB to a hundredth, as --memory-budget takes it; an amount
//! held or needed (`round_up`) in GiB to a hundredth rounded up, so that the figure a message
//! asks for is enough.
inline std::string format_amount(double value, MemoryUnit unit, bool round_up = true) {
  if (unit == MemoryUnit::Units || !std::isfinite(value)) return detail::format_general(value);
  std::string best;
  if (!round_up)
    for (const detail::ByteUnit& u : detail::byte_units) {
      const std::string digits = detail::format_general(value / u.size);
      if (digits.find('e') != std::string::npos) continue;
      double back = 0;
      std::from_chars(digits.data(), digits.data() + digits.size(), back);
      if (std::fabs(back * u.size - value) > 1e-9 * std::fabs(value)) continue;
      std::string text = digits + u.name;
      if (best.empty() || text.size() < best.size()) best = std::move(text);
    }
  if (!best.empty()) return best;
  const double hundredths = value / detail::byte_units[1].size * 100;
  const double gib = (round_up ? std::ceil(hundredths - 1e-9) : std::round(hundredths)) / 100;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, gib, std::chars_format::fixed, 2);
  return (ec == std::errc() ? std::string(buf, end) : std::string("?")) + "GiB";
}

}  // namespace pipesched
