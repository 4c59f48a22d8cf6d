"""Shared benchmark helpers: machine description, result files, page-cache warming, the encoding
floor of published Parquet tables; and, from ``tests/measure.py``, commands run measured (peak
RSS of a process tree, CPU seconds, the host's steal)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

# The repository, for the measuring helpers, which the tests own (``tests/measure.py``).
sys.path.append(str(Path(__file__).resolve().parents[1]))

from tests.measure import BIN as BIN  # noqa: E402
from tests.measure import TreeRss as TreeRss  # noqa: E402
from tests.measure import btc_reindex_cmd as btc_reindex_cmd  # noqa: E402
from tests.measure import host_steal_s as host_steal_s  # noqa: E402
from tests.measure import run_measured as run_measured  # noqa: E402
from tests.measure import steal_ticks as steal_ticks  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        # Other jobs share small machines; the load average says how much while this one ran.
        "load_avg_1_5_15m": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def warm_page_cache(folder: Path, pattern: str = "*") -> float:
    """Reads the files of ``folder`` matching ``pattern`` once, so that the timed run after it
    finds them in the page cache, as a warm-cache benchmark says: the hosts these run on page
    out file pages left idle for a while (DAMON's pageout; 1.1 GB of blk files read back from
    disk in 1.9 s against 0.2 s warm). Returns the seconds the read took."""
    t0 = time.perf_counter()
    for f in sorted(folder.glob(pattern)):
        with open(f, "rb", buffering=0) as r:
            while r.read(1 << 20):
                pass
    return time.perf_counter() - t0


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def encoding_floor(files: list[Path], threads: int = 2, repeat: int = 1) -> dict[str, Any]:
    """The Parquet ``files`` encoded again from memory on ``threads`` threads (pyarrow's writer,
    zstd at level 1 as the Rust core writes it), each with the settings its own metadata records
    per column (codec, dictionary, delta encodings, statistics) and its largest row group: the
    encoding's CPU seconds (the least of ``repeat`` rounds), and those over the threads,
    ``floor_s`` (reading the files is not counted). A run that publishes these tables spends
    at least this writing them, whoever writes them."""
    import io

    import pyarrow.parquet as pq

    def encode(path: Path) -> float:
        meta = pq.ParquetFile(path).metadata
        rows = pq.read_table(path)
        first = meta.row_group(0)
        columns = [first.column(i) for i in range(first.num_columns)]
        codec = {c.path_in_schema: c.compression.lower() for c in columns}
        codec = {k: "none" if v == "uncompressed" else v for k, v in codec.items()}
        deltas = ("DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "DELTA_BINARY_PACKED")
        encoding = {c.path_in_schema: e for c in columns for e in deltas if e in c.encodings}
        t0 = time.thread_time()
        pq.write_table(
            rows,
            io.BytesIO(),
            compression=codec,
            compression_level={k: 1 for k, v in codec.items() if v == "zstd"} or None,
            use_dictionary=[c.path_in_schema for c in columns if c.has_dictionary_page] or False,
            column_encoding=encoding or None,
            write_statistics=[c.path_in_schema for c in columns if c.is_stats_set] or False,
            row_group_size=max(meta.row_group(g).num_rows for g in range(meta.num_row_groups)),
        )
        return time.thread_time() - t0

    with ThreadPoolExecutor(threads) as pool:
        cpu = min(sum(pool.map(encode, files)) for _ in range(max(1, repeat)))
    return {"threads": threads, "files": len(files), "cpu_s": cpu, "floor_s": cpu / threads}
