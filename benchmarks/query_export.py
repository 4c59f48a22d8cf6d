"""``rechain query --out``: a table of at least ten million rows exported to Parquet and CSV
through the CLI, against DuckDB's own ``COPY`` over the same files, in one run; and the
terminal CSV stream of the same rows. Reports each side's seconds and peak RSS, and the
ratios: the CLI adds its start-up and the table view, nothing per row.

    .venv/bin/python benchmarks/query_export.py [--blocks 3700] [--tx 1000:2000]
        [--memory-budget 1G] [--node-cache DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from btc_full_sizes import chain  # noqa: E402
from common import BIN, btc_reindex_cmd, machine, run_measured, write_result  # noqa: E402

#: DuckDB's COPY options per extension: those ``rechain query --out`` uses.
FORMATS = {".parquet": "FORMAT parquet, COMPRESSION zstd", ".csv": "FORMAT csv, HEADER true"}

PEER = """
import sys, duckdb
glob, out, options, limit = sys.argv[1:5]
con = duckdb.connect()
con.execute(f"SET memory_limit = '{limit}'")
con.execute(
    f"COPY (SELECT * FROM read_parquet('{glob}', hive_partitioning = true)) TO '{out}' ({options})"
)
"""


def measure(cmd: list[str]) -> dict[str, Any]:
    done, rss, wall = run_measured(cmd)
    return {
        "seconds": round(wall, 2),
        "peak_rss_mib": round(rss.peak_root / 2**20, 1),
        "cpu_s": round(rss.cpu_s, 2),
        "steal_s": round(rss.steal_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=3700)
    ap.add_argument("--tx", default="1000:2000")
    ap.add_argument("--memory-budget", default="1G")
    ap.add_argument("--table", default="outputs")
    ap.add_argument("--node-cache", type=Path, default=Path.home() / ".cache/rechain/bench")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.tx.split(":"))
    blocks = chain(args.node_cache, args.blocks, lo, hi)
    with tempfile.TemporaryDirectory(prefix="rechain-export-") as scratch:
        work = Path(scratch)
        data = work / "data"
        subprocess.run(
            btc_reindex_cmd(blocks, data, 2, "--mode", "full", "--memory-budget", "2G"),
            check=True,
            capture_output=True,
        )
        rows = int(
            subprocess.run(
                [
                    str(BIN),
                    "query",
                    "--data",
                    str(data),
                    "--format",
                    "csv",
                    f"SELECT count(*) FROM {args.table}",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()[-1]
        )
        glob = str(data / "tables" / args.table / "**" / "*.parquet")
        result: dict[str, Any] = {
            "machine": machine(),
            "table": args.table,
            "rows": rows,
            "memory_budget": args.memory_budget,
            "formats": {},
        }
        for ext, options in FORMATS.items():
            ours_out, peer_out = work / f"ours{ext}", work / f"peer{ext}"
            ours = measure(
                [
                    str(BIN),
                    "query",
                    "--data",
                    str(data),
                    f"SELECT * FROM {args.table}",
                    "--out",
                    str(ours_out),
                    "--memory-budget",
                    args.memory_budget,
                ]
            )
            peer = measure(
                [sys.executable, "-c", PEER, glob, str(peer_out), options, args.memory_budget]
            )
            result["formats"][ext] = {
                "rechain": ours,
                "duckdb_copy": peer,
                "time_ratio": round(ours["seconds"] / peer["seconds"], 3),
                "bytes": {"rechain": ours_out.stat().st_size, "duckdb": peer_out.stat().st_size},
            }
            ours_out.unlink()
            peer_out.unlink()
        # The terminal stream of the same rows, to a pipe that discards them.
        stream = measure(
            [
                "sh",
                "-c",
                f'"{BIN}" query --data "{data}" --format csv '
                f'"SELECT * FROM {args.table}" > /dev/null',
            ]
        )
        result["terminal_csv"] = stream
        shutil.rmtree(data)
    print(write_result("query_export", result))
    for ext, r in result["formats"].items():
        print(
            f"{ext}: {rows:,} rows; rechain {r['rechain']['seconds']}s "
            f"{r['rechain']['peak_rss_mib']} MiB, duckdb COPY {r['duckdb_copy']['seconds']}s "
            f"{r['duckdb_copy']['peak_rss_mib']} MiB, ratio {r['time_ratio']}"
        )
    print(f"terminal csv: {stream['seconds']}s {stream['peak_rss_mib']} MiB")


if __name__ == "__main__":
    main()
