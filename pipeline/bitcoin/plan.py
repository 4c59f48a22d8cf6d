"""Planning a Bitcoin reindex: find blk files, read the XOR key, check the network, cut shards.

Plans are plain data (WorkUnit); the coordinator never parses block bytes itself.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from rechain.pipeline.errors import RechainError
from rechain.workers import _native
from rechain.workers.btc_scan import WorkUnit

log = logging.getLogger(__name__)

BLK_NAME = re.compile(r"^blk(\d+)\.dat$")
#: Bytes fingerprinted at the head of each file to notice a replaced file.
FINGERPRINT_BYTES = 4096
#: Default shard size: big enough to amortise task overhead, small enough to spread a file.
DEFAULT_SHARD_BYTES = 32 << 20
NETWORKS = ("main", "testnet", "testnet4", "signet", "regtest")


@dataclass(frozen=True)
class BlkFile:
    file_no: int
    path: Path
    size: int


def find_blk_files(blocks_dir: Path) -> list[BlkFile]:
    """blk*.dat in numeric order (rev*.dat and anything else ignored)."""
    if not blocks_dir.is_dir():
        raise RechainError(f"{blocks_dir}: blocks folder not found")
    found = []
    try:
        entries = list(blocks_dir.iterdir())
    except OSError as e:
        raise RechainError(f"{blocks_dir}: cannot list blocks folder: {e.strerror}") from e
    for entry in entries:
        m = BLK_NAME.match(entry.name)
        if m and entry.is_file():
            found.append(BlkFile(int(m.group(1)), entry, entry.stat().st_size))
    found.sort(key=lambda f: f.file_no)
    numbers = [f.file_no for f in found]
    for expected, actual in zip(range(len(numbers)), numbers, strict=False):
        if expected != actual:
            log.warning(
                "blk file numbers have a gap before blk%05d.dat; Bitcoin Core's reindex would "
                "stop there, rechain scans every file",
                actual,
            )
            break
    return found


#: Where a node's data folder keeps each network's blocks/ (Bitcoin Core's chain folders).
NETWORK_SUBFOLDERS = {
    "main": "",
    "testnet": "testnet3",
    "testnet4": "testnet4",
    "signet": "signet",
    "regtest": "regtest",
}


def resolve_blocks_dir(given: Path, network: str) -> Path:
    """The folder holding the blk files: ``given`` itself, or, when the user named a node's
    data folder (``~/.bitcoin``), its ``blocks/`` for ``network``. A folder without blk files
    is an error that says where they would be."""

    def has_blk(folder: Path) -> bool:
        try:
            return folder.is_dir() and any(BLK_NAME.match(e.name) for e in folder.iterdir())
        except OSError:
            return False

    if not given.is_dir():
        raise RechainError(f"{given}: blocks folder not found")
    if has_blk(given):
        return given
    sub = NETWORK_SUBFOLDERS.get(network, "")
    for candidate in (given / sub / "blocks", given / "blocks"):
        if has_blk(candidate):
            log.warning("--blocks %s holds no blk files: reading %s", given, candidate)
            return candidate
    hint = next(
        (c for c in (given / sub / "blocks", given / "blocks") if c.is_dir()), given / "blocks"
    )
    raise RechainError(
        f"no blk*.dat in {given}; did you mean {hint}? (a node keeps its block files in "
        "its data folder's blocks/, for example ~/.bitcoin/blocks)"
    )


def read_xor_key(blocks_dir: Path) -> bytes:
    """The obfuscation key from xor.dat (spec §2): missing → zeros; short → error; long → 8."""
    path = blocks_dir / "xor.dat"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        log.warning("%s missing: reading blk files with the all-zero key", path)
        return bytes(8)
    except OSError as e:
        raise RechainError(f"{path}: cannot read: {e.strerror}") from e
    if len(raw) < 8:
        raise RechainError(
            f"{path}: holds {len(raw)} bytes; Bitcoin Core writes exactly 8 (a damaged xor.dat)"
        )
    if len(raw) > 8:
        log.warning("%s holds %d bytes; using the first 8 as Bitcoin Core does", path, len(raw))
    return raw[:8]


def decode_head(path: Path, key: bytes, n: int) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(n)
    return bytes(b ^ key[i % 8] for i, b in enumerate(raw))


def check_network(files: list[BlkFile], network: str, key: bytes) -> None:
    """Fails fast when the first non-empty file starts with another network's magic."""
    magic = _native.network_info(network).magic
    for f in files:
        if f.size < 4:
            continue
        try:
            head = decode_head(f.path, key, 4)
        except OSError as e:
            raise RechainError(f"{f.path}: cannot read: {e.strerror}") from e
        if head == magic or head == b"\0\0\0\0":
            return
        for other in NETWORKS:
            if _native.network_info(other).magic == head:
                raise RechainError(
                    f"{f.path.name} starts with the {other} magic {head.hex()}, not the "
                    f"{network} magic {magic.hex()}: pass --network {other}"
                )
        log.warning(
            "%s does not start with the %s magic %s (found %s); scanning for records anyway",
            f.path.name,
            network,
            magic.hex(),
            head.hex(),
        )
        return


def fingerprint(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(FINGERPRINT_BYTES)).hexdigest()


def cut_shards(
    f: BlkFile,
    start: int,
    shard_bytes: int,
    network: str,
    key: bytes,
    check_bodies: bool,
    seq0: int,
) -> list[WorkUnit]:
    """Shards on a fixed grid of ``shard_bytes`` (the first one may start mid-cell on resume)."""
    units = []
    pos = start
    seq = seq0
    while pos < f.size:
        bound = min(f.size, (pos // shard_bytes + 1) * shard_bytes)
        units.append(WorkUnit(seq, str(f.path), f.file_no, pos, bound, network, key, check_bodies))
        seq += 1
        pos = bound
    return units
