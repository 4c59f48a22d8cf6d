"""The import's committed units and where their parts live: each unit's record
(``eth/unit/<key>``: range, counts, verdicts, last header) and the one table generation the
parts grow in. The ``blocks`` stage writes them; ``links``, status and ``verify`` read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout

#: The metrics label of the import.
STAGE = "eth_import"


#: The tables' parts live in one generation that grows unit by unit.
GENERATION = 1


def unit_key(key: str) -> bytes:
    return layout.META_ETH_UNIT_PREFIX + key.encode()


def committed_units(data: DataDir) -> dict[str, dict[str, Any]]:
    prefix = layout.META_ETH_UNIT_PREFIX
    return {k[len(prefix) :].decode(): json.loads(v) for k, v in data.items(layout.CF_META, prefix)}


def table_dir(data: DataDir, table: str) -> Path:
    return data.parquet_dir(table) / f"{GENERATION:06d}"


def part_path(data: DataDir, table: str, part: str) -> Path:
    return table_dir(data, table) / f"{part}.parquet"
