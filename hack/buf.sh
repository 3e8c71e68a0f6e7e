#!/usr/bin/env bash
# Lints the provider contract with buf (STANDARD + COMMENTS), checks its
# formatting, and checks for breaking changes against the previous commit.
# buf comes from the npm registry (hack/tools/package.json, pinned by the
# lock file) and is installed on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/hack/tools
buf=$tools/node_modules/.bin/buf

if [[ ! -x $buf ]]; then
  command -v npm >/dev/null || { echo "buf.sh: error: npm is required to install buf" >&2; exit 1; }
  echo "buf.sh: installing buf from the npm registry" >&2
  # Not `npm ci`: the lock file lists only the platform packages the registry
  # has, and `npm ci` rejects it for missing the others. Versions still come
  # from the lock file.
  (cd "$tools" && npm install --no-audit --no-fund --no-save --loglevel=error >&2)
fi

cd "$root/proto"
"$buf" lint
"$buf" format --diff --exit-code

against=${BUF_AGAINST:-HEAD~1}
if git -C "$root" cat-file -e "$against:proto/buf.yaml" 2>/dev/null; then
  "$buf" breaking --against "$root/.git#ref=$against,subdir=proto"
  echo "buf: lint, format and breaking (against $against) clean"
else
  echo "buf: lint and format clean; no contract at $against to check breaking changes against"
fi
