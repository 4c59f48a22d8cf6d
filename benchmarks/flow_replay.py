"""Flow LedgerWAL replay, rechain side by side with flow-go's own replay on the same WAL.

flow-go v0.33.1 (the `flowgo` oracle in tests/flow_go, built from the Go module proxy) writes a
WAL; then `rechain flow replay` and flow-go's `DiskWAL.Replay` rebuild the state from it. Reports
updates/s for each, the ratio, peak RSS of each, and checks both reach the same final root.

    .venv/bin/python benchmarks/flow_replay.py [--updates 20000] [--registers-per-update 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, machine, run_measured, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def flowgo_binary() -> Path:
    # Same cache variable as the tests: worktrees with different harness sources need their own.
    cache = Path(
        os.environ.get("RECHAIN_FLOWGO_CACHE", Path.home() / ".cache" / "rechain" / "flowgo")
    )
    out = subprocess.run(
        ["bash", str(REPO / "tests" / "flow_go" / "build.sh"), str(cache)],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--registers-per-update", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    flowgo = flowgo_binary()
    work = Path(tempfile.mkdtemp(prefix="rechain-flow-bench-"))
    try:
        wal = work / "wal"
        subprocess.run(
            [
                str(flowgo),
                "gen",
                "--out",
                str(wal),
                "--updates",
                str(args.updates),
                "--registers-per-update",
                str(args.registers_per_update),
                "--seed",
                "7",
            ],
            check=True,
            capture_output=True,
            timeout=3600,
        )
        cpu0 = _children_cpu()
        ours, ours_rss, ours_wall = run_measured(
            [
                str(BIN),
                "flow",
                "replay",
                "--wal",
                str(wal),
                "--data",
                str(work / "data"),
                "--workers",
                str(args.workers),
                "--no-progress",
                "--json",
            ]
        )
        mine = json.loads(ours.stdout)
        cpu1 = _children_cpu()
        theirs, theirs_rss, theirs_wall = run_measured(
            [str(flowgo), "replay", "--wal", str(wal), "--roots=false"]
        )
        cpu2 = _children_cpu()
        go = json.loads(theirs.stdout)
        ray_start = mine["run"]["ray_start_s"]
        ours_s = mine["run"]["total_s"] - ray_start
        go_s = float(go["elapsed_seconds"])
        out = {
            "benchmark": "flow_replay",
            "machine": machine(),
            "input": {
                "updates": args.updates,
                "registers_per_update": args.registers_per_update,
                "segments": mine["segments"],
                "wal_bytes": sum(p.stat().st_size for p in wal.iterdir()),
            },
            "same_final_root": mine["root"] == go["final_root"],
            "rechain_updates_per_s": round(mine["updates_applied"] / ours_s),
            "flowgo_updates_per_s": round(int(go["updates"]) / go_s),
            "speedup_vs_flowgo": round(go_s / ours_s, 3),
            "rechain_seconds_excluding_ray_start": round(ours_s, 3),
            "rechain_ray_start_s": round(ray_start, 3),
            "rechain_decode": mine["run"].get("decode"),
            "rechain_wall_s": round(ours_wall, 3),
            "flowgo_seconds": round(go_s, 3),
            "flowgo_wall_s": round(theirs_wall, 3),
            # CPU seconds (user + system) of each whole process: less sensitive than wall time
            # to other work on a shared machine. rechain's include Python start-up and publishing.
            "cpu_seconds": {
                "rechain": round(cpu1 - cpu0, 3),
                "flowgo": round(cpu2 - cpu1, 3),
                "flowgo_over_rechain": round((cpu2 - cpu1) / (cpu1 - cpu0), 3),
            },
            "peak_rss_mib": {
                "rechain_process": round(ours_rss.peak_root / 2**20),
                "rechain_ray_tree": round(ours_rss.peak_tree / 2**20),
                "flowgo": round(theirs_rss.peak_root / 2**20),
            },
            "targets": {
                "speedup >= 2": go_s / ours_s >= 2,
                "rss (rechain process) <= flowgo": ours_rss.peak_root <= theirs_rss.peak_root,
            },
        }
        path = write_result("flow_replay", out)
        print(json.dumps(out, indent=1))
        print(f"wrote {path}")
        if not out["same_final_root"]:
            raise SystemExit("final roots differ")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
