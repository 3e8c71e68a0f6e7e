#!/usr/bin/env bash
# Runs the provider-conformance CLI against the local provider, routes
# included: the provider runs in a network namespace of its own
# (`unshare -rn`), so its routing table and listeners are private to the run,
# and the suite talks to it over the socket (a Unix socket crosses network
# namespaces). The inventory declares the two nodes the suite uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/debug
work=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$work"' EXIT
cat >"$work/inventory.yaml" <<'YAML'
instances:
  - node: conformance-node-1
    addresses: [{type: InternalIP, address: 127.0.4.1}]
  - node: conformance-node-2
    addresses: [{type: InternalIP, address: 127.0.4.2}]
YAML
unshare -rn sh -c 'ip link set lo up && exec "$0" "$@"' "$bin/local-provider" \
  --endpoint "unix://$work/provider.sock" --inventory "$work/inventory.yaml" \
  --state-file "$work/state.json" --route-table 100 2>"$work/provider.log" &
pid=$!
for _ in $(seq 100); do [[ -S $work/provider.sock ]] && break; sleep 0.1; done
if ! "$bin/provider-conformance" --endpoint "unix://$work/provider.sock"; then
  echo "conformance-local: provider log:" >&2
  tail -n 30 "$work/provider.log" >&2
  exit 1
fi
