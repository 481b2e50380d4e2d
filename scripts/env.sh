# Sourced by the other scripts: puts the project's own tools on PATH.
# wasm-opt comes from npm's binaryen (end2end/node_modules): Debian's binaryen 108 produces
# WASM that never hydrates, and cargo-leptos uses the first wasm-opt on PATH.
SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SLUICE_ROOT
export PATH="$SLUICE_ROOT/end2end/node_modules/.bin:$HOME/.cargo/bin:$PATH"
# Same value cargo-leptos uses; see .cargo/config.toml.
export LEPTOS_OUTPUT_NAME=sluice
