#!/usr/bin/env bash
# Fuzzes pipesched's readers and checkpoint passes with libFuzzer (Clang, AddressSanitizer and
# UndefinedBehaviorSanitizer): the CSV reader, the text-form reader, the action-string parser
# and the JSON reader (with the run-plan reader on what it reads), each followed by validation,
# simulation, lowering and a write + re-read round trip; the model-file reader (pipesched's
# and Hugging Face's), the device and cluster file readers, each followed by a write + re-read
# and a small simulation; the checkpoint passes on small generated schedules; and the layout
# reader, with a write + re-read.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]    SECONDS per target (default 60); TARGET: csv, text,
#                                            action, json, model, device, checkpoint, layout
#                                            (default: all eight)
#
# The targets run side by side, as many at once as there are cores (PIPESCHED_FUZZ_JOBS sets
# another number), each for SECONDS; their summaries print in the order the targets were named.
#
# Installs clang and libFuzzer's runtime when run as root and they are missing. Builds into
# build/fuzz (the `fuzz` preset). The working corpus of each target grows in
# build/fuzz/corpus/TARGET; the seeds (tests/fuzz/seeds, tests/fuzz/regressions,
# tests/data/pytorch) are read, never written. An input that crashes, hangs (10 s), or
# allocates more than 256 MB at once is saved as build/fuzz/artifacts/TARGET-crash-… and the
# script exits 1; docs/fuzzing.md says how to reproduce and keep it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || {
  echo "usage: scripts/fuzz.sh [SECONDS] [csv|text|action|json|model|device|checkpoint|layout ...]  (SECONDS: a positive whole number)" >&2
  exit 2
}
shift $(( $# > 0 ? 1 : 0 ))
targets=("$@")
all_targets=(csv text action json model device checkpoint layout)
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case "$t" in
    csv|text|action|json|model|device|checkpoint|layout) ;;
    *) echo "scripts/fuzz.sh: unknown target '$t'; the targets are ${all_targets[*]}" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
fuzzer_links() {
  command -v clang++ >/dev/null || return 1
  local dir
  dir="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    >"$dir/t.cpp"
  clang++ -fsanitize=fuzzer,address,undefined "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local ok=$?
  rm -rf "$dir"
  return $ok
}
if ! fuzzer_links; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/fuzz.sh: clang++ with libFuzzer is needed; install clang and libclang-rt-14-dev" >&2
    exit 1
  fi
  echo "pipesched fuzz: installing clang and libFuzzer's runtime"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
  fuzzer_links || { echo "scripts/fuzz.sh: clang++ -fsanitize=fuzzer still does not link" >&2; exit 1; }
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

build=build/fuzz
mkdir -p "$build/artifacts"
jobs="${PIPESCHED_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -gt 0 ]] || {
  echo "scripts/fuzz.sh: PIPESCHED_FUZZ_JOBS must be a positive whole number, not '$jobs'" >&2
  exit 2
}

# Runs target $1 for $seconds; its exit status says whether it found a problem.
fuzz_one() {
  local t="$1" corpus="$build/corpus/$1"
  mkdir -p "$corpus"
  local seeds=(tests/fuzz/seeds/"$t")
  [ -d tests/fuzz/regressions/"$t" ] && seeds+=(tests/fuzz/regressions/"$t")
  if [ "$t" = csv ] || [ "$t" = text ]; then
    seeds+=(tests/data/pytorch)
    for d in ../shared/data/pytorch ../shared/data/pytorch215; do
      [ -d "$d" ] && seeds+=("$d")
    done
  fi
  echo "pipesched fuzz: $t for ${seconds} s (corpus $corpus, seeds ${seeds[*]})"
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=256 \
    -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$corpus" "${seeds[@]}" 2>"$build/fuzz_$t.log"
}

# At most $jobs targets at once; each one's exit status is kept by name.
declare -A pid_of
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  pid_of[$t]=$!
  running=$((running + 1))
done
status=0
for t in "${targets[@]}"; do
  if ! wait "${pid_of[$t]}"; then
    status=1
    echo "pipesched fuzz: $t FOUND A PROBLEM; the last lines of $build/fuzz_$t.log:" >&2
    tail -n 40 "$build/fuzz_$t.log" >&2
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|Done [0-9]+ runs" \
      "$build/fuzz_$t.log" | tr '\n' ' ' | sed 's/^/pipesched fuzz: '"$t"': /'
    echo
  fi
done
if [ $status -ne 0 ]; then
  echo "pipesched fuzz: inputs that failed are in $build/artifacts/ (see docs/fuzzing.md)" >&2
else
  echo "pipesched fuzz: ${targets[*]}: no finding in ${seconds} s each"
fi
exit $status
