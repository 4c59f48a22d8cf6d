"""Publication's spend prints (``publish._spent_prints``) as the chain grows: per segment, the
count and hash sum of the spends of its outputs, the check that decides which published
``outputs`` segments a rerun copies again.

Synthetic spends (heights sorted, as the chain state stages them; random rows) are cut into
segments of equal heights; the prints are timed at the default chain's size (68 segments,
6.2 M spends: 13,500 blocks at a 1 GiB budget), at 4x its spends with 4x the segments, and at
4x its spends with 16x the segments, and each is checked against the range join that defines
them (every spend against every segment's height range, which DuckDB runs as a nested loop:
its time grows with spends times segments, the prints' with spends).

    .venv/bin/python benchmarks/btc_publish_prints.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_result  # noqa: E402
from rechain.pipeline.bitcoin.stages.publish import _spent_prints  # noqa: E402

#: (segments, spends, heights)
SIZES = [(68, 6_200_000, 13_500), (272, 24_800_000, 54_000), (1_088, 24_800_000, 54_000)]
RANGE_JOIN = """SELECT g.first, g.last, count(r.prev_height),
    coalesce(sum(hash(r.prev_height, r.prev_row)::HUGEINT), 0)
    FROM segs g LEFT JOIN spends r ON r.prev_height BETWEEN g.first AND g.last GROUP BY ALL"""


def spends(n: int, heights: int, rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {
            "prev_height": np.sort(rng.integers(0, heights, n)).astype(np.uint32),
            "prev_row": rng.integers(0, 1_000, n).astype(np.uint32),
        }
    )


def main() -> None:
    runs = []
    for segments, n, heights in SIZES:
        con = duckdb.connect()
        con.execute("SET threads = 2")
        con.register("spends", spends(n, heights, np.random.default_rng(7)))
        cuts = np.linspace(0, heights, segments + 1).astype(int)
        segs = [(int(cuts[i]), int(cuts[i + 1]) - 1) for i in range(segments)]
        t = time.perf_counter()
        prints = _spent_prints(con, segs, "spends")
        prints_s = time.perf_counter() - t
        con.register("segs", pa.table({"first": cuts[:-1], "last": cuts[1:] - 1}))
        t = time.perf_counter()
        joined = con.execute(RANGE_JOIN).fetchall()
        range_join_s = time.perf_counter() - t
        want = {(int(a), int(b)): f"{c}:{h}" for a, b, c, h in joined}
        runs.append(
            {
                "segments": segments,
                "spends": n,
                "prints_s": round(prints_s, 3),
                "range_join_s": round(range_join_s, 3),
                "equal": prints == want,
            }
        )
        print(runs[-1], flush=True)
    out = {"benchmark": "btc_publish_prints", "machine": machine(), "runs": runs}
    path = write_result("btc_publish_prints", out)
    print(f"wrote {path}")
    if not all(r["equal"] for r in runs):
        raise SystemExit("the prints differ from the range join's")


if __name__ == "__main__":
    main()
