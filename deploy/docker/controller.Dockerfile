# cloud-controller-manager: a static (musl) binary on distroless, non-root.
# Build from the repository root:
#   docker build -f deploy/docker/controller.Dockerfile -t ghcr.io/ccm-rs/cloud-controller-manager:0.1.0 .
FROM rust:1.89-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl -p cloud-controller-manager --bin cloud-controller-manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/cloud-controller-manager /cloud-controller-manager
USER 65532:65532
ENTRYPOINT ["/cloud-controller-manager"]
