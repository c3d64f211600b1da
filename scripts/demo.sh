#!/usr/bin/env bash
# Builds and runs the pipesched demo (installs missing Debian packages when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target pipesched_demo
exec build/default/examples/pipesched_demo "$@"
