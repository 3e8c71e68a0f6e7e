#!/usr/bin/env bash
# A hybrid cluster (docs/hybrid.md) in a few seconds: one
# cloud-controller-manager, two providers on sockets of their own, a real
# kube-apiserver, all inside a private network namespace like `make demo`.
# "onprem" is the local provider (owns local://, the default provider:
# Services without a class); "cloud" is the fake provider (owns fake://,
# serves class example.com/cloud, declines Services without a class,
# manages platform "cloud").
#
# A Node of each is initialised by its owner only (providerID scheme, and
# each provider's calls counted from the controller's metrics); a Service
# without a class gets an onprem VIP and one of class example.com/cloud the
# cloud's address; with the cloud provider hung (SIGSTOP) an onprem Node
# still initialises and a Service without a class still gets its VIP, while
# a cloud Node waits and /readyz fails cloud's check only; once it is resumed
# (SIGCONT) that one is initialised too, no Node deleted; `provider info`
# lists both providers. Exits non-zero, naming the logs, if anything it
# shows does not happen (DEMO_HOLD=1 keeps it running).
set -euo pipefail
demo=demo-hybrid
source "$(dirname "$0")/lib/demo.sh"

start_control_plane
controller_identity

platform=cloudprovider.kubernetes.io/platform
cloud_class=example.com/cloud
onprem_vips=127.200.0.0/24
cloud_pool=192.0.2.0/24

cat >"$work/inventory.yaml" <<EOF
instances:
EOF
for i in 1 2; do
  cat >>"$work/inventory.yaml" <<EOF
  - node: demo-onprem-$i
    id: vm-$i
    type: local.small
    zone: local-1
    region: local
    addresses:
      - {type: InternalIP, address: 127.0.1.$i}
EOF
done
step "providers: onprem = local-provider (the default; VIPs $onprem_vips; log: $work/onprem.log), cloud = fake-provider (class $cloud_class, declines Services without a class, platform cloud, addresses from $cloud_pool; log: $work/cloud.log)"
"$ccm_bin/local-provider" --endpoint "unix://$work/onprem.sock" \
  --inventory "$work/inventory.yaml" --vip-range "$onprem_vips" >"$work/onprem.log" 2>&1 &
onprem_pid=$!
pids+=("$onprem_pid")
"$ccm_bin/fake-provider" --endpoint "unix://$work/cloud.sock" \
  --load-balancer-class "$cloud_class" --unclassed-services=declined --platform cloud \
  --lb-ip-pool "$cloud_pool" >"$work/cloud.log" 2>&1 &
cloud_pid=$!
pids+=("$cloud_pid")
# wait_socket NAME PID: NAME's socket, failing at once if it exits.
wait_socket() {
  local deadline=$((SECONDS + 30))
  until [[ -S $work/$1.sock ]]; do
    kill -0 "$2" 2>/dev/null || { echo "$demo: $1 exited (log: $work/$1.log)" >&2; return 1; }
    ((SECONDS < deadline)) || { echo "$demo: timed out after 30s waiting for $1's socket" >&2; return 1; }
    sleep 0.1
  done
}
wait_socket onprem "$onprem_pid"
wait_socket cloud "$cloud_pid"
ls -l "$work/onprem.sock" "$work/cloud.sock" | sed 's/^/  /'

# register NAME [cloud]: a Node as kubelet --cloud-provider=external
# registers it (tainted, no providerID); a cloud one with the platform label.
register() {
  local labels="kubernetes.io/hostname: $1"
  [[ ${2:-} != cloud ]] || labels+=", $platform: cloud"
  k apply -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {$labels}
spec:
  taints: [{key: node.cloudprovider.kubernetes.io/uninitialized, value: "true", effect: NoSchedule}]
EOF
}
# initialised_by NAME SCHEME: no uninitialized taint, a providerID SCHEME://…
initialised_by() {
  local got
  got=$(k get node "$1" -o jsonpath='{.spec.providerID} {.spec.taints[*].key}')
  [[ $got == "$2://"* && $got != *node.cloudprovider.kubernetes.io/uninitialized* ]]
}
table() {
  k get nodes -o custom-columns="NAME:.metadata.name,PLATFORM:.metadata.labels.cloudprovider\.kubernetes\.io/platform,PROVIDER-ID:.spec.providerID,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,TAINTS:.spec.taints[*].key"
}

step "register 2 nodes as kubelet --cloud-provider=external does: demo-onprem-1 (no platform: the default provider's), demo-cloud-1 ($platform=cloud)"
register demo-onprem-1
register demo-cloud-1 cloud
table

admin_port=$(free_port)
step "controller: cloud-controller-manager --provider onprem=unix://…/onprem.sock --provider cloud=unix://…/cloud.sock --default-provider onprem (log: $work/controller.log; admin on :$admin_port)"
"$ccm_bin/cloud-controller-manager" --kubeconfig "$work/ccm.kubeconfig" \
  --provider "onprem=unix://$work/onprem.sock" --provider "cloud=unix://$work/cloud.sock" \
  --default-provider onprem --configure-cloud-routes=false \
  --node-monitor-period=1s --provider-capability-refresh-period=2s \
  --secure-port=0 --admin-port="$admin_port" --bind-address=127.0.0.1 >"$work/controller.log" 2>&1 &
pids+=($!)
wait_until "demo-onprem-1 initialised by onprem (local://)" 60 initialised_by demo-onprem-1 local
wait_until "demo-cloud-1 initialised by cloud (fake://)" 60 initialised_by demo-cloud-1 fake
table

# calls PROVIDER METHOD: that provider's calls of METHOD, from the
# controller's metrics (all codes).
calls() {
  curl -sf "http://127.0.0.1:$admin_port/metrics" |
    awk -v m="method=\"$2\"" -v p="provider=\"$1\"" 'index($0, "ccm_provider_request_duration_seconds_count{") == 1 && index($0, m) && index($0, p) {s += $NF} END {print s + 0}'
}
step "each Node asked of its owner only: BatchInstances calls (instance questions, batched) per provider (controller metrics, label provider)"
for p in onprem cloud; do echo "  $p: $(calls "$p" BatchInstances)"; done
(($(calls onprem BatchInstances) >= 1 && $(calls cloud BatchInstances) >= 1))

step "load balancers by class: demo-web (no class) -> onprem, demo-cloud-web (class $cloud_class) -> cloud"
# service NAME [CLASS]: a LoadBalancer Service, of CLASS if given.
service() {
  local class=
  [[ -z ${2:-} ]] || class="loadBalancerClass: $2"
  k apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: $1, namespace: default}
spec:
  type: LoadBalancer
  $class
  selector: {app: $1}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
EOF
}
service demo-web
service demo-cloud-web "$cloud_class"
lb_ip() { k get service "$1" -o jsonpath='{.status.loadBalancer.ingress[0].ip}'; }
has_ip() { [[ $(lb_ip "$1") == "$2"* ]]; }
wait_until "demo-web with an onprem VIP (127.200.0.x)" 60 has_ip demo-web 127.200.0.
wait_until "demo-cloud-web with a cloud address (192.0.2.x)" 60 has_ip demo-cloud-web 192.0.2.
k get services demo-web demo-cloud-web -o custom-columns='NAME:.metadata.name,CLASS:.spec.loadBalancerClass,EXTERNAL-IP:.status.loadBalancer.ingress[*].ip,FINALIZERS:.metadata.finalizers[*]'
for p in onprem cloud; do echo "  $p EnsureLoadBalancer calls: $(calls "$p" EnsureLoadBalancer)"; done

# readyz_lines: the providers' checks in /readyz?verbose.
readyz_lines() { curl -s "http://127.0.0.1:$admin_port/readyz?verbose" | grep -E 'provider-ready|readyz'; }
readyz_has() {
  local body
  body=$(readyz_lines)
  for want in "$@"; do [[ $body == *"$want"* ]] || return 1; done
}
step "operations: /readyz names each provider's check"
wait_until "provider-ready:onprem and provider-ready:cloud ok" 30 readyz_has "[+] provider-ready:onprem ok" "[+] provider-ready:cloud ok"
readyz_lines | sed 's/^/  /'

step "cloud hung: SIGSTOP the cloud provider (pid $cloud_pid); register demo-onprem-2 and demo-cloud-2, create demo-web-2 (no class)"
kill -STOP "$cloud_pid"
hung_at=$(date +%s%N)
since_hung() { echo "$((($(date +%s%N) - hung_at) / 1000000)) ms after the stop"; }
register demo-onprem-2
register demo-cloud-2 cloud
service demo-web-2
wait_until "demo-onprem-2 initialised by onprem while cloud is hung" 30 initialised_by demo-onprem-2 local
echo "  demo-onprem-2 initialised by onprem $(since_hung)"
wait_until "demo-web-2 with an onprem VIP while cloud is hung" 30 has_ip demo-web-2 127.200.0.
echo "  demo-web-2 got $(lb_ip demo-web-2) from onprem $(since_hung)"
# The controller reads each provider's readiness every 2 s here
# (--provider-capability-refresh-period), giving up after 5 s.
wait_until "provider-ready:cloud failed, onprem still ok" 30 readyz_has "[+] provider-ready:onprem ok" "[-] provider-ready:cloud failed"
echo "  $(since_hung), /readyz?verbose:"
readyz_lines | sed 's/^/  /'
table
if initialised_by demo-cloud-2 fake; then
  echo "$demo: demo-cloud-2 was initialised while its provider was stopped" >&2
  exit 1
fi
echo "  demo-cloud-2 waits for its owner (still tainted)"

step "cloud resumed: SIGCONT; demo-cloud-2 initialised by cloud, both ready, no Node deleted"
kill -CONT "$cloud_pid"
resumed_at=$(date +%s%N)
wait_until "demo-cloud-2 initialised by cloud (fake://)" 60 initialised_by demo-cloud-2 fake
echo "  demo-cloud-2 initialised by cloud $((($(date +%s%N) - resumed_at) / 1000000)) ms after SIGCONT"
table
wait_until "provider-ready:onprem and provider-ready:cloud ok" 30 readyz_has "[+] provider-ready:onprem ok" "[+] provider-ready:cloud ok"
readyz_lines | sed 's/^/  /'
[[ $(k get nodes -o name | wc -l) == 4 ]]

step "cloud-controller-manager provider info, the same --provider flags: every configured provider (excerpt)"
"$ccm_bin/cloud-controller-manager" provider info \
  --provider "onprem=unix://$work/onprem.sock" --provider "cloud=unix://$work/cloud.sock" >"$work/provider-info.txt"
grep -E '^(=== provider|name |provider_id_schemes|load_balancer_classes|unclassed_services|platforms|capabilities)' "$work/provider-info.txt" | sed 's/^/  /'
[[ $(grep -c '^=== provider ' "$work/provider-info.txt") == 2 ]]

step "demo-hybrid passed"
if [[ ${DEMO_HOLD:-} == 1 ]]; then
  echo "Holding; Ctrl-C stops everything. Everything runs in a private network namespace; from another terminal:"
  echo "  nsenter -t $$ -U -n --preserve-credentials env KUBECONFIG=$KUBECONFIG $bin/kubectl get nodes"
  wait
fi
