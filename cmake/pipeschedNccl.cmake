# pipesched_find_nccl(<found_var> <reason_var>)
#
# Finds NCCL's library and header and defines the imported target pipesched::nccl_runtime
# for them; sets <found_var> to TRUE or FALSE and, when FALSE, <reason_var> to a sentence
# saying what is missing and how to point at it.
#
# pipesched's own build and its installed package (pipeschedConfig.cmake, on the user's
# machine at find time) both run this, so the exported pipesched::nccl names
# pipesched::nccl_runtime instead of the paths NCCL had on the machine that built pipesched.
#
# Where it looks, first to last: NCCL_ROOT (a CMake variable or an environment variable) and
# the environment variable NCCL_HOME; the CUDA toolkit's library and include folders (run
# find_package(CUDAToolkit) first: NCCL packages often install there); CMake's default
# places. The results are cached as PIPESCHED_NCCL_LIBRARY and PIPESCHED_NCCL_INCLUDE_DIR;
# set either to choose another NCCL.
include_guard(GLOBAL)

function(pipesched_find_nccl found_var reason_var)
  set(roots)
  foreach(root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "$ENV{NCCL_HOME}")
    if(NOT root STREQUAL "")
      list(APPEND roots "${root}")
    endif()
  endforeach()
  find_library(PIPESCHED_NCCL_LIBRARY NAMES nccl
    HINTS ${roots} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64
    DOC "NCCL's library, for pipesched::nccl")
  find_path(PIPESCHED_NCCL_INCLUDE_DIR nccl.h
    HINTS ${roots} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include
    DOC "The folder holding nccl.h, for pipesched::nccl")

  set(missing)
  if(NOT PIPESCHED_NCCL_LIBRARY)
    list(APPEND missing "its library (libnccl)")
  endif()
  if(NOT PIPESCHED_NCCL_INCLUDE_DIR)
    list(APPEND missing "its header (nccl.h)")
  endif()
  if(missing)
    list(JOIN missing " and " missing)
    set(places "NCCL_ROOT, NCCL_HOME")
    set(toolkit_dirs ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_INCLUDE_DIRS})
    if(toolkit_dirs)
      list(JOIN toolkit_dirs ", " toolkit_dirs)
      string(APPEND places ", the CUDA toolkit's folders (${toolkit_dirs})")
    endif()
    set(${found_var} FALSE PARENT_SCOPE)
    set(${reason_var} "NCCL was not found: ${missing} is in none of ${places} or the default places; set NCCL_ROOT to NCCL's prefix, or PIPESCHED_NCCL_LIBRARY and PIPESCHED_NCCL_INCLUDE_DIR to its files" PARENT_SCOPE)
    return()
  endif()

  if(NOT TARGET pipesched::nccl_runtime)
    add_library(pipesched::nccl_runtime UNKNOWN IMPORTED)
    set_target_properties(pipesched::nccl_runtime PROPERTIES
      IMPORTED_LOCATION "${PIPESCHED_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${PIPESCHED_NCCL_INCLUDE_DIR}")
  endif()
  set(${found_var} TRUE PARENT_SCOPE)
  set(${reason_var} "" PARENT_SCOPE)
endfunction()
