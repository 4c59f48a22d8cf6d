"""``rechain eth export-era1`` and ``eth export-ere``: archives of an imported chain, written
from the bytes of the import's source (era1 or Ere files, or geth's freezer), byte for byte
what geth writes (``geth export-history``, ``--format era1`` or ``ere``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.ethereum import archives
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

#: The Ere profiles ``export-ere`` writes: geth's (receipts, no proofs), without receipts, and
#: with proofs (a source file's as read; built for pre-merge blocks: a post-merge block's proof
#: needs beacon state).
ERE_PROFILES = ("noproofs", "noreceipts", "full")


def _source(data_path: Path, start: int) -> tuple[str, list[str], str, str | None]:
    """The import's source kind, its files in block order, its network and the TD of block
    ``start - 1`` (for a source that stores none)."""
    with DataDir(data_path, readonly=True) as data:
        source = data.meta_get(layout.META_ETH_IMPORT)
        if source is None:
            raise RechainError(f"{data_path}: no Ethereum import here yet")
        td_before = None
        if start > 0:
            raw = data.get(layout.CF_ETH_TD, (start - 1).to_bytes(8, "big"))
            td_before = str(int.from_bytes(raw, "big")) if raw else None
    src = Path(source["source"])
    if source["kind"] == "freezer":
        paths = [str(src)]
    else:
        paths = [str(a.path) for a in archives.scan(src)]
    return source["kind"], paths, source["network"], td_before


def _files(written: list[Any], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [dict(zip(keys, w, strict=True)) for w in written]


def export_era1(data_path: Path, out: Path, first: int | None, last: int | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    start = first or 0
    if start % archives.FILE_BLOCKS:
        raise RechainError(
            f"--from {start}: era1 files start at a multiple of {archives.FILE_BLOCKS}"
        )
    kind, paths, network, td_before = _source(data_path, start)
    end = (1 << 63) if last is None else last + 1
    try:
        written = _native.eth_export_era1(kind, paths, network, str(out), start, end, td_before)
    except ValueError as e:
        raise RechainError(str(e)) from e
    files = _files(written, ("path", "first_block", "blocks", "accumulator"))
    return {
        "out": str(out),
        "files": files,
        "blocks": sum(f["blocks"] for f in files),
        "total_s": time.perf_counter() - t0,
    }


def export_ere(
    data_path: Path, out: Path, first: int | None, last: int | None, profile: str = "noproofs"
) -> dict[str, Any]:
    """Ere files of blocks ``first..last``: 8192 a file from ``first``, each named for the epoch
    of its first block and its last block's hash, as geth cuts and names them."""
    t0 = time.perf_counter()
    if profile not in ERE_PROFILES:
        raise RechainError(f"--profile must be one of {', '.join(ERE_PROFILES)}")
    start = first or 0
    kind, paths, network, td_before = _source(data_path, start)
    end = (1 << 63) if last is None else last + 1
    try:
        written = _native.eth_export_ere(
            kind, paths, network, str(out), start, end, td_before, profile
        )
    except ValueError as e:
        raise RechainError(str(e)) from e
    files = _files(written, ("path", "first_block", "blocks", "last_hash", "accumulator"))
    return {
        "out": str(out),
        "profile": profile,
        "files": files,
        "blocks": sum(f["blocks"] for f in files),
        "total_s": time.perf_counter() - t0,
    }
