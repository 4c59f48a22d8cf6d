"""``rechain eth export-era1``: era1 archives of an imported chain, written from the bytes of
the import's source (era1 files or geth's freezer), byte for byte what geth writes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

EPOCH_BLOCKS = 8192


def export_era1(data_path: Path, out: Path, first: int | None, last: int | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    with DataDir(data_path, readonly=True) as data:
        source = data.meta_get(layout.META_ETH_IMPORT)
        if source is None:
            raise RechainError(f"{data_path}: no Ethereum import here yet")
        start = first or 0
        if start % EPOCH_BLOCKS:
            raise RechainError(f"--from {start}: era1 files start at a multiple of {EPOCH_BLOCKS}")
        td_before = None
        if start > 0:
            raw = data.get(layout.CF_ETH_TD, (start - 1).to_bytes(8, "big"))
            td_before = str(int.from_bytes(raw, "big")) if raw else None
    src = Path(source["source"])
    paths = sorted(src.glob("*.era1")) if source["kind"] == "era1" else [src]
    if source["kind"] == "era1":
        paths.sort(key=lambda p: int(p.name.rsplit("-", 2)[1]))
    end = (1 << 63) if last is None else last + 1
    try:
        written = _native.eth_export_era1(
            source["kind"], [str(p) for p in paths], source["network"], str(out), start, end,
            td_before,
        )  # fmt: skip
    except ValueError as e:
        raise RechainError(str(e)) from e
    return {
        "out": str(out),
        "files": [
            {"path": p, "first_block": f, "blocks": n, "accumulator": acc}
            for p, f, n, acc in written
        ],
        "blocks": sum(n for _, _, n, _ in written),
        "total_s": time.perf_counter() - t0,
    }
