#!/usr/bin/env bash
# Runs the provider-conformance CLI against the local provider, routes
# included: the provider runs in a network namespace of its own
# (`unshare -rn`), so its routing table and listeners are private to the run,
# and the suite talks to it over the socket (a Unix socket crosses network
# namespaces). The inventory declares the two nodes the suite uses. It
# declares what the hybrid fixture "onprem" would: Services without a class
# served, a platform of its own.
name=conformance-local
source "$(dirname "$0")/lib/conformance.sh"
conformance_setup
cat >"$work/inventory.yaml" <<'YAML'
instances:
  - node: conformance-node-1
    addresses: [{type: InternalIP, address: 127.0.4.1}]
  - node: conformance-node-2
    addresses: [{type: InternalIP, address: 127.0.4.2}]
YAML
conformance_run unshare -rn sh -c 'ip link set lo up && exec "$0" "$@"' "$root/target/debug/local-provider" \
  --inventory "$work/inventory.yaml" --state-file "$work/state.json" --route-table 100 \
  --unclassed-services served --platform onprem
