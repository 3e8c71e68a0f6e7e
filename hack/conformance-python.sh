#!/usr/bin/env bash
# Runs the provider-conformance CLI against the Python example provider
# (providers/examples/python-memory) on a temporary socket, the way a
# provider author runs it against theirs: the example declares the two
# nodes the suite uses and invents no instances. Then stops it with SIGTERM
# and checks it drained and removed its socket.
name=conformance-python
source "$(dirname "$0")/lib/conformance.sh"
conformance_setup
venv=$("$root/hack/python-venv.sh")
export PYTHONPATH=$root/provider-sdk/python/src PYTHONDONTWRITEBYTECODE=1
conformance_run "$venv/bin/python" "$root/providers/examples/python-memory/memory_provider.py" \
  --instance conformance-node-1 --instance conformance-node-2 \
  --load-balancer-class example.com/memory --platform memory
