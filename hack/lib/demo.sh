# Sourced by hack/demo.sh and hack/demo-hybrid.sh: what both demos share.
# Sourcing it re-executes the demo inside a private network namespace
# (`unshare -rn`: no root, and no packet leaves it), empties its work
# directory target/$demo (the caller sets `demo`, its name), and installs
# the cleanup that stops, last started first, every process whose pid is
# added to `pids`, printing the logs' tails when the demo fails. Then:
#   step TEXT                      a `== TEXT` line
#   wait_until WHAT SECONDS CMD... polls CMD until it succeeds, or fails
#   free_port                      a free TCP port on 127.0.0.1
#   k ARG...                       kubectl
#   start_control_plane [ARG...]   the real kube-apiserver (ARGs are its
#                                  flags); sets KUBECONFIG
#   controller_identity            kube-system/cloud-controller-manager with
#                                  the shipped RBAC, in $work/ccm.kubeconfig
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if [[ -z ${CCM_DEMO_NETNS:-} ]]; then
  if ! unshare -rn true 2>/dev/null; then
    echo "$demo: 'unshare -rn' is not allowed here (unprivileged user namespaces are off?); the demo runs in a network namespace of its own" >&2
    exit 1
  fi
  CCM_DEMO_NETNS=1 exec unshare -rn "$0" "$@"
fi
ip link set lo up

bin=$root/target/testenv/bin
ccm_bin=$root/target/debug
work=$root/target/$demo
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
    # A stopped process (SIGSTOP) would never act on SIGTERM.
    kill -CONT "${pids[i]}" 2>/dev/null || true
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  if [[ -n $interrupted ]]; then
    echo "$demo: stopped; everything it started has exited" >&2
  elif ((code != 0)); then
    echo "$demo: FAILED (exit $code); logs in $work/*.log" >&2
    tail -n 20 "$work"/*.log >&2 || true
  fi
  exit "$code"
}
trap cleanup EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# wait_until DESCRIPTION SECONDS COMMAND...: polls COMMAND until it
# succeeds; fails at once if a process the demo started has exited.
wait_until() {
  local what=$1 secs=$2 pid
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "$demo: while waiting for $what, a process it started (pid $pid) exited; its log is below" >&2
        return 1
      fi
    done
    if ((SECONDS >= deadline)); then
      echo "$demo: timed out after ${secs}s waiting for: $what" >&2
      return 1
    fi
    sleep 0.2
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
k() { "$bin/kubectl" "$@"; }

start_control_plane() {
  step "network namespace: a private one (unshare -rn); loopback only"
  ip -brief addr show lo | sed 's/^/  /'

  step "control plane: kube-apiserver v1.36.3 + embedded etcd on 127.0.0.1 (log: $work/apiserver.log)"
  "$bin/ccm-testenv" --data-dir "$work/apiserver" -- "$@" >"$work/ready.json" 2>"$work/apiserver.log" &
  pids+=($!)
  wait_until "apiserver ready" 120 grep -q ready "$work/ready.json"
  export KUBECONFIG=$work/apiserver/kubeconfig
  k version | sed 's/^/  /'
}

controller_identity() {
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
}
