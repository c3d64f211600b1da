# ctest bench.mpi_links: the link microbenchmark under mpirun (2 processes) writes a cluster
# file with the links it measured in place of the base preset's (ranks_per_node 2, a
# link_bandwidth that is not the preset's) and the rest as the base, and
# `pipesched simulate --cluster` reads it.
#
#   cmake -DLINKS=... -DCLI=... -DMPIEXEC=... -DNP_FLAG=-np -DWORK_DIR=... -P run_mpi_links_test.cmake
cmake_minimum_required(VERSION 3.20)  # string(JSON) in script mode
foreach(v LINKS CLI MPIEXEC NP_FLAG WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_mpi_links_test.cmake: -D${v}=... is missing")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(out "${WORK_DIR}/links.json")
file(REMOVE "${out}")
execute_process(COMMAND "${MPIEXEC}" ${NP_FLAG} 2 "${LINKS}" --out "${out}" --repeats 3
                        --max-bytes 65536 --base rtx-4090
                RESULT_VARIABLE rc OUTPUT_VARIABLE printed ERROR_VARIABLE errors)
message("${printed}${errors}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpi_links exited ${rc}")
endif()
if(NOT printed MATCHES "kept: (direct|host)")
  message(FATAL_ERROR "mpi_links printed no fitted path")
endif()
file(READ "${out}" text)
string(JSON format GET "${text}" format)
string(JSON per_node GET "${text}" ranks_per_node)
string(JSON gpus GET "${text}" gpus)
string(JSON peak GET "${text}" peak_flops)
string(JSON bandwidth GET "${text}" link_bandwidth)
if(NOT format STREQUAL "pipesched-cluster" OR NOT per_node EQUAL 2 OR NOT gpus EQUAL 2)
  message(FATAL_ERROR "links.json: format ${format}, ranks_per_node ${per_node}, gpus ${gpus}; "
                      "want pipesched-cluster, 2, 2")
endif()
# (string(JSON) gives numbers in its own spelling: 1.652e+14 or 165200000000000.0)
if(NOT peak MATCHES "^(1\\.652e\\+14|165200000000000(\\.0*)?)$")
  message(FATAL_ERROR "links.json: peak_flops ${peak}, not the base rtx-4090's 1.652e+14")
endif()
if(bandwidth MATCHES "^(2\\.4e\\+10|24000000000(\\.0*)?)$")
  message(FATAL_ERROR "links.json: link_bandwidth is the preset's, not a measured figure")
endif()
# The file is a device the command line reads and simulates with.
execute_process(COMMAND "${CLI}" simulate --schedule 1f1b --ranks 2 --microbatches 4
                        --model gpt3-1.3b --cluster "${out}"
                RESULT_VARIABLE sim_rc OUTPUT_VARIABLE sim_out ERROR_VARIABLE sim_err)
if(NOT sim_rc EQUAL 0)
  message(FATAL_ERROR "pipesched simulate --cluster links.json exited ${sim_rc}: ${sim_err}")
endif()
message("pipesched simulate read it: ${sim_out}")
