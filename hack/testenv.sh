#!/usr/bin/env bash
# Starts ccm-testenv in the foreground and tells a human how to use it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/testenv/bin
dir=${CCM_TESTENV_DIR:-$root/target/testenv/data}
audit=$root/target/testenv/audit
mkdir -p "$audit"
# The audit log the steady-state tests count writes from (CCM_TEST_AUDIT_LOG).

"$bin/ccm-testenv" --data-dir "$dir" "$@" -- --audit-policy-file="$root/tests/support/audit-policy.yaml" \
  --audit-log-path="$audit/audit.log" --audit-log-format=json \
  2> >(sed -u 's/^/[apiserver] /' >"$root/target/testenv/apiserver.log") |
while IFS= read -r line; do
  kubeconfig=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["kubeconfig"])' "$line")
  url=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["url"])' "$line")
  cat <<MSG
Control plane ready: kube-apiserver v1.36 with embedded etcd at $url
(log: target/testenv/apiserver.log). Press Ctrl-C to stop it; its state is removed.

  export KUBECONFIG=$kubeconfig
  $bin/kubectl get --raw /readyz
  $bin/kubectl auth can-i delete nodes --as=system:serviceaccount:default:nobody

Tests can reuse it instead of starting their own:
  CCM_TEST_KUBECONFIG=$kubeconfig CCM_TEST_AUDIT_LOG=$audit/audit.log cargo test
MSG
done
