# Run with `cmake -P`: compiles SOURCE with CXX_COMPILER (syntax only, C++20, INCLUDE_DIR on
# the include path, CXX_FLAGS added) and checks the outcome against the file's first line,
# `// expect: <text>`. <text> = success: the file must compile. Any other <text>: the
# compilation must fail and the compiler's output must contain <text> verbatim.
foreach(var CXX_COMPILER INCLUDE_DIR SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_compile_fail.cmake: pass -D${var}=... before -P")
  endif()
endforeach()

file(READ "${SOURCE}" head LIMIT 4096)
string(REGEX MATCH "^[^\r\n]*" first_line "${head}")
if(NOT first_line MATCHES "^// expect: (.+)$")
  message(FATAL_ERROR "${SOURCE}: the first line must be `// expect: <text>` (the diagnostic "
                      "the file must provoke) or `// expect: success`; it is `${first_line}`")
endif()
string(STRIP "${CMAKE_MATCH_1}" expected)

separate_arguments(extra_flags UNIX_COMMAND "${CXX_FLAGS}")
execute_process(
  COMMAND "${CXX_COMPILER}" ${extra_flags} -std=c++20 -fsyntax-only "-I${INCLUDE_DIR}" "${SOURCE}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(expected STREQUAL "success")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${SOURCE} should compile but did not (exit ${result}):\n${output}")
  endif()
  message(STATUS "${SOURCE} compiled, as expected")
  return()
endif()

if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it should fail with: ${expected}")
endif()
string(FIND "${output}" "${expected}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "${SOURCE} failed to compile, but its output lacks the expected text\n"
                      "  expected: ${expected}\n  output:\n${output}")
endif()
message(STATUS "${SOURCE} failed to compile with the expected diagnostic")
