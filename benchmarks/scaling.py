"""How the header reindex's cost grows with input size and with workers.

Runs ``rechain btc reindex`` (headers mode) on generated chains of 1x, 2x and 4x a base size
(the chain of benchmarks/btc_headers.py: shuffled arrival, side branches, orphans) with 1 and 2
workers, ``--repeats`` times each, and reports headers/s and the wall time with Ray's start-up
taken out (``run.ray_start_s`` of the reindex's own JSON), per point and the best of the repeats.
The summary says how the time grows against the input (1.0 = linear) and the 1 -> 2 worker
speed-up at each size.

    .venv/bin/python benchmarks/scaling.py [--base 250000] [--multipliers 1,2,4] [--workers 1,2]

On a cluster (see benchmarks/README.md): ``--tofu-outputs outputs.json`` takes ``ray_address``
and the input/data paths from ``tofu output -json``; ``--ray-address`` and ``--work-dir`` set
them by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, machine, run_measured, write_result  # noqa: E402
from rechain.workers import _native  # noqa: E402

CORE_FILE_BYTES = 134_217_728  # Bitcoin Core's blk file size limit


def reindex(
    blocks: Path, data: Path, workers: int, ray_address: str | None
) -> tuple[dict[str, Any], float]:
    cmd = [str(BIN), "btc", "reindex", "--blocks", str(blocks), "--data", str(data)]
    cmd += ["--network", "regtest", "--no-progress", "--json", "--workers", str(workers)]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    done, _, elapsed = run_measured(cmd)
    return json.loads(done.stdout)["run"], elapsed


def one_run(run: dict[str, Any], wall: float) -> dict[str, Any]:
    without_ray = run["total_s"] - run["ray_start_s"]
    return {
        "headers_per_s": round(run["records_scanned"] / without_ray),
        "seconds_excluding_ray_start": round(without_ray, 3),
        "ray_start_s": round(run["ray_start_s"], 3),
        "wall_s_including_ray": round(wall, 3),
        "shards": run["shards"],
        "stage_seconds": {k: round(v, 3) for k, v in run.items() if k.endswith("_s")},
    }


def from_tofu_outputs(path: Path) -> tuple[str, Path]:
    """``tofu output -json``: the Ray address and a work folder on the input volume, which the
    head writes and the workers read at the same path."""
    outs = json.loads(path.read_text())
    paths = outs["paths"]["value"]
    return outs["ray_address"]["value"], Path(paths["input"]) / "bench-scaling"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=int, default=250_000, help="headers at 1x")
    ap.add_argument("--multipliers", default="1,2,4")
    ap.add_argument("--workers", default="1,2", help="worker counts to compare")
    ap.add_argument("--repeats", type=int, default=2, help="runs per point; the best is charted")
    ap.add_argument("--ray-address", default=None, help="join this Ray cluster")
    ap.add_argument("--tofu-outputs", type=Path, default=None, help="`tofu output -json` file")
    ap.add_argument("--work-dir", type=Path, default=None, help="where inputs are generated")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    mults = [int(m) for m in args.multipliers.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    ray_address, work_parent = args.ray_address, args.work_dir
    if args.tofu_outputs is not None:
        tofu_address, tofu_work = from_tofu_outputs(args.tofu_outputs)
        ray_address = ray_address or tofu_address
        work_parent = work_parent or tofu_work
    if work_parent is not None:
        work_parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-scale-", dir=work_parent))
    load_before = os.getloadavg()
    points: list[dict[str, Any]] = []
    try:
        for mult in mults:
            node = work / f"x{mult}"
            t = time.perf_counter()
            _native.generate_bitcoin(
                str(node),
                _native.BtcGenConfig(
                    blocks=args.base * mult,
                    network="regtest",
                    seed=42,
                    file_size=CORE_FILE_BYTES,
                    xor=True,
                    shuffle_window=1024,
                    side_branches=20,
                    orphans=10,
                    tx_min=1,
                    tx_max=1,
                ),
            )
            gen_s = time.perf_counter() - t
            blocks = node / "blocks"
            file_bytes = sum(f.stat().st_size for f in blocks.glob("blk*.dat"))
            for workers in worker_counts:
                runs = []
                for _ in range(args.repeats):
                    data = work / "data"
                    run, wall = reindex(blocks, data, workers, ray_address)
                    shutil.rmtree(data, ignore_errors=True)
                    runs.append(one_run(run, wall))
                    headers = run["records_scanned"]
                best = min(runs, key=lambda r: r["seconds_excluding_ray_start"])
                points.append(
                    {
                        "multiplier": mult,
                        "headers": headers,
                        "file_bytes": file_bytes,
                        "files": len(list(blocks.glob("blk*.dat"))),
                        "generate_s": round(gen_s, 3),
                        "workers": workers,
                        "best": best,
                        "median_headers_per_s": round(
                            statistics.median(r["headers_per_s"] for r in runs)
                        ),
                        "runs": runs,
                    }
                )
                print(
                    f"{mult}x {headers:,} headers, {workers} worker(s): "
                    f"{best['headers_per_s']:,}/s, {best['seconds_excluding_ray_start']:.2f}s "
                    f"(+{best['ray_start_s']:.2f}s Ray start)",
                    flush=True,
                )
            shutil.rmtree(node, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def best_s(mult: int, workers: int) -> float:
        p = next(p for p in points if p["multiplier"] == mult and p["workers"] == workers)
        return p["best"]["seconds_excluding_ray_start"]

    base_mult, top_mult = min(mults), max(mults)
    # Time at k x the input divided by k x the time at 1x: 1.0 is linear, above it superlinear.
    growth = {
        str(w): {
            f"{m}x": round(best_s(m, w) / (best_s(base_mult, w) * m / base_mult), 3) for m in mults
        }
        for w in worker_counts
    }
    speedup = {}
    if 1 in worker_counts and len(worker_counts) > 1:
        most = max(worker_counts)
        speedup = {f"{m}x": round(best_s(m, 1) / best_s(m, most), 3) for m in mults}
    top_growth = growth[str(min(worker_counts))][f"{top_mult}x"]
    out: dict[str, Any] = {
        "benchmark": "scaling",
        "machine": {**machine(), "load_avg_1_5_15m_before": [round(x, 2) for x in load_before]},
        "ray_address": ray_address,
        "base_headers": args.base,
        "repeats": args.repeats,
        "points": points,
        "time_growth_vs_linear": growth,
        "speedup_1_to_max_workers": speedup,
        "linearity_at_top_size": top_growth,
        "target_linearity_max": 1.1,
        "targets": {
            f"{top_mult}x input costs <= 1.1x linear ({min(worker_counts)} worker)": top_growth
            <= 1.1,
        },
    }
    path = write_result("scaling", out)
    print(json.dumps({k: v for k, v in out.items() if k not in ("points", "machine")}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
