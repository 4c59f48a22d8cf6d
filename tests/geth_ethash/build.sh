#!/usr/bin/env bash
# Builds the gethethash oracle (go-ethereum v1.11.6) into the cache directory given as $1 (first build ~1.5 min).
# Prints the binary's path; rebuilds only when its sources or the Go toolchain changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../go_build.sh" "$here" gethethash "${1:?usage: build.sh CACHE_DIR}"
