#!/usr/bin/env bash
# Runs the provider-conformance CLI against a real, published cloud: the AWS
# cloud of k8s.io/cloud-provider-aws served through the Go adapter
# (tests/real-ccm/aws, built by hack/build-aws-provider.sh), its EC2 and ELB
# calls answered by fake-aws on loopback, which holds the instances the
# suite asks about (conformance-node-1 and -2, by their private DNS names).
#
# The cloud's Initialize takes a Kubernetes client and its SetInformers a
# Node informer, so the provider gets cluster access as docs/deploy.md
# "Provider cluster access" ships it: a ccm-testenv apiserver on loopback, the
# provider's own ServiceAccount with the shipped ClusterRole (read Nodes,
# nothing else) and $KUBECONFIG for it. The missing instance is a well-formed
# AWS providerID of an instance fake-aws does not hold.
# The suite's nodes are registered as Nodes (the cloud's Node informer maps
# a route's instance to its Node). Nothing is left out.
# Needs target/debug/provider-conformance (CARGO_TARGET_DIR is honoured).
name=conformance-aws
source "$(dirname "$0")/lib/conformance.sh"
conformance_setup
"$root/hack/build-aws-provider.sh"
bin_dir=$root/target/real-ccm/bin

fake_pid=
stop_fake() {
  if [[ -n $fake_pid ]] && kill -0 "$fake_pid" 2>/dev/null; then kill -TERM "$fake_pid"; wait "$fake_pid" 2>/dev/null || true; fi
}
trap 'stop_fake; cleanup' EXIT

"$bin_dir/fake-aws" --cluster-id conformance --cloud-config "$work/cloud.conf" --address-file "$work/address" \
  --instance conformance-node-1 --instance conformance-node-2 2>"$work/fake-aws.log" &
fake_pid=$!
for _ in $(seq 100); do
  [[ -s $work/address ]] && break
  kill -0 "$fake_pid" 2>/dev/null || { echo "$name: fake-aws exited:" >&2; cat "$work/fake-aws.log" >&2; exit 1; }
  sleep 0.1
done
[[ -s $work/address ]] || { echo "$name: fake-aws wrote no address in 10 s" >&2; exit 1; }

testenv=$root/target/testenv/bin
[[ -x $testenv/ccm-testenv ]] || { echo "$name: $testenv/ccm-testenv not built (make testenv-bin)" >&2; exit 1; }
"$testenv/ccm-testenv" --data-dir "$work/apiserver" >"$work/ready.json" 2>"$work/apiserver.log" &
api_pid=$!
trap 'stop_fake; kill -TERM "$api_pid" 2>/dev/null; wait "$api_pid" 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 600); do
  grep -q ready "$work/ready.json" 2>/dev/null && break
  kill -0 "$api_pid" 2>/dev/null || { echo "$name: ccm-testenv exited:" >&2; tail -n 20 "$work/apiserver.log" >&2; exit 1; }
  sleep 0.2
done
grep -q ready "$work/ready.json" || { echo "$name: the apiserver was not ready in 120 s" >&2; exit 1; }
k() { KUBECONFIG=$work/apiserver/kubeconfig "$testenv/kubectl" "$@"; }
access=$root/deploy/components/provider-cluster-access
k create serviceaccount cloud-controller-manager-provider -n kube-system >/dev/null
k apply -f "$access/clusterrole-provider.yaml" >/dev/null
k create clusterrolebinding conformance-aws-provider --clusterrole=ccm-rs:cloud-controller-manager:provider \
  --serviceaccount=kube-system:cloud-controller-manager-provider >/dev/null
cp "$work/apiserver/kubeconfig" "$work/provider.kubeconfig"
KUBECONFIG=$work/provider.kubeconfig "$testenv/kubectl" config set-credentials admin \
  --token="$(k create token cloud-controller-manager-provider -n kube-system --duration=1h)" >/dev/null
# The suite's nodes as the cluster knows them (initialised: providerID set),
# so the cloud's Node informer maps a route's instance to its Node.
curl -fsS "$(cat "$work/address")/control/instances" | python3 -c '
import json, sys
for i in json.load(sys.stdin):
    print(json.dumps({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": i["privateDnsName"]},
                      "spec": {"providerID": "aws:///%s/%s" % (i["zone"], i["id"])}}))
' | k apply -f - >/dev/null

export AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake AWS_EC2_METADATA_DISABLED=true \
  AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export KUBECONFIG=$work/provider.kubeconfig
conformance_args=(--node conformance-node-1 --node conformance-node-2
  --missing-provider-id aws:///us-east-1a/i-0000000000000dead)
conformance_run "$bin_dir/aws-provider" --cloud-config "$work/cloud.conf"
