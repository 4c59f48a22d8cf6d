#!/usr/bin/env bash
# Builds the flowgo oracle (flow-go v0.33.1) into the cache directory given as $1.
# Prints the binary's path; rebuilds only when its sources or the Go toolchain changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../go_build.sh" "$here" flowgo "${1:?usage: build.sh CACHE_DIR}"
