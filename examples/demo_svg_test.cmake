# ctest example.demo.svg: the demo names only the SVG timelines it wrote. WORK_DIR holds a
# directory where the demo would write 1f1b.svg, so that file cannot be written; the demo must
# say so on standard error and exit non-zero, and every "timeline: PATH" it prints must name a
# file that exists and holds an SVG.
#
#   cmake -DDEMO=... -DWORK_DIR=... -P demo_svg_test.cmake
foreach(v DEMO WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "demo_svg_test.cmake: -D${v}=... is missing")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/1f1b.svg")

execute_process(COMMAND "${DEMO}" --steps 1 --svg-dir "${WORK_DIR}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "the demo exited 0 although it could not write ${WORK_DIR}/1f1b.svg:\n${out}")
endif()
if(NOT err MATCHES "cannot write the timeline '[^']*1f1b.svg'")
  message(FATAL_ERROR "the demo did not say it could not write 1f1b.svg; stderr:\n${err}")
endif()
string(REGEX MATCHALL "timeline: [^\n]*" named "${out}")
list(LENGTH named count)
if(count EQUAL 0)
  message(FATAL_ERROR "the demo named no timeline at all:\n${out}")
endif()
foreach(line IN LISTS named)
  string(REPLACE "timeline: " "" path "${line}")
  if(IS_DIRECTORY "${path}" OR NOT EXISTS "${path}")
    message(FATAL_ERROR "the demo named ${path}, which it did not write")
  endif()
  file(READ "${path}" head LIMIT 200)
  if(NOT head MATCHES "<svg")
    message(FATAL_ERROR "the demo named ${path}, which holds no SVG")
  endif()
endforeach()
message(STATUS "the demo named ${count} timelines, each written; 1f1b.svg refused")
