# ctest example.02_train_gpt.mpi.plan: the end-to-end path of docs/mpi.md, "Running a plan".
# `pipesched tune` plans 4 GPUs as a 2-rank pipeline × 2 replicas with ZeRO-1 (a small model on
# a preset device, so the search is quick), and `mpirun -np 4 example_02_train_gpt --plan`
# runs that plan; the test passes when the example's every step matched sequential training of
# the global batch.
#
#   cmake -DCLI=... -DEXAMPLE=... -DMPIEXEC=... -DNP_FLAG=-np -DWORK_DIR=... -P run_plan_test.cmake
foreach(v CLI EXAMPLE MPIEXEC NP_FLAG WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_plan_test.cmake: -D${v}=... is missing")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(plan "${WORK_DIR}/plan.json")

execute_process(
  COMMAND "${CLI}" tune --gpus 4 --pp 2 --tp 1 --zero 1 --model gpt3-1.3b --device h100
          --global-batch 16 --threads 1 --json
  OUTPUT_FILE "${plan}" ERROR_VARIABLE tune_err RESULT_VARIABLE tune_rc)
if(NOT tune_rc EQUAL 0)
  message(FATAL_ERROR "pipesched tune exited ${tune_rc}: ${tune_err}")
endif()
file(READ "${plan}" json)
foreach(field_value pp=2 dp=2 tp=1 zero=1)
  string(REPLACE "=" ";" kv "${field_value}")
  list(GET kv 0 key)
  list(GET kv 1 want)
  string(JSON got GET "${json}" best ${key})
  if(NOT got EQUAL want)
    message(FATAL_ERROR "the plan's ${key} is ${got}, not ${want}: ${plan}")
  endif()
endforeach()

execute_process(
  COMMAND "${MPIEXEC}" ${NP_FLAG} 4 "${EXAMPLE}" --plan "${plan}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "every step matched the sequential reference")
  message(FATAL_ERROR "mpirun -np 4 example_02_train_gpt --plan ${plan} exited ${rc}")
endif()
