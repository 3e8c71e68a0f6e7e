#!/usr/bin/env bash
# Runs the provider-conformance CLI against the Go example provider
# (providers/examples/go-fake: k8s.io/cloud-provider's fake.Cloud served
# through the Go adapter) on a temporary socket, as hack/conformance.sh does
# for the Rust fake. Its instances are conformance-node-1 and
# conformance-node-2, the nodes the suite asks about by default. Then stops
# it with SIGTERM and checks it drained and removed its socket. Needs
# target/debug/provider-conformance (`cargo build -p
# ccm-provider-conformance`; CARGO_TARGET_DIR is honoured).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/debug/provider-conformance
[[ -x $bin ]] || { echo "conformance-go: $bin not built (cargo build --locked -p ccm-provider-conformance)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
work=$(mktemp -d)
sock=$work/provider.sock
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$root/providers/examples/go-fake" && go build -o "$work/go-fake" .)
"$work/go-fake" --endpoint "unix://$sock" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 200); do
  [[ -S $sock ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "conformance-go: the provider exited:" >&2; cat "$work/provider.log" >&2; exit 1; }
  sleep 0.1
done
[[ -S $sock ]] || { echo "conformance-go: no socket after 20 s" >&2; cat "$work/provider.log" >&2; exit 1; }

status=0
"$bin" --endpoint "unix://$sock" || status=$?

kill -TERM "$pid"
stopped=0
wait "$pid" || stopped=$?
pid=
if ((status != 0 || stopped != 0)); then
  echo "conformance-go: go-fake log (exit $stopped, last 50 lines):" >&2
  tail -n 50 "$work/provider.log" >&2
fi
[[ ! -e $sock ]] || { echo "conformance-go: the provider left its socket behind" >&2; status=1; }
((stopped == 0)) || status=1
exit "$status"
