#!/usr/bin/env bash
# Builds upstream-ccm (the upstream Go cloud-controller-manager from
# k8s.io/cloud-provider with the in-memory "bench" cloud, tests/upstream-ccm)
# for `make bench-compare` and for the e2e test
# tests/e2e/tests/e2e/upstream_handoff/ (which runs this script, so `make
# test` builds it too), caching the binary by a hash of everything that
# affects it, and links it into target/upstream-ccm/bin/.
#
# Modelled on hack/build-testenv.sh. Its dependency graph is a subset of
# tests/testenv's, so after build-testenv.sh a cold build reuses most of
# the Go build cache; a cache hit builds nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/upstream-ccm
out=$root/target/upstream-ccm/bin
k8s_version=v1.36.3

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

key=$( { cd "$src" && cat go.mod go.sum ./*.go; go version; echo "$k8s_version" build-upstream-ccm-v1; } | sha256sum | cut -c1-16)
cache=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/upstream-ccm/$key

if [[ ! -x $cache/upstream-ccm ]]; then
  echo "build-upstream-ccm: building the upstream cloud-controller-manager $k8s_version (cache key $key)" >&2
  start=$(date +%s)
  mkdir -p "${cache%/*}"
  tmp=$(mktemp -d "${cache%/*}/tmp.XXXXXX")
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
  (cd "$src" && go build -p "$(nproc)" -ldflags "$ldflags" -o "$tmp/upstream-ccm" .) || { rm -rf "$tmp"; echo "build-upstream-ccm: error: building upstream-ccm failed" >&2; exit 1; }
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "build-upstream-ccm: built in $(( $(date +%s) - start ))s" >&2
fi

# Drop binaries of keys unused for a week so the cache does not grow forever.
find "${cache%/*}" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$cache"

mkdir -p "$out"
ln -sfn "$cache/upstream-ccm" "$out/upstream-ccm"
