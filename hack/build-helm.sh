#!/usr/bin/env bash
# Builds helm from the pinned Go module in tests/tools (the chart test
# renders deploy/helm with it), caching the binary by a hash of go.mod,
# go.sum and the Go version, and links it into target/testenv/bin/helm.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/tools
out=$root/target/testenv/bin

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

key=$( { cd "$src" && cat go.mod go.sum; go version; echo build-helm-v1; } | sha256sum | cut -c1-16)
cache=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/helm/$key

if [[ ! -x $cache/helm ]]; then
  echo "build-helm: building helm (cache key $key); a cold build takes a few minutes" >&2
  start=$(date +%s)
  mkdir -p "${cache%/*}"
  tmp=$(mktemp -d "${cache%/*}/tmp.XXXXXX")
  (cd "$src" && go build -p "$(nproc)" -ldflags "-s -w" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm) || { rm -rf "$tmp"; echo "build-helm: error: building helm failed" >&2; exit 1; }
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "build-helm: built in $(( $(date +%s) - start ))s" >&2
fi

find "${cache%/*}" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$cache"
mkdir -p "$out"
ln -sfn "$cache/helm" "$out/helm"
