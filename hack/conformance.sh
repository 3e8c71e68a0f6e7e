#!/usr/bin/env bash
# Runs the provider-conformance CLI against the fake-provider binary, the way
# a provider author runs it against theirs. The fake declares the two nodes
# the suite uses and does not invent instances for unknown names.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/debug
work=$(mktemp -d)
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/instances.json" <<'JSON'
[{"name": "conformance-node-1"}, {"name": "conformance-node-2"}]
JSON
"$bin/fake-provider" --endpoint "unix://$work/provider.sock" --auto-create-instances false \
  --instances-file "$work/instances.json" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 100); do [[ -S $work/provider.sock ]] && break; sleep 0.1; done
"$bin/provider-conformance" --endpoint "unix://$work/provider.sock"
