# Run with `cmake -P` (see CMakeLists.txt for the variables): install BUILD_DIR into
# PREFIX, build the consumer in CONSUMER_SOURCE_DIR against it and run the program.
# Every step starts from empty directories so a stale install cannot hide a broken one.
foreach(var BUILD_DIR PREFIX CONSUMER_SOURCE_DIR CONSUMER_BINARY_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer.cmake: pass -D${var}=... before -P")
  endif()
endforeach()

# Runs a command and stops with its output when it fails.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${result}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

set(config_args)
if(NOT "${CONFIG}" STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()

file(REMOVE_RECURSE "${PREFIX}" "${CONSUMER_BINARY_DIR}")
run_step("install into ${PREFIX}"
  "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" ${config_args})

set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${CONSUMER_BINARY_DIR}" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_PREFIX_PATH=${PREFIX}"
  # Only the fresh install may satisfy find_package, not a registry entry or a copy
  # installed on the system.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(NOT "${GENERATOR_PLATFORM}" STREQUAL "")
  list(APPEND configure_args -A "${GENERATOR_PLATFORM}")
endif()
if(NOT "${GENERATOR_TOOLSET}" STREQUAL "")
  list(APPEND configure_args -T "${GENERATOR_TOOLSET}")
endif()
if(NOT "${MAKE_PROGRAM}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(NOT "${CONFIG}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
run_step("configure the consumer" "${CMAKE_COMMAND}" ${configure_args})

# The package must have come from PREFIX, not from anywhere else on the machine.
file(STRINGS "${CONSUMER_BINARY_DIR}/CMakeCache.txt" found_dir REGEX "^pipesched_DIR:")
string(REGEX REPLACE "^pipesched_DIR:[A-Z]+=" "" found_dir "${found_dir}")
file(REAL_PATH "${PREFIX}" real_prefix)
file(REAL_PATH "${found_dir}" real_found_dir)
string(FIND "${real_found_dir}/" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "find_package(pipesched) used ${found_dir}, not the install in ${PREFIX}")
endif()

run_step("build the consumer" "${CMAKE_COMMAND}" --build "${CONSUMER_BINARY_DIR}" ${config_args})
run_step("run the consumer"
  "${CONSUMER_BINARY_DIR}/bin/pipesched_consumer${EXECUTABLE_SUFFIX}")
