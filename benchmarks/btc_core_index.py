"""Bitcoin Core block-index benchmark: export time, and a reindex guided by that index against a
plain header reindex of the same files, in one run on the same generated chain.

Reports the export (wall and its read/encode/LevelDB-write split), both reindexes (wall, and
without Ray start-up), their stage seconds, and whether both data folders have the same
``rechain verify`` digest.

    .venv/bin/python benchmarks/btc_core_index.py [--blocks 1000000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BIN,  # noqa: E402
    btc_reindex_cmd,
    machine,
    run_measured,
    write_result,
)
from rechain.pipeline.verify import verify  # noqa: E402
from rechain.workers import _native  # noqa: E402


def reindex(blocks: Path, data: Path, workers: int, *extra: str) -> tuple[dict, float]:
    cmd = btc_reindex_cmd(blocks, data, workers, *extra)
    done, _, elapsed = run_measured(cmd)
    return json.loads(done.stdout), elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-ci-"))
    try:
        gen_t = time.perf_counter()
        # The chain of benchmarks/btc_headers.py: shuffled arrival, side branches, orphans.
        _native.generate_bitcoin(
            str(work / "node"),
            _native.BtcGenConfig(
                blocks=args.blocks,
                network="regtest",
                seed=42,
                file_size=134_217_728,
                xor=True,
                shuffle_window=1024,
                side_branches=20,
                orphans=10,
                tx_min=1,
                tx_max=1,
            ),
        )
        gen_s = time.perf_counter() - gen_t
        blocks = work / "node" / "blocks"
        plain, plain_wall = reindex(blocks, work / "plain", args.workers)

        cmd = [str(BIN), "btc", "export-core-index", "--data", str(work / "plain")]
        done, _, export_wall = run_measured([*cmd, "--out", str(work / "index"), "--json"])
        exported = json.loads(done.stdout)

        guided, guided_wall = reindex(
            blocks, work / "guided", args.workers, "--core-index", str(work / "index")
        )
        p, g = plain["run"], guided["run"]
        ci = g["core_index"]
        same = (
            verify(work / "plain")["digest"]["content"]
            == verify(work / "guided")["digest"]["content"]
        )
        p_core = p["total_s"] - p["ray_start_s"]
        g_core = g["total_s"] - g["ray_start_s"]
        out = {
            "benchmark": "btc_core_index",
            "machine": machine(),
            "input": {
                "headers": p["records_scanned"],
                "file_bytes": p["file_bytes"],
                "files": p["files"],
                "generate_s": round(gen_s, 3),
            },
            "export": {
                "wall_s": round(export_wall, 3),
                "total_s": exported["total_s"],
                "read_s": exported["read_s"],
                "encode_s": exported["encode_s"],
                "leveldb_write_s": exported["write_s"],
                "block_records": exported["block_records"],
                "index_bytes": sum(f.stat().st_size for f in (work / "index").iterdir()),
            },
            "reindex_plain": {
                "wall_s": round(plain_wall, 3),
                "total_s": round(p["total_s"], 3),
                "without_ray_start_s": round(p_core, 3),
                "stage_seconds": {k: round(v, 3) for k, v in p.items() if k.endswith("_s")},
            },
            "reindex_core_index": {
                "wall_s": round(guided_wall, 3),
                "total_s": round(g["total_s"], 3),
                "without_ray_start_s": round(g_core, 3),
                "index_read_s": ci["read_s"],
                "index_plan_s": ci["plan_s"],
                "index_check_s": ci["check_s"],
                "verified": ci["verified"],
                "searched_bytes": ci["searched_bytes"],
                "disagreements": len(ci["disagreements"]),
                "stage_seconds": {k: round(v, 3) for k, v in g.items() if k.endswith("_s")},
            },
            "speedup_wall": round(plain_wall / guided_wall, 3),
            "speedup_without_ray_start": round(p_core / g_core, 3),
            "same_verify_digest": same,
            "targets": {
                "export < 10 s (wall)": export_wall < 10,
                "core-index reindex >= 2x faster (wall)": plain_wall / guided_wall >= 2,
                "same digest": same,
            },
        }
        path = write_result("btc_core_index", out)
        print(json.dumps(out, indent=1))
        print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
