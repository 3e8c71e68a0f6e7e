#!/usr/bin/env bash
# Prints the path of buf, installing it from the npm registry on first use
# (hack/tools/package.json, versions pinned by its lock file). Shared by
# hack/buf.sh and hack/go-sdk.sh.
set -euo pipefail
tools=$(cd "$(dirname "$0")/tools" && pwd)
buf=$tools/node_modules/.bin/buf

if [[ ! -x $buf ]]; then
  command -v npm >/dev/null || { echo "install-buf: error: npm is required to install buf" >&2; exit 1; }
  echo "install-buf: installing buf from the npm registry" >&2
  # Not `npm ci`: the lock file lists only the platform packages the registry
  # has, and `npm ci` rejects it for missing the others. Versions still come
  # from the lock file. One install at a time (the lock is on the directory).
  (cd "$tools" && flock . npm install --no-audit --no-fund --no-save --loglevel=error >&2)
fi
echo "$buf"
