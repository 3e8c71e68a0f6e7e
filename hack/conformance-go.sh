#!/usr/bin/env bash
# Runs the provider-conformance CLI against the Go example provider
# (providers/examples/go-fake: k8s.io/cloud-provider's fake.Cloud served
# through the Go adapter), as hack/conformance.sh does for the Rust fake.
# Its instances are conformance-node-1 and conformance-node-2, the nodes the
# suite asks about by default. Needs target/debug/provider-conformance
# (`cargo build -p ccm-provider-conformance`; CARGO_TARGET_DIR is honoured).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/debug
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
work=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$work"' EXIT
(cd "$root/providers/examples/go-fake" && go build -o "$work/go-fake" .)
"$work/go-fake" --endpoint "unix://$work/provider.sock" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 100); do [[ -S $work/provider.sock ]] && break; sleep 0.1; done
if ! "$bin/provider-conformance" --endpoint "unix://$work/provider.sock"; then
  echo "--- go-fake log (last 50 lines)" >&2
  tail -n 50 "$work/provider.log" >&2
  exit 1
fi
