"""``rechain query`` and the Python API: DuckDB over the current view of the tables.

``connect(DATADIR)`` opens an in-memory DuckDB with one view per table over the generation the
table view (``store/table_view.py``) holds when it is called, so every query on it sees one
publication even while a run switches to the next. Results stream: ``--out FILE`` is DuckDB's
own ``COPY`` (Parquet, CSV or JSON by the file's extension, never held in Python), and the
terminal formats print a batch of rows at a time.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.table_view import current_tables, parquet_sql

if TYPE_CHECKING:
    import duckdb

#: Rows fetched from DuckDB per batch for the terminal formats.
FETCH_ROWS = 2_048
#: ``--out`` file extensions and the COPY options that write them.
OUT_FORMATS = {
    ".parquet": "FORMAT parquet, COMPRESSION zstd",
    ".pq": "FORMAT parquet, COMPRESSION zstd",
    ".csv": "FORMAT csv, HEADER true",
    ".json": "FORMAT json, ARRAY true",
    ".jsonl": "FORMAT json",
    ".ndjson": "FORMAT json",
}


def connect(
    data: Path, *, memory_budget: int | None = None, threads: int | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per table of ``data``'s current publication (the Python
    API: ``rechain.pipeline.query.connect(path).sql("SELECT ...")``). ``memory_budget``
    bounds DuckDB's memory; beyond it, operators spill under ``DATADIR/tmp/duckdb``."""
    tables = current_tables(Path(data))
    if not tables:
        if (Path(data) / "parquet").is_dir():
            raise RechainError(
                f"{data}: no finished publication of the tables yet: the run that writes them "
                "was interrupted or has not finished; rerun it"
            )
        raise RechainError(f"{data}: no tables yet (run a reindex or import into it first)")
    # Imported here: reindexes use this package and never need DuckDB's start-up.
    import duckdb

    con = duckdb.connect(":memory:")
    if memory_budget is not None:
        spill = Path(data) / "tmp" / "duckdb"
        con.execute(f"SET memory_limit = '{max(memory_budget >> 20, 64)}MiB'")
        con.execute(f"SET temp_directory = '{_quote(str(spill))}'")
    if threads is not None:
        con.execute(f"SET threads = {threads}")
    for table, folder in tables.items():
        if any(folder.rglob("*.parquet")):
            con.execute(f'CREATE VIEW "{table}" AS {parquet_sql(folder)}')
            continue
        # A declared table without rows yet (an Ethereum import writes no empty parts).
        from rechain.schemas.tables import TABLES

        if table in TABLES:
            con.register(f"_empty_{table}", TABLES[table].schema.empty_table())
            con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "_empty_{table}"')
    return con


def run_query(data: Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The whole result of ``sql`` (for small results; ``stream`` for any size)."""
    columns, batches = stream(connect(data), sql)
    return columns, [row for batch in batches for row in batch]


def stream(
    con: duckdb.DuckDBPyConnection, sql: str, rows: int = FETCH_ROWS
) -> tuple[list[str], Iterator[list[tuple[Any, ...]]]]:
    """The columns of ``sql``'s result and its rows, ``rows`` at a time."""
    import duckdb

    try:
        cur = con.execute(sql)
    except duckdb.Error as e:
        raise _failed(e) from e
    columns = [d[0] for d in cur.description] if cur.description else []

    def batches() -> Iterator[list[tuple[Any, ...]]]:
        while True:
            try:
                batch = cur.fetchmany(rows)
            except duckdb.Error as e:
                raise _failed(e) from e
            if not batch:
                return
            yield batch

    return columns, batches()


def export(data: Path, sql: str, out: Path, *, memory_budget: int | None = None) -> int:
    """Writes ``sql``'s result to ``out`` with DuckDB's COPY (the format from the extension,
    ``OUT_FORMATS``): rows go from DuckDB to the file, never through Python. The file appears
    whole or not at all. Returns the rows written."""
    import duckdb

    options = OUT_FORMATS.get(out.suffix.lower())
    if options is None:
        raise RechainError(
            f"--out {out}: unknown extension; use one of {', '.join(sorted(OUT_FORMATS))}"
        )
    tmp = out.with_name(f".{out.name}.tmp")
    con = connect(data, memory_budget=memory_budget)
    try:
        row = con.execute(
            f"COPY ({sql.strip().rstrip(';')}) TO '{_quote(str(tmp))}' ({options})"
        ).fetchone()
    except duckdb.Error as e:
        tmp.unlink(missing_ok=True)
        raise _failed(e) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        con.close()
    os.replace(tmp, out)
    return int(row[0]) if row else 0


def plain(v: Any) -> Any:
    """A DuckDB value as JSON can hold it: bytes as hex, decimals as numbers, times as ISO 8601
    text, intervals as ISO 8601 durations, UUIDs as text, NaN and infinities as null."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return _iso_duration(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)


def _iso_duration(d: datetime.timedelta) -> str:
    sign = "-" if d < datetime.timedelta(0) else ""
    d = abs(d)
    seconds = d.seconds + d.microseconds / 1e6
    text = f"{seconds:g}S" if seconds else ""
    return f"{sign}P{d.days}DT{text}" if text else f"{sign}P{d.days}D"


def write(
    out: TextIO, columns: list[str], batches: Iterator[list[tuple[Any, ...]]], fmt: str
) -> int:
    """Writes rows to ``out`` as they come (``table``, ``csv`` or ``json``, a JSON array);
    returns the number of rows. The table's column widths come from its first batch."""
    count = 0
    if fmt == "json":
        out.write("[")
        for batch in batches:
            for row in batch:
                out.write(
                    ("," if count else "")
                    + json.dumps(dict(zip(columns, map(plain, row), strict=True)))
                )
                count += 1
        out.write("]\n")
        return count
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for batch in batches:
            w.writerows([[plain(v) for v in r] for r in batch])
            count += len(batch)
        return count
    widths: list[int] | None = None
    for batch in batches:
        cells = [[_cell(v) for v in r] for r in batch]
        if widths is None:
            widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
            _table_head(out, columns, widths)
        out.write("".join(_table_row(r, widths) for r in cells))
        count += len(batch)
    if widths is None:
        _table_head(out, columns, [len(c) for c in columns])
    out.write(f"({count:,} row{'s' if count != 1 else ''})\n")
    return count


def render(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> str:
    """``write`` into a string (small results)."""
    import io

    buf = io.StringIO()
    write(buf, columns, iter([rows]), fmt)
    return buf.getvalue().rstrip("\n")


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    p = plain(v)
    return json.dumps(p) if isinstance(p, list | dict) else str(p)


def _table_head(out: TextIO, columns: list[str], widths: list[int]) -> None:
    out.write(_table_row(columns, widths))
    out.write("  ".join("-" * w for w in widths) + "\n")


def _table_row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"


def _failed(e: Exception) -> BaseException:
    """A DuckDB error as the CLI reports it; ctrl-C during a query stays an interrupt."""
    if "Interrupt" in type(e).__name__:
        return KeyboardInterrupt()
    return RechainError(f"query failed: {e}")


def _quote(text: str) -> str:
    return text.replace("'", "''")
