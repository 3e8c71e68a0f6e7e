# fake-provider: the in-memory fake cloud, as a provider sidecar image.
# Build from the repository root:
#   docker build -f deploy/docker/fake-provider.Dockerfile -t ghcr.io/ccm-rs/fake-provider:0.1.0 .
FROM rust:1.89-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl -p ccm-fake-provider --bin fake-provider

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/fake-provider /fake-provider
USER 65532:65532
ENTRYPOINT ["/fake-provider"]
