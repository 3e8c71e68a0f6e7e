#!/usr/bin/env bash
# Runs the provider-conformance CLI against the Python example provider
# (providers/examples/python-memory) on a temporary socket, the way a
# provider author runs it against theirs: the example declares the two
# nodes the suite uses and invents no instances. Then stops it with SIGTERM
# and checks it drained and removed its socket.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CONFORMANCE_BIN:-$root/target/debug/provider-conformance}
[[ -x $bin ]] || { echo "conformance-python: $bin not built (cargo build --locked -p ccm-provider-conformance)" >&2; exit 1; }
venv=$("$root/hack/python-venv.sh")
work=$(mktemp -d)
sock=$work/provider.sock
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

PYTHONPATH=$root/provider-sdk/python/src PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/python" "$root/providers/examples/python-memory/memory_provider.py" \
  --endpoint "unix://$sock" --instance conformance-node-1 --instance conformance-node-2 \
  2>"$work/provider.log" &
pid=$!
for _ in $(seq 200); do
  [[ -S $sock ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "conformance-python: the provider exited:" >&2; cat "$work/provider.log" >&2; exit 1; }
  sleep 0.1
done
[[ -S $sock ]] || { echo "conformance-python: no socket after 20 s" >&2; cat "$work/provider.log" >&2; exit 1; }

status=0
"$bin" --endpoint "unix://$sock" || status=$?

kill -TERM "$pid"
stopped=0
wait "$pid" || stopped=$?
pid=
if ((status != 0 || stopped != 0)); then
  echo "conformance-python: provider log (exit $stopped):" >&2
  tail -n 50 "$work/provider.log" >&2
fi
[[ ! -e $sock ]] || { echo "conformance-python: the provider left its socket behind" >&2; status=1; }
((stopped == 0)) || status=1
exit "$status"
