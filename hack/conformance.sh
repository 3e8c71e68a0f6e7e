#!/usr/bin/env bash
# Runs the provider-conformance CLI against the fake-provider binary, the way
# a provider author runs it against theirs. The fake declares the two nodes
# the suite uses and does not invent instances for unknown names. It declares
# what the hybrid fixture "cloud" declares (a load balancer class, Services
# without a class declined, a platform), which
# identity/ownership-well-formed-and-stable checks.
name=conformance
source "$(dirname "$0")/lib/conformance.sh"
conformance_setup
cat >"$work/instances.json" <<'JSON'
[{"name": "conformance-node-1"}, {"name": "conformance-node-2"}]
JSON
conformance_run "$root/target/debug/fake-provider" --auto-create-instances false \
  --instances-file "$work/instances.json" \
  --load-balancer-class example.com/cloud --unclassed-services declined --platform cloud
