#!/usr/bin/env bash
# Checks the Python provider SDK (provider-sdk/python) and the Python
# example provider: the checked-in stubs match what grpcio-tools generates
# from proto/, ruff check and ruff format --check are clean, pytest passes.
# The virtualenv comes from hack/python-venv.sh (cached).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pydir=$root/provider-sdk/python
example=$root/providers/examples/python-memory
venv=$("$root/hack/python-venv.sh")
export PATH=$venv/bin:$PATH PYTHONPATH=$pydir/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1

imported=$(python -c 'import ccmrs_provider; print(ccmrs_provider.__file__)')
[[ $imported == "$pydir/src/"* ]] || { echo "python-sdk: imported $imported, not this checkout's SDK" >&2; exit 1; }

echo "python-sdk: stubs are up to date" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python "$pydir/scripts/generate_stubs.py" --out "$tmp"
if ! diff -r -x __pycache__ "$tmp/ccmrs" "$pydir/src/ccmrs"; then
  echo "python-sdk: error: provider-sdk/python/src/ccmrs is stale; run: python provider-sdk/python/scripts/generate_stubs.py" >&2
  exit 1
fi

echo "python-sdk: ruff" >&2
(cd "$pydir" && ruff check --no-cache . && ruff format --no-cache --check .)
(cd "$example" && ruff check --no-cache . && ruff format --no-cache --check .)

echo "python-sdk: pytest" >&2
cd "$pydir"
python -m pytest -q
