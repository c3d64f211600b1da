#!/usr/bin/env bash
# Fault test: runs `mpirun -np P mpi_fault MODE` under a time limit and checks that the job
# ended within it, non-zero, with the failing rank named, and left no process behind; in
# `snapshot` mode, that it ended with 0 and every rank found its parameters right.
# The limit bounds the whole job (start, the waits that end in a timeout, MPI_Abort): it is
# several times what an idle machine needs, so that the test holds on a loaded one.
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
if [ "$mode" = snapshot ]; then
  [ "$rc" -eq 0 ] || fail "the job exited $rc"
else
  [ "$rc" -ne 0 ] || fail "the job exited 0"
fi
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
  hang | stop)
    # The ranks still running name rank $bad as the one that went silent, whichever of their
    # waits ran out first (hang: a wait in the step, often for a rank that itself waits for
    # rank $bad; stop: the start of the next step), and no other rank. The first rank to end
    # the job (MPI_Abort) may stop the others before they print, so one line is enough.
    grep -Eq "^rank [0-9]+: .*; rank $bad went silent" "$out" ||
      fail "no rank named rank $bad as the process that went silent"
    if grep -E "went silent" "$out" | grep -Evq "; rank $bad went silent"; then
      fail "a rank named another process than rank $bad as silent"
    fi
    ;;
  absent)
    # A rank that never builds its pipeline: the others give up on the start-up agreement
    # after its 5 s startup_timeout, naming that wait (the first to end the job may stop the
    # others before they print, so one line is enough), well within the limit.
    grep -Eq "^mpi::Transport: not every process of the job joined the start-up agreement on the schedule within 5 s" "$out" ||
      fail "no rank named the start-up agreement it gave up on"
    [ "$(echo "$elapsed < 30" | bc)" -eq 1 ] || fail "the job took $elapsed s, over 30 s for a 5 s startup_timeout"
    ;;
  snapshot)
    # Every rank hears of rank $bad's snapshot fault and finds its own parameters right.
    for r in $(seq 0 $((np - 1))); do
      grep -q "^rank $r: step 1 failed on rank $bad: rank $bad failed in its optimizer step: .*bad_alloc.*the step was rolled back" "$out" ||
        fail "rank $r did not report rank $bad's snapshot fault as rolled back"
      grep -q "^rank $r: parameters kept through the failed step" "$out" ||
        fail "rank $r did not find its parameters right"
    done
    ;;
esac
sleep 1
if pgrep -f "$token" >/dev/null; then
  pgrep -af "$token"
  pkill -9 -f "$token"
  fail "processes were left running"
fi
echo "fault test passed ($mode)"
