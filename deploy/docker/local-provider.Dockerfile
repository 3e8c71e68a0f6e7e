# local-provider: instances from an inventory, load balancers as L4 proxies on
# local addresses, routes in a kernel table; as a provider sidecar image.
# Build from the repository root:
#   docker build -f deploy/docker/local-provider.Dockerfile -t ghcr.io/ccm-rs/local-provider:0.1.0 .
FROM rust:1.89-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl -p ccm-local-provider --bin local-provider

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/local-provider /local-provider
USER 65532:65532
ENTRYPOINT ["/local-provider"]
