# Run with `cmake -DSETTINGS=<install_settings.cmake> -DCASE=<case> [-DCONFIG=<config>] -P`
# (tests/install/CMakeLists.txt registers one test per case). Every case starts from empty
# directories of its own, so neither a stale install nor a previous run can hide a failure.
#
#   prefix                 install the build tree into WORK_DIR/prefix; check the files a
#                          user gets and that the package files name no path of this machine
#   find_package           copy the prefix elsewhere (the package must be relocatable), then
#                          build and run consumer/ with MPI and the CUDA toolkit hidden
#   component_mpi          build consumer_mpi/ (REQUIRED COMPONENTS mpi) and run it on 2 ranks
#   component_mpi_missing  configure consumer_mpi/ with MPI hidden: must fail, naming mpi
#   component_nccl         build and run consumer_nccl/ (REQUIRED COMPONENTS nccl)
#   subproject             configure, build and run subproject/, which add_subdirectory's the
#                          source tree with pipesched's defaults
cmake_minimum_required(VERSION 3.25)  # this project's policies in script mode

foreach(var SETTINGS CASE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: pass -D${var}=... before -P")
  endif()
endforeach()
include("${SETTINGS}")

set(prefix "${WORK_DIR}/prefix")
set(config_args)
if(NOT "${CONFIG}" STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()

# Sets <out_var> to <text> with every line indented: message() prints indented lines as they
# are, where it would reflow the others into paragraphs.
function(indent out_var text)
  string(REPLACE "\n" "\n    " text "    ${text}")
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Runs a command and stops with its output when it fails.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out
                  TIMEOUT 300)
  if(NOT result EQUAL 0)
    indent(out "${out}")
    message(FATAL_ERROR "${what} failed (exit ${result}):\n${out}")
  endif()
  if(what MATCHES "^run ")
    # What the program says it checked.
    string(STRIP "${out}" out)
    message(STATUS "${what}: ok: ${out}")
  else()
    message(STATUS "${what}: ok")
  endif()
endfunction()

# Sets <out_var> to the arguments that configure the project in <source> into <binary> with
# this build's generator, compiler and flags, finding packages only under <prefix_path>.
function(configure_args out_var source binary prefix_path)
  set(args -S "${source}" -B "${binary}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
    "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
    "-DCMAKE_PREFIX_PATH=${prefix_path}"
    # Only the fresh install may satisfy find_package(pipesched), not a registry entry or
    # a copy installed on the system.
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  if(NOT "${GENERATOR_PLATFORM}" STREQUAL "")
    list(APPEND args -A "${GENERATOR_PLATFORM}")
  endif()
  if(NOT "${GENERATOR_TOOLSET}" STREQUAL "")
    list(APPEND args -T "${GENERATOR_TOOLSET}")
  endif()
  if(NOT "${MAKE_PROGRAM}" STREQUAL "")
    list(APPEND args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  if(NOT "${CONFIG}" STREQUAL "")
    list(APPEND args "-DCMAKE_BUILD_TYPE=${CONFIG}")
  endif()
  set(${out_var} ${args} PARENT_SCOPE)
endfunction()

# Stops unless find_package(pipesched) in the project configured into <binary> used the
# package under <expected_prefix>.
function(check_found_in binary expected_prefix)
  file(STRINGS "${binary}/CMakeCache.txt" found_dir REGEX "^pipesched_DIR:")
  string(REGEX REPLACE "^pipesched_DIR:[A-Z]+=" "" found_dir "${found_dir}")
  file(REAL_PATH "${expected_prefix}" real_prefix)
  file(REAL_PATH "${found_dir}" real_found_dir)
  string(FIND "${real_found_dir}/" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "find_package(pipesched) used '${found_dir}', not the package in ${expected_prefix}")
  endif()
endfunction()

# Stops unless the prefix the fixture installed is there.
function(require_prefix)
  if(NOT EXISTS "${prefix}/${INSTALL_CMAKEDIR}/pipeschedConfig.cmake")
    message(FATAL_ERROR "no package in ${prefix}: the test install.prefix installs it and must run first")
  endif()
endfunction()

if(CASE STREQUAL "prefix")
  file(REMOVE_RECURSE "${prefix}")
  run_step("install into ${prefix}"
    "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})

  # What a user gets: headers (the version header among them), the package, the licence.
  set(cmake_dir "${prefix}/${INSTALL_CMAKEDIR}")
  foreach(file
      "${INSTALL_INCLUDEDIR}/pipesched/pipesched.hpp" "${INSTALL_INCLUDEDIR}/pipesched/version.hpp"
      "${INSTALL_CMAKEDIR}/pipeschedConfig.cmake" "${INSTALL_CMAKEDIR}/pipeschedConfigVersion.cmake"
      "${INSTALL_CMAKEDIR}/pipeschedTargets.cmake" "${INSTALL_CMAKEDIR}/pipeschedNccl.cmake"
      "${INSTALL_DOCDIR}/LICENSE" "${INSTALL_DOCDIR}/CHANGELOG.md")
    if(NOT EXISTS "${prefix}/${file}")
      message(FATAL_ERROR "the install lacks ${file}")
    endif()
  endforeach()
  # A component's target file is there exactly when the build has that component.
  foreach(part Mpi Cuda Nccl)
    string(TOUPPER ${part} upper)
    set(file "${cmake_dir}/pipesched${part}Targets.cmake")
    if(HAS_${upper} AND NOT EXISTS "${file}")
      message(FATAL_ERROR "this build has the ${part} component, but the install lacks ${file}")
    elseif(NOT HAS_${upper} AND EXISTS "${file}")
      message(FATAL_ERROR "this build has no ${part} component, yet the install has ${file}")
    endif()
  endforeach()

  # Relocatable: no file of the package names a path of this machine, whether one listed in
  # FORBIDDEN_PATHS (sources, build, CUDA toolkit, MPI, NCCL, the prefix itself) or any other
  # absolute path outside a comment.
  file(GLOB package_files "${cmake_dir}/*.cmake")
  list(APPEND FORBIDDEN_PATHS "${prefix}")
  file(REAL_PATH "${prefix}" real_prefix)
  list(APPEND FORBIDDEN_PATHS "${real_prefix}")
  set(problems "")
  foreach(file IN LISTS package_files)
    file(READ "${file}" text)
    foreach(path IN LISTS FORBIDDEN_PATHS)
      string(FIND "${text}" "${path}" at)
      if(NOT at EQUAL -1)
        string(APPEND problems "\n  ${file} names ${path}")
      endif()
    endforeach()
    file(STRINGS "${file}" lines)
    foreach(line IN LISTS lines)
      if(line MATCHES "^[ \t]*#")
        continue()
      endif()
      if(line MATCHES "(^|[ \t\"(;])(/[A-Za-z0-9_.+-]+)+")
        string(APPEND problems "\n  ${file} has the absolute path ${CMAKE_MATCH_0}: ${line}")
      endif()
    endforeach()
  endforeach()
  if(NOT problems STREQUAL "")
    message(FATAL_ERROR "the installed package is not relocatable:${problems}")
  endif()
  list(LENGTH package_files count)
  message(STATUS "${count} package files name no path of this machine")

elseif(CASE STREQUAL "find_package")
  require_prefix()
  # A copy in another place: it works only if nothing in the package names where it was
  # installed.
  set(moved "${WORK_DIR}/moved/prefix")
  set(binary "${WORK_DIR}/consumer")
  file(REMOVE_RECURSE "${WORK_DIR}/moved" "${binary}")
  file(MAKE_DIRECTORY "${WORK_DIR}/moved")
  file(COPY "${prefix}" DESTINATION "${WORK_DIR}/moved")
  configure_args(args "${TEST_SOURCE_DIR}/consumer" "${binary}" "${moved}")
  run_step("configure the host-only consumer (MPI and CUDA hidden)" "${CMAKE_COMMAND}" ${args}
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE
    -DPIPESCHED_EXPECT_HOST_ONLY=ON "-DPIPESCHED_EXPECT_VERSION=${VERSION}")
  check_found_in("${binary}" "${moved}")
  run_step("build the consumer" "${CMAKE_COMMAND}" --build "${binary}" ${config_args})
  run_step("run the consumer" "${binary}/bin/pipesched_consumer${EXECUTABLE_SUFFIX}")

elseif(CASE STREQUAL "component_mpi")
  require_prefix()
  set(binary "${WORK_DIR}/consumer_mpi")
  file(REMOVE_RECURSE "${binary}")
  configure_args(args "${TEST_SOURCE_DIR}/consumer_mpi" "${binary}" "${prefix}")
  run_step("configure the MPI consumer" "${CMAKE_COMMAND}" ${args})
  check_found_in("${binary}" "${prefix}")
  run_step("build the MPI consumer" "${CMAKE_COMMAND}" --build "${binary}" ${config_args})
  # As the other MPI tests do: OpenMPI may run as root and with more ranks than cores.
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  set(ENV{OMPI_MCA_rmaps_base_oversubscribe} 1)
  set(ENV{OMPI_MCA_hwloc_base_binding_policy} none)
  run_step("run the MPI consumer on 2 ranks"
    "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS}
    "${binary}/bin/pipesched_consumer_mpi${EXECUTABLE_SUFFIX}" 2 ${MPIEXEC_POSTFLAGS})

elseif(CASE STREQUAL "component_mpi_missing")
  require_prefix()
  set(binary "${WORK_DIR}/consumer_mpi_missing")
  file(REMOVE_RECURSE "${binary}")
  configure_args(args "${TEST_SOURCE_DIR}/consumer_mpi" "${binary}" "${prefix}")
  execute_process(COMMAND "${CMAKE_COMMAND}" ${args} -DCMAKE_DISABLE_FIND_PACKAGE_MPI=TRUE
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 300)
  indent(shown "${out}")
  if(result EQUAL 0)
    message(FATAL_ERROR "find_package(pipesched REQUIRED COMPONENTS mpi) succeeded with MPI hidden; it must fail:\n${shown}")
  endif()
  # CMake wraps long messages: compare with the line breaks and indentation taken out.
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")
  # Without MPI in the build the component is not in the install; with it, MPI is hidden.
  if(HAS_MPI)
    set(reason "it needs MPI, and CMAKE_DISABLE_FIND_PACKAGE_MPI forbids looking for it")
  else()
    set(reason "this pipesched install was built without it")
  endif()
  foreach(expected "cannot provide the required components:" "component mpi: ${reason}")
    string(FIND "${flat}" "${expected}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "configure failed as it must, but its output does not say '${expected}':\n${shown}")
    endif()
  endforeach()
  message(STATUS "configure failed as it must: component mpi: ${reason}")

elseif(CASE STREQUAL "component_nccl")
  require_prefix()
  set(binary "${WORK_DIR}/consumer_nccl")
  file(REMOVE_RECURSE "${binary}")
  configure_args(args "${TEST_SOURCE_DIR}/consumer_nccl" "${binary}" "${prefix}")
  run_step("configure the NCCL consumer" "${CMAKE_COMMAND}" ${args})
  check_found_in("${binary}" "${prefix}")
  run_step("build the NCCL consumer" "${CMAKE_COMMAND}" --build "${binary}" ${config_args})
  run_step("run the NCCL consumer" "${binary}/bin/pipesched_consumer_nccl${EXECUTABLE_SUFFIX}")

elseif(CASE STREQUAL "subproject")
  set(binary "${WORK_DIR}/subproject")
  set(parent_prefix "${WORK_DIR}/subproject-install")
  file(REMOVE_RECURSE "${binary}" "${parent_prefix}")
  # The parent finds nothing through CMAKE_PREFIX_PATH; pipesched comes from its sources.
  configure_args(args "${TEST_SOURCE_DIR}/subproject" "${binary}" "")
  # This build's choices for MPI and CUDA (AUTO by default), so the parent sees the same parts.
  if(HAS_CUDA)
    set(expect_cuda ON)
  else()
    set(expect_cuda OFF)
  endif()
  run_step("configure the parent project" "${CMAKE_COMMAND}" ${args}
    "-DPIPESCHED_SOURCE_DIR=${SOURCE_DIR}"
    "-DPIPESCHED_ENABLE_MPI=${ENABLE_MPI}" "-DPIPESCHED_ENABLE_CUDA=${ENABLE_CUDA}"
    "-DEXPECT_MPI_TARGET=${HAS_MPI}" "-DEXPECT_CUDA_TARGET=${expect_cuda}")
  run_step("build the parent project" "${CMAKE_COMMAND}" --build "${binary}" ${config_args})
  run_step("run the parent's program" "${binary}/bin/pipesched_parent${EXECUTABLE_SUFFIX}")
  # PIPESCHED_INSTALL is OFF in a subproject: installing the parent installs nothing of
  # pipesched's.
  run_step("install the parent project"
    "${CMAKE_COMMAND}" --install "${binary}" --prefix "${parent_prefix}" ${config_args})
  file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE "${parent_prefix}" "${parent_prefix}/*")
  if(installed)
    list(JOIN installed ", " installed)
    message(FATAL_ERROR "installing a project that add_subdirectory's pipesched installed pipesched's files: ${installed}")
  endif()

else()
  message(FATAL_ERROR "install_test.cmake: no case '${CASE}'; the cases are prefix, find_package, component_mpi, component_mpi_missing, component_nccl and subproject")
endif()
