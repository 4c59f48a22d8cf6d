#!/usr/bin/env bash
# Builds the gethharness oracle (go-ethereum v1.17.10) into the cache directory given as $1 (first build ~7 min on 2 cores).
# Prints the binary's path; rebuilds only when its sources or the Go toolchain changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../go_build.sh" "$here" gethharness "${1:?usage: build.sh CACHE_DIR}"
