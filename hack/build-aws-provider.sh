#!/usr/bin/env bash
# Builds tests/real-ccm/aws: aws-provider (the published AWS cloud,
# k8s.io/cloud-provider-aws, served through the Go adapter) and fake-aws
# (an in-memory EC2 + classic ELB API on loopback), for the e2e test
# tests/e2e/tests/e2e/real_ccm.rs (which runs this script) and
# `make conformance-aws`. Caches the binaries by a hash of everything that
# affects them (the module, the Go SDK it replaces in, the Go version) and
# links them into target/real-ccm/bin/; a cache hit builds nothing.
#
# Modelled on hack/build-upstream-ccm.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/real-ccm/aws
sdk=$root/provider-sdk/go
out=$root/target/real-ccm/bin

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

key=$( {
  for dir in "$src" "$sdk"; do
    (cd "$dir" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs cat)
  done
  go version
  echo build-aws-provider-v1
} | sha256sum | cut -c1-16)
cache=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/real-ccm-aws/$key

if [[ ! -x $cache/aws-provider || ! -x $cache/fake-aws ]]; then
  echo "build-aws-provider: building aws-provider and fake-aws (cache key $key)" >&2
  start=$(date +%s)
  mkdir -p "${cache%/*}"
  tmp=$(mktemp -d "${cache%/*}/tmp.XXXXXX")
  (cd "$src" && go build -p "$(nproc)" -ldflags "-s -w" -o "$tmp/" ./cmd/aws-provider ./cmd/fake-aws) \
    || { rm -rf "$tmp"; echo "build-aws-provider: error: building tests/real-ccm/aws failed" >&2; exit 1; }
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "build-aws-provider: built in $(( $(date +%s) - start ))s" >&2
fi

# Drop binaries of keys unused for a week so the cache does not grow forever.
find "${cache%/*}" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$cache"

mkdir -p "$out"
ln -sfn "$cache/aws-provider" "$out/aws-provider"
ln -sfn "$cache/fake-aws" "$out/fake-aws"
