# ctest example.02_train_gpt.mpi.plan and .plan_3d: the end-to-end path of docs/mpi.md,
# "Running a plan". `pipesched tune` plans GPUS GPUs (default 4) with a 2-rank pipeline, TP
# tensor ranks (default 1) and ZeRO-1 (a small model on a preset device, so the search is
# quick) — 4 GPUs as pp 2 × dp 2, 8 with TP 2 as pp 2 × dp 2 × tp 2 — and
# `mpirun -np GPUS example_02_train_gpt --plan` runs that plan; the test passes when the
# example's every step matched sequential training of the global batch.
#
#   cmake -DCLI=... -DEXAMPLE=... -DMPIEXEC=... -DNP_FLAG=-np -DWORK_DIR=... [-DGPUS=8 -DTP=2]
#         -P run_plan_test.cmake
foreach(v CLI EXAMPLE MPIEXEC NP_FLAG WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_plan_test.cmake: -D${v}=... is missing")
  endif()
endforeach()
if(NOT DEFINED GPUS)
  set(GPUS 4)
endif()
if(NOT DEFINED TP)
  set(TP 1)
endif()
math(EXPR DP "${GPUS} / (2 * ${TP})")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(plan "${WORK_DIR}/plan.json")

execute_process(
  COMMAND "${CLI}" tune --gpus ${GPUS} --pp 2 --tp ${TP} --zero 1 --model gpt3-1.3b --device h100
          --global-batch 16 --threads 1 --json
  OUTPUT_FILE "${plan}" ERROR_VARIABLE tune_err RESULT_VARIABLE tune_rc)
if(NOT tune_rc EQUAL 0)
  message(FATAL_ERROR "pipesched tune exited ${tune_rc}: ${tune_err}")
endif()
file(READ "${plan}" json)
foreach(field_value pp=2 dp=${DP} tp=${TP} zero=1)
  string(REPLACE "=" ";" kv "${field_value}")
  list(GET kv 0 key)
  list(GET kv 1 want)
  string(JSON got GET "${json}" best ${key})
  if(NOT got EQUAL want)
    message(FATAL_ERROR "the plan's ${key} is ${got}, not ${want}: ${plan}")
  endif()
endforeach()

execute_process(
  COMMAND "${MPIEXEC}" ${NP_FLAG} ${GPUS} "${EXAMPLE}" --plan "${plan}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "every step matched the sequential reference")
  message(FATAL_ERROR "mpirun -np ${GPUS} example_02_train_gpt --plan ${plan} exited ${rc}")
endif()
