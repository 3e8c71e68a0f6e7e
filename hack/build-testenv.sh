#!/usr/bin/env bash
# Builds ccm-testenv (kube-apiserver + embedded etcd) and kubectl from
# tests/testenv, caching the binaries by a hash of everything that affects
# them, and links them into target/testenv/bin/.
#
# A cold build compiles most of k8s.io/kubernetes (its time:
# docs/benchmarks.md); a cache hit builds nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/testenv
out=$root/target/testenv/bin
k8s_version=v1.36.3

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

key=$( { cd "$src" && cat go.mod go.sum ./*.go; go version; echo "$k8s_version" build-testenv-v1; } | sha256sum | cut -c1-16)
cache=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/testenv/$key

if [[ ! -x $cache/ccm-testenv || ! -x $cache/kubectl ]]; then
  echo "build-testenv: building kube-apiserver+etcd and kubectl $k8s_version (cache key $key); a cold build takes a while (docs/benchmarks.md)" >&2
  start=$(date +%s)
  mkdir -p "${cache%/*}"
  tmp=$(mktemp -d "${cache%/*}/tmp.XXXXXX")
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
  (cd "$src" && go build -p "$(nproc)" -ldflags "$ldflags" -o "$tmp/ccm-testenv" .) || { rm -rf "$tmp"; echo "build-testenv: error: building ccm-testenv failed" >&2; exit 1; }
  (cd "$src" && go build -p "$(nproc)" -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl) || { rm -rf "$tmp"; echo "build-testenv: error: building kubectl failed" >&2; exit 1; }
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "build-testenv: built in $(( $(date +%s) - start ))s" >&2
fi

# Drop binaries of keys unused for a week so the cache does not grow forever.
find "${cache%/*}" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$cache"

mkdir -p "$out"
ln -sfn "$cache/ccm-testenv" "$out/ccm-testenv"
ln -sfn "$cache/kubectl" "$out/kubectl"
