#!/usr/bin/env bash
# The main job on a local default, with real sockets: a real kube-apiserver
# (ccm-testenv), the local provider and the cloud-controller-manager running
# with only its own ClusterRole, all inside a private network namespace
# (`unshare -rn`: no root, and no packet leaves it).
#
# Three Nodes registered the way `kubelet --cloud-provider=external`
# registers them get initialised from the provider's inventory; each gets a
# route for its pod CIDR in kernel table 100; a LoadBalancer Service gets a
# VIP on which a real L4 proxy forwards to the ingress-labelled Nodes'
# nodePort (each "node" is a small HTTP server on 127.0.1.N standing in for
# kube-proxy, answering its name); relabelling a Node moves the traffic; the
# QPS annotation limits a burst; deleting a Node's instance from the
# inventory deletes the Node and its route; deleting the Service closes the
# listener. Everything is stopped and removed at the end (DEMO_HOLD=1 keeps
# it running until Ctrl-C). Exits non-zero if anything it shows does not
# happen.
set -euo pipefail
demo=demo
source "$(dirname "$0")/lib/demo.sh"

# The apiserver's audit log records every write (metadata only): the
# steady-state step counts the controller's writes from it.
start_control_plane --audit-policy-file="$root/tests/support/audit-policy.yaml" \
  --audit-log-path="$work/audit.log" --audit-log-format=json
controller_identity

inventory() {
  echo "instances:"
  for i in "$@"; do
    cat <<EOF
  - node: demo-node-$i
    id: vm-$i
    type: local.small
    zone: local-$((i % 2 == 1 ? 1 : 2))
    region: local
    addresses:
      - {type: InternalIP, address: 127.0.1.$i}
      - {type: Hostname, address: demo-node-$i}
EOF
  done
}
inventory 1 2 3 >"$work/inventory.yaml"
provider_metrics=$(free_port)
step "provider: local-provider on unix://$work/provider.sock (inventory $work/inventory.yaml; VIPs 127.200.0.0/24; routes in table 100; log: $work/provider.log)"
"$ccm_bin/local-provider" --endpoint "unix://$work/provider.sock" \
  --inventory "$work/inventory.yaml" --state-file "$work/provider-state.json" \
  --vip-range 127.200.0.0/24 --route-table 100 --inventory-poll-interval 200ms \
  --ingress-node-selector node.ccm-rs.io/ingress=true \
  --metrics-listen "127.0.0.1:$provider_metrics" >"$work/provider.log" 2>&1 &
pids+=($!)
wait_until "provider socket" 30 test -S "$work/provider.sock"
ls -l "$work/provider.sock" | sed 's/^/  /'
sed 's/^/  /' "$work/inventory.yaml" | head -9
echo "  ..."

step "register 3 nodes as kubelet --cloud-provider=external does (tainted, no providerID); 1 and 2 labelled node.ccm-rs.io/ingress=true"
for i in 1 2 3; do
  ingress=false
  ((i < 3)) && ingress=true
  k apply -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: demo-node-$i
  labels: {kubernetes.io/hostname: demo-node-$i, node.ccm-rs.io/ingress: "$ingress"}
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
    [[ $(k get nodes -o jsonpath='{range .items[*]}{.spec.providerID}{"\n"}{end}' | grep -c '^local://') == 3 ]]
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
admin_port=$(free_port)
step "controller: cloud-controller-manager (log: $work/controller.log; admin on :$admin_port); watching the nodes"
"$ccm_bin/cloud-controller-manager" --kubeconfig "$work/ccm.kubeconfig" \
  --provider-endpoint "unix://$work/provider.sock" --cloud-provider=external \
  --node-monitor-period=1s --route-reconciliation-period=2s --node-status-update-frequency=2s \
  --cluster-cidr=10.244.0.0/16 --secure-port=0 --admin-port="$admin_port" --bind-address=127.0.0.1 >"$work/controller.log" 2>&1 &
pids+=($!)

watch_nodes
k get nodes -o wide -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type,node.ccm-rs.io/ingress
k get events.events.k8s.io -n default --field-selector reason=Synced -o custom-columns='REASON:.reason,NODE:.regarding.name,NOTE:.note'

step "routes: one per node pod CIDR (--cluster-cidr=10.244.0.0/16) in the kernel's table 100, NetworkUnavailable=False"
kernel_routes() { ip route show table 100; }
routes_are() { [[ $(kernel_routes | grep -c '^10\.244\.') == "$1" ]]; }
wait_until "3 routes in table 100" 60 routes_are 3
echo "$ ip route show table 100"
kernel_routes | sed 's/^/  /'
network_ok() {
  [[ $(k get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="NetworkUnavailable")].reason}{"\n"}{end}' | grep -c RouteCreated) == 3 ]]
}
wait_until "NetworkUnavailable=False/RouteCreated on every node" 60 network_ok
k get nodes -o custom-columns='NAME:.metadata.name,POD-CIDR:.spec.podCIDR,NETWORK-UNAVAILABLE:.status.conditions[?(@.type=="NetworkUnavailable")].status,REASON:.status.conditions[?(@.type=="NetworkUnavailable")].reason'

node_port=30080
step "backends: each node answers its name on 127.0.1.N:$node_port (standing in for kube-proxy; log: $work/backends.log)"
python3 - "$node_port" >"$work/backends.log" 2>&1 <<'EOF' &
import http.server, sys, threading
port = int(sys.argv[1])
def serve(i):
    name = f"demo-node-{i}\n".encode()
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(name)))
            self.end_headers()
            self.wfile.write(name)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer((f"127.0.1.{i}", port), Handler).serve_forever()
for i in (1, 2, 3):
    threading.Thread(target=serve, args=(i,), daemon=True).start()
print("serving", flush=True)
threading.Event().wait()
EOF
pids+=($!)
wait_until "backends" 30 grep -q serving "$work/backends.log"
for i in 1 2 3; do echo "  curl 127.0.1.$i:$node_port -> $(curl -s --max-time 2 "http://127.0.1.$i:$node_port/")"; done

step "load balancer: a Service of type LoadBalancer gets a VIP with a real listener"
k apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: demo-web, namespace: default}
spec:
  type: LoadBalancer
  selector: {app: demo-web}
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: $node_port, protocol: TCP}]
EOF
lb_ip() { k get service demo-web -o jsonpath='{.status.loadBalancer.ingress[0].ip}'; }
wait_until "demo-web EXTERNAL-IP" 60 bash -c "[[ -n \$('$bin/kubectl' get service demo-web -o jsonpath='{.status.loadBalancer.ingress[0].ip}') ]]"
vip=$(lb_ip)
k get service demo-web
k get events.events.k8s.io -n default --field-selector regarding.name=demo-web -o custom-columns='REASON:.reason,SERVICE:.regarding.name,NOTE:.note'
echo "$ ss -ltn (listeners on the VIP)"
ss -ltn "src $vip" | sed 's/^/  /'

# who_answers N: N requests to the VIP, one connection each; prints the
# answers sorted and counted.
who_answers() {
  for _ in $(seq "$1"); do curl -s --max-time 2 "http://$vip/" || echo "(no answer)"; done | sort | uniq -c | sed 's/^ */  /'
}
answered_only_by() {
  local got want
  got=$(who_answers 12 | awk '{print $2}' | sort | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  [[ $got == "$want" ]]
}
echo "$ 12 x curl http://$vip/   (ingress nodes: demo-node-1, demo-node-2)"
wait_until "answers from exactly demo-node-1 and demo-node-2" 30 answered_only_by demo-node-1 demo-node-2
who_answers 12

step "relabel: demo-node-2 stops being an ingress node, demo-node-3 becomes one; the load balancer follows"
k label node demo-node-2 node.ccm-rs.io/ingress=false --overwrite
k label node demo-node-3 node.ccm-rs.io/ingress=true --overwrite
wait_until "answers from exactly demo-node-1 and demo-node-3" 60 answered_only_by demo-node-1 demo-node-3
echo "$ 12 x curl http://$vip/"
who_answers 12
k get events.events.k8s.io -n default --field-selector regarding.name=demo-web,reason=UpdatedLoadBalancer -o custom-columns='REASON:.reason,SERVICE:.regarding.name,NOTE:.note'

step "annotation: lb.local.ccm-rs.io/listener-max-qps=5 limits a burst of 30 concurrent requests"
metric() { curl -sf "http://127.0.0.1:$provider_metrics/metrics" | awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {print s + 0}'; }
rate_metric='local_lb_rejected_total{load_balancer="kubernetes-default-demo-web",vip="'"$vip"'",protocol="TCP",port="80",reason="rate"}'
# burst: 30 requests at once; writes how many were served to $work/served.
burst() { seq 30 | xargs -P 30 -I{} curl -s -o /dev/null -w '%{http_code}\n' --max-time 2 "http://$vip/" | grep -c 200 >"$work/served" || true; }
burst
echo "  without the annotation: served $(cat "$work/served") of 30"
rate_rejected_before=$(metric "$rate_metric")
k annotate service demo-web lb.local.ccm-rs.io/listener-max-qps=5
limited() { burst; (($(cat "$work/served") <= 10)); }
wait_until "the limit applied" 60 limited
served=$(cat "$work/served")
rate_rejected=$(metric "$rate_metric")
echo "  with listener-max-qps=5: served $served of 30; the provider's local_lb_rejected_total{reason=\"rate\"} went from $rate_rejected_before to $rate_rejected"
((served <= 10 && rate_rejected > rate_rejected_before))
k annotate service demo-web lb.local.ccm-rs.io/listener-max-qps-

step "lifecycle: demo-node-3 is NotReady and its instance leaves the inventory"
inventory 1 2 >"$work/inventory.yaml.new" && mv "$work/inventory.yaml.new" "$work/inventory.yaml"
wait_until "demo-node-3 deleted" 60 bash -c "! '$bin/kubectl' get node demo-node-3"
k get nodes
k get events.events.k8s.io -n default --field-selector reason=DeletingNode -o custom-columns='REASON:.reason,NODE:.regarding.name,NOTE:.note'
wait_until "demo-node-3's route deleted" 60 routes_are 2
echo "$ ip route show table 100"
kernel_routes | sed 's/^/  /'
wait_until "answers only from demo-node-1" 60 answered_only_by demo-node-1
echo "$ 12 x curl http://$vip/"
who_answers 12

step "steady state: 8 s of kubelet heartbeats and nothing else; zero provider mutations, zero controller writes"
# Provider calls by method, from the controller's metrics (all codes).
calls() {
  curl -sf "http://127.0.0.1:$admin_port/metrics" |
    awk -v m="method=\"$1\"" 'index($0, "ccm_provider_request_duration_seconds_count{") == 1 && index($0, m) {s += $NF} END {print s + 0}'
}
mutating=(EnsureLoadBalancer UpdateLoadBalancer EnsureLoadBalancerDeleted CreateRoute DeleteRoute)
declare -A before
for m in "${mutating[@]}" ListRoutes BatchInstances; do before[$m]=$(calls "$m"); done
# The controller's writes in the audit log since $1, leaving out its own
# leader Lease.
ccm_writes() {
  python3 - "$work/audit.log" system:serviceaccount:kube-system:cloud-controller-manager "$1" <<'EOF'
import json, sys
path, user, since = sys.argv[1], sys.argv[2], sys.argv[3]
for line in open(path):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    ref = e.get("objectRef", {})
    if (e.get("stage") == "ResponseComplete" and e["user"].get("username") == user
            and e["requestReceivedTimestamp"] >= since and ref.get("resource") != "leases"):
        print(" ", e["verb"], e["requestURI"], e.get("responseStatus", {}).get("code"))
EOF
}
quiet_from=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
for _ in $(seq 8); do
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for n in demo-node-1 demo-node-2; do
    k patch node "$n" --subresource=status --type=strategic \
      -p '{"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":"'"$now"'"}]}}' >/dev/null
  done
  sleep 1
done
# A marker write by the admin: once it is in the audit log, so is every
# request answered before it.
k create configmap demo-audit-marker -n default >/dev/null
wait_until "the audit log caught up" 30 grep -q demo-audit-marker "$work/audit.log"
writes=$(ccm_writes "$quiet_from")
mutations=0
for m in "${mutating[@]}"; do
  d=$(($(calls "$m") - before[$m]))
  mutations=$((mutations + d))
  ((d == 0)) || echo "  $m: $d calls"
done
echo "  provider reads meanwhile: ListRoutes +$(($(calls ListRoutes) - before[ListRoutes])), BatchInstances +$(($(calls BatchInstances) - before[BatchInstances]))"
echo "  provider mutations: $mutations; controller writes: $(grep -c . <<<"$writes" || true)"
if ((mutations != 0)) || [[ -n $writes ]]; then
  [[ -z $writes ]] || echo "$writes" >&2
  echo "demo: the controller was not quiet in steady state (see above; $work/controller.log)" >&2
  exit 1
fi
# The periodic passes ran meanwhile: quiet by decision, not by idling.
(($(calls ListRoutes) > before[ListRoutes] && $(calls BatchInstances) > before[BatchInstances]))

step "provider metrics (http://127.0.0.1:$provider_metrics/metrics, excerpt)"
curl -sf "http://127.0.0.1:$provider_metrics/metrics" | grep -E '^local_(lb_connections_total|lb_rejected_total\{[^}]*reason="rate"|lb_backend_healthy|routes|load_balancers)' | sed 's/^/  /'

step "delete the Service: the listener closes and the VIP is free (finalizer service.kubernetes.io/load-balancer-cleanup)"
k delete service demo-web --wait=true
no_listener() { [[ -z $(ss -Hltn "src $vip") ]]; }
wait_until "no listener on $vip" 60 no_listener
echo "$ ss -ltn (listeners on $vip): $(ss -Hltn "src $vip" | wc -l)"
if curl -s --max-time 2 "http://$vip/" >/dev/null; then
  echo "demo: $vip still answers" >&2
  exit 1
fi
echo "  curl http://$vip/ -> connection refused"
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
  echo "Holding; Ctrl-C stops everything. Everything runs in a private network namespace; from another terminal:"
  echo "  nsenter -t $$ -U -n --preserve-credentials env KUBECONFIG=$KUBECONFIG $bin/kubectl get nodes"
  wait
fi
