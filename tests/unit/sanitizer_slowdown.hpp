// Time bounds in the unit tests scale with the build: sanitizer builds run several times slower.
#pragma once

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr double sanitizer_slowdown = 10;
#else
inline constexpr double sanitizer_slowdown = 1;
#endif
