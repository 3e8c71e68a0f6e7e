#!/usr/bin/env bash
# Lints the provider contract with buf (STANDARD + COMMENTS), checks its
# formatting, and checks for breaking changes against the previous commit.
# buf comes from the npm registry (hack/tools/package.json, pinned by the
# lock file) and is installed on first use by hack/install-buf.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
buf=$("$root/hack/install-buf.sh")

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
