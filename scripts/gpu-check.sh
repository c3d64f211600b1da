#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, builds the CUDA parts, runs every GPU test
# and the GPU report (numerics against the host double reference, synthetic layers on
# cuda-local against the simulator, the toy GPT's step time per plan) and prints the final
# table. Meant to finish in under 8 minutes on a 16-core machine.
#
# usage: scripts/gpu-check.sh [BUILD_DIR]     (default build/gpu)
# Needs: nvcc, CMake, Ninja. GoogleTest is taken from the system, or built from the sources in
# $PIPESCHED_GTEST_SOURCE (e.g. a copy of /usr/src/googletest) where the system has none. MPI
# is optional (the NCCL tests run under mpirun when it is there).
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/gpu}"
jobs="$(nproc 2>/dev/null || echo 4)"
start=$(date +%s)

say() { printf '\n=== %s (%ds)\n' "$*" "$(( $(date +%s) - start ))"; }

say "GPU"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none); nothing to check." >&2
  exit 2
fi
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

say "configure ($build)"
args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPESCHED_ENABLE_CUDA=ON
      -DPIPESCHED_BUILD_TOOLS=OFF -DPIPESCHED_BUILD_EXAMPLES=OFF -DPIPESCHED_BUILD_BENCHMARKS=ON
      -DPIPESCHED_GPU_ONLY=ON)
[ -n "${PIPESCHED_GTEST_SOURCE:-}" ] && args+=("-DPIPESCHED_GTEST_SOURCE=$PIPESCHED_GTEST_SOURCE")
cmake "${args[@]}" || { echo "gpu-check: configure failed" >&2; exit 1; }

say "build"
targets=(gpu_report)
grep -q '^pipesched_cuda_tests' < <(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1) &&
  targets+=(pipesched_cuda_tests)
grep -q '^pipesched_nccl_tests' < <(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1) &&
  targets+=(pipesched_nccl_tests)
[[ " ${targets[*]} " == *" pipesched_nccl_tests "* ]] ||
  echo "gpu-check: the NCCL test is not built (it needs MPI and NCCL here); NCCL is not checked"
cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { echo "gpu-check: build failed" >&2; exit 1; }

status=0
say "GPU tests"
if [[ " ${targets[*]} " == *" pipesched_cuda_tests "* ]]; then
  (cd "$build" && ctest -L GPU --output-on-failure) || status=1
else
  echo "gpu-check: GoogleTest not found; the GPU unit tests were not built (set PIPESCHED_GTEST_SOURCE)"
  status=1
fi

say "GPU report"
report="$build/gpu-report.md"
"$build/bench/gpu_report" --gpu "$gpu_name" | tee "$report" || status=1

say "done: $( [ $status -eq 0 ] && echo PASSED || echo FAILED ) in $(( $(date +%s) - start )) s on $gpu_name"
echo "The table above is also in $report (paste it into docs/gpu.md with the date)."
exit $status
