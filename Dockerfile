# syntax=docker/dockerfile:1
# outbox-relay container image: multi-stage build (Rust builder -> slim Debian runtime).
#   docker build -t outbox-relay .
#   docker run --rm -v ./examples/relay.toml:/etc/outbox-relay/relay.toml:ro outbox-relay

FROM rust:1-bookworm AS builder
# rdkafka-sys builds the bundled librdkafka (C/C++, make, pkg-config, zlib; cmake for the cmake-build feature;
# OpenSSL headers for the `ssl` feature: Kafka TLS and SASL PLAIN/SCRAM; the runtime image has libssl3)
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake pkg-config zlib1g-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# cache mounts keep the registry and target/ between builds (BuildKit); the binary is copied out of the cache
# and stripped as scripts/release.sh strips it: 12.5 MB instead of 92.6 MB (profile.release keeps
# debug info for profiling; the image does not ship it)
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin outbox-relay \
 && install -m 0755 target/release/outbox-relay /usr/local/bin/outbox-relay \
 && objcopy --strip-debug --strip-unneeded /usr/local/bin/outbox-relay

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin relay
COPY --from=builder /usr/local/bin/outbox-relay /usr/local/bin/outbox-relay
USER relay
CMD ["outbox-relay", "run", "--config", "/etc/outbox-relay/relay.toml"]
