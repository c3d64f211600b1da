#!/usr/bin/env bash
# Builds pipesched and runs every test (installs missing Debian packages when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --workflow --preset default
