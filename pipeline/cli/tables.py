"""The chain-independent commands over a data folder: `stages` (each stage's checkpoint),
`verify` (RocksDB, Parquet and manifest agree; a digest) and `query` (SQL over the Parquet
tables): their parsers and handlers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rechain.pipeline.cli.common import add_memory_budget, print_json
from rechain.pipeline.errors import RechainError

if TYPE_CHECKING:
    from rechain.pipeline.cli.common import Subparsers


def add_commands(sub: Subparsers) -> None:
    """`stages`, `verify`, `query`."""
    st = sub.add_parser("stages", help="each pipeline stage's checkpoint in a data folder")
    st.add_argument("--data", type=Path, required=True)
    st.add_argument("--json", action="store_true")
    st.set_defaults(handler=stages)

    v = sub.add_parser("verify", help="check RocksDB, Parquet and manifest agree; print a digest")
    v.add_argument("--data", type=Path, required=True)
    v.add_argument("--json", action="store_true")
    v.set_defaults(handler=verify)

    q = sub.add_parser("query", help="SQL (DuckDB) over the Parquet tables")
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("sql")
    q.add_argument(
        "--format", default="table", choices=["table", "csv", "json"], help="terminal output"
    )
    q.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the result to FILE instead (.parquet, .csv, .json or .jsonl), streamed by "
        "DuckDB: any size",
    )
    add_memory_budget(q, "DuckDB's memory limit; larger sorts and joins spill to disk")
    q.set_defaults(handler=query)


def stages(args: argparse.Namespace) -> int:
    from rechain.pipeline.stage_report import format_stages, stage_report

    report = stage_report(args.data)
    print_json(report) if args.json else print(format_stages(report))
    return 0


def verify(args: argparse.Namespace) -> int:
    from rechain.pipeline.verify import verify as verify_data

    result = verify_data(args.data)
    if args.json:
        print_json(result)
    else:
        print(("OK" if result["ok"] else "MISMATCH") + f"  digest {result['digest']['content']}")
        for p in result["problems"]:
            print(f"  {p}")
    return 0 if result["ok"] else 1


def query(args: argparse.Namespace) -> int:
    from rechain.pipeline import query as q
    from rechain.pipeline.store.table_view import current_view

    # A run that switches the view during the query may remove the files it was reading:
    # the query then runs once more, on the new view (never on a mix of the two).
    for attempt in (1, 2):
        view = current_view(args.data)
        try:
            if args.out is not None:
                rows = q.export(args.data, args.sql, args.out, memory_budget=args.memory_budget)
                print(f"wrote {rows:,} rows to {args.out}", file=sys.stderr)
                return 0
            con = q.connect(args.data, memory_budget=args.memory_budget)
            columns, batches = q.stream(con, args.sql)
            q.write(sys.stdout, columns, batches, args.format)
            return 0
        except RechainError:
            if attempt == 2 or current_view(args.data) == view:
                raise
    return 0
