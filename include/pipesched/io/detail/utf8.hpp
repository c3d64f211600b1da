// UTF-8 validity, shared by the JSON writer (which replaces invalid bytes) and the JSON reader
// (which refuses them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pipesched::detail {

//! The length of the valid UTF-8 sequence that starts at `text[i]` (1 to 4), or 0 when the
//! bytes there are not UTF-8 (a stray continuation byte, an overlong form, a surrogate, a value
//! past U+10FFFF, a sequence cut short).
inline std::size_t utf8_length(std::string_view text, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  std::size_t len = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (text.size() - i < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace pipesched::detail
