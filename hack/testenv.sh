#!/usr/bin/env bash
# Starts ccm-testenv in the foreground and tells a human how to use it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/testenv/bin
dir=${CCM_TESTENV_DIR:-$root/target/testenv/data}

"$bin/ccm-testenv" --data-dir "$dir" "$@" 2> >(sed -u 's/^/[apiserver] /' >"$root/target/testenv/apiserver.log") |
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
  CCM_TEST_KUBECONFIG=$kubeconfig cargo test
MSG
done
