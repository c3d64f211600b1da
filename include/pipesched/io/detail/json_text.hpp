// Text helpers of the JSON reader (io/json_read.hpp): the length of a valid UTF-8 sequence, a
// code point written out, a code point's name for messages, and whether a number literal out
// of a double's range is too large or too small.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipesched/io/detail/utf8.hpp"

namespace pipesched::detail::json_read {

using pipesched::detail::utf8_length;  // io/detail/utf8.hpp

//! Appends code point `cp` (at most U+10FFFF, not a surrogate) to `out` in UTF-8.
inline void append_utf8(std::string& out, std::uint32_t cp) {
  auto put = [&](std::uint32_t b) { out += static_cast<char>(b); };
  if (cp < 0x80) {
    put(cp);
  } else if (cp < 0x800) {
    put(0xC0 | (cp >> 6));
    put(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    put(0xE0 | (cp >> 12));
    put(0x80 | ((cp >> 6) & 0x3F));
    put(0x80 | (cp & 0x3F));
  } else {
    put(0xF0 | (cp >> 18));
    put(0x80 | ((cp >> 12) & 0x3F));
    put(0x80 | ((cp >> 6) & 0x3F));
    put(0x80 | (cp & 0x3F));
  }
}

//! "U+000A": a code point as Unicode writes it.
inline std::string code_point_name(std::uint32_t cp) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string digits;
  for (int shift = cp > 0xFFFF ? 20 : 12; shift >= 0; shift -= 4)
    digits += hex[(cp >> shift) & 0xF];
  return "U+" + digits;
}

//! Whether a JSON number literal out of a double's range is too large (else too small): its
//! first significant digit stands at 10^k with k >= 0.
inline bool overflows_double(std::string_view literal) {
  std::size_t i = literal.front() == '-' ? 1 : 0;
  long long k = 0;
  bool significant = false;
  for (; i < literal.size() && literal[i] >= '0' && literal[i] <= '9'; ++i) {
    if (significant) ++k;
    if (literal[i] != '0') significant = true;
  }
  if (!significant && i < literal.size() && literal[i] == '.') {
    for (++i; i < literal.size() && literal[i] == '0'; ++i)
      --k;
    --k;
  }
  const std::size_t e = literal.find_first_of("eE");
  long long exponent = 0;
  if (e != std::string_view::npos) {
    std::size_t j = e + 1;
    const bool negative = literal[j] == '-';
    if (literal[j] == '+' || literal[j] == '-') ++j;
    for (; j < literal.size(); ++j)
      exponent = std::min<long long>(exponent * 10 + (literal[j] - '0'), 1'000'000'000'000LL);
    if (negative) exponent = -exponent;
  }
  return k + exponent >= 0;
}

}  // namespace pipesched::detail::json_read
