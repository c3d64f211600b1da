#!/usr/bin/env bash
# Fault test: runs `mpirun -np P mpi_fault MODE` under a time limit and checks that the job
# ended within it, non-zero, with the failing rank named, and left no process behind.
# usage: run_fault.sh MPIEXEC PROGRAM MODE PROCESSES LIMIT_SECONDS
set -u
mpiexec=$1 program=$2 mode=$3 np=$4 limit=$5
token="fault-$mode-$$-$RANDOM"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_hwloc_base_binding_policy=none

start=$(date +%s.%N)
timeout --kill-after=5 "$limit" "$mpiexec" -np "$np" "$program" "$mode" "$token" >"$out" 2>&1
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$out"
echo "--- exit code $rc after ${elapsed} s (limit $limit s)"

fail() { echo "FAULT TEST FAILED ($mode): $*"; exit 1; }
[ "$(echo "$elapsed < $limit" | bc)" -eq 1 ] || fail "the job did not end within $limit s"
[ "$rc" -ne 0 ] || fail "the job exited 0"
bad=$((np / 2))
case $mode in
  throw)
    # Every rank names the failing rank and its action (stage bad, microbatch 2: "<bad>F2").
    for r in $(seq 0 $((np - 1))); do
      grep -q "^rank $r: step failed on rank $bad at ${bad}F2: .*injected fault" "$out" ||
        fail "rank $r did not report rank $bad's failure at ${bad}F2"
    done
    ;;
  kill)
    grep -Eiq "rank $bad .*(signal 9|killed)|process rank $bad" "$out" ||
      fail "nothing names rank $bad as killed"
    ;;
  hang)
    grep -q "from rank $bad and none came" "$out" ||
      fail "no rank reported waiting in vain for rank $bad"
    ;;
esac
sleep 1
if pgrep -f "$token" >/dev/null; then
  pgrep -af "$token"
  pkill -9 -f "$token"
  fail "processes were left running"
fi
echo "fault test passed ($mode)"
