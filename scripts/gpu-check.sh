#!/usr/bin/env bash
# The GPU check. On a machine with an NVIDIA GPU: builds the CUDA parts (PIPESCHED_GPU_ONLY),
# asks the CUDA runtime what it sees, runs every GPU test with PIPESCHED_REQUIRE_GPU=1 (a test
# that cannot reach a GPU fails instead of skipping), runs the GPU report (numerics against the
# host double reference, synthetic layers on cuda-local against the simulator, the toy GPT's
# step time per plan), runs the link microbenchmark (gpu_links: host copies of every GPU, NCCL
# between GPUs 0 and 1 where there are two), runs the fidelity benchmark (gpu_fidelity: the toy
# GPT's layers profiled on the GPU, every configuration's step predicted and measured, on
# cuda-local, and over NCCL with a GPU per process where there are two GPUs), and prints what
# ran, what did not and why, and the report's tables. The
# exit status is 0 only when everything needed passed; the NCCL tests between ranks need a GPU
# per rank (nccl.np2 two, nccl.np4 four, nccl.np8 eight: the pp2 × dp2 × tp2 ZeRO-1 run) and
# on a machine with fewer are reported "not run (needs N GPUs)", which is not a failure. Meant to finish in under 10 minutes on a 16-core machine.
#
# --dry-run does everything but use a GPU: the same configure and build, every program started
# from the path the real run starts it from (the report's --help, --probe and host-side
# --check-figures, the test programs' test lists), the ctest entries run without a GPU (each
# passes or skips) and read back the way the real run reads them, a GPU test run with
# PIPESCHED_REQUIRE_GPU=1 shown to fail, and the output files written. Exit 0 when all is in
# place. On a 2-core machine the build takes about 10 minutes. To skip it, point the dry run at
# a build folder that already holds the CUDA targets (--reuse-build, e.g. build/default after
# scripts/test.sh): that folder is used as it is configured, and the GPU-only configuration the
# real run builds is then only configured (in DIR/gpu-check/gpu-only), to check that it
# configures and puts every program at the same place.
#
# usage: scripts/gpu-check.sh [--dry-run] [--build-dir DIR | DIR | --reuse-build DIR] [--jobs N]
#   DIR            build folder (default $PIPESCHED_GPU_BUILD_DIR, else build/gpu); configured
#                  here with PIPESCHED_GPU_ONLY=ON, so give it a folder of its own (a folder
#                  configured without PIPESCHED_GPU_ONLY is refused rather than reconfigured)
#   --reuse-build  use DIR as it is configured, without configuring it (default
#                  $PIPESCHED_GPU_REUSE_BUILD): any build folder with the CUDA tests and
#                  gpu_report in it; only those targets are built, and only if out of date
#   --jobs         parallel build jobs (default $PIPESCHED_GPU_CHECK_JOBS, else every core)
# A relative DIR is taken from the current folder.
# Needs: CMake 3.25, nvcc (CUDACXX, the PATH or /usr/local/cuda/bin), Ninja or make, and
# GoogleTest (the system's, else the sources in $PIPESCHED_GTEST_SOURCE or /usr/src/googletest).
# The NCCL tests need NCCL (in the CUDA toolkit) and an MPI with mpirun.
# Writes in DIR: gpu-report.md (the report's, the links' and the fidelity tables), gpu-check/links.json
# (with two GPUs: their measured link as a device file), gpu-check/junit.xml (ctest's results),
# gpu-check/summary.md (the summary printed at the end).
set -uo pipefail

usage() { sed -n '/^# usage:/,/^# gpu-check\/summary.md/s/^# \{0,1\}//p' "$0"; }
usage_error() {
  echo "gpu-check: $1" >&2
  usage >&2
  exit 2
}

dry_run=0
build="${PIPESCHED_GPU_BUILD_DIR:-}"
reuse="${PIPESCHED_GPU_REUSE_BUILD:-}"
build_named=0  # a build folder named on the command line, not by the environment
jobs="${PIPESCHED_GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build-dir)
      [ $# -ge 2 ] || usage_error "--build-dir takes a folder"
      build="$2"
      build_named=1
      shift
      ;;
    --build-dir=*)
      build="${1#*=}"
      build_named=1
      ;;
    --reuse-build)
      [ $# -ge 2 ] || usage_error "--reuse-build takes a folder"
      reuse="$2"
      shift
      ;;
    --reuse-build=*) reuse="${1#*=}" ;;
    --jobs)
      [ $# -ge 2 ] || usage_error "--jobs takes a number"
      jobs="$2"
      shift
      ;;
    --jobs=*) jobs="${1#*=}" ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*) usage_error "unknown option '$1'" ;;
    *)
      build="$1"
      build_named=1
      ;;
  esac
  shift
done
case "$jobs" in '' | *[!0-9]*) usage_error "--jobs is '$jobs'; give a whole number" ;; esac
if [ -n "$reuse" ]; then
  # One folder or the other: a folder to configure GPU-only, or one to use as it is.
  [ "$build_named" -eq 0 ] || [ "$build" = "$reuse" ] ||
    usage_error "give either a build folder to configure ('$build') or --reuse-build ('$reuse'), not both"
  build="$reuse"
  [ -f "$build/CMakeCache.txt" ] ||
    usage_error "--reuse-build '$build' is not a configured CMake build folder (no CMakeCache.txt); build it first (e.g. scripts/test.sh for build/default) or give a folder to configure"
fi
# A folder named on the command line is the caller's, relative to where the caller is.
case "$build" in '' | /*) ;; *) build="$PWD/$build" ;; esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo" || exit 2
[ -n "$build" ] || build="$repo/build/gpu"
out="$build/gpu-check"
report="$build/gpu-report.md"
junit="$out/junit.xml"
summary="$out/summary.md"
start=$(date +%s)
gpu_name=""

say() { printf '\n=== %s (%ds)\n' "$*" "$(($(date +%s) - start))"; }
# Parts of the summary: "what | result" rows, and whether each counts against the check.
rows=()
failed=0
row() { rows+=("| $1 | $2 |"); }
problem() {
  row "$1" "FAILED: $2"
  failed=1
  echo "gpu-check: $1: $2" >&2
}

# The end, whatever happened: the summary on the screen and in $summary, and the exit status.
finish() {
  local verdict="PASSED"
  [ "$failed" -eq 0 ] || verdict="FAILED"
  local what="GPU check"
  [ "$dry_run" -eq 1 ] && what="GPU check, dry run (no GPU used)"
  say "summary"
  {
    echo "## $what: $verdict"
    echo
    echo "${gpu_name:+GPU: $gpu_name; }$(date -u '+%Y-%m-%d %H:%M UTC'); build folder $build"
    echo
    echo "| part | result |"
    echo "|---|---|"
    printf '%s\n' ${rows[@]+"${rows[@]}"}
  } | { mkdir -p "$out" 2>/dev/null; tee "$summary"; }
  echo
  echo "gpu-check: $verdict in $(($(date +%s) - start)) s${gpu_name:+ on $gpu_name}"
  [ "$dry_run" -eq 0 ] && [ -s "$report" ] &&
    echo "The report's tables are in $report, this summary in $summary (paste both into docs/gpu.md with the date)."
  [ "$failed" -eq 0 ]
  exit $?
}
# A step without which nothing after it can run.
fatal() {
  problem "$1" "$2"
  finish
}

# ---- tools ------------------------------------------------------------------------------------
say "tools"
command -v cmake >/dev/null || fatal "tools" "cmake is not on the PATH"
command -v ctest >/dev/null || fatal "tools" "ctest is not on the PATH"
if [ -z "${CUDACXX:-}" ]; then
  if command -v nvcc >/dev/null; then
    CUDACXX="$(command -v nvcc)"
    export CUDACXX
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  else
    fatal "tools" "nvcc not found (set CUDACXX, or put the CUDA toolkit's bin on the PATH)"
  fi
fi
echo "cmake: $(cmake --version | head -1); nvcc: $CUDACXX ($("$CUDACXX" --version | tail -1))"

# ---- the GPU, as the driver sees it ------------------------------------------------------------
if [ "$dry_run" -eq 0 ]; then
  say "GPU (nvidia-smi)"
  if command -v nvidia-smi >/dev/null && nvidia-smi -L; then
    gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>/dev/null ||
      nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  else
    # Not the end: the CUDA runtime's own answer (the probe below) says more.
    problem "GPU (nvidia-smi)" "nvidia-smi is missing or finds no GPU"
  fi
fi

# ---- configure and build -----------------------------------------------------------------------
# What the real run configures: the GPU tests and the report, nothing else.
gpu_only_args() {
  local dir="$1"
  args=(-S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPIPESCHED_ENABLE_CUDA=ON
    -DPIPESCHED_GPU_ONLY=ON -DPIPESCHED_BUILD_TESTS=ON -DPIPESCHED_BUILD_TOOLS=OFF
    -DPIPESCHED_BUILD_EXAMPLES=OFF -DPIPESCHED_BUILD_BENCHMARKS=ON)
  # A folder configured before keeps its generator; a new one gets Ninja where there is one.
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then args+=(-G Ninja); fi
  [ -n "${PIPESCHED_CUDA_ARCHITECTURES:-}" ] && args+=("-DCMAKE_CUDA_ARCHITECTURES=$PIPESCHED_CUDA_ARCHITECTURES")
  local gtest_source="${PIPESCHED_GTEST_SOURCE:-}"
  [ -z "$gtest_source" ] && [ -f /usr/src/googletest/CMakeLists.txt ] && gtest_source=/usr/src/googletest
  # Used only where the system has no GoogleTest of its own (tests/CMakeLists.txt looks first).
  [ -n "$gtest_source" ] && args+=("-DPIPESCHED_GTEST_SOURCE=$gtest_source")
}
# The value of a cache entry of the build folder $1 ("" when it has none).
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" 2>/dev/null | head -1; }

if [ -n "$reuse" ]; then
  say "build folder ($build, reused as configured)"
  [ "$(cache_value "$build" CMAKE_HOME_DIRECTORY)" -ef "$repo" ] ||
    fatal "configure" "$build was configured from $(cache_value "$build" CMAKE_HOME_DIRECTORY), not from this source tree ($repo)"
  case "$(cache_value "$build" CMAKE_CUDA_COMPILER)" in
    '' | *NOTFOUND) false ;;
  esac ||
    fatal "configure" "$build was configured without CUDA (no CMAKE_CUDA_COMPILER in its cache): configure it with nvcc found (PIPESCHED_ENABLE_CUDA=AUTO or ON, CUDACXX set), or leave out --reuse-build"
  echo "PIPESCHED_GPU_ONLY=$(cache_value "$build" PIPESCHED_GPU_ONLY), CMAKE_BUILD_TYPE=$(cache_value "$build" CMAKE_BUILD_TYPE), nvcc $(cache_value "$build" CMAKE_CUDA_COMPILER)"
else
  say "configure ($build)"
  # Reconfiguring a full build GPU-only would leave it building nothing else, and a later plain
  # build in it would pass on the GPU tests alone.
  if [ -f "$build/CMakeCache.txt" ] && [ "$(cache_value "$build" PIPESCHED_GPU_ONLY)" != "ON" ]; then
    fatal "configure" "$build is a build folder of the whole project (PIPESCHED_GPU_ONLY is not ON there); the check would reconfigure it GPU-only. Give it a folder of its own, or --reuse-build $build to use that folder as it is"
  fi
  gpu_only_args "$build"
  # Only what this configure writes counts (a folder used before may hold older lists).
  rm -f "$out/report.txt" "$out/tests.txt"
  cmake "${args[@]}" || fatal "configure" "cmake failed (its output is above)"
fi

# Where CMake builds each program: written by bench/gpu and tests/cuda at configure time, so
# this script runs exactly the files the build makes.
manifest_value() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -1; }
[ -f "$out/report.txt" ] ||
  fatal "configure" "$out/report.txt is missing: the GPU report is not configured there (is the build folder single-configuration, was CUDA found, and, in a full build, PIPESCHED_BUILD_BENCHMARKS on?)"
gpu_report="$(manifest_value "$out/report.txt" gpu_report)"
gpu_links="$(manifest_value "$out/report.txt" gpu_links)"
gpu_fidelity="$(manifest_value "$out/report.txt" gpu_fidelity)"
[ -n "$gpu_links" ] || fatal "configure" "$out/report.txt names no gpu_links (the link microbenchmark): configure the folder again"
[ -n "$gpu_fidelity" ] || fatal "configure" "$out/report.txt names no gpu_fidelity (the fidelity benchmark): configure the folder again"
targets=(gpu_report gpu_links gpu_fidelity)
cuda_tests=""
nccl_tests=""
mpiexec=""
if [ -f "$out/tests.txt" ]; then
  cuda_tests="$(manifest_value "$out/tests.txt" cuda_tests)"
  nccl_tests="$(manifest_value "$out/tests.txt" nccl_tests)"
  mpiexec="$(manifest_value "$out/tests.txt" mpiexec)"
  targets+=(pipesched_cuda_tests)
  [ -n "$nccl_tests" ] && targets+=(pipesched_nccl_tests)
else
  problem "GPU tests" "not configured: GoogleTest was not found (install libgtest-dev, or set PIPESCHED_GTEST_SOURCE to its sources), or PIPESCHED_BUILD_TESTS is OFF in $build"
fi
# What CMake found of what the NCCL tests need ("" for nothing, or a *-NOTFOUND entry).
nccl_found="$(cache_value "$build" PIPESCHED_NCCL_LIBRARY)"
case "$nccl_found" in *-NOTFOUND) nccl_found="" ;; esac
mpi_found="$(cache_value "$build" MPIEXEC_EXECUTABLE)"
case "$mpi_found" in *-NOTFOUND) mpi_found="" ;; esac
[ -f "$out/tests.txt" ] && [ -z "$nccl_tests" ] &&
  problem "NCCL tests" "not built: they need NCCL (the CUDA toolkit's lib folder) and an MPI with mpirun (e.g. Debian's libopenmpi-dev and openmpi-bin); CMake found NCCL '${nccl_found:-nowhere}' and mpiexec '${mpi_found:-nowhere}', so NCCL is not checked"
# The lists name this folder's programs, or they are another folder's (a copied build folder).
for program in "$gpu_report" "$gpu_links" "$gpu_fidelity" "$cuda_tests" "$nccl_tests"; do
  [ -n "$program" ] || continue
  case "$(realpath -m "$program")/" in
    "$(realpath -m "$build")"/*) ;;
    *) fatal "configure" "$out names $program, which is outside the build folder $build (a folder copied from elsewhere? configure it again)" ;;
  esac
done

# A reused folder was not configured the way the real run configures its own: configure that
# too (configure only, nothing built), and check that it configures and places every program
# where the reused folder has it, so the real run starts the same files at the same places.
if [ -n "$reuse" ] && [ "$dry_run" -eq 1 ]; then
  gpu_only="$out/gpu-only"
  say "configure the real run's GPU-only folder ($gpu_only, configure only)"
  gpu_only_args "$gpu_only"
  rm -f "$gpu_only/gpu-check/report.txt" "$gpu_only/gpu-check/tests.txt"
  if ! cmake "${args[@]}" >"$out/gpu-only-configure.log" 2>&1; then
    cat "$out/gpu-only-configure.log"
    problem "GPU-only configure" "cmake failed (its output is above); the real run would stop there"
  else
    grep '^-- pipesched: ' "$out/gpu-only-configure.log"
    differs=""
    for entry in report.txt:gpu_report report.txt:gpu_links report.txt:gpu_fidelity tests.txt:cuda_tests tests.txt:nccl_tests tests.txt:mpiexec; do
      file="${entry%%:*}" key="${entry#*:}"
      here="$(manifest_value "$out/$file" "$key")"
      there="$(manifest_value "$gpu_only/gpu-check/$file" "$key")"
      [ "$key" = mpiexec ] || { here="${here#"$build"/}"; there="${there#"$gpu_only"/}"; }
      [ "$here" = "$there" ] || differs="$differs $key ('${there:-none}' there, '${here:-none}' here);"
    done
    if [ -z "$differs" ]; then
      row "GPU-only configure" "ok: configures, every program at the same place as in $build"
    else
      problem "GPU-only configure" "the real run's folder places programs differently:$differs"
    fi
  fi
fi

say "build (${targets[*]}, $jobs jobs)"
cmake --build "$build" -j "$jobs" --target "${targets[@]}" || fatal "build" "the build failed (its output is above)"
for program in "$gpu_report" "$gpu_links" "$gpu_fidelity" "$cuda_tests" "$nccl_tests"; do
  [ -z "$program" ] || [ -x "$program" ] || fatal "build" "built, but $program is not there"
done
mkdir -p "$out" || fatal "output" "cannot make $out"
probe_file="$(mktemp "$out/.writable.XXXXXX" 2>/dev/null)" || fatal "output" "cannot write in $out"
rm -f "$probe_file"
: >"$report.tmp" 2>/dev/null || fatal "output" "cannot write $report"
rm -f "$report.tmp"
if [ -n "$reuse" ]; then
  row "build" "ok: ${targets[*]} (in $build, reused)"
else
  row "build" "ok: ${targets[*]}"
fi

# ---- the GPU, as the CUDA runtime sees it ------------------------------------------------------
say "GPU (CUDA runtime)"
"$gpu_report" --probe
probe=$?
if [ "$dry_run" -eq 1 ]; then
  # No GPU is the expected answer here; one that is there but cannot run a kernel is not.
  case $probe in
    0) row "CUDA runtime" "a GPU is usable here (the tests below use it)" ;;
    2) row "CUDA runtime" "ok: no usable GPU, as expected in a dry run" ;;
    *) problem "CUDA runtime" "gpu_report --probe exited $probe" ;;
  esac
else
  case $probe in
    0) row "CUDA runtime" "ok: a kernel ran on GPU 0" ;;
    2) problem "CUDA runtime" "no usable GPU (the probe's reason is above; the tests below fail with it)" ;;
    *) problem "CUDA runtime" "a GPU is there but a kernel could not run on it (see above)" ;;
  esac
fi

# ---- programs start ----------------------------------------------------------------------------
mpi_env=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none)
listed=0
if [ -n "$cuda_tests" ]; then
  say "test programs start"
  n="$("$cuda_tests" --gtest_list_tests | grep -c '^  ')" || n=0
  [ "$n" -gt 0 ] || problem "GPU tests" "$cuda_tests --gtest_list_tests lists no test"
  echo "$cuda_tests: $n tests"
  listed=$((listed + n))
  if [ -n "$nccl_tests" ]; then
    if [ -z "$mpiexec" ] || ! command -v "$mpiexec" >/dev/null; then
      problem "NCCL tests" "mpirun ('$mpiexec') is not there to run them"
    else
      n="$(env "${mpi_env[@]}" "$mpiexec" -n 1 "$nccl_tests" --gtest_list_tests | grep -c '^  ')" || n=0
      [ "$n" -gt 0 ] || problem "NCCL tests" "$nccl_tests --gtest_list_tests (under $mpiexec) lists no test"
      echo "$nccl_tests: $n tests (run as the ctest entries nccl.np1, nccl.np2, nccl.np4 and nccl.np8)"
      listed=$((listed + 4))
    fi
  fi
  entries="$(ctest --test-dir "$build" -N -L GPU | sed -n 's/^Total Tests: //p')"
  echo "ctest: ${entries:-0} GPU entries"
  [ "${entries:-0}" -eq "$listed" ] ||
    problem "GPU tests" "ctest has ${entries:-0} GPU entries but the programs list $listed (one per test, four for NCCL: nccl.np1, np2, np4, np8)"
fi
if [ "$dry_run" -eq 1 ]; then
  "$gpu_report" --help >/dev/null || problem "GPU report" "gpu_report --help failed"
  "$gpu_links" --help >/dev/null || problem "link microbenchmark" "gpu_links --help failed"
  "$gpu_fidelity" --help >/dev/null || problem "fidelity benchmark" "gpu_fidelity --help failed"
  # Without a GPU the fidelity benchmark must say so and exit 2, not crash or pass.
  if [ "$probe" -eq 2 ]; then
    "$gpu_fidelity" --quick --rounds 1 >/dev/null 2>"$out/fidelity-no-gpu.txt"
    rc=$?
    if [ "$rc" -eq 2 ] && [ -s "$out/fidelity-no-gpu.txt" ]; then
      row "fidelity benchmark (no GPU)" "ok: starts, says why it cannot run ($(head -1 "$out/fidelity-no-gpu.txt")), exits 2"
    else
      problem "fidelity benchmark (no GPU)" "gpu_fidelity exited $rc without a GPU (expected 2 and a reason)"
    fi
  fi
  say "GPU report's byte figures, on the host"
  if "$gpu_report" --check-figures; then
    row "GPU report (host side)" "ok: starts; its peak figures match the host models of each precision"
  else
    problem "GPU report (host side)" "gpu_report --check-figures failed (see above)"
  fi
fi

# ---- the tests ---------------------------------------------------------------------------------
# Reads ctest's JUnit file: one line per entry, "status<TAB>name<TAB>reason", where status is
# pass, fail or skip and the reason is the first thing the output says about a skip, a "not
# run" or a failure. A failed GoogleTest program whose output lacks its closing line ("N tests
# from M test suites ran.") did not finish: it crashed, hung or ran out of time.
read_junit() {
  awk '
    function unescape(s) {
      gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "'"'"'", s)
      gsub(/&amp;/, "\\&", s); return s
    }
    function attr(line, key,   v) {
      v = line
      if (!sub(".*[ <]" key "=\"", "", v)) return ""
      sub(/".*/, "", v)
      return unescape(v)
    }
    function take(line) {
      line = unescape(line)
      sub(/\r$/, "", line)
      if (line ~ /not run: /) { if (notrun == "") { notrun = line; sub(/.*not run: /, "", notrun) } return }
      if (line ~ /^\[==========\] Running /) gtest = 1
      if (line ~ /^\[==========\] [0-9]+ tests? from .* ran\./) finished = 1
      if (want) {
        # The processes of an mpirun entry print at once, so another failure header may come
        # between a header and its message.
        if (line == "Failed" || line == "" || line ~ /^\[/ || line ~ /: Failure$|: failure in /) return
        reason = line
        want = 0
        return
      }
      if (reason == "" && line ~ /: Skipped$|: Failure$|: failure in /) { want = 1; return }
      if (reason == "" && line ~ /^(gpu_report|pipesched_[a-z_]+): /) reason = line
    }
    /<testcase / {
      name = attr($0, "name"); status = attr($0, "status")
      message = ""; reason = ""; notrun = ""; want = 0; inside = 0; finished = 0; gtest = 0
    }
    /<skipped message="|<failure message="/ { message = attr($0, "message") }
    /<system-out>/ {
      inside = 1; line = $0; sub(/.*<system-out>/, "", line)
      if (line ~ /<\/system-out>/) { sub(/<\/system-out>.*/, "", line); inside = 0 }
      take(line); next
    }
    inside && /<\/system-out>/ { line = $0; sub(/<\/system-out>.*/, "", line); take(line); inside = 0; next }
    inside { take($0); next }
    /<\/testcase>/ {
      s = status == "run" ? "pass" : status == "fail" ? "fail" : "skip"
      why = notrun != "" ? "not run: " notrun : reason != "" ? reason : message
      if (s == "fail" && gtest && !finished)
        why = "did not finish (a crash, a hang or a timeout)" (why != "" ? "; first failure: " why : "")
      printf "%s\t%s\t%s\n", s, name, why
    }
  ' "$1"
}

# Runs the GPU entries and prints what happened to each; sets passed/failed_tests/skipped/notrun.
run_tests() {
  local require="$1" file="$2"
  shift 2
  rm -f "$file"
  env PIPESCHED_REQUIRE_GPU="$require" ctest --test-dir "$build" -L GPU --output-on-failure \
    --output-junit "$file" "$@"
  local rc=$?
  passed=0 failed_tests=0 skipped=0 notrun=0 results=""
  if [ ! -s "$file" ]; then
    echo "gpu-check: ctest wrote no results to $file (it exited $rc)" >&2
    failed_tests=1
    return
  fi
  results="$(read_junit "$file")"
  echo
  while IFS=$'\t' read -r status name why; do
    [ -n "$name" ] || continue
    case "$status" in
      pass)
        passed=$((passed + 1))
        printf 'PASS     %s\n' "$name"
        ;;
      fail)
        failed_tests=$((failed_tests + 1))
        printf 'FAIL     %s: %s\n' "$name" "${why:-no failure message (a timeout or a crash: its output is above)}"
        ;;
      skip)
        # The one documented exception: tests between two ranks on a machine with fewer GPUs.
        if [[ "$name" == nccl.np[2-9]* && "$why" == *"needs "*" GPUs"* ]]; then
          notrun=$((notrun + 1))
          printf 'NOT RUN  %s (needs %s GPUs): %s\n' "$name" "${name#nccl.np}" "$why"
        else
          skipped=$((skipped + 1))
          printf 'SKIP     %s: %s\n' "$name" "${why:-no reason given}"
        fi
        ;;
    esac
  done <<<"$results"
  if [ "$rc" -ne 0 ] && [ "$failed_tests" -eq 0 ]; then
    echo "gpu-check: ctest exited $rc with no failed entry in its results" >&2
    failed_tests=1
  fi
}

tests_row() {
  local text="$passed passed, $failed_tests failed, $skipped skipped"
  [ "$notrun" -gt 0 ] && text="$text, $notrun not run (nccl.npN: needs N GPUs)"
  echo "$text"
}

if [ -n "$cuda_tests" ]; then
  if [ "$dry_run" -eq 1 ]; then
    say "GPU tests without a GPU (each passes or skips)"
    run_tests 0 "$junit"
    if [ "$failed_tests" -eq 0 ] && [ $((passed + skipped + notrun)) -gt 0 ]; then
      row "GPU tests, no GPU" "ok: $(tests_row)"
    else
      problem "GPU tests, no GPU" "$(tests_row)"
    fi
    if [ "$probe" -eq 2 ]; then
      # With PIPESCHED_REQUIRE_GPU=1 (the real run) a test that finds no GPU must fail, in the
      # CUDA tests and in the NCCL ones alike (on one process and on two, where the second
      # one's failures must be reported, not hang it), or a broken GPU machine would pass by
      # skipping.
      say "PIPESCHED_REQUIRE_GPU=1 turns a missing GPU into a failure"
      guard=(-R '^(DeviceTensor\.RoundTripAndClone|nccl\.np1|nccl\.np2)$')
      [ -n "$nccl_tests" ] || guard=(-R '^DeviceTensor\.RoundTripAndClone$')
      run_tests 1 "$out/junit-require.xml" "${guard[@]}"
      expected=$([ -n "$nccl_tests" ] && echo 3 || echo 1)
      named="$(grep -v 'did not finish' <<<"$results" | grep -c 'PIPESCHED_REQUIRE_GPU is set')"
      if [ "$failed_tests" -eq "$expected" ] && [ "$passed" -eq 0 ] && [ "$skipped" -eq 0 ] &&
        [ "$named" -eq "$expected" ]; then
        row "PIPESCHED_REQUIRE_GPU=1" "ok: without a GPU the tests fail and say why"
      else
        problem "PIPESCHED_REQUIRE_GPU=1" "expected $expected failures naming the missing GPU, got $(tests_row)"
      fi
    fi
  else
    say "GPU tests (PIPESCHED_REQUIRE_GPU=1)"
    run_tests 1 "$junit"
    if [ "$failed_tests" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$passed" -gt 0 ]; then
      row "GPU tests" "ok: $(tests_row)"
    else
      problem "GPU tests" "$(tests_row)"
    fi
  fi
fi

# ---- the report --------------------------------------------------------------------------------
if [ "$dry_run" -eq 0 ]; then
  say "GPU report"
  "$gpu_report" --gpu "${gpu_name:-GPU 0}" | tee "$report"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) row "GPU report" "ok: every check passed (tables in $report)" ;;
    1) problem "GPU report" "some checks failed (the FAIL rows in $report)" ;;
    *) problem "GPU report" "did not run (exit $rc: no usable GPU)" ;;
  esac
  # The link microbenchmark: host copies of every GPU, and NCCL between GPUs 0 and 1 where
  # there are two; its tables go into the report too, and, with two GPUs, the measured link
  # as a device file beside it.
  say "links"
  "$gpu_links" --out "$out/links.json" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) row "link microbenchmark" "ok: measured (tables in $report)" ;;
    1) problem "link microbenchmark" "a CUDA or NCCL call failed (see above)" ;;
    *) problem "link microbenchmark" "did not run (exit $rc: no usable GPU)" ;;
  esac
  # The fidelity benchmark: on cuda-local, then over NCCL with a GPU per process (two GPUs and
  # the link gpu_links measured between them).
  say "fidelity (cuda-local)"
  "$gpu_fidelity" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) row "fidelity, cuda-local" "ok: measured (tables in $report)" ;;
    1) problem "fidelity, cuda-local" "a CUDA call or a step failed (see above)" ;;
    *) problem "fidelity, cuda-local" "did not run (exit $rc)" ;;
  esac
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" || gpus=0
  if [ "$gpus" -lt 2 ]; then
    row "fidelity, NCCL" "not run (needs 2 GPUs; this machine has $gpus)"
  elif [ -z "$nccl_tests" ] || [ -z "$mpiexec" ]; then
    row "fidelity, NCCL" "not run (built without NCCL or MPI)"
  elif [ ! -s "$out/links.json" ]; then
    problem "fidelity, NCCL" "gpu_links wrote no $out/links.json to predict the messages with"
  else
    say "fidelity (NCCL, 2 processes)"
    env "${mpi_env[@]}" "$mpiexec" -n 2 "$gpu_fidelity" --nccl --links "$out/links.json" | tee -a "$report"
    rc=${PIPESTATUS[0]}
    case $rc in
      0) row "fidelity, NCCL" "ok: measured on 2 GPUs (tables in $report)" ;;
      *) problem "fidelity, NCCL" "exited $rc (see above)" ;;
    esac
  fi
fi

finish
