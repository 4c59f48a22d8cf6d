#!/usr/bin/env bash
# Builds a Go test oracle (a module folder under tests/) into a cache directory, only when its
# sources, go.mod/go.sum or the Go toolchain changed; prints the binary's path. Modules come
# from the Go module proxy. Usage: go_build.sh MODULE_DIR BINARY_NAME CACHE_DIR
set -euo pipefail
here="${1:?usage: go_build.sh MODULE_DIR BINARY_NAME CACHE_DIR}"
name="${2:?usage: go_build.sh MODULE_DIR BINARY_NAME CACHE_DIR}"
cache="${3:?usage: go_build.sh MODULE_DIR BINARY_NAME CACHE_DIR}"
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
mkdir -p "$cache"
stamp="$( (cd "$here" && cat go.mod go.sum ./*.go; go version) | sha256sum | cut -d' ' -f1)"
bin="$cache/$name"
if [[ -x "$bin" && -f "$cache/$name.stamp" && "$(cat "$cache/$name.stamp")" == "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
(cd "$here" && go build -trimpath -o "$bin.tmp" .) >&2
mv -f "$bin.tmp" "$bin"
echo "$stamp" > "$cache/$name.stamp"
# In CI the binary is all that is kept: Go's build and module caches are gigabytes.
if [[ "${RECHAIN_DROP_BUILD_CACHES:-0}" == 1 ]]; then
    go clean -cache -modcache >&2
fi
echo "$bin"
