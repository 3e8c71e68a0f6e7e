# The two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is installed or built by the targets below.

SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
# Same settings as hack/build-testenv.sh so vet reuses the build cache.
GO_ENV := GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-19s %s\n", $$1, $$2}'

.PHONY: testenv-bin
testenv-bin: ## Build (or reuse from cache) the test kube-apiserver and kubectl.
	@hack/build-testenv.sh

.PHONY: tools-bin
tools-bin: ## Build (or reuse from cache) helm, for the chart test.
	@hack/build-helm.sh

.PHONY: demo
demo: testenv-bin ## The main job: control plane + local provider + controller in a private network namespace; nodes initialised, a load balancer serving.
	$(CARGO) build --locked -p cloud-controller-manager -p ccm-local-provider
	hack/demo.sh

.PHONY: demo-hybrid
demo-hybrid: testenv-bin ## A hybrid cluster in seconds: one controller, the local provider as "onprem" and the fake as "cloud"; Nodes initialised by their owner, Services by class, one provider hung.
	$(CARGO) build --locked -p cloud-controller-manager -p ccm-local-provider -p ccm-fake-provider
	hack/demo-hybrid.sh

.PHONY: testenv
testenv: testenv-bin ## Start a local control plane and print how to use it (Ctrl-C stops it).
	@hack/testenv.sh

.PHONY: lint
lint: testenv-bin ## cargo fmt --check, cargo clippy -D warnings, go vet (and the testenv port picker's go test), buf lint/format/breaking.
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CARGO) clippy -p ccm-provider-sdk --no-default-features --features client --locked -- -D warnings
	$(CARGO) clippy -p ccm-provider-sdk --no-default-features --features server --locked -- -D warnings
	cd tests/testenv && $(GO_ENV) go vet ./... && $(GO_ENV) go test ./internal/...
	cd hack/ocibuild && test -z "$$(gofmt -l .)" && $(GO_ENV) go vet ./... && $(GO_ENV) go test ./...
	hack/buf.sh

.PHONY: test
test: lint tools-bin ## Lint, then run every test against a real kube-apiserver, the chaos suite's short form, then the demo and the hybrid demo.
	$(CARGO) test --workspace --locked --no-fail-fast --exclude ccm-chaos
	CHAOS_SCALE=1 $(CARGO) test --locked -p ccm-chaos -- --nocapture --test-threads=1
	$(MAKE) --no-print-directory conformance
	$(MAKE) --no-print-directory conformance-local
	$(MAKE) --no-print-directory python-sdk
	$(MAKE) --no-print-directory conformance-python
	$(MAKE) --no-print-directory go-sdk
	$(MAKE) --no-print-directory conformance-go
	$(MAKE) --no-print-directory conformance-aws
	$(MAKE) --no-print-directory demo
	$(MAKE) --no-print-directory demo-hybrid

# Property tests (proptest), the project's fuzzing: they run on stable Rust
# with nothing to install, where cargo-fuzz needs nightly and libFuzzer, and
# CI machines are fresh. `make test` runs them with proptest's default 256
# cases each (PROPTEST_CASES overrides); `make fuzz` runs the same
# properties with FUZZ_CASES each (its duration: docs/benchmarks.md).
FUZZ_CASES ?= 12000

.PHONY: fuzz
fuzz: ## Property tests (fuzzing) with FUZZ_CASES=12000 cases each; make test runs them with 256.
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --locked -p ccm-provider-sdk -p cloud-controller-manager --lib -- proptests

# The long form's size (1 to 20); 1 is the short form `make test` runs.
CHAOS_SCALE ?= 5

.PHONY: chaos
chaos: testenv-bin ## The chaos suite, long form (CHAOS_SCALE=5; CHAOS_SEED=N repeats a run's choices): kill -9, SIGSTOP, restarts; prints the counts.
	CHAOS_SCALE=$(CHAOS_SCALE) $(CARGO) test --locked -p ccm-chaos -- --nocapture --test-threads=1

.PHONY: conformance
conformance: ## The provider-conformance CLI against the fake-provider binary.
	$(CARGO) build --locked -p ccm-fake-provider -p ccm-provider-conformance
	hack/conformance.sh

.PHONY: conformance-local
conformance-local: ## The provider-conformance CLI against the local provider (in a network namespace of its own, routes included).
	$(CARGO) build --locked -p ccm-local-provider -p ccm-provider-conformance
	hack/conformance-local.sh

.PHONY: python-sdk
python-sdk: ## Python provider SDK: stubs up to date, ruff check + format, pytest (cached venv).
	hack/python-sdk.sh

.PHONY: conformance-python
conformance-python: ## The provider-conformance CLI against the Python example provider.
	$(CARGO) build --locked -p ccm-provider-conformance
	hack/conformance-python.sh
.PHONY: go-sdk
go-sdk: ## Go provider SDK, example and tests/upstream-ccm: stubs current (buf generate + diff), gofmt, go vet, go test.
	hack/go-sdk.sh

.PHONY: conformance-go
conformance-go: ## The provider-conformance CLI against the Go example (fake.Cloud through the Go adapter).
	$(CARGO) build --locked -p ccm-provider-conformance
	hack/conformance-go.sh

.PHONY: conformance-aws
conformance-aws: testenv-bin ## The provider-conformance CLI against a real published cloud: k8s.io/cloud-provider-aws through the Go adapter, on a fake EC2/ELB API.
	$(CARGO) build --locked -p ccm-provider-conformance
	hack/conformance-aws.sh

# Images and releases (docs/deploy.md, "Images"): static musl release
# builds for two architectures, so not part of `make test`; .ci/run runs
# `make test-release` after it.
.PHONY: images
images: ## OCI images (controller, fake and local providers, a base for provider binaries) for linux/amd64+arm64 as OCI layouts in _out/images/, without a container daemon.
	hack/images.sh

.PHONY: test-images
test-images: images ## make images, then run each image's entrypoint as its user (and the fake provider against the controller's probe); a second build must give the same digests.
	hack/test-images.sh

.PHONY: release
release: images tools-bin ## The versioned artifacts in _out/release/<version>/: images as OCI layout tars, the chart .tgz, SBOM, CHANGELOG section, SHA256SUMS.
	hack/release.sh

.PHONY: test-release
test-release: test-images release ## make test-images and make release, then check the artifacts: checksums, one version in the chart, the labels and --version.
	cd hack/ocibuild && CCM_RELEASE_DIR=$(CURDIR)/_out/release $(GO_ENV) go test -count=1 -run '^TestRelease$$' -v .

.PHONY: bench
bench: testenv-bin ## Benchmarks (not part of make test): provider RPC latency, 1,000-node initialisation, one provider's node initialisation with the other hung (two providers), 1,000 LoadBalancer Services, 1,000 nodes' routes, controller RSS at 5,000 Nodes + Services, the local provider's proxy against a direct connection, JSON vs protobuf for 5,000 realistic Nodes.
	$(CARGO) bench --locked -p ccm-provider-sdk --bench uds_roundtrip
	$(CARGO) bench --locked -p ccm-e2e --bench init_nodes
	$(CARGO) bench --locked -p ccm-e2e --bench hybrid_isolation
	$(CARGO) bench --locked -p ccm-e2e --bench lb_services
	$(CARGO) bench --locked -p ccm-e2e --bench node_routes
	$(CARGO) bench --locked -p ccm-e2e --bench controller_rss
	$(CARGO) bench --locked -p ccm-local-provider --bench proxy
	$(CARGO) bench --locked -p ccm-e2e --bench encoding

.PHONY: bench-compare
bench-compare: testenv-bin ## Side by side with the upstream Go CCM (built from k8s.io/cloud-provider): same scenarios, one apiserver, alternating runs, ratios. Scenarios (BENCH_COMPARE_SCENARIOS=standard,quota,steady): standard (BENCH_COMPARE_SIZES=1000,5000 BENCH_COMPARE_RUNS=2), quota (Nodes initialised under a cloud quota: BENCH_COMPARE_QUOTA_NODES=5000 BENCH_COMPARE_QUOTAS=20,1), steady (kubelet-sized Nodes heartbeating + LB Services: cloud calls per Node-hour, CPU, RSS; BENCH_COMPARE_STEADY_NODES=5000 BENCH_COMPARE_STEADY_SECS=600); docs/benchmarks.md.
	hack/build-upstream-ccm.sh
	$(CARGO) bench --locked -p ccm-e2e --bench compare
