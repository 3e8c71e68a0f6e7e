# The two commands a newcomer needs are `make test` and (for now) `make testenv`.
# Everything they need is installed or built by the targets below.

SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
# Same settings as hack/build-testenv.sh so vet reuses the build cache.
GO_ENV := GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: testenv-bin
testenv-bin: ## Build (or reuse from cache) the test kube-apiserver and kubectl.
	@hack/build-testenv.sh

.PHONY: testenv
testenv: testenv-bin ## Start a local control plane and print how to use it (Ctrl-C stops it).
	@hack/testenv.sh

.PHONY: lint
lint: testenv-bin ## cargo fmt --check, cargo clippy -D warnings, go vet, buf lint/format/breaking.
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	cd tests/testenv && $(GO_ENV) go vet ./...
	hack/buf.sh

.PHONY: test
test: lint ## Lint, then run every test against a real kube-apiserver.
	$(CARGO) test --workspace --locked --no-fail-fast

.PHONY: bench
bench: ## Benchmarks (not part of make test): provider RPC latency over a Unix socket.
	$(CARGO) bench --locked -p ccm-provider-sdk --bench uds_roundtrip
