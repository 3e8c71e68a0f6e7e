#!/usr/bin/env bash
# Runs the provider-conformance CLI against the Go example provider
# (providers/examples/go-fake: k8s.io/cloud-provider's fake.Cloud served
# through the Go adapter) on a temporary socket, as hack/conformance.sh does
# for the Rust fake. Its instances are conformance-node-1 and
# conformance-node-2, the nodes the suite asks about by default. Needs
# target/debug/provider-conformance (`cargo build -p
# ccm-provider-conformance`; CARGO_TARGET_DIR is honoured).
name=conformance-go
source "$(dirname "$0")/lib/conformance.sh"
conformance_setup
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
(cd "$root/providers/examples/go-fake" && go build -o "$work/go-fake" .)
# The identity declares a class, declines Services without one and names a
# platform (contract 1.3.0), for identity/ownership-well-formed-and-stable.
conformance_run "$work/go-fake" --load-balancer-class example.com/go-fake --unclassed-services declined \
  --platform go-fake
