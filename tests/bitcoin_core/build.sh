#!/usr/bin/env bash
# Builds the Bitcoin Core oracle (this folder: Core's validation engine, libbitcoinkernel, whose
# source the libbitcoinkernel-sys crate vendors, with kernel.patch applied) into a cache directory,
# only when its inputs or the toolchain changed; prints the binary's path. The C++ build (10-25
# minutes on 2 cores) stays in CACHE_DIR/target, so a change to src/ relinks only.
# Usage: build.sh [CACHE_DIR]   (default ~/.cache/rechain/bitcoin_core)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:-$HOME/.cache/rechain/bitcoin_core}"
for tool in cargo cmake c++ patch python3; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed" >&2; exit 1; }
done
mkdir -p "$cache"
stamp="$( (cd "$here" && cat Cargo.toml Cargo.lock kernel.patch build.sh src/*.rs; cargo --version; \
    cmake --version | head -1; c++ --version | head -1) | sha256sum | cut -d' ' -f1)"
bin="$cache/rechain-core-oracle"
if [[ -x "$bin" && -f "$bin.stamp" && "$(cat "$bin.stamp")" == "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
work="$cache/build"
mkdir -p "$work/src"
rm -f "$work"/src/*.rs
cp "$here/Cargo.toml" "$here/Cargo.lock" "$work/"
cp "$here"/src/*.rs "$work/src/"
[[ -s "$work/Cargo.lock" ]] || rm -f "$work/Cargo.lock"
# The -sys crate's pristine source comes through cargo's registry cache, then gets the patch.
sys="$work/kernel-sys"
patch_sum="$(sha256sum "$here/kernel.patch" | cut -d' ' -f1)"
if [[ ! -f "$sys/.patched" || "$(cat "$sys/.patched")" != "$patch_sum" ]]; then
    fetch="$cache/fetch"
    mkdir -p "$fetch/src"
    printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[workspace]\n[dependencies]\nlibbitcoinkernel-sys = "=0.4.1"\n' > "$fetch/Cargo.toml"
    : > "$fetch/src/lib.rs"
    pristine="$(cargo metadata --format-version 1 --manifest-path "$fetch/Cargo.toml" | python3 -c '
import json, os, sys
pkg = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "libbitcoinkernel-sys"]
print(os.path.dirname(pkg[0]["manifest_path"]))')"
    rm -rf "$sys" "$sys.tmp"
    cp -a "$pristine" "$sys.tmp"
    patch -s -p1 -d "$sys.tmp" < "$here/kernel.patch"
    echo "$patch_sum" > "$sys.tmp/.patched"
    mv "$sys.tmp" "$sys"
fi
CARGO_TARGET_DIR="$cache/target" cargo build --release --manifest-path "$work/Cargo.toml" >&2
cp "$work/Cargo.lock" "$cache/Cargo.lock.built"
cp -f "$cache/target/release/rechain-core-oracle" "$bin.tmp"
mv -f "$bin.tmp" "$bin"
echo "$stamp" > "$bin.stamp"
# In CI the binary is all that is kept: the build folder is most of the cache (706 MB of 734 here).
if [[ "${RECHAIN_DROP_BUILD_CACHES:-0}" == 1 ]]; then
    rm -rf "$cache/target"
fi
echo "$bin"
