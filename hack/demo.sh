#!/usr/bin/env bash
# The main job on a local default: a real kube-apiserver (ccm-testenv), the
# fake provider, and the cloud-controller-manager running with only its own
# ClusterRole. Nodes registered the way `kubelet --cloud-provider=external`
# registers them get initialised; a node whose instance disappears is
# deleted; a LoadBalancer Service gets an address from the fake cloud, and
# deleting it deletes the cloud's load balancer. Everything is stopped and removed at the end (DEMO_HOLD=1 keeps it
# running until Ctrl-C). Exits non-zero if anything it shows does not happen.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/testenv/bin
ccm_bin=$root/target/debug
work=$root/target/demo
rm -rf "$work"
mkdir -p "$work"

pids=()
interrupted=
cleanup() {
  local code=$?
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    # After Ctrl-C the terminal has already sent SIGINT to every process of
    # the group; a second signal would make kube-apiserver exit at once,
    # skipping its cleanup. So give them time first.
    if [[ -n $interrupted ]]; then
      for _ in $(seq 100); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.1; done
    fi
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  if [[ -n $interrupted ]]; then
    echo "demo: stopped; everything it started has exited" >&2
  elif ((code != 0)); then
    echo "demo: FAILED (exit $code); logs in $work/*.log" >&2
    tail -n 20 "$work"/*.log >&2 || true
  fi
  exit "$code"
}
trap cleanup EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# wait_until DESCRIPTION SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local what=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "demo: timed out after ${secs}s waiting for: $what" >&2
      return 1
    fi
    sleep 0.2
  done
}

step "control plane: kube-apiserver v1.36.3 + embedded etcd on 127.0.0.1 (log: $work/apiserver.log)"
"$bin/ccm-testenv" --data-dir "$work/apiserver" >"$work/ready.json" 2>"$work/apiserver.log" &
pids+=($!)
wait_until "apiserver ready" 120 grep -q ready "$work/ready.json"
export KUBECONFIG=$work/apiserver/kubeconfig
k() { "$bin/kubectl" "$@"; }
k version | sed 's/^/  /'

step "RBAC: the controller runs as kube-system/cloud-controller-manager with deploy/base/clusterrole.yaml"
k create serviceaccount cloud-controller-manager -n kube-system
k apply -f "$root/deploy/base/clusterrole.yaml"
k create clusterrolebinding ccm-rs:cloud-controller-manager \
  --clusterrole=ccm-rs:cloud-controller-manager --serviceaccount=kube-system:cloud-controller-manager
k apply -f "$root/deploy/base/role-leader-election.yaml"
k create rolebinding ccm-rs:cloud-controller-manager:leader-election -n kube-system \
  --role=ccm-rs:cloud-controller-manager:leader-election --serviceaccount=kube-system:cloud-controller-manager
cp "$KUBECONFIG" "$work/ccm.kubeconfig"
KUBECONFIG=$work/ccm.kubeconfig k config set-credentials admin \
  --token="$(k create token cloud-controller-manager -n kube-system --duration=2h)" >/dev/null
k auth can-i delete nodes --as=system:serviceaccount:kube-system:cloud-controller-manager
k auth can-i list secrets --as=system:serviceaccount:kube-system:cloud-controller-manager || true

step "provider: fake-provider on unix://$work/provider.sock (admin API on provider.sock.admin; log: $work/provider.log)"
"$ccm_bin/fake-provider" --endpoint "unix://$work/provider.sock" >"$work/provider.log" 2>&1 &
pids+=($!)
wait_until "provider socket" 30 test -S "$work/provider.sock"
ls -l "$work/provider.sock" | sed 's/^/  /'

step "register 3 nodes as kubelet --cloud-provider=external does (tainted, no providerID)"
for i in 1 2 3; do
  k apply -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: demo-node-$i
  labels: {kubernetes.io/hostname: demo-node-$i}
spec:
  podCIDR: 10.244.$i.0/24
  podCIDRs: [10.244.$i.0/24]
  taints: [{key: node.cloudprovider.kubernetes.io/uninitialized, value: "true", effect: NoSchedule}]
EOF
done
for n in demo-node-1 demo-node-2; do
  k patch node "$n" --subresource=status --type=merge \
    -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":null,"lastTransitionTime":null}]}}' >/dev/null
done

initialised() {
  local taints
  taints=$(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.spec.taints[*].key}{"\n"}{end}')
  ! grep -q 'node.cloudprovider.kubernetes.io/uninitialized' <<<"$taints" &&
    [[ $(k get nodes -o jsonpath='{range .items[*]}{.spec.providerID}{"\n"}{end}' | grep -c '^fake://') == 3 ]]
}
table() {
  k get nodes -o custom-columns='NAME:.metadata.name,PROVIDER-ID:.spec.providerID,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,TYPE:.metadata.labels.node\.kubernetes\.io/instance-type,ADDRESSES:.status.addresses[*].address,TAINTS:.spec.taints[*].key'
}
# Prints the node table each time it changes, until every node is initialised.
watch_nodes() {
  local last="" now deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    now=$(table 2>/dev/null) || true
    if [[ $now != "$last" ]]; then
      printf '%s  (t=%ss)\n%s\n\n' "$(date +%T)" "$SECONDS" "$now"
      last=$now
    fi
    initialised && return 0
    sleep 0.1
  done
  echo "demo: nodes not initialised within 60s" >&2
  return 1
}
table
admin_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
step "controller: cloud-controller-manager (log: $work/controller.log; admin on :$admin_port); watching the nodes"
"$ccm_bin/cloud-controller-manager" --kubeconfig "$work/ccm.kubeconfig" \
  --provider-endpoint "unix://$work/provider.sock" --cloud-provider=external \
  --node-monitor-period=1s --cluster-cidr=10.244.0.0/16 --admin-port="$admin_port" >"$work/controller.log" 2>&1 &
pids+=($!)

watch_nodes
k get nodes -o wide -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type
k get events.events.k8s.io -n default --field-selector reason=Synced -o custom-columns='REASON:.reason,NODE:.regarding.name,NOTE:.note'

step "routes: one cloud route per node pod CIDR (--cluster-cidr=10.244.0.0/16), NetworkUnavailable=False"
fake_routes() {
  curl -sf --unix-socket "$work/provider.sock.admin" http://fake/state | python3 -c '
import json, sys
for r in json.load(sys.stdin)["routes"]:
    print("  %s -> %s (%s)" % (r["destination_cidr"], r["target_node"], r["name"]))
'
}
routes_ready() { [[ $(fake_routes | wc -l) == 3 ]]; }
wait_until "3 routes in the fake cloud" 60 routes_ready
fake_routes
network_ok() {
  [[ $(k get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="NetworkUnavailable")].reason}{"\n"}{end}' | grep -c RouteCreated) == 3 ]]
}
wait_until "NetworkUnavailable=False/RouteCreated on every node" 60 network_ok
k get nodes -o custom-columns='NAME:.metadata.name,POD-CIDR:.spec.podCIDR,NETWORK-UNAVAILABLE:.status.conditions[?(@.type=="NetworkUnavailable")].status,REASON:.status.conditions[?(@.type=="NetworkUnavailable")].reason'

step "lifecycle: demo-node-3 is NotReady and its instance is deleted in the cloud"
curl -sf --unix-socket "$work/provider.sock.admin" -X DELETE http://fake/instances/demo-node-3
echo
wait_until "demo-node-3 deleted" 60 bash -c "! '$bin/kubectl' get node demo-node-3"
k get nodes
k get events.events.k8s.io -n default --field-selector reason=DeletingNode -o custom-columns='REASON:.reason,NODE:.regarding.name,NOTE:.note'
two_routes() { [[ $(fake_routes | wc -l) == 2 ]]; }
wait_until "demo-node-3's route deleted" 60 two_routes
echo "routes left in the fake cloud:"
fake_routes

step "load balancer: a Service of type LoadBalancer gets an EXTERNAL-IP from the fake cloud"
k create service loadbalancer demo-web --tcp=80:8080
lb_ip() { k get service demo-web -o jsonpath='{.status.loadBalancer.ingress[0].ip}'; }
wait_until "demo-web EXTERNAL-IP" 60 bash -c "[[ -n \$('$bin/kubectl' get service demo-web -o jsonpath='{.status.loadBalancer.ingress[0].ip}') ]]"
k get service demo-web
k get service demo-web -o jsonpath='{range .status.conditions[*]}  condition {.type}={.status} reason={.reason}: {.message}{"\n"}{end}'
k get events.events.k8s.io -n default --field-selector regarding.name=demo-web -o custom-columns='REASON:.reason,SERVICE:.regarding.name,NOTE:.note'
fake_lbs() {
  curl -sf --unix-socket "$work/provider.sock.admin" http://fake/state | python3 -c '
import json, sys
for lb in json.load(sys.stdin)["load_balancers"]:
    ports = [p["port"] for p in lb["ports"]]
    print("  %s ip=%s ports=%s backends=%s" % (lb["name"], lb["ip"], ports, lb["backends"]))
'
}
echo "the fake cloud's load balancers:"
fake_lbs
[[ $(fake_lbs | grep -c "ip=$(lb_ip) ") == 1 ]]

step "load balancer: deleting the Service deletes the cloud load balancer (finalizer service.kubernetes.io/load-balancer-cleanup)"
k delete service demo-web --wait=true
no_lbs() { [[ -z $(fake_lbs) ]]; }
wait_until "the fake cloud has no load balancer" 60 no_lbs
echo "the fake cloud's load balancers: $(fake_lbs | wc -l)"
k get events.events.k8s.io -n default --field-selector regarding.name=demo-web -o custom-columns='REASON:.reason,SERVICE:.regarding.name,NOTE:.note'

step "operations: leader Lease, health and metrics on the admin port"
k get lease -n kube-system cloud-controller-manager -o custom-columns='LEASE:.metadata.name,HOLDER:.spec.holderIdentity,DURATION:.spec.leaseDurationSeconds'
for path in healthz readyz; do
  echo "GET /$path"
  curl -sf "http://127.0.0.1:$admin_port/$path" | sed 's/^/  /'
done
echo "GET /metrics (excerpt)"
curl -sf "http://127.0.0.1:$admin_port/metrics" >"$work/metrics.txt"
grep -E '^(running_managed_controllers|leader_election_master_status|service_controller_[a-z_]*(total|count)|route_controller_route_sync_total|workqueue_adds_total)' "$work/metrics.txt" | sed 's/^/  /'
grep -E '^ccm_provider_request_duration_seconds_count' "$work/metrics.txt" | head -6 | sed 's/^/  /'
grep -q '^running_managed_controllers{name="service",manager="cloud-controller-manager"} 1' "$work/metrics.txt"

step "demo passed"
if [[ ${DEMO_HOLD:-} == 1 ]]; then
  echo "Holding; Ctrl-C stops everything. Try:  export KUBECONFIG=$KUBECONFIG; $bin/kubectl get nodes"
  wait
fi
