# Multi-stage build of the same artifacts as scripts/run: the release `sluice` server and the
# console's site (WASM, JS, CSS). Tool versions match scripts/setup; keep the two in step.
# (No Docker engine runs on the project's build machines, so CI does not build this image.)

FROM rust:1.88-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-unknown-unknown \
 && cargo install --locked cargo-leptos@0.3.10 --features no_downloads
WORKDIR /src
# wasm-bindgen-cli must equal the wasm-bindgen version pinned in Cargo.lock.
COPY Cargo.lock ./
RUN version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock) \
 && cargo install wasm-bindgen-cli --version "$version"
# npm's binaryen provides wasm-opt (Debian's binaryen 108 breaks hydration).
COPY end2end/package.json end2end/package-lock.json end2end/
RUN cd end2end && npm ci --no-audit --no-fund
ENV PATH=/src/end2end/node_modules/.bin:$PATH
COPY . .
RUN cargo leptos build --release --split

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/sluice --create-home sluice
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY --from=build /src/target/site /usr/share/sluice/site
USER sluice
WORKDIR /var/lib/sluice
ENV SLUICE_LISTEN=0.0.0.0:3000 \
    SLUICE_DATA_DIR=/var/lib/sluice/data \
    LEPTOS_SITE_ROOT=/usr/share/sluice/site \
    SLUICE_LOG_FORMAT=json
EXPOSE 3000
HEALTHCHECK CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3000"]
ENTRYPOINT ["/usr/local/bin/sluice"]
