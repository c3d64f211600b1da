// The library's version. CMake's project() version is read from this file, so the two
// cannot disagree.
#pragma once

#define PIPESCHED_VERSION_MAJOR 0
#define PIPESCHED_VERSION_MINOR 2
#define PIPESCHED_VERSION_PATCH 0
//! "MAJOR.MINOR.PATCH" as a string literal.
#define PIPESCHED_VERSION_STRING "0.2.0"
//! MAJOR * 10000 + MINOR * 100 + PATCH, for `#if PIPESCHED_VERSION >= 200`.
#define PIPESCHED_VERSION \
  (PIPESCHED_VERSION_MAJOR * 10000 + PIPESCHED_VERSION_MINOR * 100 + PIPESCHED_VERSION_PATCH)

//! pipesched: pipeline-parallel training schedules, their policies, passes, analysis, file
//! formats and the executor that runs them.
namespace pipesched {

//! The library's version, "MAJOR.MINOR.PATCH".
inline constexpr const char* version_string = PIPESCHED_VERSION_STRING;

}  // namespace pipesched
