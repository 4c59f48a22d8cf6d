"""``rechain query``: DuckDB over the published Parquet tables, one view per table name."""

from __future__ import annotations

import csv
import datetime
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import current_generation

if TYPE_CHECKING:
    import duckdb


def connect(data: Path) -> duckdb.DuckDBPyConnection:
    root = data / "parquet"
    if not root.is_dir():
        raise RechainError(f"{data}: no Parquet tables yet (run a reindex first)")
    # Imported here: reindexes use this module's helpers and never need DuckDB's start-up.
    import duckdb

    con = duckdb.connect(":memory:")
    for table_dir in sorted(root.iterdir()):
        gen = current_generation(table_dir) if table_dir.is_dir() else None
        if gen is None:
            continue
        if not any(gen.rglob("*.parquet")):
            # A declared table without rows yet (an Ethereum import writes no empty parts).
            from rechain.schemas.tables import TABLES

            if table_dir.name in TABLES:
                con.register(
                    f"_empty_{table_dir.name}", TABLES[table_dir.name].schema.empty_table()
                )
                con.execute(
                    f'CREATE VIEW "{table_dir.name}" AS SELECT * FROM "_empty_{table_dir.name}"'
                )
            continue
        # Full-decode tables are Hive-partitioned by height_range; headers is one flat part.
        pattern = str(gen / "**" / "*.parquet").replace("'", "''")
        con.execute(
            f'CREATE VIEW "{table_dir.name}" AS SELECT * FROM '
            f"read_parquet('{pattern}', hive_partitioning = true)"
        )
    return con


def run_query(data: Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    import duckdb

    con = connect(data)
    try:
        cur = con.execute(sql)
    except duckdb.Error as e:
        raise RechainError(f"query failed: {e}") from e
    columns = [d[0] for d in cur.description] if cur.description else []
    return columns, cur.fetchall()


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes | bytearray):
        return v.hex()
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def render(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([dict(zip(columns, map(_plain, r), strict=True)) for r in rows])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([[_plain(v) for v in r] for r in rows])
        return buf.getvalue().rstrip("\n")
    cells = [[("NULL" if v is None else str(_plain(v))) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)
