# Sourced by hack/conformance*.sh: runs the provider-conformance CLI against
# one provider process the way a provider author runs it against theirs,
# then stops the provider with SIGTERM and checks it exited 0 and removed its
# socket. The caller sets `name` and calls conformance_setup, writes what
# the provider needs into "$work", then calls conformance_run COMMAND...
# (the command must end up as the provider process itself, exec'ing through
# any wrapper, and take `--endpoint unix://$sock` appended). Arguments for
# the CLI itself go in the array conformance_args.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${CONFORMANCE_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/provider-conformance}
pid=
work=
conformance_args=()
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  [[ -z $work ]] || rm -rf "$work"
}
trap cleanup EXIT

conformance_setup() {
  [[ -x $bin ]] || { echo "$name: $bin not built (cargo build --locked -p ccm-provider-conformance)" >&2; exit 1; }
  work=$(mktemp -d)
  sock=$work/provider.sock
}

conformance_run() {
  "$@" --endpoint "unix://$sock" 2>"$work/provider.log" &
  pid=$!
  for _ in $(seq 200); do
    [[ -S $sock ]] && break
    kill -0 "$pid" 2>/dev/null || { echo "$name: the provider exited:" >&2; cat "$work/provider.log" >&2; exit 1; }
    sleep 0.1
  done
  [[ -S $sock ]] || { echo "$name: no socket after 20 s" >&2; cat "$work/provider.log" >&2; exit 1; }

  local status=0 stopped=0
  "$bin" --endpoint "unix://$sock" "${conformance_args[@]}" || status=$?
  kill -TERM "$pid"
  wait "$pid" || stopped=$?
  pid=
  if ((status != 0 || stopped != 0)); then
    echo "$name: provider log (exit $stopped, last 50 lines):" >&2
    tail -n 50 "$work/provider.log" >&2
  fi
  [[ ! -e $sock ]] || { echo "$name: the provider left its socket behind" >&2; status=1; }
  ((stopped == 0)) || status=1
  return "$status"
}
