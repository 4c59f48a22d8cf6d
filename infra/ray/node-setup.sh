#!/bin/bash
# Prepares one node of the `ray up` cluster (infra/ray/cluster.yaml): local NVMe at /mnt/nvme,
# Rust, Python 3.11, the repository's .venv (make setup) and, when infra/ray/input.env sets
# RECHAIN_INPUT_S3, a copy of the input at /data/blocks. Idempotent: `ray up` reruns it.
set -euo pipefail
repo="$HOME/rechain"
export DEBIAN_FRONTEND=noninteractive

sudo apt-get update -q
sudo apt-get install -y -q build-essential pkg-config git curl mdadm xfsprogs

# Local NVMe instance store (one disk, or a RAID 0 of several) at /mnt/nvme.
if ! mountpoint -q /mnt/nvme; then
  mapfile -t disks < <(lsblk -dpno NAME,MODEL | awk '/Amazon EC2 NVMe Instance Storage/ {print $1}')
  sudo mkdir -p /mnt/nvme
  if [ "${#disks[@]}" -gt 1 ]; then
    sudo mdadm --create /dev/md0 --run --level=0 --raid-devices="${#disks[@]}" "${disks[@]}"
    sudo mkfs.xfs -f /dev/md0 && sudo mount -o noatime /dev/md0 /mnt/nvme
  elif [ "${#disks[@]}" -eq 1 ]; then
    sudo mkfs.xfs -f "${disks[0]}" && sudo mount -o noatime "${disks[0]}" /mnt/nvme
  fi
  sudo chown "$(id -u):$(id -g)" /mnt/nvme
fi
mkdir -p /mnt/nvme/ray /mnt/nvme/rechain
[ -L /tmp/ray ] || { rm -rf /tmp/ray; ln -s /mnt/nvme/ray /tmp/ray; }

# Rust for the native core; Python 3.11 from uv (the image's own Python may be older).
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] \
  || curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
[ -x "$HOME/.local/bin/uv" ] || curl -LsSf https://astral.sh/uv/install.sh | sh
export PATH="$HOME/.cargo/bin:$HOME/.local/bin:$PATH"
uv python install 3.11
make -C "$repo" setup PY="$(uv python find 3.11)"
grep -q 'rechain/.venv/bin' "$HOME/.bashrc" \
  || echo 'export PATH="$HOME/rechain/.venv/bin:$HOME/.cargo/bin:$PATH" RAY_AUTH_MODE=disabled' >> "$HOME/.bashrc"

# The input, at the same path on every node.
if [ -f "$repo/infra/ray/input.env" ]; then
  # shellcheck disable=SC1091
  . "$repo/infra/ray/input.env"
fi
if [ -n "${RECHAIN_INPUT_S3:-}" ]; then
  command -v aws >/dev/null || "$repo/.venv/bin/pip" install -q awscli
  aws_cli="$(command -v aws || echo "$repo/.venv/bin/aws")"
  mkdir -p /mnt/nvme/input
  "$aws_cli" s3 sync --only-show-errors "$RECHAIN_INPUT_S3" /mnt/nvme/input/blocks
  [ -e /data ] || sudo ln -s /mnt/nvme/input /data
fi
