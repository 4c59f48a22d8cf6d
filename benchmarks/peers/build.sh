#!/usr/bin/env bash
# Builds the peers binary (src/main.rs: bitcoin-block-parser and blocks_iterator from crates.io,
# as pinned by Cargo.lock) in release mode into a cache directory, keyed on a hash of its
# sources, Cargo.toml, Cargo.lock and the Rust toolchain; prints the binary's path. A first
# build takes a few minutes on 2 cores; later calls only hash.
# Usage: build.sh [CACHE_DIR]   (default $RECHAIN_PEERS_CACHE or ~/.cache/rechain/peers)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${1:-${RECHAIN_PEERS_CACHE:-$HOME/.cache/rechain/peers}}"
command -v cargo >/dev/null || { echo "build.sh: cargo is not installed" >&2; exit 1; }
mkdir -p "$cache"
stamp="$( (cd "$here" && cat Cargo.toml Cargo.lock src/*.rs; rustc --version) | sha256sum | cut -c1-16)"
# One binary per stamp: worktrees with different sources share the cache without rebuilding
# each other's binary over and over.
bin="$cache/rechain-peers-$stamp"
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi
CARGO_TARGET_DIR="$cache/target" cargo build --release --locked \
    --manifest-path "$here/Cargo.toml" >&2
cp -f "$cache/target/release/rechain-peers" "$bin.tmp"
mv -f "$bin.tmp" "$bin"
# In CI the binary is all that is kept.
if [[ "${RECHAIN_DROP_BUILD_CACHES:-0}" == 1 ]]; then
    rm -rf "$cache/target"
fi
echo "$bin"
