# ctest example.02_train_gpt.mpi.every_plan.dp1 and .dp2: every plan `pipesched tune --json`
# prints runs. The tune searches every base schedule (`pipesched list`) on GPUS GPUs with a
# 2-rank pipeline (4 GPUs: pp 2 × dp 2 with ZeRO-1, the default; 2 GPUs: pp 2 × dp 1) for a
# model file of the toy GPT's shape (8 blocks of width 16, which the example builds) on a
# preset device, so the search is quick; then its best plan and the best plan
# of each (schedule, checkpoint) pair in "baselines" (each distinct plan once) run under
# `mpirun -np GPUS example_02_train_gpt --plan`, and the test passes when every step of every
# run matched sequential training of the global batch.
#
#   cmake -DCLI=... -DEXAMPLE=... -DMPIEXEC=... -DNP_FLAG=-np -DWORK_DIR=... -DGPUS=4
#         -P run_every_plan_test.cmake
cmake_minimum_required(VERSION 3.20)  # string(JSON), if(IN_LIST) in script mode
foreach(v CLI EXAMPLE MPIEXEC NP_FLAG WORK_DIR GPUS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_every_plan_test.cmake: -D${v}=... is missing")
  endif()
endforeach()
math(EXPR DP "${GPUS} / 2")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(out "${WORK_DIR}/tune.json")

execute_process(COMMAND "${CLI}" list OUTPUT_VARIABLE listing RESULT_VARIABLE list_rc)
if(NOT list_rc EQUAL 0)
  message(FATAL_ERROR "pipesched list exited ${list_rc}")
endif()
# The schedule names: the indented words between "schedules" and the next heading.
string(REGEX MATCH "schedules[^\n]*\n(  [^\n]*\n)+" section "${listing}")
string(REGEX MATCHALL "\n  [a-z0-9-]+" names "${section}")
set(bases "")
foreach(n IN LISTS names)
  string(STRIP "${n}" n)
  list(APPEND bases "${n}")
endforeach()
list(LENGTH bases base_count)
if(base_count LESS 10 OR NOT "chimera" IN_LIST bases)
  message(FATAL_ERROR "pipesched list named ${base_count} schedules (${bases}); expected every "
                      "base, chimera among them")
endif()
list(JOIN bases "," base_list)

set(model "${WORK_DIR}/toy.json")
file(WRITE "${model}"
     "{\"format\": \"pipesched-model\", \"name\": \"toy\", \"layers\": 8, \"hidden\": 16, "
     "\"heads\": 2, \"ffn_hidden\": 32, \"sequence\": 16, \"vocabulary\": 32, "
     "\"bytes_per_value\": 8, \"flash_attention\": false, \"dropout\": false}\n")
execute_process(
  COMMAND "${CLI}" tune --gpus ${GPUS} --pp 2 --tp 1 --model "${model}" --device h100
          --global-batch 8 --bases ${base_list} --threads 1 --json
  OUTPUT_FILE "${out}" ERROR_VARIABLE tune_err RESULT_VARIABLE tune_rc)
if(NOT tune_rc EQUAL 0)
  message(FATAL_ERROR "pipesched tune exited ${tune_rc}: ${tune_err}")
endif()
file(READ "${out}" json)

# The plans: "best" (index -1), then each baseline that has a schedule, each distinct one once.
string(JSON baseline_count LENGTH "${json}" baselines)
math(EXPR last "${baseline_count} - 1")
set(seen "")
set(runs 0)
set(failed "")
set(schedules "")
foreach(i RANGE -1 ${last})
  if(i EQUAL -1)
    string(JSON plan GET "${json}" best)
  else()
    string(JSON has_text ERROR_VARIABLE no_text GET "${json}" baselines ${i} schedule_text)
    if(no_text)
      continue()
    endif()
    string(JSON plan GET "${json}" baselines ${i})
  endif()
  string(SHA1 key "${plan}")
  if(key IN_LIST seen)
    continue()
  endif()
  list(APPEND seen ${key})
  string(JSON base GET "${plan}" schedule)
  string(JSON checkpoint GET "${plan}" checkpoint)
  string(JSON dp GET "${plan}" dp)
  if(NOT dp EQUAL DP)
    message(FATAL_ERROR "the ${base} (${checkpoint}) plan has dp ${dp}, not ${DP}")
  endif()
  list(APPEND schedules ${base})
  math(EXPR runs "${runs} + 1")
  set(file "${WORK_DIR}/plan-${runs}.json")
  file(WRITE "${file}" "${plan}\n")
  execute_process(
    COMMAND "${MPIEXEC}" ${NP_FLAG} ${GPUS} "${EXAMPLE}" --plan "${file}" --steps 2
    OUTPUT_VARIABLE run_out ERROR_VARIABLE run_err RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND run_out MATCHES "every step matched the sequential reference")
    message("${base} (checkpoint ${checkpoint}, dp ${dp}): every step matched")
  else()
    message("${base} (checkpoint ${checkpoint}, dp ${dp}), ${file}: exit ${rc}\n${run_out}"
            "${run_err}")
    list(APPEND failed "${base}/${checkpoint}")
  endif()
endforeach()

list(REMOVE_DUPLICATES schedules)
list(LENGTH schedules ran_bases)
message("${runs} plans of ${ran_bases} base schedules ran on ${GPUS} processes")
if(failed)
  message(FATAL_ERROR "plans that did not train like sequential training: ${failed}")
endif()
if(NOT "chimera" IN_LIST schedules OR ran_bases LESS base_count)
  message(FATAL_ERROR "the plans ran cover ${ran_bases} of ${base_count} bases (${schedules}); "
                      "every base, chimera among them, should have a plan")
endif()
