#!/usr/bin/env bash
# Prints the path of a virtualenv with the Python provider SDK's
# dependencies (its `dev` extra included) at the exact versions of
# provider-sdk/python/constraints.txt, creating it on first use. The venv is
# cached by a hash of pyproject.toml, constraints.txt and the interpreter's
# version, so every checkout with the same files shares it; callers put
# provider-sdk/python/src first on PYTHONPATH so that the checkout being
# tested is the one imported (the venv's editable install may point at
# another checkout that created it).
#
# Beside it, <venv>/wheelhouse holds the SDK's runtime dependencies and
# setuptools as wheels, at the same versions: the install tests
# (tests/test_install.py) install the SDK into fresh virtualenvs from there,
# without the network.
#
# Cold: downloads the wheels from PyPI. Warm: instant.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pydir=$root/provider-sdk/python
python=${PYTHON:-python3}

command -v "$python" >/dev/null || { echo "python-venv: $python not found (install python3)" >&2; exit 1; }
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "python-venv: $python cannot create virtualenvs (on Debian/Ubuntu: apt-get install python3-venv)" >&2
  exit 1
fi

key=$( { cat "$pydir/pyproject.toml" "$pydir/constraints.txt"; "$python" -c 'import sys; print(sys.version)'; echo python-venv-v1; } | sha256sum | cut -c1-16)
base=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/python
venv=$base/$key
mkdir -p "$base"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input -q)

# One creator at a time; a venv cannot be built elsewhere and moved.
exec 9>"$base/$key.lock"
flock 9
if [[ ! -e $venv/.complete ]]; then
  echo "python-venv: creating $venv (cold: about 30 s)" >&2
  start=$(date +%s)
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "${pip[@]}" install -c "$pydir/constraints.txt" setuptools
  "${pip[@]}" install --no-build-isolation -c "$pydir/constraints.txt" -e "$pydir[dev]"
  touch "$venv/.complete"
  echo "python-venv: created in $(( $(date +%s) - start ))s" >&2
fi
if [[ ! -e $venv/wheelhouse/.complete ]]; then
  rm -rf "$venv/wheelhouse"
  requirements=$("$venv/bin/python" - "$pydir/pyproject.toml" <<'EOF'
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
EOF
  )
  mapfile -t deps <<<"$requirements"
  "${pip[@]}" download --only-binary :all: -d "$venv/wheelhouse" -c "$pydir/constraints.txt" \
    "${deps[@]}" setuptools
  touch "$venv/wheelhouse/.complete"
fi
exec 9>&-

# Drop venvs of keys unused for a week so the cache does not grow forever.
find "$base" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$venv"
echo "$venv"
