# ctest example.02_train_gpt.mpi.plan and .plan_3d: the end-to-end path of docs/mpi.md,
# "Running a plan". `pipesched profile` measures the toy GPT's layers on this machine (tensor
# degrees 1 and TP), `pipesched tune --profile` plans GPUS GPUs (default 4) with a 2-rank
# pipeline, TP tensor ranks (default 1) and ZeRO-1 from that profile — 4 GPUs as pp 2 × dp 2,
# 8 with TP 2 as pp 2 × dp 2 × tp 2 — and `mpirun -np GPUS example_02_train_gpt --plan` builds
# the plan's model and runs the plan; the test passes when the example's every step matched
# sequential training of the global batch and it printed the plan's predicted step beside the
# measured one. With -DVOCAB=1 (ctest example.02_train_gpt.mpi.plan_vocabulary) the tune also
# tries the head split by vocabulary (--vocab-parallel), and the run takes the first plan of
# "best" and "baselines" that has vocabulary passes: the example builds the head's shards and
# runs the passes, each shard averaged over the data-parallel group.
#
#   cmake -DCLI=... -DEXAMPLE=... -DMPIEXEC=... -DNP_FLAG=-np -DWORK_DIR=... [-DGPUS=8 -DTP=2]
#         [-DVOCAB=1] -P run_plan_test.cmake
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
if(NOT DEFINED VOCAB)
  set(VOCAB 0)
endif()
set(vocab_flag "")
if(VOCAB)
  set(vocab_flag --vocab-parallel)
endif()
math(EXPR DP "${GPUS} / (2 * ${TP})")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(plan "${WORK_DIR}/plan.json")
set(profile "${WORK_DIR}/profile.json")

set(degrees 1)
if(NOT TP EQUAL 1)
  set(degrees "1,${TP}")
endif()
execute_process(
  COMMAND "${CLI}" profile --layers 4 --hidden 16 --heads 2 --ffn 32 --vocabulary 32 --sequence 16
          --microbatch-sizes 1,2 --tp ${degrees} --repeats 1 -o "${profile}"
  ERROR_VARIABLE profile_err RESULT_VARIABLE profile_rc)
if(NOT profile_rc EQUAL 0)
  message(FATAL_ERROR "pipesched profile exited ${profile_rc}: ${profile_err}")
endif()
execute_process(
  COMMAND "${CLI}" tune --gpus ${GPUS} --pp 2 --tp ${TP} --zero 1 --profile "${profile}"
          --device h100 --microbatch-sizes 1,2 --global-batch 16 --threads 1 ${vocab_flag} --json
  OUTPUT_FILE "${plan}" ERROR_VARIABLE tune_err RESULT_VARIABLE tune_rc)
if(NOT tune_rc EQUAL 0)
  message(FATAL_ERROR "pipesched tune exited ${tune_rc}: ${tune_err}")
endif()
file(READ "${plan}" json)
string(JSON chosen GET "${json}" best)
if(VOCAB)
  # The first plan with the head split: "best", else the baselines in order.
  string(JSON baseline_count LENGTH "${json}" baselines)
  math(EXPR last "${baseline_count} - 1")
  set(chosen "")
  foreach(i RANGE -1 ${last})
    if(i EQUAL -1)
      string(JSON candidate GET "${json}" best)
    else()
      string(JSON candidate GET "${json}" baselines ${i})
    endif()
    string(JSON split ERROR_VARIABLE no_split GET "${candidate}" vocabulary_passes)
    if(NOT no_split AND split)
      set(chosen "${candidate}")
      break()
    endif()
  endforeach()
  if(chosen STREQUAL "")
    message(FATAL_ERROR "tune --vocab-parallel gave no plan with vocabulary passes: ${plan}")
  endif()
  set(plan "${WORK_DIR}/vocabulary-plan.json")
  file(WRITE "${plan}" "${chosen}\n")
endif()
foreach(field_value pp=2 dp=${DP} tp=${TP} zero=1)
  string(REPLACE "=" ";" kv "${field_value}")
  list(GET kv 0 key)
  list(GET kv 1 want)
  string(JSON got GET "${chosen}" ${key})
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
if(NOT out MATCHES "the plan's model as the toy GPT: 4 blocks"
   OR NOT out MATCHES "the plan predicts [0-9.]+ ms from this machine's layer profile")
  message(FATAL_ERROR "example_02_train_gpt --plan ${plan} did not build the plan's model or "
                      "print its predicted step")
endif()
if(VOCAB AND NOT out MATCHES "split by vocabulary over the 2 pipeline ranks")
  message(FATAL_ERROR "example_02_train_gpt --plan ${plan} did not split the head")
endif()
