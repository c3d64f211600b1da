#!/usr/bin/env bash
# Builds pipesched and runs every test (installs missing Debian packages when run as root).
# With an argument, uses that CMake preset instead of the default one: asan (Address +
# UndefinedBehavior sanitizers) or tsan (ThreadSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
case "$preset" in
  default|debug|asan|tsan) ;;
  *) echo "usage: scripts/test.sh [default|debug|asan|tsan]" >&2; exit 2 ;;
esac
scripts/setup.sh
# The CUDA toolkit's usual place, when a non-login shell has not put nvcc on the PATH: the GPU
# targets then still compile (CMake reports which optional parts it builds).
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake --workflow --preset "$preset"
