#!/usr/bin/env bash
# Cross-checks pipesched against PyTorch's torch.distributed.pipelining: pipesched's generators
# against PyTorch's stored dumps and its schedule classes (same actions, and the same order or
# the same makespan), pipesched's files loaded by PyTorch (also under max_outstanding_sends=1,
# no slower than PyTorch's own lowering; a generator refused at every size fails), a few run
# in PyTorch's runtime on gloo CPU processes with gradients compared to sequential training
# (scripts/pytorch_interop.py says what each part does). Not part of the default tests: it
# downloads PyTorch (about 5 GB, a few minutes) into a scratch virtual environment; --offline
# needs no PyTorch (the default tests run it).
#
#   scripts/pytorch-interop.sh [--quick] [--offline] [--timeout S] [--venv DIR]
#                              [--torch VERSION] [--pipesched BINARY]
#
# --venv DIR         where the environment lives (default build/pytorch-venv; kept, so a second
#                    run starts at once)
# --torch VERSION    the PyTorch release to install (default 2.15.0)
# --pipesched BINARY the command to check (default: build it in build/pytorch-interop)
# --quick            fewer sizes
# --offline          only compare with PyTorch's stored dumps (tests/data), with python3
# --timeout S        seconds each pipesched command and each PyTorch run may take (default
#                    300); one that takes longer is killed and counts as a failure
# Exits 0 when every check passed, 1 when one failed (a refusal or a timeout included).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="$root/build/pytorch-venv"
torch_version="2.15.0"
binary=""
quick=""
offline=""
timeout="300"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --torch) torch_version="$2"; shift 2 ;;
    --pipesched) binary="$2"; shift 2 ;;
    --quick) quick="--quick"; shift ;;
    --offline) offline="--offline"; shift ;;
    --timeout) timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pytorch-interop.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$binary" ]]; then
  build="$root/build/pytorch-interop"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target pipesched_cli -j "$(nproc)"
  binary="$build/tools/pipesched"
fi
[[ -x "$binary" ]] || { echo "pytorch-interop.sh: '$binary' is not an executable" >&2; exit 2; }

[[ "$timeout" =~ ^[0-9]+([.][0-9]+)?$ && "$timeout" != 0 ]] ||
  { echo "pytorch-interop.sh: --timeout needs a number of seconds above 0, got '$timeout'" >&2; exit 2; }

if [[ -n "$offline" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/pipesched-interop.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  python3 "$here/pytorch_interop.py" "$binary" "$work" --offline --timeout "$timeout"
  exit $?
fi

if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
  "$venv/bin/pip" install --quiet "torch==$torch_version" numpy
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/pipesched-interop.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$here/pytorch_interop.py" "$binary" "$work" $quick --timeout "$timeout"
