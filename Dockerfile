# memlens: build the web UI and the server, then run them from a slim, non-root image.
# No network is needed at run time.
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN rustup target add wasm32-unknown-unknown
COPY . .
RUN cargo fetch --locked \
 && cargo run --locked --profile bundle -p memlens-bundle -- --release \
 && cargo build --release --locked -p memlens \
 && cp target/release/memlens /usr/local/bin/memlens

# The runtime alone: what both images below run on.
FROM debian:bookworm-slim AS runtime
# CA certificates: a shared store's S3 endpoint is reached over HTTPS with the system's roots.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app memlens \
 && mkdir -p /data /app \
 && chown memlens /data
ENV MEMLENS_BIND=0.0.0.0:8080 \
    MEMLENS_DATA_DIR=/data \
    MEMLENS_STATIC_DIR=/app/dist
USER memlens
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s CMD ["memlens", "healthcheck"]
ENTRYPOINT ["memlens", "serve"]

# The release image (.github/workflows/release.yml, `--target prebuilt`): the binaries the
# release built for each architecture, unpacked under release/<amd64|arm64>/.
FROM runtime AS prebuilt
ARG TARGETARCH
COPY release/${TARGETARCH}/memlens /usr/local/bin/memlens
COPY release/${TARGETARCH}/dist /app/dist

# The default: built from this checkout.
FROM runtime
COPY --from=build /usr/local/bin/memlens /usr/local/bin/memlens
COPY --from=build /src/dist /app/dist
