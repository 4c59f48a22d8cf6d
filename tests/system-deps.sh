#!/usr/bin/env bash
# The system packages the test suite needs beyond `make setup`: the Bitcoin Core oracle's
# C++ build (cmake, a compiler, Boost's headers) and the Prometheus server the cluster test
# scrapes. Installs what is missing (Debian packages, as root), or says the one command to run.
set -euo pipefail
packages=(cmake g++ libboost-dev prometheus)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} (Debian packages the tests need)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    exit 0
fi
echo "the tests need these Debian packages: ${missing[*]}" >&2
echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
exit 1
