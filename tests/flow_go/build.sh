#!/usr/bin/env bash
# Builds the flowgo oracle (flow-go v0.33.1) into the cache directory given as $1, only when its
# sources, go.mod/go.sum or the Go toolchain changed. Prints the binary's path.
# Modules come from the Go module proxy; the first build takes a few minutes.
set -euo pipefail
cache="${1:?usage: build.sh CACHE_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
mkdir -p "$cache"
stamp="$( (cd "$here" && cat go.mod go.sum ./*.go; go version) | sha256sum | cut -d' ' -f1)"
bin="$cache/flowgo"
if [[ -x "$bin" && -f "$cache/flowgo.stamp" && "$(cat "$cache/flowgo.stamp")" == "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
(cd "$here" && go build -trimpath -o "$bin.tmp" .) >&2
mv -f "$bin.tmp" "$bin"
echo "$stamp" > "$cache/flowgo.stamp"
echo "$bin"
