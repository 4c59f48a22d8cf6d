"""The published full-mode tables as the stages after ``publish`` and the commands see them:
which tables a generation holds, the off-chain files' name, and the rows its manifest
counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout

#: The tables the publish stage publishes, in publication order.
FULL_TABLES = (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)
#: The name of the files holding rows of copies off the best chain.
OFFCHAIN = "offchain"


def count_rows(
    folder: Path,
    linked: dict[str, dict[str, Any]] | None = None,
    table: str = "",
    seg_rows: dict[str, dict[str, int]] | None = None,
) -> int:
    """Rows under a table generation's folder, from the Parquet footers, except for the
    ``linked`` segments (unchanged since the manifest counted them). Each file's count goes
    in ``seg_rows`` (file -> table -> rows)."""
    total = 0
    for f in folder.rglob("*.parquet"):
        path = str(f.relative_to(folder))
        known = (linked or {}).get(path, {}).get("rows", {}).get(table)
        n = int(known) if known is not None else pq.read_metadata(f).num_rows
        if seg_rows is not None:
            seg_rows.setdefault(path, {})[table] = n
        total += n
    return total


def published_rows(data: DataDir) -> dict[str, int]:
    """Row counts of the current generation's tables, as the publication that wrote it
    counted them from its Parquet footers (its manifest, ``META_BTC_PUBLISHED``)."""
    manifest = data.meta_get(layout.META_BTC_PUBLISHED) or {}
    gen = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0)
    if manifest.get("generation") == gen and "rows" in manifest:
        return {table: int(manifest["rows"][table]) for table in FULL_TABLES}
    # A generation published before manifests held their row counts.
    return {t: count_rows(data.parquet_dir(t) / f"{gen:06d}") for t in FULL_TABLES}
