# Run with `cmake -P`: builds the API reference (docs/Doxyfile) into WORK_DIR and fails if
# Doxygen warns, listing the warnings: a public name without a //! comment ("... is not
# documented"), a broken reference or a malformed comment. Options:
#   -DDOXYGEN=<doxygen executable>  -DSOURCE_DIR=<repository root>  -DWORK_DIR=<scratch folder>
#   -DPENDING=<path>,<path>,...     (optional) paths under SOURCE_DIR, files or folders, whose
#                                   public names are still being documented: their warnings are
#                                   listed but do not fail the check. A pending path without a
#                                   warning fails it, so the list only shrinks.
foreach(var DOXYGEN SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_api_docs.cmake: pass -D${var}=... before -P")
  endif()
endforeach()
set(pending "")
if(DEFINED PENDING AND NOT PENDING STREQUAL "")
  string(REPLACE "," ";" pending "${PENDING}")
endif()

# docs/Doxyfile as it is, with the pages and the warning log in WORK_DIR.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(log "${WORK_DIR}/warnings.log")
file(WRITE "${WORK_DIR}/Doxyfile"
  "@INCLUDE = \"${SOURCE_DIR}/docs/Doxyfile\"\n"
  "OUTPUT_DIRECTORY = \"${WORK_DIR}\"\n"
  "WARN_LOGFILE = \"${log}\"\n")

execute_process(
  COMMAND "${DOXYGEN}" "${WORK_DIR}/Doxyfile"
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "doxygen docs/Doxyfile failed (exit ${result}):\n${output}")
endif()

# Warnings about the configuration itself go to the console, the rest to the log.
set(text "")
if(EXISTS "${log}")
  file(READ "${log}" text)
endif()
string(APPEND text "\n${output}")
string(REPLACE "${SOURCE_DIR}/" "" text "${text}")
# One entry per warning: a line naming a file and its continuation lines (indented details).
string(REPLACE ";" "<semicolon>" text "${text}")
string(REGEX REPLACE "\n([ \t])" "<newline>\\1" text "${text}")
string(REGEX MATCHALL "[^\n]+" entries "${text}")

set(failing "")
set(failing_count 0)
set(waiting "")
set(waiting_count 0)
set(quiet_pending "${pending}")
foreach(entry IN LISTS entries)
  string(STRIP "${entry}" stripped)
  if(stripped STREQUAL "")
    continue()
  endif()
  string(REPLACE "<newline>" "\n" entry "${entry}")
  string(REPLACE "<semicolon>" ";" entry "${entry}")
  set(is_pending FALSE)
  foreach(path IN LISTS pending)
    string(LENGTH "${path}" n)
    string(SUBSTRING "${entry}" 0 ${n} head)
    if(head STREQUAL path)
      set(is_pending TRUE)
      list(REMOVE_ITEM quiet_pending "${path}")
    endif()
  endforeach()
  if(is_pending)
    string(APPEND waiting "${entry}\n")
    math(EXPR waiting_count "${waiting_count} + 1")
  else()
    string(APPEND failing "${entry}\n")
    math(EXPR failing_count "${failing_count} + 1")
  endif()
endforeach()

if(waiting_count GREATER 0)
  message("${waiting_count} warnings in headers still being documented (PENDING), not counted:\n"
          "${waiting}")
endif()
if(failing_count GREATER 0)
  message("${failing}")  # as Doxygen wrote them
  if(failing_count EQUAL 1)
    set(counted "1 warning")
  else()
    set(counted "${failing_count} warnings")
  endif()
  message(FATAL_ERROR
    "doxygen docs/Doxyfile warns (${counted}, above); give each public name a //! comment "
    "saying what it is, or fix the reference")
endif()
if(quiet_pending)
  string(REPLACE ";" ", " quiet_pending "${quiet_pending}")
  message(FATAL_ERROR
    "no warnings any more in ${quiet_pending}: take it off the PENDING list (tests/CMakeLists.txt)")
endif()
if(waiting_count GREATER 0)
  message(STATUS "API reference built; no warnings outside PENDING (${WORK_DIR}/html/index.html)")
else()
  message(STATUS "API reference built without warnings (${WORK_DIR}/html/index.html)")
endif()
