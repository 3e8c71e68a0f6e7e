#!/usr/bin/env bash
# Checks the Python provider SDK (provider-sdk/python) and the Python
# example provider: the checked-in stubs match what grpcio-tools generates
# from proto/, ruff check and ruff format --check are clean, pytest passes
# (including installing the SDK into fresh virtualenvs outside the checkout).
# The virtualenv comes from hack/python-venv.sh (cached).
#
#   hack/python-sdk.sh wheel DIR   only builds the SDK's wheel into DIR
#                                  (reproducible for a SOURCE_DATE_EPOCH)
#                                  and prints its path
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pydir=$root/provider-sdk/python
example=$root/providers/examples/python-memory
venv=$("$root/hack/python-venv.sh")

if [[ ${1:-} == wheel ]]; then
  [[ $# == 2 && -n $2 ]] || { echo "usage: hack/python-sdk.sh wheel DIR" >&2; exit 2; }
  exec "$venv/bin/python" "$pydir/scripts/build_wheel.py" "$2"
fi
[[ $# == 0 ]] || { echo "usage: hack/python-sdk.sh [wheel DIR]" >&2; exit 2; }

export PATH=$venv/bin:$PATH PYTHONPATH=$pydir/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
# tests/test_install.py installs from here instead of PyPI.
export CCMRS_WHEELHOUSE=$venv/wheelhouse

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
